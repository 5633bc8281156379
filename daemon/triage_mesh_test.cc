// Triage of hangs with model parallelism (daemon/triage_mesh.cc): the rank
// held up by whom, followed through per-group collective numbers and
// pipeline send/recv, on records as holdfast-train writes them.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/triage.h"

namespace holdfast {
namespace {

constexpr int64_t kSec = 1000000000LL;
constexpr int64_t kNow = 100 * kSec;

// A rank of a mesh (TP, PP) at step 13, in `phase` since `since_s` seconds
// ago, having issued `counts` collectives in its {dp, tp, pp} groups.
RankView MeshRank(int rank, MeshShape mesh, Phase phase, double since_s, std::vector<uint64_t> counts,
                  char state = 'S') {
  RankView v;
  v.rank = rank;
  v.pid = 1000 + rank;
  v.proc_state = ProcStateFromLetter(state);
  RankProgress& p = v.progress;
  p.valid = true;
  p.writer_pid = v.pid;
  p.step = 13;
  p.phase = phase;
  p.phase_started_ns = kNow - static_cast<int64_t>(since_s * kSec);
  p.mesh = mesh;
  p.group_issued[static_cast<size_t>(CollectiveGroup::kData) - 1] = counts.at(0);
  p.group_issued[static_cast<size_t>(CollectiveGroup::kTensor) - 1] = counts.at(1);
  p.group_issued[static_cast<size_t>(CollectiveGroup::kPipeline) - 1] = counts.at(2);
  p.collectives_issued = counts[0] + counts[1] + counts[2];
  return v;
}

// The rank waits in the newest collective it issued: `kind` on `group`
// (whose count it is), labelled `label`.
void WaitIn(RankView* v, CollectiveKind kind, CollectiveLabel label) {
  RankProgress& p = v->progress;
  CollectiveRecord c;
  c.seq = p.collectives_issued;
  c.kind = kind;
  c.bytes = 4096;
  c.issued_ns = p.phase_started_ns;
  c.label = label;
  c.group_seq = p.issued_in(label.group);
  p.ring.push_back(c);
  p.ring_head = p.ring.size();
  p.phase = Phase::kCollective;
  p.collective_kind = kind;
  p.waiting_on = c.seq;
}

CollectiveLabel Recv(int from, MessageKind what, int micro, int send_to = -1, MessageKind send_what = MessageKind::kNone,
                     int send_micro = -1) {
  CollectiveLabel l{CollectiveGroup::kPipeline};
  l.recv_from = from;
  l.recv_what = what;
  l.recv_micro = micro;
  l.send_to = send_to;
  l.send_what = send_what;
  l.send_micro = send_micro;
  return l;
}

HangDetector::Verdict Hung(double stalled_s, std::vector<int> stopped = {}) {
  HangDetector::Verdict v;
  v.hung = true;
  v.stalled_s = stalled_s;
  v.timeout_s = stopped.empty() ? 5 : 1;
  v.allowance = stopped.empty() ? "step" : "stopped";
  v.stopped = std::move(stopped);
  return v;
}

// pp 2 x dp 2 (rank = dp + 2 x stage), `--inject-fault hang@1:14`: rank 1
// (stage 0) spins in the forward of step 14. Its stage-1 partner rank 3
// waits for micro-batch 2's activations; ranks 0 and 2 finished their
// pipeline and wait in their data-parallel groups' reduce-scatter #30, rank
// 0 for rank 1, rank 2 for rank 3. The global sequence names rank 3 too (it
// issued fewer collectives than rank 2): per group, only rank 1 is blamed.
TEST(MeshTriageTest, APipelineStageThatNeverSendsIsBlamedNotTheStageWaitingForIt) {
  const MeshShape mesh{1, 2, 1};
  std::vector<RankView> ranks = {
      MeshRank(0, mesh, Phase::kCollective, 8, {30, 0, 40}),
      MeshRank(1, mesh, Phase::kForward, 9, {29, 0, 33}),
      MeshRank(2, mesh, Phase::kCollective, 8, {30, 0, 40}),
      MeshRank(3, mesh, Phase::kCollective, 9, {29, 0, 34}),
  };
  WaitIn(&ranks[0], CollectiveKind::kReduceScatter, CollectiveLabel{CollectiveGroup::kData});
  WaitIn(&ranks[2], CollectiveKind::kReduceScatter, CollectiveLabel{CollectiveGroup::kData});
  WaitIn(&ranks[3], CollectiveKind::kSendRecv, Recv(1, MessageKind::kActivations, 2, 1, MessageKind::kGradients, 0));
  TriageReport inc = TriageHang(kNow, ranks, Hung(9));
  EXPECT_EQ(inc.event, event_kind::kHang);
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_EQ(inc.summary,
            "rank 1 (tp 0, pp stage 0, dp 1) in forward of step 14 for 9.0 s; "
            "rank 0 (tp 0, pp stage 0, dp 0) waiting 8.0 s in reduce_scatter #30 of its dp group (ranks 0-1), "
            "which it never entered; "
            "rank 3 (tp 0, pp stage 1, dp 1) waiting 9.0 s to receive micro-batch 2's activations from it and send "
            "micro-batch 0's gradients to it; "
            "rank 2 waiting behind them in reduce_scatter of their dp groups (no step for 9.0 s; step allowance 5.0 s)");
  // The waiting stage's own view of its wait, as evidence and status show it.
  EXPECT_EQ(inc.evidence.culprits, std::vector<int>{1});
}

// tp 2 x pp 2 x dp 2 (rank = tp + 2 x (dp + 2 x stage)), rank 6 (tp 0, stage
// 1, dp 1) SIGSTOPped in its backward: stage 0's rank 2 waits for micro-batch
// 1's gradients from it, its tp peer rank 7 in their tp allreduce.
TEST(MeshTriageTest, AStoppedStageIsNamedWithTheSendRecvItsNeighbourWaitsIn) {
  const MeshShape mesh{2, 2, 1};
  std::vector<RankView> ranks;
  for (int r = 0; r < 8; ++r) ranks.push_back(MeshRank(r, mesh, Phase::kCollective, 3, {12, 60, 20}));
  ranks[6] = MeshRank(6, mesh, Phase::kBackward, 3.5, {11, 59, 19}, 'T');
  WaitIn(&ranks[2], CollectiveKind::kSendRecv, Recv(6, MessageKind::kGradients, 1, 6, MessageKind::kActivations, 3));
  ranks[7].progress.group_issued[static_cast<size_t>(CollectiveGroup::kTensor) - 1] = 60;
  WaitIn(&ranks[7], CollectiveKind::kAllreduce, CollectiveLabel{CollectiveGroup::kTensor});
  // Its tp peer of stage 0 (rank 3) waits for rank 2 in their tp allreduce; the others in dp.
  WaitIn(&ranks[3], CollectiveKind::kAllreduce, CollectiveLabel{CollectiveGroup::kTensor});
  for (int r : {0, 1, 4, 5}) WaitIn(&ranks[static_cast<size_t>(r)], CollectiveKind::kReduceScatter,
                                    CollectiveLabel{CollectiveGroup::kData});
  TriageReport inc = TriageHang(kNow, ranks, Hung(3.5, {6}));
  EXPECT_EQ(inc.culprits, std::vector<int>{6});
  EXPECT_EQ(inc.summary,
            "rank 6 (tp 0, pp stage 1, dp 1) in backward of step 14 for 3.5 s, process stopped (SIGSTOP?); "
            "rank 7 (tp 1, pp stage 1, dp 1) waiting 3.0 s in allreduce #60 of its tp group (ranks 6-7), which it "
            "never entered; "
            "rank 4 (tp 0, pp stage 1, dp 0) waiting 3.0 s in reduce_scatter #12 of its dp group (ranks 4,6), which "
            "it never entered; "
            "rank 2 (tp 0, pp stage 0, dp 1) waiting 3.0 s to receive micro-batch 1's gradients from it and send "
            "micro-batch 3's activations to it; "
            "rank 3 waiting behind them in allreduce of their tp groups; ranks 0-1,5 waiting behind them in "
            "reduce_scatter of their dp groups (no step for 3.5 s; stopped allowance 1.0 s)");

  // Stopped inside the send/recv itself (both posted): the neighbour still
  // waits on it, and the stopped rank's own line names the send/recv.
  WaitIn(&ranks[6], CollectiveKind::kSendRecv, Recv(2, MessageKind::kActivations, 3, 2, MessageKind::kGradients, 1));
  inc = TriageHang(kNow, ranks, Hung(3.5, {6}));
  EXPECT_EQ(inc.culprits, std::vector<int>{6});
  EXPECT_NE(inc.summary.find("rank 6 (tp 0, pp stage 1, dp 1) in send/recv with rank 2 (receiving micro-batch 3's "
                             "activations, sending micro-batch 1's gradients) of step 14 for 3.5 s, process stopped "
                             "(SIGSTOP?); rank 7"),
            std::string::npos)
      << inc.summary;
  EXPECT_NE(inc.summary.find("rank 2 (tp 0, pp stage 0, dp 1) waiting 3.0 s to receive micro-batch 1's gradients from "
                             "it"),
            std::string::npos)
      << inc.summary;
}

// tp 2 x dp 2: rank 1 never enters its tp group's allreduce #7; the other tp
// group went on to the data-parallel reduce-scatter, where rank 3 waits for
// rank 1 and rank 2 for rank 0 (who waits for rank 1).
TEST(MeshTriageTest, ARankThatNeverEntersItsTensorGroupsAllreduceIsNamedWithTheGroup) {
  const MeshShape mesh{2, 1, 1};
  std::vector<RankView> ranks = {
      MeshRank(0, mesh, Phase::kCollective, 6, {4, 7, 0}),
      MeshRank(1, mesh, Phase::kForward, 6, {4, 6, 0}),
      MeshRank(2, mesh, Phase::kCollective, 5, {5, 8, 0}),
      MeshRank(3, mesh, Phase::kCollective, 5, {5, 8, 0}),
  };
  WaitIn(&ranks[0], CollectiveKind::kAllreduce, CollectiveLabel{CollectiveGroup::kTensor});
  WaitIn(&ranks[2], CollectiveKind::kReduceScatter, CollectiveLabel{CollectiveGroup::kData});
  WaitIn(&ranks[3], CollectiveKind::kReduceScatter, CollectiveLabel{CollectiveGroup::kData});
  TriageReport inc = TriageHang(kNow, ranks, Hung(6));
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_EQ(inc.summary,
            "rank 1 (tp 1, pp stage 0, dp 0) in forward of step 14 for 6.0 s; "
            "rank 0 (tp 0, pp stage 0, dp 0) waiting 6.0 s in allreduce #7 of its tp group (ranks 0-1), which it "
            "never entered; "
            "rank 3 (tp 1, pp stage 0, dp 1) waiting 5.0 s in reduce_scatter #5 of its dp group (ranks 1,3), which "
            "it never entered; "
            "rank 2 waiting behind them in reduce_scatter of their dp groups (no step for 6.0 s; step allowance 5.0 s)");
}

// Every member entered and waits: the group's collective is stuck (the
// transport); its members are named, not a bystander.
TEST(MeshTriageTest, AGroupWhoseMembersAllEnteredIsNamedAsStuck) {
  const MeshShape mesh{2, 1, 1};
  std::vector<RankView> ranks = {
      MeshRank(0, mesh, Phase::kCollective, 6, {4, 7, 0}),
      MeshRank(1, mesh, Phase::kCollective, 6, {4, 7, 0}),
      MeshRank(2, mesh, Phase::kCollective, 5, {5, 8, 0}),
      MeshRank(3, mesh, Phase::kCollective, 5, {5, 8, 0}),
  };
  WaitIn(&ranks[0], CollectiveKind::kAllreduce, CollectiveLabel{CollectiveGroup::kTensor});
  WaitIn(&ranks[1], CollectiveKind::kAllreduce, CollectiveLabel{CollectiveGroup::kTensor});
  WaitIn(&ranks[2], CollectiveKind::kReduceScatter, CollectiveLabel{CollectiveGroup::kData});
  WaitIn(&ranks[3], CollectiveKind::kReduceScatter, CollectiveLabel{CollectiveGroup::kData});
  TriageReport inc = TriageHang(kNow, ranks, Hung(6));
  EXPECT_EQ(inc.culprits, (std::vector<int>{0, 1}));
  EXPECT_EQ(inc.summary.rfind("all ranks of tp group 0-1 entered allreduce #7 of it but it has not completed", 0), 0u)
      << inc.summary;
}

// Ranks that disagree on the mesh, or a run without model parallelism, are
// triaged as before (one sequence of collectives).
// dp 2 x ep 2 (a mixture-of-experts model): rank 1 stopped in its forward
// before the dispatch; rank 0 waits in the all-to-all's exchange with it
// (tokens for its experts out, rank 1's tokens in), on their ep group.
TEST(MeshTriageTest, AnExpertParallelRankThatNeverDispatchesIsNamedWithTheTokensItsPeerWaitsFor) {
  const MeshShape mesh{1, 1, 2};
  std::vector<RankView> ranks = {
      MeshRank(0, mesh, Phase::kCollective, 8, {12, 0, 0}),
      MeshRank(1, mesh, Phase::kForward, 9, {12, 0, 0}, 'T'),
  };
  ranks[0].progress.group_issued[static_cast<size_t>(CollectiveGroup::kExpert) - 1] = 7;
  ranks[1].progress.group_issued[static_cast<size_t>(CollectiveGroup::kExpert) - 1] = 6;
  CollectiveLabel exchange{CollectiveGroup::kExpert};
  exchange.send_to = 1;
  exchange.recv_from = 1;
  exchange.send_what = MessageKind::kTokens;
  exchange.recv_what = MessageKind::kTokens;
  WaitIn(&ranks[0], CollectiveKind::kSendRecv, exchange);
  TriageReport inc = TriageHang(kNow, ranks, Hung(9, {1}));
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_NE(inc.summary.find("rank 1 (tp 0, pp stage 0, dp 1, ep 1)"), std::string::npos) << inc.summary;
  EXPECT_NE(inc.summary.find("rank 0 (tp 0, pp stage 0, dp 0, ep 0) waiting 8.0 s to receive tokens for its experts "
                             "from it"),
            std::string::npos)
      << inc.summary;
}

TEST(MeshTriageTest, WithoutAModelParallelMeshTheGlobalSequenceIsUsed) {
  std::vector<RankView> ranks = {
      MeshRank(0, MeshShape{1, 1, 1}, Phase::kCollective, 6, {7, 0, 0}),
      MeshRank(1, MeshShape{1, 1, 1}, Phase::kForward, 6, {6, 0, 0}),
  };
  WaitIn(&ranks[0], CollectiveKind::kAllreduce, CollectiveLabel{CollectiveGroup::kData});
  TriageReport inc = TriageHang(kNow, ranks, Hung(6));
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_EQ(inc.summary.rfind("rank 1 never entered allreduce #7 (in forward of step 14", 0), 0u) << inc.summary;
  ranks[0].progress.mesh = MeshShape{2, 1, 1};  // disagrees with rank 1's
  inc = TriageHang(kNow, ranks, Hung(6));
  EXPECT_EQ(inc.summary.rfind("rank 1 never entered allreduce #7", 0), 0u) << inc.summary;
}

}  // namespace
}  // namespace holdfast
