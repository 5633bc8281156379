#include "checkpoint/checkpoint_writer.h"

#include <spdlog/spdlog.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>

#include "checkpoint/checkpoint_loader.h"

namespace holdfast {
namespace {

using Clock = std::chrono::steady_clock;

// Staging copies and hashes this much at a time, so each piece is hashed while
// it is still in the cache the copy just filled.
constexpr uint64_t kStageChunkBytes = 2u << 20;

// A commit waits for other ranks in Store Gets of at most this long, looking
// between them whether the writer is being destroyed (AwaitPeerKey): short
// next to the 0.5 s a restart takes, long next to a Store round trip.

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string ShardKey(int64_t step, int rank) {
  return "ckpt/" + std::to_string(step) + "/shard/" + std::to_string(rank);
}
std::string OutcomeKey(int64_t step) { return "ckpt/" + std::to_string(step) + "/outcome"; }

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string Text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

std::string JoinPath(const std::string& a, const std::string& b) { return a + "/" + b; }

// The level of the routine lines (commits, skips, retention): info, or debug
// for saves taken every step (CheckpointWriterOptions::log_commits).
spdlog::level::level_enum RoutineLevel(const CheckpointWriterOptions& o) {
  return o.log_commits ? spdlog::level::info : spdlog::level::debug;
}

// Sets `thread`'s policy (SCHED_IDLE or SCHED_OTHER) for
// CheckpointWriterOptions::idle_priority; a failure (a kernel without
// SCHED_IDLE, a seccomp filter) only costs the priority, and is logged once.
void SetPolicy(pthread_t thread, int policy, const CheckpointWriterOptions& o) {
  sched_param p{};
  p.sched_priority = 0;
  const int rc = pthread_setschedparam(thread, policy, &p);
  static std::atomic<bool> warned{false};
  if (rc != 0 && !warned.exchange(true)) {
    spdlog::warn("{}: rank {} could not set its writer threads' scheduling policy ({}); they run at normal priority",
                 o.log_name, o.rank, std::strerror(rc));
  }
}

}  // namespace

const char* InFlightPolicyName(InFlightPolicy policy) {
  return policy == InFlightPolicy::kWait ? "wait" : "skip";
}

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(CheckpointWriterOptions options,
                                                                   Callback callback) {
  if (options.root.empty()) return InvalidArgumentError("checkpoint writer: root directory is empty");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgumentError("checkpoint writer: rank " + std::to_string(options.rank) +
                                " is outside world size " + std::to_string(options.world_size));
  }
  if (options.world_size > 1 && options.store == nullptr) {
    return InvalidArgumentError("checkpoint writer: world size " + std::to_string(options.world_size) +
                                " needs a Store to commit through");
  }
  if (options.retention.keep_last < 1 || options.retention.keep_every < 0 || options.retention.keep_newest_every < 0) {
    return InvalidArgumentError(
        "checkpoint writer: retention needs keep_last >= 1, keep_every >= 0 and keep_newest_every >= 0");
  }
  if (options.write_chunk_bytes == 0) options.write_chunk_bytes = 64u << 20;
  if (options.storage == nullptr) options.storage = PosixStorage::Default();

  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter(std::move(options), std::move(callback)));
  // The parent of the first save: the newest folder with a readable manifest.
  CheckpointLoader loader(w->options_.root, w->storage_);
  Result<std::vector<int64_t>> steps = loader.ListSteps();
  if (steps.ok()) {
    for (int64_t step : *steps) {
      if (loader.ReadManifest(step).ok()) {
        w->parent_step_ = step;
        w->newest_committed_ = step;
        break;
      }
    }
  } else if (steps.status().code() != StatusCode::kNotFound) {
    return steps.status();
  }
  w->thread_ = std::thread([p = w.get()] { p->ThreadMain(); });
  w->commit_thread_ = std::thread([p = w.get()] { p->CommitMain(); });
  return w;
}

