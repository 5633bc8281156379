// The Python module (common/python/holdfast) writes the record the C++ side
// reads: a record created as holdfastd creates it, written by
// /usr/bin/python3 through the module, read with ProgressReader; and the same
// calls through ProgressWriter and through the module leave the same bytes
// (times aside).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "common/mesh.h"
#include "common/progress_record.h"

namespace holdfast {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::string TempPath(const char* tag) {
  return (std::filesystem::temp_directory_path() /
          (std::string("hf_progress_py_") + tag + "_" + std::to_string(getpid())))
      .string();
}

std::string PythonDir() {
  const char* src = std::getenv("HOLDFAST_SOURCE_DIR");
  return std::string(src != nullptr ? src : HOLDFAST_DEFAULT_SOURCE_DIR) + "/common/python";
}

// Runs `script` with /usr/bin/python3 and the module on its path, under the
// environment holdfastd gives a rank. Returns the exit code and the pid.
int RunPython(const std::string& script, const std::string& progress_path, int rank, pid_t* pid_out = nullptr) {
  pid_t child = fork();
  if (child == 0) {
    setenv("PYTHONPATH", PythonDir().c_str(), 1);
    setenv("HOLDFAST_PROGRESS_PATH", progress_path.c_str(), 1);
    setenv("HOLDFAST_RANK", std::to_string(rank).c_str(), 1);
    execl(kPython, "python3", "-B", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid_out != nullptr) *pid_out = child;
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

ProgressSnapshot ReadRecord(const std::string& path) {
  auto reader = ProgressReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return {};
  return (*reader)->Read();
}

class ProgressRecordPythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  }
};

TEST_F(ProgressRecordPythonTest, ReaderSeesWhatThePythonModuleWrote) {
  const std::string path = TempPath("xproc");
  ASSERT_TRUE(CreateProgressFile(path, 3).ok());  // as holdfastd does before launch
  const std::string script = R"(
import os, holdfast
assert holdfast.enabled()
with holdfast.phase("forward"):
    a = holdfast.issue_collective("allreduce", 4096)
    holdfast.collective_done(a, holdfast.wait_collective(a, "allreduce"))
holdfast.step(1)
holdfast.checkpoint_committed(1)
holdfast.checkpoint_failed(2, "open /ck/step-2: No space left on device")
with holdfast.phase("backward"):
    b = holdfast.issue_collective("allreduce", 8192)
    holdfast.wait_collective(b, "allreduce")
    os._exit(0)  # dies waiting in collective #2
)";
  pid_t pid = 0;
  ASSERT_EQ(RunPython(script, path, 3, &pid), 0);
  ProgressSnapshot s = ReadRecord(path);
  ASSERT_TRUE(s.valid);
  EXPECT_FALSE(s.torn);
  const ProgressRecordLayout& r = s.record;
  EXPECT_EQ(r.seq % 2, 0u);
  EXPECT_EQ(r.version, kProgressVersion);
  EXPECT_EQ(r.size, sizeof(ProgressRecordLayout));
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.pid, pid);
  EXPECT_EQ(r.step, 1);
  EXPECT_EQ(s.phase(), Phase::kCollective);
  EXPECT_EQ(static_cast<CollectiveKind>(r.collective_kind), CollectiveKind::kAllreduce);
  EXPECT_EQ(r.waiting_on, 2u);
  EXPECT_EQ(r.collectives_issued, 2u);
  EXPECT_EQ(r.collectives_done, 1u);
  EXPECT_EQ(r.ring_head, 2u);
  EXPECT_EQ(r.ring[0].seq, 1u);
  EXPECT_EQ(r.ring[0].kind, static_cast<uint32_t>(CollectiveKind::kAllreduce));
  EXPECT_EQ(r.ring[0].bytes, 4096u);
  EXPECT_GE(r.ring[0].completed_ns, r.ring[0].issued_ns);
  EXPECT_GT(r.ring[0].issued_ns, 0);
  EXPECT_EQ(r.ring[1].seq, 2u);
  EXPECT_EQ(r.ring[1].bytes, 8192u);
  EXPECT_EQ(r.ring[1].completed_ns, 0);
  EXPECT_GT(r.last_step_ns, 0);  // the first phase started the first step's timer
  EXPECT_EQ(r.checkpoint_step, 1);
  EXPECT_EQ(r.checkpoint_failures, 1u);
  EXPECT_EQ(r.checkpoint_failed_step, 2);
  EXPECT_STREQ(r.checkpoint_error, "open /ck/step-2: No space left on device");
  // One clock: the module's times are CLOCK_MONOTONIC, as the daemon's.
  const int64_t now = MonotonicNowNs();
  EXPECT_LE(r.heartbeat_ns, now);
  EXPECT_GT(r.heartbeat_ns, now - int64_t{60} * 1000000000);
  EXPECT_GE(r.heartbeat_ns, r.phase_started_ns);
  std::remove(path.c_str());
}

