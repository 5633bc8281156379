// fuzz_seed_corpus SOURCE_DIR OUT_DIR: writes the fuzz targets' seed corpora
// (tests/fuzz/corpus/README.md) from the real writers and encoders, so that the
// seeds are what holdfast actually produces: manifests and shard headers
// written by CheckpointWriter, progress records written by ProgressWriter,
// control and cluster lines from their encoders, and the example configs
// copied from SOURCE_DIR. Each target's folder under OUT_DIR is replaced.
// The seed formats are the harnesses' (see each *_fuzz.cc).
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/format.h"
#include "common/memory_store.h"
#include "common/progress_record.h"
#include "daemon/cluster_protocol.h"
#include "daemon/control_protocol.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HF_CHECK_MSG(in.good(), "cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  HF_CHECK_MSG(out.good(), "cannot write " + path.string());
}

fs::path Fresh(const fs::path& out, const std::string& target) {
  const fs::path dir = out / target;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string BigEndian64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (56 - 8 * i));
  return s;
}

template <typename T>
void PutLe(std::string* s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s->append(b, sizeof(T));
}

// ---- checkpoints: a world-1 run of two saves, and a world-2 save ----

// A rank's state as holdfast-train names its buffers (small sizes).
struct State {
  std::vector<uint8_t> meta, params, exp_avg, exp_avg_sq, rng;
  State(int64_t step, int rank)
      : meta(24, static_cast<uint8_t>(step)), params(100 + rank, 1), exp_avg(100 + rank, 2),
        exp_avg_sq(100 + rank, 3), rng(16, 4) {}
  std::vector<BufferView> Views() const {
    return {{"meta", meta.data(), meta.size()},
            {"params", params.data(), params.size()},
            {"optim.exp_avg", exp_avg.data(), exp_avg.size()},
            {"optim.exp_avg_sq", exp_avg_sq.data(), exp_avg_sq.size()},
            {"rng.cpu", rng.data(), rng.size()}};
  }
};

void WriteCheckpoints(const fs::path& root) {
  fs::create_directories(root / "world1");
  fs::create_directories(root / "world2");
  {
    CheckpointWriterOptions o;
    o.root = (root / "world1").string();
    o.layout = "dp=1";
    o.config_hash = "5a1b2c3d4e5f6071";
    auto w = std::move(CheckpointWriter::Create(o)).value();
    for (int64_t step : {25, 50}) {
      State s(step, 0);
      HF_CHECK(w->Save(step, s.Views()).ok());
      HF_CHECK(w->Flush().ok());
    }
  }
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < 2; ++r) {
    CheckpointWriterOptions o;
    o.root = (root / "world2").string();
    o.rank = r;
    o.world_size = 2;
    o.layout = "dp=2";
    o.config_hash = "5a1b2c3d4e5f6071";
    o.store = store;
    writers.push_back(std::move(CheckpointWriter::Create(o)).value());
  }
  State s0(200, 0), s1(200, 1);
  HF_CHECK(writers[1]->Save(200, s1.Views()).ok());
  HF_CHECK(writers[0]->Save(200, s0.Views()).ok());
  HF_CHECK(writers[0]->Flush().ok());
  HF_CHECK(writers[1]->Flush().ok());
}

void ManifestSeeds(const fs::path& ckpt, const fs::path& out) {
  const fs::path dir = Fresh(out, "manifest");
  const std::string world1 = ReadFile((ckpt / "world1" / StepDirName(50) / kManifestFileName).string());
  const std::string world2 = ReadFile((ckpt / "world2" / StepDirName(200) / kManifestFileName).string());
  WriteFile(dir / "world1-step50.json", world1);
  WriteFile(dir / "world2-step200.json", world2);
  // A leading ' ' (0 modulo 16): parsed as it is, so its checksum no longer holds.
  WriteFile(dir / "unrepaired-checksum-mismatch.json", " " + world2);
  // A valid manifest that claims a 1 PiB shard: the loader must skip it without
  // allocating the claim (fixed in CheckpointLoader::ReadAndCheck).
  Result<Manifest> huge = ParseManifest(world1);
  HF_CHECK(huge.ok());
  huge->shards[0].size = uint64_t{1} << 50;
  WriteFile(dir / "claims-huge-shard.json", EncodeManifest(*huge));
}