CheckpointWriter::CheckpointWriter(CheckpointWriterOptions options, Callback callback)
    : options_(std::move(options)), storage_(options_.storage), callback_(std::move(callback)) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  commit_cv_.notify_all();
  // The writer finishes the shard in flight and queues its commit; the
  // committer then publishes every queued shard and abandons what waits on a peer.
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    writer_done_ = true;
  }
  commit_cv_.notify_all();
  if (commit_thread_.joinable()) commit_thread_.join();
}

size_t CheckpointWriter::staging_capacity() const {
  std::lock_guard<std::mutex> l(mu_);
  return staging_capacity_;
}

void CheckpointWriter::BoostWhileWaited() {
  if (!options_.idle_priority) return;
  if (!writer_boosted_.exchange(true)) SetPolicy(thread_.native_handle(), SCHED_OTHER, options_);
  if (!committer_boosted_.exchange(true)) SetPolicy(commit_thread_.native_handle(), SCHED_OTHER, options_);
}

void CheckpointWriter::LowerAgain(std::atomic<bool>* boosted) {
  if (options_.idle_priority && boosted->exchange(false)) SetPolicy(pthread_self(), SCHED_IDLE, options_);
}

void CheckpointWriter::WaitIdle(std::unique_lock<std::mutex>* lock) {
  if (job_.has_value()) BoostWhileWaited();
  idle_cv_.wait(*lock, [this] { return !job_.has_value(); });
}

void CheckpointWriter::WaitCommitted(std::unique_lock<std::mutex>* lock) {
  if (job_.has_value() || !commits_.empty() || committing_) BoostWhileWaited();
  idle_cv_.wait(*lock, [this] { return !job_.has_value() && commits_.empty() && !committing_; });
}

void CheckpointWriter::EnsureStaging(size_t bytes) {
  if (bytes <= staging_capacity_) return;
  spdlog::info("{}: rank {} allocating a {:.1f} MB staging buffer (was {:.1f} MB)", options_.log_name, options_.rank,
               bytes / 1e6, staging_capacity_ / 1e6);
  staging_.reset();  // free first: bounded memory matters more than the realloc
  std::unique_ptr<uint8_t[]> fresh(new uint8_t[bytes]);
  std::memset(fresh.get(), 0, bytes);  // fault the pages in now, not during a copy
  std::lock_guard<std::mutex> l(mu_);
  staging_ = std::move(fresh);
  staging_capacity_ = bytes;
}

Status CheckpointWriter::Reserve(size_t bytes) {
  std::lock_guard<std::mutex> save_lock(save_mu_);
  {
    std::unique_lock<std::mutex> l(mu_);
    WaitIdle(&l);
  }
  EnsureStaging(bytes);
  return Status::Ok();
}

