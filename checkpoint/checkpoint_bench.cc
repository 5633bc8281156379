// checkpoint_bench: measures what a save costs the training loop, how fast the
// background writer and the verifying loader move bytes, on one folder's disk.
// bench/checkpoint_bench.sh runs it next to dd and torch.save and prints the
// table; this program prints "key=value" lines.
//
//   checkpoint_bench --dir DIR [--mb 400] [--reps 3]
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
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

int Main(int argc, char** argv) {
  std::string dir;
  size_t mb = 400;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--dir") dir = argv[i + 1];
    else if (k == "--mb") mb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
  }
  if (dir.empty() || reps < 1) {
    std::fprintf(stderr, "usage: checkpoint_bench --dir DIR [--mb 400] [--reps 3]\n");
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
  size_t total = meta.size();
  for (const BufferView& v : views) total += v.name == "meta" ? 0 : v.size;

  CheckpointWriterOptions o;
  o.root = dir;
  o.retention.keep_last = 10;  // no pruning inside the timed region
  Result<std::unique_ptr<CheckpointWriter>> created = CheckpointWriter::Create(o);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  CheckpointWriter& w = **created;
  if (!w.Reserve(total + 4096).ok()) return 1;

  int64_t step = std::max<int64_t>(w.newest_committed_step(), 0) + 1;
  // Synchronous save: the loop waits until the checkpoint is durable.
  std::vector<double> sync_s;
  for (int r = 0; r < reps; ++r) {
    Clock::time_point t0 = Clock::now();
    if (!w.Save(step++, views).ok()) return 1;
    Status s = w.Flush();
    sync_s.push_back(Since(t0));
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  (void)w.TakeOutcomes();
  // Asynchronous save: the loop only waits for the copy into staging.
  std::vector<double> stall_s;
  for (int r = 0; r < reps; ++r) {
    Clock::time_point t0 = Clock::now();
    if (!w.Save(step++, views).ok()) return 1;
    stall_s.push_back(Since(t0));
    if (Status s = w.Flush(); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<double> write_bw;
  uint64_t shard_bytes = 0;
  for (const SaveOutcome& out : w.TakeOutcomes()) {
    write_bw.push_back(out.shard_bytes / out.write_seconds);
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
  std::printf("sync_save_s=%.6f\nstall_s=%.6f\n", Median(sync_s), Median(stall_s));
  std::printf("write_MBps=%.1f\n", Median(write_bw) / 1e6);
  std::printf("restore_verify_MBps=%.1f\nseq_read_MBps=%.1f\n", shard_bytes / Median(load_s) / 1e6,
              shard_bytes / Median(read_s) / 1e6);
  return 0;
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) { return holdfast::Main(argc, argv); }
