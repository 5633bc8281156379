// libFuzzer target: holdfastd's job file (daemon/job_config.h), read as the
// daemon reads it: LoadJobConfig on the file, then the [health] sections of
// the same text (health/config.h ParseHealthConfig, as HealthWatch does).
// The input is the file's bytes, written into a memfd that is read through
// its /proc/self/fd path. toml++ is compiled into this target header-only, so
// that libFuzzer sees the TOML parser's edges as well as ours. Properties:
//   - neither parser crashes or throws; a refusal is kInvalidArgument with a
//     message;
//   - an accepted job keeps the file's exact text, has a command, and every
//     value lies in the range the loader documents.
// Seeds: tests/fuzz/corpus/job_config (the example job files).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/cluster_protocol.h"
#include "daemon/job_config.h"
#include "daemon/straggler.h"
#include "health/config.h"

namespace holdfast {
namespace {

// The job file: one memfd, rewritten for each input.
const std::string& WriteJobFile(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("job.toml", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  HF_CHECK(fd >= 0);
  HF_CHECK(ftruncate(fd, 0) == 0);
  HF_CHECK(pwrite(fd, data, size, 0) == static_cast<ssize_t>(size));
  return path;
}

void CheckRanges(const JobConfig& job) {
  HF_CHECK(!job.command.empty());
  HF_CHECK(job.nproc >= 1 && job.nproc <= kMaxClusterNodeRanks);
  HF_CHECK(job.tokens_per_step >= 0 && job.tokens_per_step <= (int64_t{1} << 50));
  HF_CHECK(job.journal_mode == JournalMode::kWal || job.journal_mode == JournalMode::kDelete ||
           job.journal_mode == JournalMode::kTruncate);
  const SuperviseConfig& s = job.supervise;
  HF_CHECK(s.poll_ms >= 10 && s.poll_ms <= 60000);
  HF_CHECK(s.hang_factor >= 1.5 && s.hang_factor <= 1000 && s.hang_min_s >= 0.5);
  HF_CHECK(s.restart_budget >= 0 && s.backoff_initial_s >= 0 && s.term_grace_s >= 0 && s.exit_grace_s >= 0);
  HF_CHECK(s.straggler_factor == 0 || (s.straggler_factor >= 1.1 && s.straggler_factor <= 1000));
  const StragglerConfig straggler = StragglerConfig::FromSupervise(s);
  HF_CHECK(straggler.factor == s.straggler_factor && straggler.min_duration_s == s.straggler_min_duration_s);
}

}  // namespace
}  // namespace holdfast

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace holdfast;
  const std::string& path = WriteJobFile(data, size);
  Result<JobConfig> job = LoadJobConfig(path);
  if (!job.ok()) {
    HF_CHECK_MSG(job.status().code() == StatusCode::kInvalidArgument, job.status().ToString());
    HF_CHECK(!job.status().message().empty());
    return 0;
  }
  HF_CHECK(job->source == path);
  HF_CHECK(job->text == std::string(reinterpret_cast<const char*>(data), size));
  CheckRanges(*job);

  Result<health::HealthConfig> health = health::ParseHealthConfig(job->text, job->source);
  if (!health.ok()) {
    HF_CHECK_MSG(health.status().code() == StatusCode::kInvalidArgument, health.status().ToString());
    HF_CHECK(!health.status().message().empty());
  }
  return 0;
}