void ShardHeaderSeeds(const fs::path& ckpt, const fs::path& out) {
  const fs::path dir = Fresh(out, "shard_header");
  auto seed = [&](const fs::path& shard, const std::string& name) {
    const std::string file = ReadFile(shard.string());
    Result<uint32_t> header_size =
        PeekShardHeaderSize(reinterpret_cast<const uint8_t*>(file.data()), file.size());
    HF_CHECK(header_size.ok());
    WriteFile(dir / name, BigEndian64(file.size()) + file.substr(0, *header_size));
  };
  seed(ckpt / "world1" / StepDirName(50) / ShardFileName(0, 1), "rank0-of-1.bin");
  seed(ckpt / "world2" / StepDirName(200) / ShardFileName(1, 2), "rank1-of-2.bin");
}

// ---- progress records: a simulated run, read as the daemon reads them ----

class Rank {
 public:
  Rank(const fs::path& dir, int rank) : path_((dir / ("rank-" + std::to_string(rank))).string()) {
    HF_CHECK(CreateProgressFile(path_, rank).ok());
    writer_ = std::move(ProgressWriter::Open(path_, rank)).value();
    reader_ = std::move(ProgressReader::Open(path_)).value();
  }
  ProgressWriter& w() { return *writer_; }
  ProgressSnapshot Snapshot() const { return reader_->Read(); }
  // One data-parallel step: forward, backward with one bucket allreduce, optimizer.
  void Step(int64_t completed) {
    w().BeginStep();
    w().SetPhase(Phase::kForward);
    w().SetPhase(Phase::kBackward);
    const uint64_t seq = w().IssueCollective(CollectiveKind::kAllreduce, 4096);
    w().WaitCollective(seq, CollectiveKind::kAllreduce);
    w().CollectiveDone(seq);
    w().SetPhase(Phase::kOptimizer);
    w().EndStep(completed);
  }

 private:
  std::string path_;
  std::unique_ptr<ProgressWriter> writer_;
  std::unique_ptr<ProgressReader> reader_;
};

// The harness's header (daemon/fuzz/progress_record_fuzz.cc), then the polls.
std::string ProgressSeed(uint8_t flags, int64_t start_ns, uint32_t interval_ns, uint16_t wstatus,
                         uint8_t straggler, const std::vector<std::vector<ProgressSnapshot>>& polls) {
  std::string s;
  s += static_cast<char>(flags);
  PutLe<int64_t>(&s, start_ns);
  PutLe<uint32_t>(&s, interval_ns);
  PutLe<uint16_t>(&s, wstatus);
  s += static_cast<char>(straggler);
  for (const auto& poll : polls) {
    for (const ProgressSnapshot& p : poll) {
      s += '\x01';  // 'S', alive
      s.append(reinterpret_cast<const char*>(&p.record), sizeof(p.record));
    }
  }
  return s;
}

std::vector<ProgressSnapshot> Poll(const std::vector<Rank*>& ranks) {
  std::vector<ProgressSnapshot> out;
  for (const Rank* r : ranks) out.push_back(r->Snapshot());
  return out;
}

