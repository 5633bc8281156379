#include "trainer/train_state.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace holdfast {

const StateBuffer* TrainState::Find(const std::string& name) const {
  for (const StateBuffer& b : buffers) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

uint64_t TrainState::TotalBytes() const {
  uint64_t total = 0;
  for (const StateBuffer& b : buffers) total += b.bytes.size();
  return total;
}

Status WriteStateDir(const TrainState& state, const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("create " + dir + ": " + ec.message());
  nlohmann::json index = nlohmann::json::array();
  for (size_t i = 0; i < state.buffers.size(); ++i) {
    const StateBuffer& b = state.buffers[i];
    const std::string file = std::to_string(i) + ".bin";
    std::ofstream out(dir + "/" + file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.bytes.data()), static_cast<std::streamsize>(b.bytes.size()));
    out.close();
    if (!out) return IoError("write " + dir + "/" + file + " failed");
    index.push_back({{"name", b.name}, {"file", file}, {"bytes", b.bytes.size()}});
  }
  std::ofstream js(dir + "/index.json", std::ios::trunc);
  js << index.dump(1) << "\n";
  js.close();
  if (!js) return IoError("write " + dir + "/index.json failed");
  return Status::Ok();
}

Result<TrainState> ReadStateDir(const std::string& dir) {
  std::ifstream js(dir + "/index.json");
  if (!js) return NotFoundError("no state at " + dir + " (missing index.json)");
  nlohmann::json index = nlohmann::json::parse(js, nullptr, false);
  if (index.is_discarded() || !index.is_array()) return CorruptionError(dir + "/index.json is not a JSON array");
  TrainState state;
  try {
    for (const auto& e : index) {
      StateBuffer b;
      b.name = e.at("name").get<std::string>();
      const std::string path = dir + "/" + e.at("file").get<std::string>();
      const uint64_t bytes = e.at("bytes").get<uint64_t>();
      std::ifstream in(path, std::ios::binary);
      if (!in) return NotFoundError("state file " + path + " is missing");
      b.bytes.resize(bytes);
      in.read(reinterpret_cast<char*>(b.bytes.data()), static_cast<std::streamsize>(bytes));
      if (static_cast<uint64_t>(in.gcount()) != bytes || in.peek() != EOF) {
        return CorruptionError("state file " + path + " does not have the " + std::to_string(bytes) +
                               " bytes its index says");
      }
      state.buffers.push_back(std::move(b));
    }
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(dir + "/index.json: " + e.what());
  }
  return state;
}

}  // namespace holdfast
