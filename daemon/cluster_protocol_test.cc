#include "daemon/cluster_protocol.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "daemon/line_connection.h"

namespace holdfast {
namespace {

using json = nlohmann::json;

// The two machines' CLOCK_MONOTONIC: the sender booted long before the receiver.
constexpr int64_t kSenderNow = 900'000'000'000'000;  // 250 h
constexpr int64_t kReceiverNow = 7'000'000'000'000;  // ~2 h
constexpr int64_t kSecond = 1'000'000'000;

RankView MakeView(int rank, uint64_t ring_head) {
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
  for (uint64_t s = ring_head > kProgressRingSize ? ring_head - kProgressRingSize : 0; s < ring_head; ++s) {
    CollectiveRecord e;
    e.seq = s + 1;
    e.kind = s % 2 == 0 ? CollectiveKind::kAllreduce : CollectiveKind::kBroadcast;
    e.bytes = 1 << 20;
    e.issued_ns = kSenderNow - static_cast<int64_t>(ring_head - s) * kSecond;
    e.completed_ns = s + 1 == ring_head ? 0 : e.issued_ns + 1000;
    p.ring.push_back(e);
  }
  return v;
}

// What a clock reading on the sender reads as on the receiver.
int64_t Moved(int64_t t) { return t == 0 ? 0 : kReceiverNow - (kSenderNow - t); }

void ExpectViewArrived(const RankView& sent, const RankView& got) {
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
  }
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
std::vector<ClusterMessage> OneOfEach() {
  HelloMsg hello;
  hello.node = 3;
  hello.host = "gpu-b02";
  hello.nproc = 8;
  hello.pid = 31337;
  hello.health_report_json = R"({"status":"pass","results":[]})";
  RankExitMsg exit;
  exit.generation = 4;
  exit.rank = 17;
  exit.wstatus = 9;
  exit.exec_error = "";
  exit.log_tail = {"step 100 loss 2.1", "Traceback (most recent call last):"};
  exit.ranks = {MakeView(16, 3), MakeView(17, 40)};
  StartMsg start;
  start.run_id = "r-20240601-abc";
  start.attempt = 2;
  start.generation = 5;
  start.world_size = 16;
  start.store_addr = "10.0.0.1:29500";
  start.master_port = 29501;
  start.resume_step = -1;
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
          FinishMsg{0, "completed"}};
}

// Expects kInvalidArgument whose message contains every needle.
void ExpectBad(std::string_view line, std::initializer_list<std::string> needles) {
  Result<ClusterMessage> r = ParseClusterMessage(line, kReceiverNow);
  ASSERT_FALSE(r.ok()) << line;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  for (const std::string& needle : needles) {
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << needle << "'";
  }
}

// A valid encoded message as JSON, to break one field of.
json Encoded(const ClusterMessage& m) { return json::parse(EncodeClusterMessage(m, kSenderNow)); }

TEST(ClusterProtocolTest, HelloRoundTrip) {
  const HelloMsg sent = std::get<HelloMsg>(OneOfEach()[0]);
  const std::string line = EncodeClusterMessage(sent, kSenderNow);
  EXPECT_EQ(line.rfind(R"({"v":2,"type":"hello",)", 0), 0u) << line;
  HelloMsg got = RoundTrip(sent);
  EXPECT_EQ(got.version, kClusterProtocolVersion);
  EXPECT_EQ(got.node, 3);
  EXPECT_EQ(got.host, "gpu-b02");
  EXPECT_EQ(got.nproc, 8);
  EXPECT_EQ(got.pid, 31337);
  EXPECT_EQ(got.health_report_json, sent.health_report_json);
}

TEST(ClusterProtocolTest, ProgressRoundTripMovesClocks) {
  const ProgressMsg sent = std::get<ProgressMsg>(OneOfEach()[1]);
  ProgressMsg got = RoundTrip(sent);
  EXPECT_EQ(got.generation, 4);
  ASSERT_EQ(got.ranks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) ExpectViewArrived(sent.ranks[i], got.ranks[i]);
  // The heartbeat was 2 s old on the sender; it is 2 s old on the receiver.
  EXPECT_EQ(kReceiverNow - got.ranks[1].progress.heartbeat_ns, 2 * kSecond);
  // A wrapped ring keeps its newest 16 entries, oldest first.
  EXPECT_EQ(got.ranks[2].progress.ring_head, 1000u);
  ASSERT_EQ(got.ranks[2].progress.ring.size(), static_cast<size_t>(kProgressRingSize));
  EXPECT_EQ(got.ranks[2].progress.ring.front().seq, 1000u - kProgressRingSize + 1);
  EXPECT_EQ(got.ranks[2].progress.ring.back().seq, 1000u);
}

TEST(ClusterProtocolTest, WhetherAWriterIsAttachedCrossesNodes) {
  ProgressMsg sent = std::get<ProgressMsg>(OneOfEach()[1]);
  sent.ranks[0].progress.writer_pid = 0;  // a job without the progress module
  ProgressMsg got = RoundTrip(sent);
  EXPECT_FALSE(got.ranks[0].progress.attached());
  EXPECT_TRUE(got.ranks[1].progress.attached());
  // A daemon from before the field sent no "writer": read as attached, as it judged.
  std::string line = EncodeClusterMessage(sent, kSenderNow);
  for (std::string key = "\"writer\":false,"; line.find(key) != std::string::npos;) line.erase(line.find(key), key.size());
  for (std::string key = "\"writer\":true,"; line.find(key) != std::string::npos;) line.erase(line.find(key), key.size());
  ASSERT_EQ(line.find("writer"), std::string::npos) << line;
  auto old = ParseClusterMessage(line, kReceiverNow);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(std::get<ProgressMsg>(*old).ranks[0].progress.attached());
}

TEST(ClusterProtocolTest, RankExitRoundTrip) {
  const RankExitMsg sent = std::get<RankExitMsg>(OneOfEach()[2]);
  RankExitMsg got = RoundTrip(sent);
  EXPECT_EQ(got.generation, 4);
  EXPECT_EQ(got.rank, 17);
  EXPECT_EQ(got.wstatus, 9);
  EXPECT_EQ(got.exec_error, "");
  EXPECT_EQ(got.log_tail, sent.log_tail);
  ASSERT_EQ(got.ranks.size(), 2u);
  ExpectViewArrived(sent.ranks[0], got.ranks[0]);
  ExpectViewArrived(sent.ranks[1], got.ranks[1]);

  RankExitMsg failed;
  failed.rank = 3;
  failed.wstatus = 127 << 8;
  failed.exec_error = "execvp ./train: No such file or directory";
  EXPECT_EQ(RoundTrip(failed).exec_error, failed.exec_error);
}

TEST(ClusterProtocolTest, LeaderMessagesRoundTrip) {
  std::vector<ClusterMessage> all = OneOfEach();
  EXPECT_EQ(RoundTrip(std::get<HealthMsg>(all[3])).report_json, R"({"status":"warn"})");
  EXPECT_EQ(RoundTrip(std::get<HealthMsg>(all[3])).generation, -1);
  EXPECT_EQ(RoundTrip(std::get<RejectMsg>(all[4])).why, "node 3 has already joined");

  const StartMsg& start = std::get<StartMsg>(all[5]);
  StartMsg s = RoundTrip(start);
  EXPECT_EQ(s.run_id, start.run_id);
  EXPECT_EQ(s.attempt, 2);
  EXPECT_EQ(s.generation, 5);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.store_addr, "10.0.0.1:29500");
  EXPECT_EQ(s.master_port, 29501);
  EXPECT_EQ(s.resume_step, -1);
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_EQ(s.ranks[1].global_rank, 9);
  EXPECT_EQ(s.ranks[1].local_rank, 1);
  EXPECT_EQ(s.ranks[1].node, 1);
  EXPECT_EQ(s.ranks[1].host, "gpu-b02");
  EXPECT_EQ(s.ranks[1].device, 1);