Result<SaveDecision> CheckpointWriter::Save(int64_t step, const std::vector<BufferView>& buffers,
                                            std::map<std::string, double> manifest_metrics) {
  const Clock::time_point t0 = Clock::now();
  std::lock_guard<std::mutex> save_lock(save_mu_);
  std::vector<std::pair<std::string, uint64_t>> sizes;
  sizes.reserve(buffers.size());
  for (const BufferView& b : buffers) {
    if (b.data == nullptr && b.size > 0) {
      return InvalidArgumentError("checkpoint buffer '" + b.name + "' has no data");
    }
    sizes.emplace_back(b.name, b.size);
  }
  HF_ASSIGN_OR_RETURN(ShardHeader header, LayoutShard(step, options_.rank, options_.world_size, sizes));

  {
    std::unique_lock<std::mutex> l(mu_);
    const bool commits_full = PendingCommits() >= kMaxPendingCommits;
    if (job_.has_value() || commits_full) {
      const std::string in_flight = job_.has_value()
                                        ? "step " + std::to_string(job_->step) + " is still being written"
                                        : std::to_string(kMaxPendingCommits) + " written steps still wait to commit "
                                          "(the store does not answer)";
      if (options_.policy == InFlightPolicy::kSkip) {
        ++skipped_;
        spdlog::log(options_.log_commits ? spdlog::level::warn : spdlog::level::debug,
                    "{}: save of step {} skipped: {} (policy=skip, {} skipped so far)", options_.log_name, step,
                    in_flight, skipped_.load());
        return SaveDecision::kSkipped;
      }
      BoostWhileWaited();
      idle_cv_.wait(l, [this] {
        return !job_.has_value() && PendingCommits() < kMaxPendingCommits;
      });
      spdlog::log(options_.log_commits ? spdlog::level::warn : spdlog::level::debug,
                  "{}: save of step {} waited {:.1f} ms: {} (policy=wait)", options_.log_name, step,
                  SecondsSince(t0) * 1e3, in_flight);
    }
  }
  // The background thread is idle: the staging buffer is ours until handover.
  EnsureStaging(header.file_size);
  uint8_t* dst = staging_.get();
  std::vector<uint8_t> head = EncodeShardHeader(header);
  std::memcpy(dst, head.data(), head.size());
  uint64_t pos = head.size();
  Job job;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const ShardEntry& e = header.entries[i];
    std::memset(dst + pos, 0, e.offset - pos);  // alignment padding
    if (e.size > 0 && buffers[i].defer_copy) {
      job.deferred.push_back({static_cast<const uint8_t*>(buffers[i].data), e.offset, e.size, buffers[i].ready});
    } else if (e.size > 0) {
      std::memcpy(dst + e.offset, buffers[i].data, e.size);
    }
    pos = e.offset + e.size;
  }

  job.step = step;
  job.header = std::move(header);
  job.metrics = std::move(manifest_metrics);
  job.stall_seconds = SecondsSince(t0);
  job.handed_over = Clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    staging_pending_ = !job.deferred.empty();
    job_ = std::move(job);
  }
  work_cv_.notify_one();
  return SaveDecision::kQueued;
}

void CheckpointWriter::WaitStaged() {
  if (!staging_pending_.load()) return;
  std::unique_lock<std::mutex> l(mu_);
  if (!staging_pending_.load()) return;
  if (!fence_waiting_since_.has_value()) fence_waiting_since_ = Clock::now();
  BoostWhileWaited();
  staged_cv_.wait(l, [this] { return !staging_pending_.load(); });
}

Status CheckpointWriter::Flush() {
  std::lock_guard<std::mutex> save_lock(save_mu_);
  std::unique_lock<std::mutex> l(mu_);
  WaitCommitted(&l);
  return last_status_;
}

std::vector<SaveOutcome> CheckpointWriter::TakeOutcomes() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<SaveOutcome> out;
  out.swap(outcomes_);
  return out;
}

void CheckpointWriter::ThreadMain() {
  if (options_.idle_priority) SetPolicy(pthread_self(), SCHED_IDLE, options_);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> l(mu_);
      work_cv_.wait(l, [this] { return stop_ || job_.has_value(); });
      if (!job_.has_value()) return;  // stopping and idle
      job = *job_;
    }
    PendingCommit c = Write(job);
    // Before the job is seen done: a waiter for the next one boosts again.
    LowerAgain(&writer_boosted_);
    {
      std::lock_guard<std::mutex> l(mu_);
      commits_.push_back(std::move(c));
      job_.reset();  // the staging buffer is free: the next Save may stage
    }
    commit_cv_.notify_one();
    idle_cv_.notify_all();
  }
}

