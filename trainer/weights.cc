#include "trainer/weights.h"

#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/format.h"
#include "trainer/rl/params_dump.h"

namespace holdfast {
namespace {

struct Entry {
  std::vector<int64_t> shape;
  const float* data = nullptr;
  int64_t numel = 0;
};

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return !prefix.empty() && s.compare(0, prefix.size(), prefix) == 0;
}

// Copies `entries` into `params`, every parameter matched by name and shape;
// one named `may_lack`* may be absent (it keeps its value; *kept counts them).
Status CopyByName(const std::string& source, const std::map<std::string, Entry>& entries,
                  const std::vector<std::pair<std::string, torch::Tensor>>& params, const std::string& may_lack,
                  int* kept) {
  const std::string fix = "; point it at weights of a model with this config (model.*)";
  *kept = 0;
  for (const auto& [name, t] : params) {
    auto it = entries.find(name);
    if (it == entries.end() && StartsWith(name, may_lack)) {
      ++*kept;
      continue;
    }
    if (it == entries.end()) return FailedPreconditionError(source + " has no parameter '" + name + "'" + fix);
    if (it->second.shape != t.sizes().vec()) {
      return FailedPreconditionError(source + ": parameter '" + name + "' is " + Shape(it->second.shape) +
                                     ", this model's is " + Shape(t.sizes().vec()) + fix);
    }
  }
  if (entries.size() + static_cast<size_t>(*kept) != params.size()) {
    for (const auto& [name, e] : entries) {
      bool known = false;
      for (const auto& p : params) known = known || p.first == name;
      if (!known) return FailedPreconditionError(source + " has parameter '" + name + "', which this model lacks" + fix);
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : params) {
    auto it = entries.find(name);
    if (it == entries.end()) continue;  // a may_lack one
    const Entry& e = it->second;
    t.copy_(torch::from_blob(const_cast<float*>(e.data), t.sizes(), torch::kFloat32));
  }
  return Status::Ok();
}

using Params = std::vector<std::pair<std::string, torch::Tensor>>;

// " (reward_head.* not in it: kept as initialised)" when some were absent.
std::string KeptNote(int kept, const std::string& may_lack) {
  return kept == 0 ? "" : " (" + may_lack + "* not in it: kept as initialised)";
}

Result<std::string> LoadParamsDump(const std::string& dir, const Params& params, const std::string& may_lack) {
  // The format's one reader (the GRPO workers load policy versions with it too).
  Result<rl::ParamsDump> dump = rl::ReadParamsDump(dir);
  if (!dump.ok()) {
    const Status& s = dump.status();
    if (s.code() == StatusCode::kCorruption) return InvalidArgumentError(s.message() + "; write the dump again");
    return s;
  }
  std::map<std::string, Entry> entries;
  for (const rl::ParamsDump::Tensor& t : dump->tensors) {
    entries[t.name] = Entry{t.shape, dump->data.data() + t.offset, t.numel};
  }
  int kept = 0;
  HF_RETURN_IF_ERROR(CopyByName(dir, entries, params, may_lack, &kept));
  return "params dump " + dir + KeptNote(kept, may_lack);
}

Result<std::string> LoadCheckpoint(const std::string& root, int64_t step, const Params& params,
                                   const std::string& may_lack) {
  CheckpointLoader loader(root);
  std::vector<SkippedCheckpoint> skipped;
  Result<LoadedCheckpoint> ckpt = step >= 0 ? loader.LoadAll(step) : loader.LoadNewestAll({}, &skipped);
  if (!ckpt.ok()) return ckpt.status().WithContext("load weights from checkpoint " + root);
  std::vector<float> flat;
  std::map<std::string, Entry> entries;
  for (const LoadedShard& shard : ckpt->shards) {
    HF_ASSIGN_OR_RETURN(ConstBufferView meta_buf, shard.Find("meta"));
    HF_ASSIGN_OR_RETURN(ConstBufferView p, shard.Find("params"));
    nlohmann::json meta = nlohmann::json::parse(meta_buf.data, meta_buf.data + meta_buf.size, nullptr, false);
    const std::string where = ckpt->dir + " (rank " + std::to_string(shard.header.rank) + ")";
    try {
      int64_t offset = 0, count = static_cast<int64_t>(p.size / 4), total = count;
      if (meta.contains("slice")) {
        offset = meta.at("slice").at("offset").get<int64_t>();
        count = meta.at("slice").at("count").get<int64_t>();
        total = meta.at("slice").at("total").get<int64_t>();
      }
      if (flat.empty()) {
        flat.assign(static_cast<size_t>(total), 0.0f);
        for (const auto& l : meta.at("layout")) {
          Entry e;
          e.shape = l.at("shape").get<std::vector<int64_t>>();
          e.numel = l.at("numel").get<int64_t>();
          const int64_t at = l.at("offset").get<int64_t>();
          if (at < 0 || at + e.numel > total) return CorruptionError(where + ": layout entry past the flat buffer");
          e.data = flat.data() + at;
          entries[l.at("name").get<std::string>()] = e;
        }
      }
      if (offset < 0 || count < 0 || offset + count > static_cast<int64_t>(flat.size()) ||
          p.size != static_cast<size_t>(count) * 4) {
        return CorruptionError(where + ": parameter slice does not fit the flat buffer");
      }
      std::memcpy(flat.data() + offset, p.data, p.size);
      if (!meta.contains("slice")) break;  // v1: every shard a full replica
    } catch (const nlohmann::json::exception& e) {
      return CorruptionError(where + ": state 'meta' is not what holdfast-train writes: " + e.what());
    }
  }
  int kept = 0;
  HF_RETURN_IF_ERROR(CopyByName(ckpt->dir, entries, params, may_lack, &kept));
  return "checkpoint step " + std::to_string(ckpt->manifest.step) + " (" + ckpt->dir + ")" + KeptNote(kept, may_lack);
}

}  // namespace

Result<std::string> LoadWeights(const std::string& path, const Params& params, const std::string& may_lack) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return NotFoundError(path + " is not a folder: weights are a params dump (params.json + params.bin) or a "
                         "checkpoint (a step-N folder, or a checkpoint root)");
  }
  if (fs::exists(fs::path(path) / "params.json", ec)) return LoadParamsDump(path, params, may_lack);
  const fs::path p = fs::path(path).lexically_normal();
  const fs::path leaf = p.has_filename() ? p : p.parent_path();
  const int64_t step = ParseStepDirName(leaf.filename().string());
  if (step >= 0 && fs::exists(leaf / kManifestFileName, ec)) return LoadCheckpoint(leaf.parent_path().string(), step, params, may_lack);
  return LoadCheckpoint(path, -1, params, may_lack);
}

}  // namespace holdfast
