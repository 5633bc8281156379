// checkpoint_bench: measures what a save costs the training loop, how fast the
// background writer and the verifying loader move bytes, on one folder's disk.
// bench/checkpoint_bench.sh runs it in rounds alternated with dd and prints the
// table; this program runs `--reps` of each measurement and prints "key=value"
// lines (medians over its reps).
//
//   checkpoint_bench --dir DIR [--mb 400] [--reps 1] [--compute-ms 250]
//                    [--chunk-mb 64] [--writeback 1] [--order 0] [--ranks 4]
//
// A save's training stall is measured as the trainer incurs it: Save with the
// large buffers deferred, then a stand-in for the next step's forward and
// backward (CPU work for --compute-ms on the calling thread), then the staging
// fence (WaitStaged) where the optimizer update would start; stall = time in
// Save + time blocked at the fence. stall_nocompute_s is the worst case (the
// fence right after Save); eager_stall_s is Save copying everything itself.
//
// Restore: a one-rank resume (CheckpointLoader::RestoreNewest: read with the
// checksum overlapped), the same read with the checksum in turn on one thread
// (read_threads = 0, how the loader read before), and a plain sequential read
// of the same file; each from the device (the page cache dropped first). This
// VM's disk is cached by its host, so a file read again soon arrives faster
// than the first time: the shard is read once, untimed, before the measured
// reads, and their order rotates with --order (the script passes the round).
// Then --ranks ranks (threads, one in-memory Store) restore a checkpoint that
// many ranks saved, as holdfast-train does: each reads the shard it verifies,
// every shard's "params" and its own moments; against every rank reading and
// checksumming every shard (LoadNewestAll, the resume before), and against one
// sequential read of all the shards. With --memory-dir (a tmpfs folder), the
// same one-rank restore from an in-memory snapshot of the state there, in turn
// with the restore from the disk with the page cache dropped.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/checkpoint_writer.h"
#include "common/memory_store.h"

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

// Reads the files whole, in 8 MB reads through the page cache; drops their
// cached pages first when asked. Returns the seconds the reads took (after
// the drop), or a negative value on error.
double ReadFiles(const std::vector<std::string>& paths, bool drop_first) {
  std::vector<std::unique_ptr<ReadableFile>> files;
  for (const std::string& path : paths) {
    Result<std::unique_ptr<ReadableFile>> f = PosixStorage::Default()->OpenReadable(path);
    if (!f.ok()) {
      std::fprintf(stderr, "%s\n", f.status().ToString().c_str());
      return -1;
    }
    if (drop_first) (*f)->DropCache();
    files.push_back(std::move(f).value());
  }
  std::vector<uint8_t> buf(8u << 20);
  const Clock::time_point t0 = Clock::now();
  for (const auto& file : files) {
    for (uint64_t off = 0; off < file->size(); off += buf.size()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), file->size() - off));
      if (!file->ReadAt(off, n, buf.data()).ok()) return -1;
    }
  }
  return Since(t0);
}

void DropCaches(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    Result<std::unique_ptr<ReadableFile>> f = PosixStorage::Default()->OpenReadable(path);
    if (f.ok()) (*f)->DropCache();
  }
}

// Runs the measurements of one repetition in an order that rotates with
// `first` (so that none always runs first); each returns false on error.
bool Rotated(int first, const std::vector<std::function<bool()>>& measures) {
  for (size_t k = 0; k < measures.size(); ++k) {
    if (!measures[(first + k) % measures.size()]()) return false;
  }
  return true;
}