// Times and the pid differ between two writers; whether a time is set does not.
ProgressRecordLayout WithoutTimes(ProgressRecordLayout r) {
  auto flag = [](int64_t* t) { *t = *t != 0 ? 1 : 0; };
  r.pid = 0;
  r.seq = 0;  // counts updates, and a Python step() is one update where C++ makes two
  flag(&r.phase_started_ns);
  flag(&r.step_started_ns);
  flag(&r.heartbeat_ns);
  flag(&r.last_step_ns);
  for (CollectiveEntry& e : r.ring) {
    flag(&e.issued_ns);
    flag(&e.completed_ns);
  }
  return r;
}

TEST_F(ProgressRecordPythonTest, SameCallsLeaveTheSameBytesAsProgressWriter) {
  const std::string long_error = std::string(149, 'x') + " caf\xC3\xA9 \xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9";
  const std::string py_path = TempPath("py");
  ASSERT_TRUE(CreateProgressFile(py_path, 5).ok());
  const std::string script = R"(
import holdfast
holdfast.step(0)
kinds = ["allreduce", "broadcast", "barrier", "allgather"]
for i in range(21):
    s = holdfast.issue_collective(kinds[i % 4], 100 * i)
    if i % 5 != 4:  # every fifth is left in flight
        holdfast.collective_done(s, holdfast.wait_collective(s, kinds[i % 4]))
holdfast.step(1)
with holdfast.phase("checkpoint"):
    holdfast.checkpoint_committed(1)
holdfast.step(2)
holdfast.checkpoint_failed(2, "x" * 149 + " caf\u00e9 \u00e9\u00e9\u00e9\u00e9")
with holdfast.phase("optimizer"):
    pass
b = holdfast.issue_collective("barrier")
holdfast.wait_collective(b, "barrier")
)";
  ASSERT_EQ(RunPython(script, py_path, 5), 0);

  const std::string cc_path = TempPath("cc");
  ASSERT_TRUE(CreateProgressFile(cc_path, 5).ok());
  {
    auto w = ProgressWriter::Open(cc_path, 5);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ProgressWriter& p = **w;
    // holdfast.step(n) is EndStep(n) then BeginStep(); leaving a phase sets the one before.
    p.EndStep(0);
    p.BeginStep();
    const CollectiveKind kinds[] = {CollectiveKind::kAllreduce, CollectiveKind::kBroadcast, CollectiveKind::kBarrier,
                                    CollectiveKind::kAllgather};
    for (int i = 0; i < 21; ++i) {
      const uint64_t s = p.IssueCollective(kinds[i % 4], static_cast<uint64_t>(100 * i));
      if (i % 5 != 4) {
        p.WaitCollective(s, kinds[i % 4]);
        p.CollectiveDone(s);
        p.SetPhase(Phase::kData);
      }
    }
    p.EndStep(1);
    p.BeginStep();
    p.SetPhase(Phase::kCheckpoint);
    p.SetCheckpointStep(1);
    p.SetPhase(Phase::kData);
    p.EndStep(2);
    p.BeginStep();
    p.RecordCheckpointFailure(2, long_error);
    p.SetPhase(Phase::kOptimizer);
    p.SetPhase(Phase::kData);
    const uint64_t b = p.IssueCollective(CollectiveKind::kBarrier, 0);
    p.WaitCollective(b, CollectiveKind::kBarrier);
  }

  ProgressSnapshot py = ReadRecord(py_path);
  ProgressSnapshot cc = ReadRecord(cc_path);
  ASSERT_TRUE(py.valid);
  ASSERT_TRUE(cc.valid);
  EXPECT_FALSE(py.torn);
  EXPECT_EQ(py.record.seq % 2, 0u);
  EXPECT_EQ(py.record.collectives_issued, 22u);
  EXPECT_EQ(py.record.waiting_on, 22u);
  EXPECT_EQ(py.record.step, 2);
  EXPECT_GT(py.record.last_step_ns, 0);
  EXPECT_EQ(std::string(py.record.checkpoint_error), std::string(cc.record.checkpoint_error));
  const ProgressRecordLayout a = WithoutTimes(py.record);
  const ProgressRecordLayout b = WithoutTimes(cc.record);
  const auto* pa = reinterpret_cast<const unsigned char*>(&a);
  const auto* pb = reinterpret_cast<const unsigned char*>(&b);
  for (size_t i = 0; i < sizeof(ProgressRecordLayout); ++i) {
    ASSERT_EQ(pa[i], pb[i]) << "first difference at byte offset " << i;
  }
  std::remove(py_path.c_str());
  std::remove(cc_path.c_str());
}