void CheckpointWriter::CommitMain() {
  if (options_.idle_priority) SetPolicy(pthread_self(), SCHED_IDLE, options_);
  for (;;) {
    PendingCommit c;
    {
      std::unique_lock<std::mutex> l(mu_);
      commit_cv_.wait(l, [this] { return writer_done_ || !commits_.empty(); });
      if (commits_.empty()) return;  // the writer is gone and nothing is left
      c = std::move(commits_.front());
      commits_.pop_front();
      committing_ = true;
    }
    SaveOutcome outcome = Finish(c);
    if (outcome.committed()) {
      spdlog::log(RoutineLevel(options_), "{}: rank {} step {} committed: {:.1f} MB staged in {:.3f} s, written in {:.3f} s "
                  "({:.0f} MB/s), stall {:.1f} ms (fence {:.1f} ms)",
                   options_.log_name, options_.rank, outcome.step, outcome.shard_bytes / 1e6, outcome.stage_seconds,
                   outcome.write_seconds, outcome.shard_bytes / 1e6 / std::max(outcome.write_seconds, 1e-9),
                   outcome.stall_seconds * 1e3, outcome.fence_seconds * 1e3);
    } else {
      bool exiting;
      {
        std::lock_guard<std::mutex> l(mu_);
        exiting = stop_;
      }
      spdlog::error("{}: rank {} step {} NOT saved{}: {}", options_.log_name, options_.rank, outcome.step,
                    exiting ? "" : ", training continues", outcome.status.ToString());
    }
    if (callback_) callback_(outcome);
    LowerAgain(&committer_boosted_);  // before the commit is seen done, as the writer does
    {
      std::lock_guard<std::mutex> l(mu_);
      last_status_ = outcome.status;
      outcomes_.push_back(outcome);
      if (outcomes_.size() > 64) outcomes_.erase(outcomes_.begin());
      committing_ = false;
    }
    idle_cv_.notify_all();
  }
}

CheckpointWriter::PendingCommit CheckpointWriter::Write(const Job& job) {
  PendingCommit c;
  c.metrics = job.metrics;
  c.handed_over = job.handed_over;
  SaveOutcome& out = c.outcome;
  out.step = job.step;
  out.shard_bytes = job.header.file_size;
  // Staging first, before any storage call, so the fence opens quickly
  // whatever the disk does.
  Clock::time_point t0 = Clock::now();
  Result<uint64_t> sum = Stage(job, &out.fence_seconds);
  out.stage_seconds = SecondsSince(t0);
  out.stall_seconds = job.stall_seconds + out.fence_seconds;
  if (sum.ok()) {
    t0 = Clock::now();
    Status written = WriteShard(job, JoinPath(options_.root, StepDirName(job.step)));
    out.write_seconds = SecondsSince(t0);
    if (!written.ok()) sum = written;
  }
  if (sum.ok()) {
    c.xxh3 = *sum;
  } else {
    c.written = sum.status();
  }
  return c;
}

SaveOutcome CheckpointWriter::Finish(const PendingCommit& c) {
  SaveOutcome out = c.outcome;
  Status written = c.written;
  const std::string dir = JoinPath(options_.root, StepDirName(c.outcome.step));
  if (options_.world_size > 1) {
    // Tell rank 0 either way, so a failed rank does not cost it the whole timeout.
    std::string value = written.ok() ? "ok " + std::to_string(c.outcome.shard_bytes) + " " + HexU64(c.xxh3)
                                     : "error " + written.ToString();
    Status published = options_.store->Set(ShardKey(c.outcome.step, options_.rank), Bytes(value));
    if (!published.ok() && written.ok()) written = published.WithContext("publishing shard to the store");
  }
  if (!written.ok()) {
    out.status = written.WithContext("checkpoint step " + std::to_string(c.outcome.step) + " rank " +
                                     std::to_string(options_.rank));
    if (options_.rank == 0 && options_.world_size > 1) {
      // Rank 0 commits, so it also says it will not: otherwise every other rank
      // waits out commit_timeout for the outcome, its next save blocked behind
      // this one (found by bench/soak, with rank 0's disk full).
      Status told = options_.store->Set(OutcomeKey(c.outcome.step),
                                        Bytes("rank 0 failed to write its shard: " + written.ToString()));
      if (!told.ok()) spdlog::warn("checkpoint: could not publish the outcome of step {}: {}", c.outcome.step, told.ToString());
    }
  } else {
    out.status = Commit(c, dir);
  }
  out.total_seconds = std::chrono::duration<double>(Clock::now() - c.handed_over).count();
  if (out.status.ok()) {
    parent_step_ = c.outcome.step;
    newest_committed_ = std::max(newest_committed_.load(), c.outcome.step);
    if (options_.rank == 0 || options_.prune_own_root) Prune(c.outcome.step);
  }
  return out;
}

