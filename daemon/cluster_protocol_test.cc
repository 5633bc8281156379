#include "daemon/cluster_protocol.h"

#include "common/peer_auth.h"

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

#include "daemon/cluster_protocol_test_util.h"

namespace holdfast {
namespace {

using namespace cluster_test;  // NOLINT: the suite's support

TEST(ClusterProtocolTest, HelloRoundTrip) {
  const HelloMsg sent = std::get<HelloMsg>(OneOfEach()[0]);
  const std::string line = EncodeClusterMessage(sent, kSenderNow);
  EXPECT_EQ(line.rfind(R"({"v":5,"type":"hello",)", 0), 0u) << line;
  HelloMsg got = RoundTrip(sent);
  EXPECT_EQ(got.version, kClusterProtocolVersion);
  EXPECT_EQ(got.node, 3);
  EXPECT_EQ(got.host, "gpu-b02");
  EXPECT_EQ(got.nproc, 8);
  EXPECT_EQ(got.pid, 31337);
  EXPECT_EQ(got.health_report_json, sent.health_report_json);
  EXPECT_EQ(got.nonce, sent.nonce);
  EXPECT_EQ(got.proof, sent.proof);
  EXPECT_NE(line.find(R"("nonce":")" + HexEncode(sent.nonce) + R"(","proof":")" + HexEncode(sent.proof) + "\""),
            std::string::npos)
      << line;
}

// The handshake's messages carry raw bytes as hex; anything else is refused by name.
TEST(ClusterProtocolTest, HandshakeMessagesRoundTripAndRefuseBadHex) {
  const ChallengeMsg c = RoundTrip(std::get<ChallengeMsg>(OneOfEach()[10]));
  EXPECT_EQ(c.nonce, std::string(32, '\x5a'));
  const WelcomeMsg w = RoundTrip(std::get<WelcomeMsg>(OneOfEach()[11]));
  EXPECT_EQ(w.proof, std::string(32, '\xa5'));
  EXPECT_EQ(EncodeClusterMessage(ChallengeMsg{std::string(32, '\x00')}, kSenderNow),
            R"({"v":5,"type":"challenge","nonce":")" + std::string(64, '0') + "\"}\n");
  ExpectBad(R"({"v":5,"type":"challenge","nonce":"zz"})", {"challenge", "\"nonce\" must be 64 hex digits"});
  ExpectBad(R"({"v":5,"type":"welcome","proof":"00"})", {"welcome", "\"proof\" must be 64 hex digits"});
  EXPECT_EQ(w.run_id, "r-20261202-c227");
  // A welcome of an older leader has no run id; one that is a path is refused, as in a start.
  const std::string proof = "\"proof\":\"" + std::string(64, 'a') + "\"";
  Result<ClusterMessage> old_leader = ParseClusterMessage(R"({"v":5,"type":"welcome",)" + proof + "}", kSenderNow);
  ASSERT_TRUE(old_leader.ok()) << old_leader.status().ToString();
  EXPECT_EQ(std::get<WelcomeMsg>(*old_leader).run_id, "");
  for (const char* bad : {"../../etc", ".hidden", "", "r 1", "a/b"}) {
    ExpectBad(R"({"v":5,"type":"welcome",)" + proof + R"(,"run_id":")" + bad + "\"}", {"welcome", "is not a run id"});
    json start = Encoded(OneOfEach()[5]);
    start["run_id"] = bad;
    ExpectBad(start.dump(), {"start", "is not a run id"});
  }
  json hello = Encoded(OneOfEach()[0]);
  hello["proof"] = std::string(65, 'a');
  ExpectBad(hello.dump(), {"hello", "\"proof\""});
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
}