  StopMsg stop = RoundTrip(std::get<StopMsg>(all[6]));
  EXPECT_EQ(stop.generation, 4);
  EXPECT_EQ(stop.why, "rank 17 exited with code 1");
  EXPECT_EQ(stop.grace_s, 30.5);
  SignalMsg sig = RoundTrip(std::get<SignalMsg>(all[7]));
  EXPECT_EQ(sig.generation, 4);
  EXPECT_EQ(sig.sig, 12);
  KillMsg kill = RoundTrip(std::get<KillMsg>(all[8]));
  EXPECT_EQ(kill.generation, 4);
  EXPECT_EQ(kill.ranks, (std::vector<int>{3, 5}));
  FinishMsg fin = RoundTrip(std::get<FinishMsg>(all[9]));
  EXPECT_EQ(fin.code, 0);
  EXPECT_EQ(fin.state, "completed");
}

TEST(ClusterProtocolTest, TypeNamesAndDirections) {
  std::vector<std::string> names;
  for (const ClusterMessage& m : OneOfEach()) {
    names.push_back(ClusterMessageTypeName(m));
    EXPECT_EQ(json::parse(EncodeClusterMessage(m, kSenderNow))["type"], names.back());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"hello", "progress", "rank_exit", "health", "reject", "start", "stop",
                                             "signal", "kill", "finish"}));
  EXPECT_TRUE(IsFollowerMessage(HelloMsg{}));
  EXPECT_TRUE(IsFollowerMessage(HealthMsg{}));
  EXPECT_FALSE(IsFollowerMessage(StartMsg{}));
  EXPECT_FALSE(IsFollowerMessage(RejectMsg{}));
}

