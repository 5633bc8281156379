// InMemoryStore: a Store held in this process's memory.
//
// For tests and for single-process runs: the same semantics as the TCP store
// (Get/Wait block until the key is set or the timeout passes, Add is atomic and
// stores its counter as decimal text, as the TCP store does), without sockets.
//
// Thread-safety: every method may be called from any number of threads at once;
// one mutex guards the map and one condition variable wakes waiters on Set/Add.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/store.h"

namespace holdfast {

class InMemoryStore final : public Store {
 public:
  InMemoryStore() = default;
  InMemoryStore(const InMemoryStore&) = delete;
  InMemoryStore& operator=(const InMemoryStore&) = delete;

  Status Set(const std::string& key, const std::vector<uint8_t>& value) override;
  Result<std::vector<uint8_t>> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> Check(const std::string& key) override;
  Status Delete(const std::string& key) override;

  // Number of keys now set (for tests).
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;                          // notified on every Set/Add
  std::map<std::string, std::vector<uint8_t>> data_;    // guarded by mu_
};

// Store::Add keeps its counter as decimal text ("42") in every implementation,
// so a Get of a counter reads the same everywhere. These convert; `key` only
// names the key in the error.
Result<int64_t> ParseStoreCounter(const std::string& key, const std::vector<uint8_t>& value);
std::vector<uint8_t> StoreCounterBytes(int64_t value);

}  // namespace holdfast
