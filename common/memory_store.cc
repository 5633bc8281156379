#include "common/memory_store.h"

#include <algorithm>
#include <charconv>
#include <utility>

namespace holdfast {

namespace {
// wait_for(now + a huge timeout) overflows; nobody waits longer than this anyway.
std::chrono::milliseconds Clamp(std::chrono::milliseconds t) {
  return std::clamp(t, std::chrono::milliseconds(0), std::chrono::milliseconds(std::chrono::hours(24 * 30)));
}
}  // namespace

Result<int64_t> ParseStoreCounter(const std::string& key, const std::vector<uint8_t>& value) {
  int64_t v = 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (value.empty() || ec != std::errc() || ptr != end) {
    return InvalidArgumentError("store key '" + key + "' holds a value that is not an integer counter (" +
                                std::to_string(value.size()) + " bytes); Add needs a decimal integer");
  }
  return v;
}

std::vector<uint8_t> StoreCounterBytes(int64_t value) {
  std::string s = std::to_string(value);
  return std::vector<uint8_t>(s.begin(), s.end());
}

Status InMemoryStore::Set(const std::string& key, const std::vector<uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
  return Status::Ok();
}

Result<std::vector<uint8_t>> InMemoryStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto found = [&] { return data_.count(key) > 0; };
  if (!cv_.wait_for(lock, Clamp(timeout), found)) {
    return TimeoutError("store key '" + key + "' was not set within " + std::to_string(timeout.count()) + " ms");
  }
  return data_.at(key);
}

Result<int64_t> InMemoryStore::Add(const std::string& key, int64_t delta) {
  int64_t next = delta;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      HF_ASSIGN_OR_RETURN(int64_t current, ParseStoreCounter(key, it->second));
      next = current + delta;
    }
    data_[key] = StoreCounterBytes(next);
  }
  cv_.notify_all();
  return next;
}

Status InMemoryStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto missing = [&]() -> const std::string* {
    for (const std::string& k : keys) {
      if (data_.count(k) == 0) return &k;
    }
    return nullptr;
  };
  if (!cv_.wait_for(lock, Clamp(timeout), [&] { return missing() == nullptr; })) {
    return TimeoutError("store key '" + *missing() + "' was not set within " + std::to_string(timeout.count()) +
                        " ms (waiting for " + std::to_string(keys.size()) + " keys)");
  }
  return Status::Ok();
}

Result<bool> InMemoryStore::Check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.count(key) > 0;
}

Status InMemoryStore::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  data_.erase(key);
  return Status::Ok();
}

size_t InMemoryStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

}  // namespace holdfast