TEST(ClusterProtocolTest, ARankViewIsAnArrayOfNamedItems) {
  const json progress = Encoded(OneOfEach()[1]);
  const std::vector<std::string_view>& items = ClusterRankViewItems();
  ASSERT_TRUE(progress["ranks"][0].is_array());
  ASSERT_EQ(progress["ranks"][0].size(), items.size());
  EXPECT_EQ(progress["ranks"][0][Item("rank")], std::get<ProgressMsg>(OneOfEach()[1]).ranks[0].rank);
  EXPECT_EQ(progress["ranks"][0][Item("host")], std::get<ProgressMsg>(OneOfEach()[1]).ranks[0].host);
  EXPECT_TRUE(progress["ranks"][0][Item("ring")].is_array());
  // A view of another length (another build's) is refused with the items this build reads.
  json shorter = progress;
  shorter["ranks"][1].erase(Item("heartbeat_age"));
  ExpectBad(shorter.dump(), {"progress: ranks[1] must be an array of the 31 items [rank, node, host,",
                             "heartbeat_age", "mesh, groups", "ring_since, ring] (cluster protocol v5)"});
  json keyed = progress;
  keyed["ranks"][0] = json{{"rank", 0}};
  ExpectBad(keyed.dump(), {"progress: ranks[0] must be an array of the 31 items", "got {\"rank\":0}"});
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
  EXPECT_EQ(s.spec.run_id, start.spec.run_id);
  EXPECT_EQ(s.spec.attempt, 2);
  EXPECT_EQ(s.spec.generation, 5);
  EXPECT_EQ(s.spec.world_size, 16);
  EXPECT_EQ(s.spec.store_addr, "10.0.0.1:29500");
  EXPECT_EQ(s.spec.master_port, 29501);
  EXPECT_EQ(s.spec.resume_step, -1);
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
                                             "signal", "kill", "finish", "challenge", "welcome"}));
  EXPECT_TRUE(IsFollowerMessage(HelloMsg{}));
  EXPECT_TRUE(IsFollowerMessage(HealthMsg{}));
  EXPECT_FALSE(IsFollowerMessage(StartMsg{}));
  EXPECT_FALSE(IsFollowerMessage(RejectMsg{}));
  EXPECT_FALSE(IsFollowerMessage(ChallengeMsg{}));
  EXPECT_FALSE(IsFollowerMessage(WelcomeMsg{}));
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
            {"\"hello\"", "has no \"v\"", "v1", "v5", "run the same holdfast build on every node"});
  HelloMsg future = std::get<HelloMsg>(OneOfEach()[0]);
  future.version = 6;
  ExpectBad(EncodeClusterMessage(future, kSenderNow),
            {"peer speaks holdfast cluster protocol v6", "this holdfastd speaks v5", "same holdfast build"});
  // A v2 follower (before the run key's challenge-response) is told to match the build.
  ExpectBad(R"({"v":2,"type":"hello","node":1,"host":"h","nproc":8,"pid":7,"health_report":""})",
            {"peer speaks holdfast cluster protocol v2", "this holdfastd speaks v5"});
  // A v4 follower (rank views without the mesh and groups) too, and v3 (keyed objects).
  ExpectBad(R"({"v":4,"type":"progress","generation":1,"ranks":[]})",
            {"peer speaks holdfast cluster protocol v4", "this holdfastd speaks v5"});
  ExpectBad(R"({"v":3,"type":"progress","generation":1,"ranks":[{"rank":0}]})",
            {"peer speaks holdfast cluster protocol v3", "this holdfastd speaks v5"});
  ExpectBad(R"({"v":"3","type":"stop","generation":1,"why":"","grace_s":1})", {"\"v\" must be", "\"3\""});
  ExpectBad(R"({"v":5.0,"type":"stop","generation":1,"why":"","grace_s":1})", {"\"v\" must be"});
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
  ExpectBad(R"({"v":5,"type":"reboot"})", {"unknown cluster message type \"reboot\"", "hello, progress", "welcome"});
  ExpectBad(R"({"v":5})", {"needs \"type\" as a string"});
  ExpectBad(R"({"v":5,"type":7})", {"needs \"type\" as a string"});
}