TEST_F(ProgressRecordPythonTest, WithoutTheVariableTheModuleIsANoOp) {
  // HOLDFAST_PROGRESS_PATH="" counts as unset: every call returns at once.
  EXPECT_EQ(RunPython("import holdfast\n"
                      "assert not holdfast.enabled()\n"
                      "holdfast.step(9)\n"
                      "with holdfast.phase('forward'): pass\n"
                      "assert holdfast.issue_collective('allreduce', 8) == 0\n",
                      "", 0),
            0);
}

// With a declared mesh, the module labels collectives as holdfast-train's
// ProgressWriter does (the same bytes), and its mesh groups are common/mesh.h's:
// for world 16 as tp 2 x pp 2 x dp 4 with expert groups of 2, every rank's
// every group (DeviceMesh::GroupOf) is named by holdfast.mesh_group() as that
// group.
TEST_F(ProgressRecordPythonTest, MeshLabelsAreProgressWritersAndGroupsAreDeviceMeshs) {
  Result<DeviceMesh> mesh = DeviceMesh::Create(16, MeshShape{2, 2, 2});
  ASSERT_TRUE(mesh.ok()) << mesh.status().ToString();
  std::string cases;
  for (int r = 0; r < 16; ++r) {
    for (MeshGroup g : {MeshGroup::kData, MeshGroup::kTensor, MeshGroup::kPipeline, MeshGroup::kExpert,
                        MeshGroup::kExpertData}) {
      std::string ranks;
      for (int m : mesh->GroupOf(g, r)) ranks += std::to_string(m) + ",";
      cases += "(" + std::to_string(r) + ", \"" + MeshGroupName(g) + "\", [" + ranks + "]),\n";
    }
  }
  const std::string py_path = TempPath("mesh_py");
  ASSERT_TRUE(CreateProgressFile(py_path, 5).ok());
  const std::string script = "import holdfast, sys\ncases = [\n" + cases + R"(]
wrong = [(r, name, ranks, holdfast.mesh_group(16, r, ranks, (2, 2, 2))) for r, name, ranks in cases
         if holdfast.mesh_group(16, r, ranks, (2, 2, 2)) != name]
if wrong:
    sys.exit("mesh_group disagrees with DeviceMesh: %r" % wrong[:4])
holdfast.set_mesh(tensor=2, pipeline=2, expert=2)
for kind, nbytes, group in [("allreduce", 64, "tp"), ("reduce_scatter", 128, "dp"), ("allreduce", 64, "tp"),
                            ("barrier", 0, None), ("allgather", 32, "edp")]:
    holdfast.issue_collective(kind, nbytes, group)
)";
  ASSERT_EQ(RunPython(script, py_path, 5), 0);

  const std::string cc_path = TempPath("mesh_cc");
  ASSERT_TRUE(CreateProgressFile(cc_path, 5).ok());
  {
    auto w = ProgressWriter::Open(cc_path, 5);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ProgressWriter& p = **w;
    p.SetMesh(2, 2, 2);
    p.IssueCollective(CollectiveKind::kAllreduce, 64, CollectiveLabel{CollectiveGroup::kTensor});
    p.IssueCollective(CollectiveKind::kReduceScatter, 128, CollectiveLabel{CollectiveGroup::kData});
    p.IssueCollective(CollectiveKind::kAllreduce, 64, CollectiveLabel{CollectiveGroup::kTensor});
    p.IssueCollective(CollectiveKind::kBarrier, 0);
    p.IssueCollective(CollectiveKind::kAllgather, 32, CollectiveLabel{CollectiveGroup::kExpertData});
  }
  ProgressSnapshot py = ReadRecord(py_path);
  ProgressSnapshot cc = ReadRecord(cc_path);
  ASSERT_TRUE(py.valid && cc.valid);
  EXPECT_EQ(py.record.ring_detail[2].group_seq, 2u) << "the second tp collective";
  const ProgressRecordLayout a = WithoutTimes(py.record);
  const ProgressRecordLayout b = WithoutTimes(cc.record);
  const auto* pa = reinterpret_cast<const unsigned char*>(&a);
  const auto* pb = reinterpret_cast<const unsigned char*>(&b);
  for (size_t i = 0; i < sizeof(ProgressRecordLayout); ++i) {
    ASSERT_EQ(pa[i], pb[i]) << "first difference at byte offset " << i;
  }
  std::remove(py_path.c_str());
  std::remove(cc_path.c_str());
}

}  // namespace
}  // namespace holdfast
