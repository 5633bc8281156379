// checkpoint_bench: measures what a save costs the training loop, how fast the
// background writer and the verifying loader move bytes, on one folder's disk.
// bench/checkpoint_bench.sh runs it in rounds alternated with dd and prints the
// table; this program runs `--reps` of each measurement and prints "key=value"
// lines (medians over its reps).
//
//   checkpoint_bench --dir DIR [--mb 400] [--reps 1] [--compute-ms 250]
//                    [--chunk-mb 64] [--writeback 1]
//
// A save's training stall is measured as the trainer incurs it: Save with the
// large buffers deferred, then a stand-in for the next step's forward and
// backward (CPU work for --compute-ms on the calling thread), then the staging
// fence (WaitStaged) where the optimizer update would start; stall = time in
// Save + time blocked at the fence. stall_nocompute_s is the worst case (the
// fence right after Save); eager_stall_s is Save copying everything itself.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/checkpoint_writer.h"

namespace holdfast {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Fill(std::vector<uint8_t>* v, uint64_t seed) {
  // Incompressible-looking bytes, cheaply (xorshift).
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  size_t words = v->size() / 8;
  auto* p = reinterpret_cast<uint64_t*>(v->data());
  for (size_t i = 0; i < words; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = x;
  }
}

// Busy arithmetic on the calling thread for `ms`, standing in for forward and
// backward. Returns a value so the work is not optimised away.
double Compute(double ms) {
  const Clock::time_point t0 = Clock::now();
  double x = 1.0;
  while (Since(t0) * 1e3 < ms) {
    for (int i = 0; i < 100000; ++i) x = std::sqrt(x * 1.0000001 + 1e-9);
  }
  return x;
}

int Main(int argc, char** argv) {
  std::string dir;
  size_t mb = 400;
  int reps = 1;
  double compute_ms = 250;
  size_t chunk_mb = 64;
  bool writeback = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--dir") dir = argv[i + 1];
    else if (k == "--mb") mb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else if (k == "--compute-ms") compute_ms = std::atof(argv[i + 1]);
    else if (k == "--chunk-mb") chunk_mb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (k == "--writeback") writeback = std::atoi(argv[i + 1]) != 0;
  }
  if (dir.empty() || reps < 1 || chunk_mb < 1) {
    std::fprintf(stderr,
                 "usage: checkpoint_bench --dir DIR [--mb 400] [--reps 1] [--compute-ms 250] [--chunk-mb 64] "
                 "[--writeback 1]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);

  // A model's state: parameters and two Adam moments, plus a little metadata.
  const size_t third = mb * 1000 * 1000 / 3 / 8 * 8;
  std::vector<uint8_t> params(third), exp_avg(third), exp_avg_sq(third);
  Fill(&params, 1);
  Fill(&exp_avg, 2);
  Fill(&exp_avg_sq, 3);
  std::string meta = "{\"step\": 0, \"rng\": \"...\", \"data_cursor\": 12345}";
  std::vector<BufferView> views = {{"meta", meta.data(), meta.size()},
                                   {"params", params.data(), params.size()},
                                   {"adam.exp_avg", exp_avg.data(), exp_avg.size()},
                                   {"adam.exp_avg_sq", exp_avg_sq.data(), exp_avg_sq.size()}};
  std::vector<BufferView> deferred = views;
  for (size_t i = 1; i < deferred.size(); ++i) deferred[i].defer_copy = true;
  size_t total = meta.size();
  for (const BufferView& v : views) total += v.name == "meta" ? 0 : v.size;

  CheckpointWriterOptions o;
  o.root = dir;
  o.retention.keep_last = 10;  // no pruning inside the timed region
  o.write_chunk_bytes = chunk_mb << 20;
  o.start_writeback = writeback;
  Result<std::unique_ptr<CheckpointWriter>> created = CheckpointWriter::Create(o);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  CheckpointWriter& w = **created;
  if (!w.Reserve(total + 4096).ok()) return 1;
  auto flush = [&w]() {
    Status s = w.Flush();
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return s.ok();
  };

  int64_t step = std::max<int64_t>(w.newest_committed_step(), 0) + 1;
  std::vector<double> sync_s, eager_stall_s, stall_s, fence_s, stall0_s, stage_s, write_bw, pipeline_bw;
  double sink = 0;
  for (int r = 0; r < reps; ++r) {
    // Synchronous save: the loop waits until the checkpoint is durable.
    Clock::time_point t0 = Clock::now();
    if (!w.Save(step++, views).ok()) return 1;
    if (!flush()) return 1;
    sync_s.push_back(Since(t0));
    // Everything copied inside Save (no fence): the stall before deferral.
    t0 = Clock::now();
    if (!w.Save(step++, views).ok()) return 1;
    eager_stall_s.push_back(Since(t0));
    if (!flush()) return 1;
    // Deferred save, then the next step's compute, then the fence.
    t0 = Clock::now();
    if (!w.Save(step++, deferred).ok()) return 1;
    double in_save = Since(t0);
    sink += Compute(compute_ms);
    t0 = Clock::now();
    w.WaitStaged();
    fence_s.push_back(Since(t0));
    stall_s.push_back(in_save + fence_s.back());
    if (!flush()) return 1;
    // Worst case: the fence right after Save.
    t0 = Clock::now();
    if (!w.Save(step++, deferred).ok()) return 1;
    w.WaitStaged();
    stall0_s.push_back(Since(t0));
    if (!flush()) return 1;
  }
  uint64_t shard_bytes = 0;
  for (const SaveOutcome& out : w.TakeOutcomes()) {
    write_bw.push_back(out.shard_bytes / out.write_seconds);
    pipeline_bw.push_back(out.shard_bytes / (out.stage_seconds + out.write_seconds));
    stage_s.push_back(out.stage_seconds);
    shard_bytes = out.shard_bytes;
  }

  // Restore and verify from the device (cached pages dropped), then a plain read.
  CheckpointLoader loader(dir);
  LoadOptions lo;
  lo.drop_cache = true;
  std::vector<double> load_s, read_s;
  for (int r = 0; r < reps; ++r) {
    Clock::time_point t0 = Clock::now();
    Result<LoadedShard> got = loader.LoadNewest(0, lo);
    load_s.push_back(Since(t0));
    if (!got.ok()) {
      std::fprintf(stderr, "%s\n", got.status().ToString().c_str());
      return 1;
    }
    std::string path = got->dir + "/" + got->manifest.shards[0].file;
    auto file = PosixStorage::Default()->OpenReadable(path);
    if (!file.ok()) return 1;
    (*file)->DropCache();
    std::vector<uint8_t> buf(8u << 20);
    t0 = Clock::now();
    for (uint64_t off = 0; off < (*file)->size(); off += buf.size()) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), (*file)->size() - off));
      if (!(*file)->ReadAt(off, n, buf.data()).ok()) return 1;
    }
    read_s.push_back(Since(t0));
  }

  std::printf("state_bytes=%zu\nshard_bytes=%llu\nreps=%d\n", total, static_cast<unsigned long long>(shard_bytes),
              reps);
  std::printf("compute_ms=%.0f\nchunk_mb=%zu\nwriteback=%d\n", compute_ms, chunk_mb, writeback ? 1 : 0);
  std::printf("sync_save_s=%.6f\nstall_s=%.6f\nfence_s=%.6f\nstall_nocompute_s=%.6f\neager_stall_s=%.6f\n",
              Median(sync_s), Median(stall_s), Median(fence_s), Median(stall0_s), Median(eager_stall_s));
  std::printf("stage_s=%.6f\nwrite_MBps=%.1f\npipeline_MBps=%.1f\n", Median(stage_s), Median(write_bw) / 1e6,
              Median(pipeline_bw) / 1e6);
  std::printf("restore_verify_MBps=%.1f\nseq_read_MBps=%.1f\n", shard_bytes / Median(load_s) / 1e6,
              shard_bytes / Median(read_s) / 1e6);
  volatile double keep = sink;  // the stand-in compute must not be optimised away
  (void)keep;
  return 0;
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) { return holdfast::Main(argc, argv); }