TEST(ClusterProtocolTest, EveryTruncationIsRejectedCleanly) {
  for (const ClusterMessage& m : OneOfEach()) {
    std::string line = EncodeClusterMessage(m, kSenderNow);
    line.pop_back();  // the newline
    for (size_t n = 0; n < line.size(); ++n) {
      Result<ClusterMessage> r = ParseClusterMessage(std::string_view(line).substr(0, n), kReceiverNow);
      ASSERT_FALSE(r.ok()) << ClusterMessageTypeName(m) << " cut to " << n << " bytes parsed";
      ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      ASSERT_FALSE(r.status().message().empty());
    }
    EXPECT_TRUE(ParseClusterMessage(line, kReceiverNow).ok()) << line;
  }
}

TEST(ClusterProtocolTest, VersionMismatchSaysBothVersions) {
  // A v1 peer (the untyped JSON before this protocol) sends no "v".
  ExpectBad(R"({"type":"hello","node":1,"nproc":8,"pid":7,"health":""})",
            {"\"hello\"", "has no \"v\"", "v1", "v2", "run the same holdfast build on every node"});
  HelloMsg future;
  future.version = 3;
  future.node = 1;
  future.nproc = 8;
  future.pid = 7;
  ExpectBad(EncodeClusterMessage(future, kSenderNow),
            {"peer speaks holdfast cluster protocol v3", "this holdfastd speaks v2", "same holdfast build"});
  ExpectBad(R"({"v":"2","type":"stop","generation":1,"why":"","grace_s":1})", {"\"v\" must be", "\"2\""});
  ExpectBad(R"({"v":2.0,"type":"stop","generation":1,"why":"","grace_s":1})", {"\"v\" must be"});
}

TEST(ClusterProtocolTest, RejectReadsTheSameInEveryVersion) {
  for (const char* line : {R"({"type":"reject","why":"nproc 4 differs"})",
                           R"({"v":1,"type":"reject","why":"nproc 4 differs"})",
                           R"({"v":7,"type":"reject","why":"nproc 4 differs","hint":"new"})"}) {
    Result<ClusterMessage> r = ParseClusterMessage(line, kReceiverNow);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(std::get<RejectMsg>(*r).why, "nproc 4 differs");
  }
}

TEST(ClusterProtocolTest, UnknownTypeListsTheTypes) {
  ExpectBad(R"({"v":2,"type":"reboot"})", {"unknown cluster message type \"reboot\"", "hello, progress"});
  ExpectBad(R"({"v":2})", {"needs \"type\" as a string"});
  ExpectBad(R"({"v":2,"type":7})", {"needs \"type\" as a string"});
}

TEST(ClusterProtocolTest, FramingErrors) {
  ExpectBad("", {"empty line"});
  ExpectBad("\n", {"empty line"});
  ExpectBad("not json", {"not JSON"});
  ExpectBad("[1,2]", {"must be a JSON object", "array"});
  ExpectBad("{\"v\":2,\"type\":\"kill\",\"generation\":1,\"ranks\":[]}\n{}", {"one line"});
  ExpectBad("{\"v\":2,\"type\":\"stop\",\"generation\":1,\"why\":\"\",\"grace_s\":1}trailing", {"not JSON"});
  std::string deep = R"({"v":2,"type":"kill","generation":1,"ranks":[],"x":)";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  deep += "}";
  ExpectBad(deep, {"nests deeper than 16"});
}

TEST(ClusterProtocolTest, OversizeLineRejected) {
  // Valid JSON, one byte over the limit with its newline.
  std::string line = R"({"v":2,"type":"reject","why":")";
  line += std::string(kMaxClusterMessageBytes - line.size() - 2, 'x');
  line += "\"}";
  ASSERT_EQ(line.size(), kMaxClusterMessageBytes);
  ExpectBad(line, {"4194305 bytes with its newline", "limit is 4194304"});
}