// The one-rank resume against a plain read of the same file: medians over
// reps of the overlapped restore, the serial one and the plain read.
bool MeasureRestore(const std::string& dir, int reps, int order, double* overlapped, double* serial, double* seq) {
  CheckpointLoader loader(dir);
  Result<std::vector<int64_t>> steps = loader.ListSteps();
  if (!steps.ok() || steps->empty()) return false;
  const std::string path = loader.StepDir(steps->front()) + "/" + ShardFileName(0, 1);
  RestoreOptions one;  // rank 0 of a world of 1, as a one-rank trainer resumes
  one.load.drop_cache = true;
  RestoreOptions in_turn = one;
  in_turn.load.read_threads = 0;
  std::vector<double> a, b, c;
  auto restore = [&](const RestoreOptions& o, std::vector<double>* out) {
    const Clock::time_point t0 = Clock::now();
    Result<LoadedCheckpoint> got = loader.RestoreNewest(o);
    out->push_back(Since(t0));
    if (!got.ok() || got->manifest.step != steps->front()) {
      std::fprintf(stderr, "restore: %s\n", got.ok() ? "not the newest step" : got.status().ToString().c_str());
      return false;
    }
    return true;
  };
  for (int r = 0; r < reps; ++r) {
    if (ReadFiles({path}, true) < 0) return false;  // the host's cache, as for every read below
    const bool ok = Rotated(order + r, {[&] { return restore(one, &a); }, [&] { return restore(in_turn, &b); },
                                        [&] {
                                          c.push_back(ReadFiles({path}, true));
                                          return c.back() >= 0;
                                        }});
    if (!ok) return false;
  }
  *overlapped = Median(a);
  *serial = Median(b);
  *seq = Median(c);
  return true;
}

// The in-memory snapshot tier's restore (docs/memory-snapshots.md): the same
// state saved once into `memory_dir` (tmpfs), restored by the same
// one-rank RestoreNewest, in turn with a restore from `dir` with the page
// cache dropped; medians over reps. `memory_dir` is removed afterwards.
bool MeasureMemoryRestore(const std::string& dir, const std::string& memory_dir, const std::vector<BufferView>& views,
                          int reps, int order, double* memory_s, double* disk_s) {
  {
    CheckpointWriterOptions o;
    o.root = memory_dir;
    Result<std::unique_ptr<CheckpointWriter>> w = CheckpointWriter::Create(o);
    if (!w.ok() || !(*w)->Save(1, views).ok() || !(*w)->Flush().ok()) {
      std::fprintf(stderr, "memory snapshot in %s: %s\n", memory_dir.c_str(),
                   w.ok() ? "save failed" : w.status().ToString().c_str());
      return false;
    }
  }
  CheckpointLoader disk(dir), memory(memory_dir);
  RestoreOptions dropped;
  dropped.load.drop_cache = true;
  RestoreOptions in_memory;  // tmpfs pages are the storage: nothing to drop
  std::vector<double> a, b;
  auto restore = [](const CheckpointLoader& loader, const RestoreOptions& o, std::vector<double>* out) {
    const Clock::time_point t0 = Clock::now();
    Result<LoadedCheckpoint> got = loader.RestoreNewest(o);
    out->push_back(Since(t0));
    if (!got.ok()) std::fprintf(stderr, "restore: %s\n", got.status().ToString().c_str());
    return got.ok();
  };
  bool ok = true;
  for (int r = 0; r < reps && ok; ++r) {
    ok = Rotated(order + r,
                 {[&] { return restore(memory, in_memory, &a); }, [&] { return restore(disk, dropped, &b); }});
  }
  std::error_code ec;
  std::filesystem::remove_all(memory_dir, ec);
  *memory_s = Median(a);
  *disk_s = Median(b);
  return ok;
}

