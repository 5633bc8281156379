// libFuzzer target: holdfast-train's configuration (trainer/config.h): a TOML
// file and `--set section.key=value` overrides. Input: the file's bytes, then
// optionally a NUL byte and override lines ('\n'-separated). The file is
// written into a memfd and read through its /proc/self/fd path. toml++ is
// compiled into this target header-only, so that libFuzzer sees the TOML
// parser's edges as well as ours. Properties:
//   - LoadTrainerConfig never crashes or throws; a refusal is
//     kInvalidArgument with a message;
//   - an accepted config passes ValidateTrainerConfig, and its canonical TOML
//     (ConfigToToml, what the run records) loads back to the same config: the
//     same canonical text and the same ConfigHash;
//   - its learning-rate schedule stays finite and within [0, lr].
// Seeds: tests/fuzz/corpus/trainer_config (the example and test configs).
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/config.h"

namespace holdfast {
namespace {

// Two config files (the input, and the canonical text read back): memfds
// rewritten for each input.
std::string WriteFile(int which, const std::string& bytes) {
  static const int fds[2] = {memfd_create("train.toml", MFD_CLOEXEC), memfd_create("canonical.toml", MFD_CLOEXEC)};
  const int fd = fds[which];
  HF_CHECK(fd >= 0);
  HF_CHECK(ftruncate(fd, 0) == 0);
  HF_CHECK(pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  return "/proc/self/fd/" + std::to_string(fd);
}

void CheckSchedule(const TrainerConfig& c) {
  const OptimConfig& o = c.optim;
  for (int64_t step : {int64_t{0}, o.warmup_steps - 1, o.warmup_steps, c.train.steps / 2, c.train.steps - 1,
                       c.train.steps, o.decay_steps}) {
    if (step < 0) continue;
    const double lr = LearningRateAt(o, c.train.steps, step);
    HF_CHECK_MSG(std::isfinite(lr) && lr >= 0 && lr <= o.lr * (1 + 1e-9), std::to_string(lr));  // within rounding
  }
}

}  // namespace
}  // namespace holdfast

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace holdfast;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    for (size_t at = nul + 1; at <= input.size();) {
      size_t end = input.find('\n', at);
      if (end == std::string::npos) end = input.size();
      overrides.push_back(input.substr(at, end - at));
      at = end + 1;
    }
  }
  const std::string path = WriteFile(0, input.substr(0, nul));
  Result<TrainerConfig> config = LoadTrainerConfig(path, overrides);
  if (!config.ok()) {
    HF_CHECK_MSG(config.status().code() == StatusCode::kInvalidArgument, config.status().ToString());
    HF_CHECK(!config.status().message().empty());
    return 0;
  }
  HF_CHECK(ValidateTrainerConfig(*config).ok());
  CheckSchedule(*config);
  (void)CheckpointRoot(*config);

  const std::string canonical = ConfigToToml(*config);
  const std::string canonical_path = WriteFile(1, canonical);
  Result<TrainerConfig> again = LoadTrainerConfig(canonical_path, {});
  HF_CHECK_MSG(again.ok(), again.status().ToString() + "\n" + canonical);
  HF_CHECK(ConfigHash(*again) == ConfigHash(*config));
  // A relative data.path from an override is resolved against the canonical
  // file's folder when read back (one from a file already was).
  again->data.path = config->data.path;
  HF_CHECK_MSG(ConfigToToml(*again) == canonical, canonical);
  return 0;
}