Result<uint64_t> CheckpointWriter::Stage(const Job& job, double* fence_seconds) {
  uint8_t* staging = staging_.get();
  Status ready;
  for (const DeferredCopy& d : job.deferred) {
    if (d.ready && ready.ok()) ready = d.ready().WithContext("staging the checkpoint's device state");
  }
  Xxh3Stream stream;
  size_t k = 0;  // next deferred copy that is not finished
  for (uint64_t a = 0; ready.ok() && a < job.header.file_size; a += kStageChunkBytes) {
    const uint64_t b = std::min<uint64_t>(a + kStageChunkBytes, job.header.file_size);
    while (k < job.deferred.size() && job.deferred[k].offset < b) {
      const DeferredCopy& d = job.deferred[k];
      const uint64_t lo = std::max(a, d.offset);
      const uint64_t hi = std::min(b, d.offset + d.size);
      if (lo < hi) std::memcpy(staging + lo, d.src + (lo - d.offset), hi - lo);
      if (d.offset + d.size > b) break;  // continues in the next chunk
      ++k;
    }
    stream.Update(staging + a, b - a);
  }
  const uint64_t sum = stream.Digest();
  {
    std::lock_guard<std::mutex> l(mu_);
    staging_pending_ = false;
    if (fence_waiting_since_.has_value()) {
      *fence_seconds = SecondsSince(*fence_waiting_since_);
      fence_waiting_since_.reset();
    }
  }
  staged_cv_.notify_all();
  if (!ready.ok()) return ready;
  return sum;
}

Status CheckpointWriter::WriteShard(const Job& job, const std::string& dir) {
  HF_RETURN_IF_ERROR(storage_->MakeDir(options_.root));
  HF_RETURN_IF_ERROR(storage_->MakeDir(dir));
  // The step folder's own entry must be durable before a manifest inside it is.
  HF_RETURN_IF_ERROR(storage_->SyncDir(options_.root));
  HF_ASSIGN_OR_RETURN(bool committed, storage_->Exists(JoinPath(dir, kManifestFileName)));
  if (committed) {
    return FailedPreconditionError(dir + " is already a committed checkpoint; refusing to overwrite it");
  }
  const std::string final_path = JoinPath(dir, ShardFileName(options_.rank, options_.world_size));
  const std::string tmp_path = final_path + kTempSuffix;
  auto fail = [&](const Status& s) -> Status {
    (void)storage_->Unlink(tmp_path);  // best effort: loaders ignore it anyway
    return s;
  };
  HF_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, storage_->NewWritableFile(tmp_path));
  const uint8_t* p = staging_.get();
  uint64_t off = 0;
  Status s;
  while (off < job.header.file_size && s.ok()) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(job.header.file_size - off, options_.write_chunk_bytes));
    s = file->Append(p + off, n);
    if (s.ok() && options_.start_writeback) file->StartWriteback(off, n);
    off += n;
  }
  if (s.ok()) s = file->Sync();
  Status closed = file->Close();
  if (s.ok()) s = closed;
  if (!s.ok()) return fail(s);
  s = storage_->Rename(tmp_path, final_path);
  if (!s.ok()) return fail(s);
  return storage_->SyncDir(dir);
}

