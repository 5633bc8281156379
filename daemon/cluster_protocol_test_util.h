// Test support for the cluster protocol suites: two machines' clocks, a rank
// view with every field set, one valid message of each type, round trips.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/cluster_protocol.h"

namespace holdfast {
namespace cluster_test {

using json = nlohmann::json;

// The two machines' CLOCK_MONOTONIC: the sender booted long before the receiver.
constexpr int64_t kSenderNow = 900'000'000'000'000;  // 250 h
constexpr int64_t kReceiverNow = 7'000'000'000'000;  // ~2 h
constexpr int64_t kSecond = 1'000'000'000;

inline RankView MakeView(int rank, uint64_t ring_head) {
  RankView v;
  v.rank = rank;
  v.node = 2;
  v.host = "gpu-a17";
  v.pid = 4000 + rank;
  v.alive = true;
  v.proc_state = ProcState::kDiskWait;
  v.progress.valid = true;
  v.progress.torn = false;
  RankProgress& p = v.progress;
  p.writer_pid = v.pid;
  p.step = 1234;
  p.phase = Phase::kCollective;
  p.collective_kind = CollectiveKind::kAllreduce;
  p.collectives_issued = 90;
  p.collectives_done = 89;
  p.waiting_on = 90;
  p.phase_started_ns = kSenderNow - 3 * kSecond;
  p.step_started_ns = kSenderNow - 4 * kSecond;
  p.heartbeat_ns = kSenderNow - 2 * kSecond;
  p.last_step_ns = 750'000'000;
  p.checkpoint_step = 1200;
  p.checkpoint_failures = 2;
  p.checkpoint_failed_step = 1210;
  p.checkpoint_error = "write /ckpt/step-1210: No space left on device";
  p.ring_head = ring_head;
  if (rank % 2 == 1) {  // a pipeline stage of a mesh: groups counted, send/recv labelled
    p.mesh = MeshShape{2, 4, 1};
    p.group_issued = {0, 30, 50, 10, 0, 0};
  }
  for (uint64_t s = ring_head > kProgressRingSize ? ring_head - kProgressRingSize : 0; s < ring_head; ++s) {
    CollectiveRecord e;
    e.seq = s + 1;
    e.kind = s % 2 == 0 ? CollectiveKind::kAllreduce : CollectiveKind::kBroadcast;
    if (p.mesh && s % 3 == 0) {
      e.kind = CollectiveKind::kSendRecv;
      e.label = CollectiveLabel{CollectiveGroup::kPipeline, rank - 1, rank - 1,
                                MessageKind::kActivations, MessageKind::kGradients, static_cast<int32_t>(s % 7), 3};
      e.group_seq = s / 3 + 1;
    } else if (p.mesh) {
      e.label.group = CollectiveGroup::kTensor;
      e.group_seq = s + 1;
    }
    e.bytes = 1 << 20;
    e.issued_ns = kSenderNow - static_cast<int64_t>(ring_head - s) * kSecond;
    e.completed_ns = s + 1 == ring_head ? 0 : e.issued_ns + 1000;
    p.ring.push_back(e);
  }
  return v;
}

// What a clock reading on the sender reads as on the receiver.
inline int64_t Moved(int64_t t) { return t == 0 ? 0 : kReceiverNow - (kSenderNow - t); }

inline void ExpectViewArrived(const RankView& sent, const RankView& got) {
  EXPECT_EQ(got.rank, sent.rank);
  EXPECT_EQ(got.node, sent.node);
  EXPECT_EQ(got.host, sent.host);
  EXPECT_EQ(got.pid, sent.pid);
  EXPECT_EQ(got.alive, sent.alive);
  EXPECT_EQ(got.proc_state, sent.proc_state);
  EXPECT_EQ(got.progress.valid, sent.progress.valid);
  EXPECT_EQ(got.progress.torn, sent.progress.torn);
  const RankProgress& a = sent.progress;
  const RankProgress& b = got.progress;
  EXPECT_EQ(b.writer_pid, sent.pid);
  EXPECT_EQ(b.step, a.step);
  EXPECT_EQ(b.phase, a.phase);
  EXPECT_EQ(b.collective_kind, a.collective_kind);
  EXPECT_EQ(b.collectives_issued, a.collectives_issued);
  EXPECT_EQ(b.collectives_done, a.collectives_done);
  EXPECT_EQ(b.waiting_on, a.waiting_on);
  EXPECT_EQ(b.phase_started_ns, Moved(a.phase_started_ns));
  EXPECT_EQ(b.step_started_ns, Moved(a.step_started_ns));
  EXPECT_EQ(b.heartbeat_ns, Moved(a.heartbeat_ns));
  EXPECT_EQ(b.last_step_ns, a.last_step_ns);
  EXPECT_EQ(b.checkpoint_step, a.checkpoint_step);
  EXPECT_EQ(b.checkpoint_failures, a.checkpoint_failures);
  EXPECT_EQ(b.checkpoint_failed_step, a.checkpoint_failed_step);
  EXPECT_EQ(b.checkpoint_error, a.checkpoint_error);
  EXPECT_EQ(b.ring_head, a.ring_head);
  ASSERT_EQ(b.ring.size(), a.ring.size());
  for (size_t i = 0; i < a.ring.size(); ++i) {
    EXPECT_EQ(b.ring[i].seq, a.ring[i].seq) << i;
    EXPECT_EQ(b.ring[i].kind, a.ring[i].kind) << i;
    EXPECT_EQ(b.ring[i].bytes, a.ring[i].bytes) << i;
    EXPECT_EQ(b.ring[i].issued_ns, Moved(a.ring[i].issued_ns)) << i;
    EXPECT_EQ(b.ring[i].completed_ns, Moved(a.ring[i].completed_ns)) << i;
    const CollectiveLabel& x = a.ring[i].label;
    const CollectiveLabel& y = b.ring[i].label;
    EXPECT_EQ(b.ring[i].group_seq, a.ring[i].group_seq) << i;
    EXPECT_EQ(y.group, x.group) << i;
    EXPECT_EQ(y.send_to, x.send_to) << i;
    EXPECT_EQ(y.recv_from, x.recv_from) << i;
    EXPECT_EQ(y.send_what, x.send_what) << i;
    EXPECT_EQ(y.recv_what, x.recv_what) << i;
    EXPECT_EQ(y.send_micro, x.send_micro) << i;
    EXPECT_EQ(y.recv_micro, x.recv_micro) << i;
  }
  EXPECT_EQ(b.mesh.has_value(), a.mesh.has_value());
  if (a.mesh && b.mesh) {
    EXPECT_EQ(b.mesh->tensor, a.mesh->tensor);
    EXPECT_EQ(b.mesh->pipeline, a.mesh->pipeline);
    EXPECT_EQ(b.mesh->expert, a.mesh->expert);
  }
  EXPECT_EQ(b.group_issued, a.group_issued);
}

template <typename T>
T RoundTrip(const T& m) {
  const std::string line = EncodeClusterMessage(m, kSenderNow);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  Result<ClusterMessage> got = ParseClusterMessage(line, kReceiverNow);
  EXPECT_TRUE(got.ok()) << got.status().ToString() << "\n" << line;
  if (!got.ok()) return T{};
  EXPECT_TRUE(std::holds_alternative<T>(*got)) << ClusterMessageTypeName(*got);
  if (!std::holds_alternative<T>(*got)) return T{};
  return std::get<T>(*got);
}

// One valid message of every type, for the table-driven tests.
inline std::vector<ClusterMessage> OneOfEach() {
  HelloMsg hello;
  hello.node = 3;
  hello.host = "gpu-b02";
  hello.nproc = 8;
  hello.pid = 31337;
  hello.health_report_json = R"({"status":"pass","results":[]})";
  hello.nonce = std::string(32, '\x01');
  hello.proof = std::string(32, '\xfe');
  RankExitMsg exit;
  exit.generation = 4;
  exit.rank = 17;
  exit.wstatus = 9;
  exit.exec_error = "";
  exit.log_tail = {"step 100 loss 2.1", "Traceback (most recent call last):"};
  exit.ranks = {MakeView(16, 3), MakeView(17, 40)};
  StartMsg start;
  start.spec.run_id = "r-20240601-abc";
  start.spec.attempt = 2;
  start.spec.generation = 5;
  start.spec.world_size = 16;
  start.spec.store_addr = "10.0.0.1:29500";
  start.spec.master_port = 29501;
  start.spec.resume_step = -1;
  start.ranks = {RankPlacement{8, 0, 1, "gpu-b02", 0}, RankPlacement{9, 1, 1, "gpu-b02", 1}};
  return {hello,
          ProgressMsg{4, {MakeView(0, 0), MakeView(1, 5), MakeView(2, 1000)}},
          exit,
          HealthMsg{-1, R"({"status":"warn"})"},
          RejectMsg{"node 3 has already joined"},
          start,
          StopMsg{4, "rank 17 exited with code 1", 30.5},
          SignalMsg{4, 12},
          KillMsg{4, {3, 5}},
          FinishMsg{0, "completed"},
          ChallengeMsg{std::string(32, '\x5a')},
          WelcomeMsg{std::string(32, '\xa5'), "r-20261202-c227"}};
}

// Expects kInvalidArgument whose message contains every needle.
inline void ExpectBad(std::string_view line, std::initializer_list<std::string> needles) {
  Result<ClusterMessage> r = ParseClusterMessage(line, kReceiverNow);
  ASSERT_FALSE(r.ok()) << line;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  for (const std::string& needle : needles) {
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << needle << "'";
  }
}

// A valid encoded message as JSON, to break one field of.
inline json Encoded(const ClusterMessage& m) { return json::parse(EncodeClusterMessage(m, kSenderNow)); }

// The position of a rank view's item `name` (views travel as arrays).
inline size_t Item(std::string_view name) {
  const std::vector<std::string_view>& items = ClusterRankViewItems();
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i] == name) return i;
  }
  ADD_FAILURE() << "no rank view item " << name;
  return 0;
}

// The JSON pointer to item `name` of view `view` of a message's "ranks".
inline json::json_pointer ViewPointer(size_t view, std::string_view name) {
  return json::json_pointer("/ranks/" + std::to_string(view) + "/" + std::to_string(Item(name)));
}

}  // namespace cluster_test
}  // namespace holdfast
