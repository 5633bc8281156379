#include "trainer/rl/params_dump.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace holdfast::rl {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "holdfast-params-v1";

Status WriteAndSync(const std::string& path, const char* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ErrnoError("create " + path, errno);
  const bool wrote = size == 0 || std::fwrite(data, 1, size, f) == size;
  const int err = errno;
  const bool synced = std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  std::fclose(f);
  if (!wrote || !synced) return ErrnoError("write " + path, err);
  return Status::Ok();
}

}  // namespace

void ParamsDump::Add(std::string name, std::vector<int64_t> shape, const float* values, int64_t numel) {
  Tensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.offset = static_cast<int64_t>(data.size());
  t.numel = numel;
  data.insert(data.end(), values, values + numel);
  tensors.push_back(std::move(t));
}

const ParamsDump::Tensor* ParamsDump::Find(const std::string& name) const {
  for (const Tensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string ParamsDumpIndex(const ParamsDump& dump) {
  nlohmann::json index = {{"format", kFormat}, {"dtype", "float32"}, {"tensors", nlohmann::json::array()}};
  for (const ParamsDump::Tensor& t : dump.tensors) {
    index["tensors"].push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset * 4}, {"numel", t.numel}});
  }
  return index.dump(1) + "\n";
}

Status WriteParamsDumpAtomically(const ParamsDump& dump, const std::string& dir) {
  const std::string tmp = dir + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return IoError("create " + tmp + ": " + ec.message());
  Status s = WriteAndSync(tmp + "/params.bin", reinterpret_cast<const char*>(dump.data.data()), dump.data.size() * 4);
  if (s.ok()) {
    const std::string text = ParamsDumpIndex(dump);
    s = WriteAndSync(tmp + "/params.json", text.data(), text.size());
  }
  if (s.ok()) {
    fs::remove_all(dir, ec);  // a version rewritten after a learner resumed: same step, same bits
    fs::rename(tmp, dir, ec);
    if (ec) s = IoError("rename " + tmp + " to " + dir + ": " + ec.message());
  }
  if (!s.ok()) fs::remove_all(tmp, ec);
  return s;
}

Result<ParamsDump> ReadParamsDump(const std::string& dir) {
  const std::string json_path = dir + "/params.json";
  const std::string bin_path = dir + "/params.bin";
  std::ifstream js(json_path);
  if (!js) {
    const int err = errno;
    return ErrnoError("open " + json_path + " (a holdfast-params-v1 folder holds params.json and params.bin)", err);
  }
  std::stringstream text;
  text << js.rdbuf();
  std::ifstream bin(bin_path, std::ios::binary | std::ios::ate);
  if (!bin) return ErrnoError("open " + bin_path, errno);
  const auto bytes = static_cast<size_t>(bin.tellg());
  std::vector<float> data(bytes / 4);
  bin.seekg(0);
  bin.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  if (!bin) return IoError("read " + bin_path + " failed");
  if (bytes % 4 != 0) return CorruptionError(bin_path + ": " + std::to_string(bytes) + " bytes, not whole floats");
  return ParseParamsDump(text.str(), std::move(data), json_path);
}

Result<ParamsDump> ParseParamsDump(const std::string& index_text, std::vector<float> data, const std::string& source) {
  nlohmann::json index = nlohmann::json::parse(index_text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || index.value("format", "") != kFormat ||
      index.value("dtype", "") != "float32" || !index.contains("tensors") || !index["tensors"].is_array()) {
    return CorruptionError(source + ": not a holdfast-params-v1 index (format, dtype float32, tensors)");
  }
  const auto bytes = static_cast<int64_t>(data.size() * 4);
  ParamsDump dump;
  dump.data = std::move(data);
  try {
    for (const auto& tj : index["tensors"]) {
      ParamsDump::Tensor t;
      t.name = tj.at("name").get<std::string>();
      t.shape = tj.at("shape").get<std::vector<int64_t>>();
      const int64_t offset = tj.at("offset").get<int64_t>();
      t.numel = tj.at("numel").get<int64_t>();
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      if (offset % 4 != 0 || offset < 0 || t.numel != n || offset + t.numel * 4 > bytes) {
        return CorruptionError(source + ": tensor '" + t.name + "' does not fit the data (" + std::to_string(bytes) +
                               " bytes) or its shape");
      }
      t.offset = offset / 4;
      dump.tensors.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(source + ": malformed tensor entry: " + e.what());
  }
  return dump;
}

}  // namespace holdfast::rl