Status CheckpointWriter::Commit(const PendingCommit& commit, const std::string& dir) {
  const std::string where = "checkpoint step " + std::to_string(commit.outcome.step);
  if (options_.rank != 0) {
    Result<std::vector<uint8_t>> outcome = AwaitPeerKey(OutcomeKey(commit.outcome.step));
    if (!outcome.ok()) return outcome.status().WithContext(where + ": waiting for rank 0 to commit");
    std::string text = Text(*outcome);
    if (text == "committed") return Status::Ok();
    return UnavailableError(where + ": rank 0 did not commit: " + text);
  }

  Manifest m;
  m.step = commit.outcome.step;
  m.world_size = options_.world_size;
  m.layout = options_.layout;
  m.config_hash = options_.config_hash;
  m.parent_step = parent_step_;
  m.metrics = commit.metrics;
  m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  m.shards.resize(options_.world_size);
  Status s;
  for (int r = 0; r < options_.world_size && s.ok(); ++r) {
    ManifestShard& shard = m.shards[r];
    shard.rank = r;
    shard.file = ShardFileName(r, options_.world_size);
    if (r == 0) {
      shard.size = commit.outcome.shard_bytes;
      shard.xxh3 = commit.xxh3;
      continue;
    }
    Result<std::vector<uint8_t>> got = AwaitPeerKey(ShardKey(commit.outcome.step, r));
    if (!got.ok()) {
      s = got.status().WithContext(where + ": waiting for rank " + std::to_string(r) + "'s shard");
      break;
    }
    std::string text = Text(*got);
    char hex[17] = {0};
    unsigned long long size = 0;
    if (text.rfind("ok ", 0) == 0 && std::sscanf(text.c_str(), "ok %llu %16s", &size, hex) == 2 &&
        ParseHexU64(hex).has_value()) {
      shard.size = size;
      shard.xxh3 = *ParseHexU64(hex);
    } else {
      s = UnavailableError(where + ": rank " + std::to_string(r) + " failed to write its shard: " + text);
    }
  }
  if (s.ok()) s = WriteManifest(dir, m).WithContext(where);
  if (options_.world_size > 1) {
    Status told = options_.store->Set(OutcomeKey(commit.outcome.step), Bytes(s.ok() ? "committed" : s.ToString()));
    if (!told.ok()) spdlog::warn("checkpoint: could not publish the outcome of step {}: {}", commit.outcome.step, told.ToString());
  }
  return s;
}

// A Get parked on the Store server cannot be interrupted, so the wait goes in
// slices. Without this, a rank whose peer was SIGKILLed between saving a step
// and publishing its shard sat in ~CheckpointWriter (joining this thread) for
// commit_timeout, until the supervisor's SIGKILL: 3 s more per restart.
Result<std::vector<uint8_t>> CheckpointWriter::AwaitPeerKey(const std::string& key) {
  const Clock::time_point deadline = Clock::now() + options_.commit_timeout;
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) {
        return FailedPreconditionError("abandoned waiting for store key '" + key +
                                       "': this process is exiting (the checkpoint writer was destroyed)");
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return TimeoutError("store key '" + key + "' was not set within " +
                          std::to_string(options_.commit_timeout.count()) + " ms");
    }
    Result<std::vector<uint8_t>> got = options_.store->Get(key, std::min(left, options_.peer_wait_slice));
    if (got.ok() || got.status().code() != StatusCode::kTimeout) return got;
  }
}