std::vector<ProgressSnapshot> ProgressSeeds(const fs::path& tmp, const fs::path& out) {
  const fs::path dir = Fresh(out, "progress_record");
  constexpr uint32_t kPoll = 200'000'000;  // poll_ms = 200
  {
    // One rank training: started, two steps, a checkpoint committed.
    Rank r0(tmp, 0);
    std::vector<std::vector<ProgressSnapshot>> polls;
    polls.push_back(Poll({&r0}));
    r0.Step(1);
    polls.push_back(Poll({&r0}));
    r0.Step(2);
    r0.w().SetCheckpointStep(2);
    polls.push_back(Poll({&r0}));
    WriteFile(dir / "one-rank-steps.bin", ProgressSeed(0x00, MonotonicNowNs(), kPoll, 0x0100, 0x01, polls));
  }
  std::vector<ProgressSnapshot> hung;
  {
    // Two ranks; rank 1 stops in forward while rank 0 waits in allreduce #2:
    // a hang, triaged at every poll; rank 1 then dies of SIGKILL (wstatus 9).
    Rank r0(tmp, 0), r1(tmp, 1);
    std::vector<std::vector<ProgressSnapshot>> polls;
    r0.Step(1);
    r1.Step(1);
    polls.push_back(Poll({&r0, &r1}));
    r0.w().BeginStep();
    r0.w().SetPhase(Phase::kForward);
    r0.w().SetPhase(Phase::kBackward);
    const uint64_t seq = r0.w().IssueCollective(CollectiveKind::kAllreduce, 4096);
    r0.w().WaitCollective(seq, CollectiveKind::kAllreduce);
    r1.w().BeginStep();
    r1.w().SetPhase(Phase::kForward);
    polls.push_back(Poll({&r0, &r1}));
    hung = polls.back();
    const int64_t now = MonotonicNowNs();
    WriteFile(dir / "two-ranks-hang.bin", ProgressSeed(0x90, now, kPoll, 9, 0x00, polls));
    // The same with values a job may write but no clock or count gives (they
    // overflowed triage's arithmetic before): rank 0 waiting since near
    // INT64_MIN, rank 1 at step INT64_MAX.
    polls.back()[0].record.phase_started_ns = INT64_MIN + 1;
    polls.back()[1].record.step = INT64_MAX;
    WriteFile(dir / "two-ranks-hang-extreme-values.bin", ProgressSeed(0x90, now, kPoll, 9, 0x00, polls));
  }
  {
    // Two ranks in data parallel for 5 steps, rank 1 computing 4x longer, rank
    // 0 waiting for it in each step's allreduce: a straggler (factor 2, no
    // minimum duration). Polled after each step, the harness's clock running
    // at least as fast as the real one was.
    Rank r0(tmp, 0), r1(tmp, 1);
    std::vector<std::vector<ProgressSnapshot>> polls;
    std::vector<int64_t> at;
    auto pause_ms = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
    for (int64_t step = 1; step <= 5; ++step) {
      r0.w().BeginStep();
      r1.w().BeginStep();
      r0.w().SetPhase(Phase::kForward);
      r1.w().SetPhase(Phase::kForward);
      pause_ms(2);
      const uint64_t seq = r0.w().IssueCollective(CollectiveKind::kAllreduce, 4096);
      r0.w().WaitCollective(seq, CollectiveKind::kAllreduce);
      pause_ms(6);
      r1.w().IssueCollective(CollectiveKind::kAllreduce, 4096);
      r1.w().WaitCollective(seq, CollectiveKind::kAllreduce);
      pause_ms(1);
      for (Rank* r : {&r0, &r1}) {
        r->w().CollectiveDone(seq);
        r->w().SetPhase(Phase::kOptimizer);
        r->w().EndStep(step);
      }
      at.push_back(MonotonicNowNs());
      polls.push_back(Poll({&r0, &r1}));
    }
    int64_t interval = 1;
    for (size_t k = 1; k < at.size(); ++k) {
      interval = std::max<int64_t>(interval, (at[k] - at[0]) / static_cast<int64_t>(k) + 1);
    }
    WriteFile(dir / "two-ranks-straggler.bin",
              ProgressSeed(0x10, at[0], static_cast<uint32_t>(interval), 0, 0x01, polls));
  }
  {
    // A checkpoint save that failed (training went on).
    Rank r0(tmp, 0);
    r0.Step(1);
    r0.w().SetPhase(Phase::kCheckpoint);
    r0.w().RecordCheckpointFailure(1, "write /ckpt/step-000000000001/shard-00000-of-00001.bin: No space left on device");
    r0.Step(2);
    WriteFile(dir / "checkpoint-failed.bin", ProgressSeed(0x00, MonotonicNowNs(), kPoll, 0, 0x00, {Poll({&r0})}));
  }
  {
    // A rank restored from a memory snapshot of step 14, one newer snapshot
    // passed over, then trained a step.
    Rank r0(tmp, 0);
    r0.w().SetRestored(14, RestoreTier::kMemory, 1);
    r0.Step(15);
    WriteFile(dir / "restored-from-memory.bin", ProgressSeed(0x00, MonotonicNowNs(), kPoll, 0, 0x00, {Poll({&r0})}));
    // Read as written (flags 15): the same record from a version 2 writer (an
    // older Python module), whose restore fields the reader must not trust.
    std::vector<ProgressSnapshot> v2 = Poll({&r0});
    v2[0].record.version = 2;
    WriteFile(dir / "unrepaired-version-2.bin", ProgressSeed(0x0f, MonotonicNowNs(), kPoll, 0, 0x00, {v2}));
  }
  {
    // Read as written (flags 15): a file nobody initialised.
    ProgressSnapshot zero;
    WriteFile(dir / "unrepaired-zeroed.bin", ProgressSeed(0x0f, MonotonicNowNs(), kPoll, 0, 0x00, {{zero}}));
  }
  return hung;
}