// A checkpoint of `world` ranks, each saving its slice of the three buffers,
// restored by as many ranks (threads) at once: each as holdfast-train does
// (RestoreNewest: every shard's params, its own shard whole) and each as the
// resume did before (LoadNewestAll: every shard read and checksummed in turn);
// and one sequential read of every shard. Medians over reps, in seconds;
// *ckpt_bytes is the checkpoint's size, *rank_bytes what one rank reads now.
bool MeasureRanksRestore(const std::string& root, const std::vector<uint8_t>& params,
                         const std::vector<uint8_t>& exp_avg, const std::vector<uint8_t>& exp_avg_sq, int world,
                         int reps, int order, double* restore_s, double* loadall_s, double* seq_s,
                         uint64_t* ckpt_bytes, uint64_t* rank_bytes) {
  {
    auto store = std::make_shared<InMemoryStore>();
    std::vector<std::unique_ptr<CheckpointWriter>> writers;
    std::vector<std::string> metas(world);
    const size_t floats = params.size() / 4;
    for (int r = 0; r < world; ++r) {
      CheckpointWriterOptions o;
      o.root = root;
      o.rank = r;
      o.world_size = world;
      o.store = store;
      Result<std::unique_ptr<CheckpointWriter>> w = CheckpointWriter::Create(o);
      if (!w.ok()) return false;
      writers.push_back(std::move(w).value());
    }
    for (int r = 0; r < world; ++r) {
      const size_t begin = floats * r / world * 4, end = floats * (r + 1) / world * 4;
      metas[r] = "{\"rank\": " + std::to_string(r) + "}";
      std::vector<BufferView> views = {{"meta", metas[r].data(), metas[r].size()},
                                       {"params", params.data() + begin, end - begin},
                                       {"adam.exp_avg", exp_avg.data() + begin, end - begin},
                                       {"adam.exp_avg_sq", exp_avg_sq.data() + begin, end - begin}};
      if (!writers[r]->Save(1, views).ok()) return false;
    }
    for (auto& w : writers) {
      if (Status s = w->Flush(); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return false;
      }
    }
  }
  CheckpointLoader loader(root);
  Result<Manifest> m = loader.ReadManifest(1);
  if (!m.ok()) return false;
  std::vector<std::string> paths;
  *ckpt_bytes = 0;
  for (const ManifestShard& s : m->shards) {
    paths.push_back(loader.StepDir(1) + "/" + s.file);
    *ckpt_bytes += s.size;
  }
  // Every shard's parameters and, from its own shard (which it verifies), its moments.
  auto plan = [](const LoadedCheckpoint& c) -> Result<std::vector<std::vector<std::string>>> {
    return std::vector<std::vector<std::string>>(c.shards.size(), {"params"});
  };
  std::vector<uint64_t> read_by(world, 0);
  auto ranks_at_once = [&](const std::function<bool(int)>& rank_main, std::vector<double>* out) {
    DropCaches(paths);
    std::vector<std::thread> threads;
    std::vector<char> ok(world, 0);
    const Clock::time_point t0 = Clock::now();
    for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { ok[r] = rank_main(r); });
    for (std::thread& t : threads) t.join();
    out->push_back(Since(t0));
    return std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
  };
  std::vector<double> a, b, c;
  for (int rep = 0; rep < reps; ++rep) {
    if (ReadFiles(paths, true) < 0) return false;
    auto store = std::make_shared<InMemoryStore>();  // fresh keys for each restore
    auto restore = [&](int r) {
      RestoreOptions o;
      o.rank = r;
      o.world_size = world;
      o.store = store;
      Result<LoadedCheckpoint> got = loader.RestoreNewest(o, plan);
      if (!got.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, got.status().ToString().c_str());
        return false;
      }
      read_by[r] = 0;
      for (const LoadedShard& s : got->shards) {
        for (size_t i = 0; i < s.header.entries.size(); ++i) read_by[r] += s.IsRead(i) ? s.header.entries[i].size : 0;
      }
      return true;
    };
    auto load_all = [&](int r) {
      (void)r;
      LoadOptions o;
      o.read_threads = 0;  // each shard read, then checksummed, in turn: the resume before
      return loader.LoadNewestAll(o).ok();
    };
    const bool ok = Rotated(order + rep, {[&] { return ranks_at_once(restore, &a); },
                                          [&] { return ranks_at_once(load_all, &b); },
                                          [&] {
                                            c.push_back(ReadFiles(paths, true));
                                            return c.back() >= 0;
                                          }});
    if (!ok) return false;
  }
  *restore_s = Median(a);
  *loadall_s = Median(b);
  *seq_s = Median(c);
  *rank_bytes = *std::max_element(read_by.begin(), read_by.end());
  return true;
}