TEST(ClusterProtocolTest, MissingFieldsAreNamed) {
  for (const ClusterMessage& m : OneOfEach()) {
    const json full = Encoded(m);
    for (const auto& [key, value] : full.items()) {
      if (key == "type" || (key == "v" && full["type"] == "reject")) continue;
      json broken = full;
      broken.erase(key);
      const std::string needle = key == "v" ? "has no \"v\"" : "missing \"" + key + "\"";
      ExpectBad(broken.dump(), {needle});
    }
  }
  json progress = Encoded(OneOfEach()[1]);
  progress["ranks"][1].erase("heartbeat_age");
  ExpectBad(progress.dump(), {"progress: ranks[1]: missing \"heartbeat_age\""});
  json start = Encoded(OneOfEach()[5]);
  start["ranks"][0].erase("device");
  ExpectBad(start.dump(), {"start: ranks[0]: missing \"device\""});
}

TEST(ClusterProtocolTest, WrongTypesAreNamed) {
  json hello = Encoded(OneOfEach()[0]);
  hello["node"] = "1";
  ExpectBad(hello.dump(), {"hello: \"node\" must be an integer", "got \"1\""});
  hello = Encoded(OneOfEach()[0]);
  hello["nproc"] = 8.5;
  ExpectBad(hello.dump(), {"hello: \"nproc\" must be an integer in [1, 256]", "got 8.5"});
  hello = Encoded(OneOfEach()[0]);
  hello["health_report"] = json::object();
  ExpectBad(hello.dump(), {"hello: \"health_report\" must be a string"});

  json progress = Encoded(OneOfEach()[1]);
  progress["ranks"] = json::object();
  ExpectBad(progress.dump(), {"progress: \"ranks\" must be an array"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][0]["alive"] = 1;
  ExpectBad(progress.dump(), {"progress: ranks[0]: \"alive\" must be true or false"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][2]["ring"][3] = json::array({1, 1, 1, 1});
  ExpectBad(progress.dump(), {"progress: ranks[2]: ring[3] must be [seq, kind, bytes"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][0]["issued"] = -1;
  ExpectBad(progress.dump(), {"\"issued\" must be an integer in [0, 18446744073709551615]"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][0]["state"] = "RS";
  ExpectBad(progress.dump(), {"\"state\" is 2 bytes; the limit is 1"});
  progress["ranks"][0]["state"] = " ";
  ExpectBad(progress.dump(), {"\"state\" must be one printable ASCII character"});

  json exit = Encoded(OneOfEach()[2]);
  exit["log_tail"][1] = 5;
  ExpectBad(exit.dump(), {"rank_exit: log_tail[1] must be a string"});
  json kill = Encoded(OneOfEach()[8]);
  kill["ranks"][0] = "3";
  ExpectBad(kill.dump(), {"kill: ranks[0] must be a rank"});
  json stop = Encoded(OneOfEach()[6]);
  stop["grace_s"] = "30";
  ExpectBad(stop.dump(), {"stop: \"grace_s\" must be a number"});
}

TEST(ClusterProtocolTest, OutOfRangeValuesAreNamed) {
  struct Case {
    size_t message;
    json::json_pointer where;
    json value;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {0, json::json_pointer("/node"), -1, "hello: \"node\" must be an integer in [0, 4095], got -1"},
      {0, json::json_pointer("/nproc"), 0, "\"nproc\" must be an integer in [1, 256]"},
      {0, json::json_pointer("/pid"), 0, "\"pid\" must be an integer in [1, 2147483647]"},
      {1, json::json_pointer("/generation"), -2, "\"generation\" must be an integer in [-1, 2147483647]"},
      {1, json::json_pointer("/ranks/0/rank"), -1, "progress: ranks[0]: \"rank\" must be an integer in [0, 1048575]"},
      {1, json::json_pointer("/ranks/0/phase"), 9, "\"phase\" must be an integer in [0, 8], got 9"},
      {1, json::json_pointer("/ranks/0/kind"), 6, "\"kind\" must be an integer in [0, 5]"},
      {1, json::json_pointer("/ranks/0/heartbeat_age"), -2, "\"heartbeat_age\" must be an integer >= -1"},
      {1, json::json_pointer("/ranks/0/pid"), 1LL << 40, "\"pid\" must be an integer in [0, 2147483647]"},
      {1, json::json_pointer("/ranks/0/step"), 18446744073709551615ULL, "\"step\" must be an integer"},
      {1, json::json_pointer("/ranks/1/ring_head"), 6, "\"ring\" has 5 entries; ring_head 6 means 6"},
      {1, json::json_pointer("/ranks/1/ring/0/1"), 7, "ring[0] must be [seq >= 0, kind in [0, 5]"},
      {2, json::json_pointer("/wstatus"), 65536, "\"wstatus\" must be an integer in [0, 65535]"},
      {5, json::json_pointer("/world_size"), 0, "\"world_size\" must be an integer in [1, 1048576]"},
      {5, json::json_pointer("/master_port"), 65536, "\"master_port\" must be an integer in [0, 65535]"},
      {5, json::json_pointer("/resume_step"), -2, "\"resume_step\" must be an integer >= -1"},
      {5, json::json_pointer("/generation"), -1, "start: \"generation\" must be an integer in [0, 2147483647]"},
      {5, json::json_pointer("/ranks/1/global_rank"), 16, "start: ranks[1]: \"global_rank\" must be an integer in [0, 15]"},
      {5, json::json_pointer("/ranks/1/device"), -2, "\"device\" must be an integer in [-1, 255]"},
      {6, json::json_pointer("/grace_s"), -1, "\"grace_s\" must be a number in [0.0, 1000000.0]"},
      {7, json::json_pointer("/sig"), 0, "signal: \"sig\" must be an integer in [1, 64]"},
      {8, json::json_pointer("/ranks/1"), -5, "kill: ranks[1] must be a rank in [0, 1048575], got -5"},
      {9, json::json_pointer("/code"), 256, "finish: \"code\" must be an integer in [0, 255]"},
  };
  const std::vector<ClusterMessage> all = OneOfEach();
  for (const Case& c : cases) {
    json j = Encoded(all[c.message]);
    j[c.where] = c.value;
    SCOPED_TRACE(c.where.to_string());
    ExpectBad(j.dump(), {c.needle});
  }
}

TEST(ClusterProtocolTest, ListAndStringBoundsAreEnforced) {
  json progress = Encoded(OneOfEach()[1]);
  for (int i = 0; i < kMaxClusterNodeRanks; ++i) progress["ranks"].push_back(progress["ranks"][0]);
  ExpectBad(progress.dump(), {"progress: \"ranks\" has 259 entries; the limit is 256"});
  json exit = Encoded(OneOfEach()[2]);
  exit["log_tail"] = json::array();
  for (size_t i = 0; i <= kMaxClusterLogLines; ++i) exit["log_tail"].push_back("x");
  ExpectBad(exit.dump(), {"\"log_tail\" has 101 entries; the limit is 100"});
  exit["log_tail"] = json::array({std::string(kMaxClusterLogLineBytes + 1, 'x')});
  ExpectBad(exit.dump(), {"rank_exit: log_tail[0] is 1025 bytes; the limit is 1024"});
  json hello = Encoded(OneOfEach()[0]);
  hello["host"] = std::string(256, 'h');
  ExpectBad(hello.dump(), {"hello: \"host\" is 256 bytes; the limit is 255"});
  json stop = Encoded(OneOfEach()[6]);
  stop["why"] = std::string(kMaxClusterTextBytes + 1, 'w');
  ExpectBad(stop.dump(), {"stop: \"why\" is 4097 bytes; the limit is 4096"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][0]["checkpoint_error"] = std::string(kProgressErrorSize, 'e');
  ExpectBad(progress.dump(), {"\"checkpoint_error\" is 160 bytes; the limit is 159"});
  progress["ranks"][0]["checkpoint_error"] = std::string("a\0b", 3);
  ExpectBad(progress.dump(), {"\"checkpoint_error\" must not contain NUL"});
}

TEST(ClusterProtocolTest, UnknownKeysAreIgnored) {
  json stop = Encoded(OneOfEach()[6]);
  stop["user"] = true;
  Result<ClusterMessage> r = ParseClusterMessage(stop.dump(), kReceiverNow);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::get<StopMsg>(*r).why, "rank 17 exited with code 1");
}

TEST(ClusterProtocolTest, InvalidUtf8OnTheWireIsRejected) {
  ExpectBad("{\"v\":2,\"type\":\"reject\",\"why\":\"bad \xff byte\"}", {"not JSON"});
  ExpectBad("{\"v\":2,\"type\":\"finish\",\"code\":0,\"state\":\"\xed\xa0\x80\"}", {"not JSON"});  // a surrogate
}

TEST(ClusterProtocolTest, InvalidUtf8IsRepairedWhenSent) {
  StopMsg stop{1, "disk \xff\xfe full \xe2\x82", 1};
  EXPECT_EQ(RoundTrip(stop).why, "disk \xEF\xBF\xBD\xEF\xBF\xBD full \xEF\xBF\xBD\xEF\xBF\xBD");

  RankView v = MakeView(0, 1);
  // The job wrote a record error that is not UTF-8 and fills the field: repaired
  // and cut at a character boundary to fit the record again.
  v.progress.checkpoint_error = std::string(kProgressErrorSize - 1, '\xff');
  v.host = "node\x80";
  ProgressMsg got = RoundTrip(ProgressMsg{1, {v}});
  ASSERT_EQ(got.ranks.size(), 1u);
  const std::string error = got.ranks[0].progress.checkpoint_error;
  EXPECT_EQ(error.size(), 53u * 3);  // 53 whole U+FFFD in 159 bytes
  EXPECT_EQ(error.substr(0, 3), "\xEF\xBF\xBD");
  EXPECT_EQ(got.ranks[0].host, "node\xEF\xBF\xBD");
}

TEST(ClusterProtocolTest, LongTextIsCutAtACharacterBoundary) {
  RejectMsg reject;
  reject.why = "x";
  for (size_t i = 0; i < kMaxClusterTextBytes; ++i) reject.why += "\xc3\xa9";  // é
  const std::string why = RoundTrip(reject).why;
  EXPECT_EQ(why.size(), kMaxClusterTextBytes - 1);  // 1 + 2 * 2047
  EXPECT_EQ(why.substr(why.size() - 2), "\xc3\xa9");

  RankExitMsg exit;
  for (int i = 0; i < 150; ++i) exit.log_tail.push_back("line " + std::to_string(i) + std::string(2000, '.'));
  RankExitMsg got = RoundTrip(exit);
  ASSERT_EQ(got.log_tail.size(), kMaxClusterLogLines);  // the newest
  EXPECT_EQ(got.log_tail.front().rfind("line 50...", 0), 0u);
  EXPECT_EQ(got.log_tail.back().size(), kMaxClusterLogLineBytes);

  HelloMsg hello = std::get<HelloMsg>(OneOfEach()[0]);
  hello.health_report_json = std::string(kMaxClusterReportBytes + 1, ' ');
  EXPECT_EQ(RoundTrip(hello).health_report_json, "");  // dropped, not cut into broken JSON
}

TEST(ClusterProtocolTest, RecordOddities) {
  RankView future = MakeView(0, 2);
  future.progress.heartbeat_ns = kSenderNow + kSecond;  // written after now was read
  future.proc_state = ProcState::kUnknown;
  ProgressMsg got = RoundTrip(ProgressMsg{0, {future}});
  ASSERT_EQ(got.ranks.size(), 1u);
  EXPECT_EQ(got.ranks[0].progress.heartbeat_ns, kReceiverNow);  // age 0
  EXPECT_EQ(got.ranks[0].proc_state, ProcState::kUnknown);

  // A phase this build does not know: the record is not one it can read, on
  // the follower (DecodeProgress) and so on the leader.
  RankView odd = MakeView(1, 2);
  ProgressSnapshot snapshot;
  snapshot.valid = true;
  snapshot.record.pid = odd.pid;
  snapshot.record.step = 77;
  snapshot.record.phase = 42;
  odd.progress = DecodeProgress(snapshot);
  EXPECT_FALSE(odd.progress.valid);
  got = RoundTrip(ProgressMsg{0, {odd}});
  ASSERT_EQ(got.ranks.size(), 1u);
  EXPECT_FALSE(got.ranks[0].progress.valid);
  EXPECT_EQ(got.ranks[0].progress.step, 0);
  EXPECT_EQ(got.ranks[0].rank, 1);
  EXPECT_EQ(got.ranks[0].pid, odd.pid);

  // An age older than the receiver's clock still reads as "set", as early as can be.
  json j = Encoded(ProgressMsg{0, {MakeView(0, 1)}});
  j["ranks"][0]["heartbeat_age"] = kReceiverNow + kSecond;
  Result<ClusterMessage> r = ParseClusterMessage(j.dump(), kReceiverNow);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::get<ProgressMsg>(*r).ranks[0].progress.heartbeat_ns, 1);
}

TEST(ClusterProtocolTest, WorstCaseMessagesFitTheLimit) {
  // Control characters escape to 6 bytes each: the largest text there is.
  auto worst = [](size_t n) { return std::string(n, '\x01'); };
  RankView v = MakeView(kMaxClusterWorldSize - 1, UINT64_MAX);
  v.host = worst(kMaxClusterHostBytes);
  v.progress.checkpoint_error = std::string(kProgressErrorSize - 1, '\x01');
  RankProgress& p = v.progress;
  p.step = p.last_step_ns = p.checkpoint_step = p.checkpoint_failed_step = INT64_MIN;
  p.collectives_issued = p.collectives_done = p.waiting_on = p.checkpoint_failures = UINT64_MAX;
  p.ring.resize(kProgressRingSize);
  for (CollectiveRecord& e : p.ring) {
    e.seq = e.bytes = UINT64_MAX;
    e.issued_ns = e.completed_ns = 1;
  }
  RankExitMsg exit;
  exit.rank = kMaxClusterWorldSize - 1;
  exit.exec_error = worst(kMaxClusterTextBytes);
  exit.log_tail.assign(kMaxClusterLogLines, worst(kMaxClusterLogLineBytes));
  exit.ranks.assign(kMaxClusterNodeRanks, v);
  const std::string line = EncodeClusterMessage(exit, INT64_MAX);
  EXPECT_LE(line.size(), kMaxClusterMessageBytes);
  EXPECT_TRUE(ParseClusterMessage(line, INT64_MAX).ok());

  HelloMsg hello = std::get<HelloMsg>(OneOfEach()[0]);
  hello.host = worst(kMaxClusterHostBytes);
  hello.health_report_json = worst(kMaxClusterReportBytes);
  EXPECT_TRUE(ParseClusterMessage(EncodeClusterMessage(hello, 1), 1).ok());

  KillMsg kill{INT32_MAX, std::vector<int>(kMaxClusterKillRanks, kMaxClusterWorldSize - 1)};
  EXPECT_TRUE(ParseClusterMessage(EncodeClusterMessage(kill, 1), 1).ok());
}

TEST(ClusterProtocolDeathTest, EncodingAnImpossibleMessageIsAProgrammingError) {
  EXPECT_DEATH(EncodeClusterMessage(SignalMsg{1, 0}, 1), "SignalMsg::sig");
  EXPECT_DEATH(EncodeClusterMessage(KillMsg{1, {-1}}, 1), "KillMsg::ranks");
  StartMsg start = std::get<StartMsg>(OneOfEach()[5]);
  start.ranks[0].global_rank = 16;
  EXPECT_DEATH(EncodeClusterMessage(start, 1), "global_rank");
  ProgressMsg progress;
  progress.ranks.assign(kMaxClusterNodeRanks + 1, RankView{});
  EXPECT_DEATH(EncodeClusterMessage(progress, 1), "257 rank views");
}

// ---- LineConnection over loopback TCP ----

namespace asio = boost::asio;

// Two connected sockets on 127.0.0.1, on one io_context.
struct SocketPair {
  asio::io_context io;
  asio::ip::tcp::socket a{io};
  asio::ip::tcp::socket b{io};
  SocketPair() {
    asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
  }
};

TEST(LineConnectionTest, MessagesRoundTrip) {
  SocketPair s;
  auto follower = std::make_shared<LineConnection>(std::move(s.a));
  auto leader = std::make_shared<LineConnection>(std::move(s.b));
  std::vector<std::string> at_leader;
  std::vector<std::string> at_follower;
  std::string leader_closed;
  std::string follower_closed;
  leader->Start(
      [&](std::string_view line) {
        at_leader.emplace_back(line);
        Result<ClusterMessage> m = ParseClusterMessage(line, kReceiverNow);
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        if (std::holds_alternative<HelloMsg>(*m)) {
          leader->Send(EncodeClusterMessage(std::get<StartMsg>(OneOfEach()[5]), kReceiverNow));
        } else {
          leader->Close("done");
        }
      },
      [&](const std::string& why) { leader_closed = why; });
  follower->Start(
      [&](std::string_view line) {
        at_follower.emplace_back(line);
        follower->Send(EncodeClusterMessage(OneOfEach()[1], kSenderNow));
      },
      [&](const std::string& why) { follower_closed = why; });
  follower->Send(EncodeClusterMessage(OneOfEach()[0], kSenderNow));
  s.io.run();

  ASSERT_EQ(at_leader.size(), 2u);
  EXPECT_EQ(at_leader[0].back(), '}');  // delivered without its newline
  ASSERT_EQ(at_follower.size(), 1u);
  Result<ClusterMessage> start = ParseClusterMessage(at_follower[0], kSenderNow);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_EQ(std::get<StartMsg>(*start).run_id, "r-20240601-abc");
  Result<ClusterMessage> progress = ParseClusterMessage(at_leader[1], kReceiverNow);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(std::get<ProgressMsg>(*progress).ranks.size(), 3u);
  EXPECT_EQ(leader_closed, "done");
  EXPECT_EQ(follower_closed, "the peer closed the connection");
  EXPECT_TRUE(leader->closed());
  EXPECT_TRUE(follower->closed());
}

TEST(LineConnectionTest, OversizeLineClosesWithAReason) {
  SocketPair s;
  auto sender = std::make_shared<LineConnection>(std::move(s.a));
  auto receiver = std::make_shared<LineConnection>(std::move(s.b), /*max_line_bytes=*/64);
  std::vector<std::string> lines;
  std::string why;
  int closes = 0;
  receiver->Start([&](std::string_view line) { lines.emplace_back(line); },
                  [&](const std::string& w) {
                    why = w;
                    ++closes;
                  });
  sender->Start([](std::string_view) {}, [](const std::string&) {});
  sender->Send(std::string(63, 'a'));  // 64 with its newline: fits
  sender->Send(std::string(64, 'b'));  // 65: one too many
  sender->Send("never read");
  s.io.run();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], std::string(63, 'a'));
  EXPECT_EQ(why, "the peer sent a line longer than 64 bytes (the limit, newline included)");
  EXPECT_EQ(closes, 1);
}

TEST(LineConnectionTest, DefaultLimitIsTheProtocolLimit) {
  SocketPair s;
  auto receiver = std::make_shared<LineConnection>(std::move(s.b));
  EXPECT_EQ(receiver->max_line_bytes(), kMaxClusterMessageBytes);
  std::string why;
  receiver->Start([](std::string_view) { ADD_FAILURE() << "no line should arrive"; },
                  [&](const std::string& w) { why = w; });
  // A raw peer sends 4 MiB without a newline.
  auto junk = std::make_shared<std::string>(kMaxClusterMessageBytes, 'x');
  asio::async_write(s.a, asio::buffer(*junk), [junk](const boost::system::error_code&, size_t) {});
  s.io.run();
  EXPECT_EQ(why, "the peer sent a line longer than 4194304 bytes (the limit, newline included)");
}

TEST(LineConnectionTest, CloseAfterSendingDeliversTheRejectFirst) {
  SocketPair s;
  auto leader = std::make_shared<LineConnection>(std::move(s.a));
  auto follower = std::make_shared<LineConnection>(std::move(s.b));
  std::string leader_why;
  std::string follower_why;
  std::string rejected;
  leader->Start([](std::string_view) {}, [&](const std::string& w) { leader_why = w; });
  follower->Start(
      [&](std::string_view line) {
        Result<ClusterMessage> m = ParseClusterMessage(line, kReceiverNow);
        ASSERT_TRUE(m.ok());
        rejected = std::get<RejectMsg>(*m).why;
      },
      [&](const std::string& w) { follower_why = w; });
  leader->Send(EncodeClusterMessage(RejectMsg{"nproc 4 differs from the leader's 8"}, kSenderNow));
  leader->CloseAfterSending("rejected follower");
  leader->Send("dropped: sent after closing");
  s.io.run();
  EXPECT_EQ(rejected, "nproc 4 differs from the leader's 8");
  EXPECT_EQ(leader_why, "rejected follower");
  EXPECT_EQ(follower_why, "the peer closed the connection");
}

TEST(LineConnectionTest, PeerHangingUpMidLineIsReported) {
  SocketPair s;
  auto receiver = std::make_shared<LineConnection>(std::move(s.b));
  std::string why;
  receiver->Start([](std::string_view) { ADD_FAILURE(); }, [&](const std::string& w) { why = w; });
  asio::write(s.a, asio::buffer(std::string("{\"v\":2,")));
  s.a.close();
  s.io.run();
  EXPECT_EQ(why, "the peer closed the connection in the middle of a line");
}

// A node cut off the network closes nothing: the connection must give up on
// a silent peer by itself (found by bench/soak_slurm.py: a partitioned
// follower was never lost, and the run waited on it until Slurm killed the job).
TEST(LineConnectionTest, PeerTimeoutMakesTheKernelGiveUpOnASilentPeer) {
  SocketPair s;
  const int fd = s.a.native_handle();  // the same descriptor once the connection owns the socket
  auto conn = std::make_shared<LineConnection>(std::move(s.a));
  int keepalive = 0;
  unsigned int user_timeout_ms = 1;
  socklen_t len = sizeof(keepalive);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keepalive, &len), 0);
  len = sizeof(user_timeout_ms);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, &len), 0);
  EXPECT_EQ(keepalive, 0) << "off unless asked for";
  EXPECT_EQ(user_timeout_ms, 0u);

  ASSERT_TRUE(conn->SetPeerTimeout(12).ok());
  int idle_s = 0;
  len = sizeof(keepalive);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keepalive, &len), 0);
  len = sizeof(idle_s);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, &len), 0);
  len = sizeof(user_timeout_ms);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, &len), 0);
  EXPECT_EQ(keepalive, 1) << "an idle connection to a vanished node is probed";
  EXPECT_LT(idle_s, 12);
  EXPECT_EQ(user_timeout_ms, 12000u) << "unacknowledged data is given up on after the timeout";
}

}  // namespace
}  // namespace holdfast