// ---- control protocol: requests and replies as runctl and holdfastd send them ----

void ControlSeeds(const fs::path& out) {
  const fs::path dir = Fresh(out, "control_protocol");
  WriteFile(dir / "request-ping.json", EncodeRequest({1, control_op::kPing, "{}", std::nullopt}));
  WriteFile(dir / "request-status.json", EncodeRequest({2, control_op::kStatus, "{\"run_id\":\"r-20261130-1\"}", "r-20261130-1"}));
  WriteFile(dir / "request-checkpoint.json", EncodeRequest({3, control_op::kCheckpoint, "{}", std::nullopt}));
  WriteFile(dir / "request-stop.json", EncodeRequest({4, control_op::kStop, "{}", std::nullopt}));
  RunStatus st;
  st.run_id = "r-20261130-1";
  st.name = "quickstart";
  st.state = "running";
  st.attempt = 1;
  st.generation = 2;
  st.step = 120;
  st.world_size = 2;
  st.restarts_used = 1;
  st.restart_budget = 3;
  st.last_checkpoint_step = 100;
  st.uptime_s = 61.5;
  NodeStatus node;
  node.node = 0;
  node.host = "gpu-a17";
  for (int r = 0; r < 2; ++r) {
    RankStatus rs;
    rs.rank = r;
    rs.pid = 4242 + r;
    rs.state = "running";
    rs.step = 120;
    rs.phase = r == 0 ? "collective" : "forward";
    rs.heartbeat_age_s = 0.1;
    rs.last_step_ms = 412.5;
    if (r == 0) rs.waiting_on = 18;
    rs.collectives_issued = 18 - r;
    rs.steps_per_s = 2.4;
    rs.step_ms_p50 = 410;
    rs.step_ms_p99 = 440;
    rs.compute_ms_p50 = r == 0 ? 106 : 412;
    rs.wait_ms_p50 = r == 0 ? 300 : 2;
    node.ranks.push_back(rs);
  }
  st.nodes.push_back(node);
  st.last_incident = IncidentSummary{"crash", "rank 1 killed by signal 9 (SIGKILL) in forward of step 81",
                                     1764500000000, "restart", "runbooks/crash.md"};
  st.slowest_rank = 1;
  st.slowest_rank_note = "rank 1 computes 3.9x the median of the others (412 ms vs 106 ms a step)";
  st.scheduler = "slurm";
  st.job_id = "4242";
  st.restart_count = 1;
  st.hosts = {"gpu-a17"};
  WriteFile(dir / "response-status.json", EncodeOkResponse(2, EncodeStatusResult(st)));
  WriteFile(dir / "response-checkpoint.json", EncodeOkResponse(3, "{\"requested_at_step\":120}"));
  WriteFile(dir / "response-denied.json",
            EncodeErrorResponse(4, ControlErrorCode::kPermissionDenied, "only the run's owner (uid 1000) or root may stop it"));
}

// ---- cluster protocol: one line per message type ----