int Main(int argc, char** argv) {
  std::string dir;
  size_t mb = 400;
  int reps = 1;
  double compute_ms = 250;
  size_t chunk_mb = 64;
  bool writeback = true;
  int order = 0;
  int ranks = 4;
  std::string memory_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--dir") dir = argv[i + 1];
    else if (k == "--mb") mb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else if (k == "--compute-ms") compute_ms = std::atof(argv[i + 1]);
    else if (k == "--chunk-mb") chunk_mb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (k == "--writeback") writeback = std::atoi(argv[i + 1]) != 0;
    else if (k == "--order") order = std::atoi(argv[i + 1]);
    else if (k == "--ranks") ranks = std::atoi(argv[i + 1]);
    else if (k == "--memory-dir") memory_dir = argv[i + 1];
  }
  if (dir.empty() || reps < 1 || chunk_mb < 1 || ranks < 2) {
    std::fprintf(stderr,
                 "usage: checkpoint_bench --dir DIR [--mb 400] [--reps 1] [--compute-ms 250] [--chunk-mb 64] "
                 "[--writeback 1] [--order 0] [--ranks 4] [--memory-dir /dev/shm/DIR]\n");
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

  // Restore and verify from the device (cached pages dropped first).
  spdlog::set_level(spdlog::level::err);  // no "skipping" lines for the folders of other rounds
  double r1 = 0, r1_serial = 0, r1_seq = 0, rw = 0, rw_all = 0, rw_seq = 0;
  uint64_t rw_bytes = 0, rw_rank_bytes = 0;
  if (!MeasureRestore(dir, reps, order, &r1, &r1_serial, &r1_seq)) return 1;
  if (!MeasureRanksRestore(dir + "/ranks", params, exp_avg, exp_avg_sq, ranks, reps, order, &rw, &rw_all, &rw_seq,
                           &rw_bytes, &rw_rank_bytes)) {
    return 1;
  }
  double mem_s = 0, mem_disk_s = 0;
  if (!memory_dir.empty() && !MeasureMemoryRestore(dir, memory_dir, views, reps, order, &mem_s, &mem_disk_s)) return 1;

  std::printf("state_bytes=%zu\nshard_bytes=%llu\nreps=%d\n", total, static_cast<unsigned long long>(shard_bytes),
              reps);
  std::printf("compute_ms=%.0f\nchunk_mb=%zu\nwriteback=%d\n", compute_ms, chunk_mb, writeback ? 1 : 0);
  std::printf("sync_save_s=%.6f\nstall_s=%.6f\nfence_s=%.6f\nstall_nocompute_s=%.6f\neager_stall_s=%.6f\n",
              Median(sync_s), Median(stall_s), Median(fence_s), Median(stall0_s), Median(eager_stall_s));
  std::printf("stage_s=%.6f\nwrite_MBps=%.1f\npipeline_MBps=%.1f\n", Median(stage_s), Median(write_bw) / 1e6,
              Median(pipeline_bw) / 1e6);
  std::printf("restore_verify_MBps=%.1f\nrestore_serial_MBps=%.1f\nseq_read_MBps=%.1f\n", shard_bytes / r1 / 1e6,
              shard_bytes / r1_serial / 1e6, shard_bytes / r1_seq / 1e6);
  std::printf("ranks=%d\nranks_ckpt_bytes=%llu\nranks_max_rank_bytes=%llu\n", ranks,
              static_cast<unsigned long long>(rw_bytes), static_cast<unsigned long long>(rw_rank_bytes));
  std::printf("ranks_restore_s=%.6f\nranks_loadall_s=%.6f\nranks_seq_read_s=%.6f\n", rw, rw_all, rw_seq);
  if (!memory_dir.empty()) std::printf("memory_restore_s=%.6f\nmemory_disk_restore_s=%.6f\n", mem_s, mem_disk_s);
  volatile double keep = sink;  // the stand-in compute must not be optimised away
  (void)keep;
  return 0;
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) { return holdfast::Main(argc, argv); }
