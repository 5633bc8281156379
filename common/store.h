// Store: the small key-value store ranks rendezvous through.
//
// Modelled on c10d's Store: a handful of blocking calls, each with an explicit
// timeout. The supervisor daemon hosts the server (later issue); until then the
// trainer's local launcher hosts it. Keys are namespaced by generation
// ("g3/...") by PrefixStore so that a restarted rank never meets a stale peer.
//
// Thread-safety: implementations are safe to call from several threads at once
// unless they say otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value, replacing any earlier value, and wakes waiters.
  virtual Status Set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Returns the value of key, waiting up to timeout for it to be set.
  // kTimeout names the key when it never appears.
  virtual Result<std::vector<uint8_t>> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer counter at key (missing = 0); returns the new value.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Waits until every key is set.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Whether key is set now (no waiting).
  virtual Result<bool> Check(const std::string& key) = 0;
  // Removes key; OK when it did not exist.
  virtual Status Delete(const std::string& key) = 0;
};

// Prefixes every key with "prefix/". Does not own `base` beyond the shared_ptr.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  Status Set(const std::string& key, const std::vector<uint8_t>& value) override;
  Result<std::vector<uint8_t>> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> Check(const std::string& key) override;
  Status Delete(const std::string& key) override;

 private:
  std::string Full(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// The namespace for generation g of a run: "g<g>".
inline std::string GenerationPrefix(int64_t generation) { return "g" + std::to_string(generation); }

}  // namespace holdfast