void ClusterSeeds(const std::vector<ProgressSnapshot>& records, const fs::path& out) {
  const fs::path dir = Fresh(out, "cluster_protocol");
  const int64_t now = MonotonicNowNs();
  std::vector<RankView> views;
  for (size_t i = 0; i < records.size(); ++i) {
    RankView v;
    v.rank = 2 + static_cast<int>(i);
    v.node = 1;
    v.host = "gpu-b02";
    v.pid = 4242 + static_cast<int>(i);
    v.proc_state = i == 0 ? ProcState::kSleeping : ProcState::kStopped;
    v.progress = DecodeProgress(records[i]);
    views.push_back(v);
  }
  auto put = [&](const char* name, const ClusterMessage& m) { WriteFile(dir / name, EncodeClusterMessage(m, now)); };
  put("hello.json", HelloMsg{kClusterProtocolVersion, 1, "gpu-b02", 2, 777,
                              "{\"status\":\"pass\",\"decision\":{\"action\":\"none\",\"reason\":\"\"},\"results\":[]}",
                              std::string(32, '\x11'), std::string(32, '\x22')});
  put("progress.json", ProgressMsg{3, views});
  put("rank_exit.json", RankExitMsg{3, 3, 9, "", {"step 120 loss 2.31", "Killed"}, views});
  put("health.json", HealthMsg{3, "{\"status\":\"fail\",\"decision\":{\"action\":\"drain\",\"reason\":\"ib.port_state\"}}"});
  put("reject.json", RejectMsg{"node 1 is already connected"});
  put("start.json", StartMsg{GenerationSpec{"r-20261130-1", 1, 3, 4, "10.0.0.1:29500", 29501, -1, ""},
                             {{2, 0, 1, "gpu-b02", 0}, {3, 1, 1, "gpu-b02", 1}}});
  put("stop.json", StopMsg{3, "rank 1 hung in allreduce #18", 3.0});
  put("signal.json", SignalMsg{3, 10});
  put("kill.json", KillMsg{3, {3}});
  put("finish.json", FinishMsg{0, "finished"});
  put("challenge.json", ChallengeMsg{std::string(32, '\x33')});
  put("welcome.json", WelcomeMsg{std::string(32, '\x44'), "run-20261201-1"});
}

// ---- configs: the example files ----

void CopySeeds(const fs::path& src, const fs::path& out, const std::string& target,
               const std::vector<std::pair<std::string, std::string>>& files) {
  const fs::path dir = Fresh(out, target);
  for (const auto& [from, to] : files) WriteFile(dir / to, ReadFile((src / from).string()));
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) {
  using namespace holdfast;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SOURCE_DIR OUT_DIR   (e.g. . tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path src = argv[1];
  const fs::path out = argv[2];
  char tmpl[] = "/tmp/holdfast-seeds-XXXXXX";
  HF_CHECK(mkdtemp(tmpl) != nullptr);
  const fs::path tmp = tmpl;

  WriteCheckpoints(tmp / "ckpt");
  ManifestSeeds(tmp / "ckpt", out);
  ShardHeaderSeeds(tmp / "ckpt", out);
  const std::vector<ProgressSnapshot> hung = ProgressSeeds(tmp, out);
  ControlSeeds(out);
  ClusterSeeds(hung, out);
  CopySeeds(src, out, "job_config",
            {{"examples/job.toml", "job.toml"}, {"examples/gpu/job.toml", "gpu-job.toml"},
             {"examples/pytorch_ddp/job.toml", "pytorch-ddp-job.toml"}});
  CopySeeds(src, out, "trainer_config",
            {{"examples/quickstart.toml", "quickstart.toml"}, {"examples/gpu/train.toml", "gpu-train.toml"},
             {"tests/reference/parity.toml", "parity.toml"}});
  // With the overrides examples/job.toml passes (after a NUL: one per line).
  WriteFile(out / "trainer_config" / "quickstart-with-overrides.toml",
            ReadFile((src / "examples/quickstart.toml").string()) + std::string(1, '\0') +
                "data.path=runs/quickstart/corpus.txt\noutput.dir=runs/quickstart\ncheckpoint.dir=checkpoints\n"
                "checkpoint.every_steps=25");
  fs::remove_all(tmp);
  std::printf("seed corpora written under %s\n", out.c_str());
  return 0;
}
