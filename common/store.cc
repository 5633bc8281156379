#include "common/store.h"

#include <utility>

namespace holdfast {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  HF_CHECK_MSG(base_ != nullptr, "PrefixStore needs a base store");
}

Status PrefixStore::Set(const std::string& key, const std::vector<uint8_t>& value) {
  return base_->Set(Full(key), value);
}

Result<std::vector<uint8_t>> PrefixStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->Get(Full(key), timeout);
}

Result<int64_t> PrefixStore::Add(const std::string& key, int64_t delta) { return base_->Add(Full(key), delta); }

Status PrefixStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(Full(k));
  return base_->Wait(full, timeout);
}

Result<bool> PrefixStore::Check(const std::string& key) { return base_->Check(Full(key)); }

Status PrefixStore::Delete(const std::string& key) { return base_->Delete(Full(key)); }

}  // namespace holdfast
