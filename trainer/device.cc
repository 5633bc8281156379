#include "trainer/device.h"

#include <cerrno>
#include <cstdlib>

#include "common/launch_contract.h"

namespace holdfast {
namespace {

bool ParseOrdinal(const char* text, long* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < -1 || v > 1 << 20) return false;
  *out = v;
  return true;
}

// "; CUDA_VISIBLE_DEVICES=4,5: GPU 5" — what the ordinal is on the node.
std::string VisibleNote(const EnvLookup& env, int ordinal) {
  const char* visible = env("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return "";
  std::string text = visible, entry;
  int i = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (i == ordinal) entry = item;
    ++i;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::string note = "; CUDA_VISIBLE_DEVICES=" + text;
  if (!entry.empty()) note += ": GPU " + entry;
  return note;
}

}  // namespace

Result<DevicePlacement> ResolveDevice(const TrainerConfig& c, int world_size, int cuda_device_count,
                                      const EnvLookup& env) {
  const std::string want = c.train.device;
  DevicePlacement p;
  const char* assigned = env(kEnvDevice);
  if (want == "cpu") {
    p.why = "train.device = \"cpu\"";
  } else if (assigned != nullptr) {
    long ordinal = 0;
    if (!ParseOrdinal(assigned, &ordinal)) {
      return InvalidArgumentError(std::string(kEnvDevice) + "='" + assigned +
                                  "' is not a device ordinal (-1 for the CPU, 0, 1, ...): the supervisor sets it; "
                                  "unset it to choose by LOCAL_RANK");
    }
    if (ordinal < 0) {
      if (want == "cuda") {
        return FailedPreconditionError(std::string("train.device = \"cuda\" but the supervisor gave this rank no GPU (") +
                                       kEnvDevice + "=-1): start holdfastd with CUDA_VISIBLE_DEVICES naming this "
                                       "node's GPUs (Slurm: --gres=gpu:N), or set train.device = \"auto\"");
      }
      p.why = std::string(kEnvDevice) + "=-1 (the supervisor gave this rank the CPU)";
    } else {
      if (ordinal >= cuda_device_count) {
        return FailedPreconditionError(
            std::string(kEnvDevice) + "=" + assigned + " but this process sees " + std::to_string(cuda_device_count) +
            " CUDA device(s)" + VisibleNote(env, static_cast<int>(ordinal)) +
            (cuda_device_count == 0 ? " (a LibTorch built without CUDA, or no driver): use a CUDA build of "
                                      "holdfast-train, or set train.device = \"cpu\""
                                    : ": the supervisor and this rank disagree on CUDA_VISIBLE_DEVICES"));
      }
      p.cuda = true;
      p.ordinal = static_cast<int>(ordinal);
      p.why = std::string(kEnvDevice) + "=" + assigned + VisibleNote(env, p.ordinal);
    }
  } else {
    const char* local = env(kEnvLocalRank);
    const char* local_name = kEnvLocalRank;
    if (local == nullptr) {
      local = env("LOCAL_RANK");
      local_name = "LOCAL_RANK";
    }
    long local_rank = 0;
    if (local != nullptr && (!ParseOrdinal(local, &local_rank) || local_rank < 0)) {
      return InvalidArgumentError(std::string(local_name) + "='" + local + "' is not a local rank (0, 1, ...)");
    }
    const bool can_reduce_on_gpu = world_size == 1 || c.dist.backend == "nccl";
    const bool use_gpu = want == "cuda" || (cuda_device_count > 0 && can_reduce_on_gpu);
    const std::string source =
        local != nullptr ? std::string(local_name) + "=" + local : std::string("no local rank set: GPU 0");
    if (use_gpu) {
      if (local_rank >= cuda_device_count) {
        return FailedPreconditionError(
            "train.device = \"" + want + "\" wants GPU " + std::to_string(local_rank) + " (" + source +
            ") but this process sees " + std::to_string(cuda_device_count) + " CUDA device(s)" +
            VisibleNote(env, static_cast<int>(local_rank)) +
            (cuda_device_count == 0 ? ": use a CUDA build of holdfast-train on a GPU node, or set train.device = \"cpu\""
                                    : ": start at most one rank per visible GPU"));
      }
      p.cuda = true;
      p.ordinal = static_cast<int>(local_rank);
      p.why = source + VisibleNote(env, p.ordinal);
    } else {
      p.why = cuda_device_count == 0 ? "no CUDA device visible" : "dist.backend = \"gloo\" reduces on the CPU";
    }
  }
  if (world_size > 1 && c.dist.backend == "nccl" && !p.cuda) {
    return FailedPreconditionError("dist.backend = \"nccl\" needs a GPU per rank, but this rank is on the CPU (" + p.why +
                                   "): run on GPU nodes, or set dist.backend = \"gloo\"");
  }
  if (world_size > 1 && c.dist.backend == "gloo" && p.cuda) {
    return FailedPreconditionError("this rank is on " + p.Name() + " (" + p.why +
                                   ") but dist.backend = \"gloo\" reduces host memory: set dist.backend = \"nccl\" "
                                   "for GPU ranks, or train.device = \"cpu\"");
  }
  return p;
}

}  // namespace holdfast