Status CheckpointWriter::WriteManifest(const std::string& dir, const Manifest& manifest) {
  const std::string final_path = JoinPath(dir, kManifestFileName);
  const std::string tmp_path = final_path + kTempSuffix;
  const std::string text = EncodeManifest(manifest);
  Status s;
  {
    Result<std::unique_ptr<WritableFile>> file = storage_->NewWritableFile(tmp_path);
    if (!file.ok()) return file.status();
    s = (*file)->Append(text.data(), text.size());
    if (s.ok()) s = (*file)->Sync();
    Status closed = (*file)->Close();
    if (s.ok()) s = closed;
  }
  if (s.ok()) s = storage_->Rename(tmp_path, final_path);
  if (!s.ok()) {
    (void)storage_->Unlink(tmp_path);
    return s;
  }
  // Until the folder is synced the rename may not survive a power cut; report
  // failure then, even though the manifest may turn up after a reboot (it is
  // complete and verifies, so that is harmless).
  return storage_->SyncDir(dir);
}

void CheckpointWriter::Prune(int64_t newest) {
  CheckpointLoader loader(options_.root, storage_);
  Result<std::vector<int64_t>> steps = loader.ListSteps();
  if (!steps.ok()) {
    spdlog::warn("checkpoint: retention skipped: {}", steps.status().ToString());
    return;
  }
  std::vector<int64_t> committed;
  std::vector<int64_t> partial;
  for (int64_t step : *steps) {
    Result<bool> has = storage_->Exists(JoinPath(JoinPath(options_.root, StepDirName(step)), kManifestFileName));
    if (!has.ok()) {
      spdlog::warn("checkpoint: retention skipped: {}", has.status().ToString());
      return;
    }
    (*has ? committed : partial).push_back(step);
  }
  if (options_.rank != 0) {
    // Not rank 0's root: no manifest of its own is written here (one that is,
    // a restore's, is of a step gone by), so the newest commit and the steps
    // in flight after it are all there is to keep.
    for (int64_t step : committed) {
      if (step < newest) partial.push_back(step);
    }
    committed.clear();
  }
  std::set<int64_t> keep = {newest};
  for (size_t i = 0; i < committed.size() && i < static_cast<size_t>(options_.retention.keep_last); ++i) {
    keep.insert(committed[i]);  // ListSteps is newest first
  }
  if (const int64_t every = options_.retention.keep_newest_every; every > 0) {
    // Rank 0's root: the newest committed multiple. Another root: the newest
    // multiple up to the newest commit, committed there or not (its
    // manifest is on rank 0's node).
    const std::vector<int64_t>& pool = options_.rank == 0 ? committed : partial;
    int64_t kept = -1;
    for (int64_t step : pool) {
      if (step % every == 0 && step <= newest) kept = std::max(kept, step);
    }
    if (kept >= 0) keep.insert(kept);
  }
  std::vector<int64_t> doomed;
  for (int64_t step : committed) {
    bool every = options_.retention.keep_every > 0 && step % options_.retention.keep_every == 0;
    if (!keep.count(step) && !every) doomed.push_back(step);
  }
  for (int64_t step : partial) {
    if (step < newest && !keep.count(step)) doomed.push_back(step);  // a save that died before committing
  }
  for (int64_t step : doomed) {
    Status s = RemoveStepDir(JoinPath(options_.root, StepDirName(step)), storage_);
    if (s.ok()) {
      spdlog::log(RoutineLevel(options_), "{}: retention removed step {}", options_.log_name, step);
    } else {
      spdlog::warn("checkpoint: retention could not remove step {}: {}", step, s.ToString());
    }
  }
}

Status RemoveStepDir(const std::string& dir, Storage* storage) {
  if (storage == nullptr) storage = PosixStorage::Default();
  // Manifest first, made durable, so a crash mid-removal leaves a partial folder
  // (ignored) and never a visible checkpoint with missing shards.
  HF_RETURN_IF_ERROR(storage->Unlink(JoinPath(dir, kManifestFileName)));
  HF_RETURN_IF_ERROR(storage->SyncDir(dir));
  HF_ASSIGN_OR_RETURN(std::vector<std::string> names, storage->ListDir(dir));
  for (const std::string& name : names) HF_RETURN_IF_ERROR(storage->Unlink(JoinPath(dir, name)));
  return storage->RemoveDir(dir);
}

}  // namespace holdfast