TEST(ClusterProtocolTest, FramingErrors) {
  ExpectBad("", {"empty line"});
  ExpectBad("\n", {"empty line"});
  ExpectBad("not json", {"not JSON"});
  ExpectBad("[1,2]", {"must be a JSON object", "array"});
  ExpectBad("{\"v\":4,\"type\":\"kill\",\"generation\":1,\"ranks\":[]}\n{}", {"one line"});
  ExpectBad("{\"v\":4,\"type\":\"stop\",\"generation\":1,\"why\":\"\",\"grace_s\":1}trailing", {"not JSON"});
  std::string deep = R"({"v":5,"type":"kill","generation":1,"ranks":[],"x":)";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  deep += "}";
  ExpectBad(deep, {"nests deeper than 16"});
}

TEST(ClusterProtocolTest, OversizeLineRejected) {
  // Valid JSON, one byte over the limit with its newline.
  std::string line = R"({"v":5,"type":"reject","why":")";
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
      if (key == "run_id" && full["type"] == "welcome") continue;  // optional: an older leader sends none
      json broken = full;
      broken.erase(key);
      const std::string needle = key == "v" ? "has no \"v\"" : "missing \"" + key + "\"";
      ExpectBad(broken.dump(), {needle});
    }
  }
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
  progress["ranks"][0][Item("alive")] = 1;
  ExpectBad(progress.dump(), {"progress: ranks[0]: \"alive\" (item 4) must be true or false"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][2][Item("ring")][3] = json::array({1, 1, 1, 1});
  ExpectBad(progress.dump(), {"progress: ranks[2]: ring[3] must be [seq, kind, bytes"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][0][Item("issued")] = -1;
  ExpectBad(progress.dump(), {"\"issued\" (item 12) must be an integer in [0, 18446744073709551615]"});
  progress = Encoded(OneOfEach()[1]);
  progress["ranks"][0][Item("state")] = "RS";
  ExpectBad(progress.dump(), {"\"state\" (item 5) is 2 bytes; the limit is 1"});
  progress["ranks"][0][Item("state")] = " ";
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
      {1, ViewPointer(0, "rank"), -1, "progress: ranks[0]: \"rank\" (item 0) must be an integer in [0, 1048575]"},
      {1, ViewPointer(0, "phase"), 9, "\"phase\" (item 10) must be an integer in [0, 8], got 9"},
      {1, ViewPointer(0, "kind"), 7, "\"kind\" (item 11) must be an integer in [0, 6]"},
      {1, ViewPointer(1, "mesh"), json::array({2, 0, 1}), "\"mesh\" must be [] or [tensor, pipeline, expert]"},
      {1, ViewPointer(1, "groups"), json::array({1, 2}), "\"groups\" must hold 6 counts"},
      {1, ViewPointer(0, "heartbeat_age"), -2, "\"heartbeat_age\" (item 17) must be an integer >= -1"},
      {1, ViewPointer(0, "pid"), 1LL << 40, "\"pid\" (item 3) must be an integer in [0, 2147483647]"},
      {1, ViewPointer(0, "step"), 18446744073709551615ULL, "\"step\" (item 9) must be an integer"},
      {1, ViewPointer(1, "ring_head"), 6, "\"ring\" has 5 entries; ring_head 6 means 6"},
      {1, json::json_pointer(ViewPointer(1, "ring").to_string() + "/0/1"), 7, "ring[0] must be [seq >= 0, kind in [0, 6]"},
      {1, json::json_pointer(ViewPointer(1, "ring").to_string() + "/0/5"), 7, "group in [0, 6]"},
      {1, json::json_pointer(ViewPointer(1, "ring").to_string() + "/0/7"), -2, "send_to and recv_from ranks or -1"},
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
  progress["ranks"][0][Item("checkpoint_error")] = std::string(kProgressErrorSize, 'e');
  ExpectBad(progress.dump(), {"\"checkpoint_error\" (item 22) is 160 bytes; the limit is 159"});
  progress["ranks"][0][Item("checkpoint_error")] = std::string("a\0b", 3);
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
  j["ranks"][0][Item("heartbeat_age")] = kReceiverNow + kSecond;
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

}  // namespace
}  // namespace holdfast
