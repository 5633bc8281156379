#include "daemon/control_protocol.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace holdfast {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

ControlRequest Req(uint64_t id, std::string op, std::string args = "{}") {
  ControlRequest r;
  r.id = id;
  r.op = std::move(op);
  r.args_json = std::move(args);
  return r;
}

// Expects kInvalidArgument whose message contains `needle`.
void ExpectBadRequest(const std::string& line, const std::string& needle) {
  Result<ControlRequest> r = ParseControlRequest(line);
  ASSERT_FALSE(r.ok()) << line;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message '" << r.status().message() << "' lacks '" << needle << "'";
}

TEST(ControlProtocolTest, RequestRoundTrip) {
  std::string line = EncodeRequest(Req(42, "checkpoint", R"({"reason":"operator","n":[1,2]})"));
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  Result<ControlRequest> r = ParseControlRequest(line);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->id, 42u);
  EXPECT_EQ(r->op, "checkpoint");
  EXPECT_EQ(json::parse(r->args_json), json::parse(R"({"reason":"operator","n":[1,2]})"));
  // Every op of v1 is accepted; a missing args is {}; a line without '\n' is fine too.
  for (const std::string& op : ControlOps()) {
    Result<ControlRequest> p =
        ParseControlRequest(R"({"v":1,"id":18446744073709551615,"op":")" + op + R"("})");
    ASSERT_TRUE(p.ok()) << op << ": " << p.status().ToString();
    EXPECT_EQ(p->id, 18446744073709551615ull);
    EXPECT_EQ(p->args_json, "{}");
  }
}

TEST(ControlProtocolTest, ResponseRoundTrips) {
  Result<ControlResponse> ok = ParseControlResponse(EncodeOkResponse(7, R"({"requested_at_step":120})"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->ok);
  EXPECT_EQ(ok->id, 7u);
  EXPECT_EQ(json::parse(ok->result_json)["requested_at_step"], 120);

  Result<ControlResponse> err =
      ParseControlResponse(EncodeErrorResponse(8, FailedPreconditionError("no checkpoint yet")));
  ASSERT_TRUE(err.ok()) << err.status().ToString();
  EXPECT_FALSE(err->ok);
  EXPECT_EQ(err->id, 8u);
  EXPECT_EQ(err->error_code, "FailedPrecondition");
  EXPECT_EQ(err->error.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(err->error.message(), "no checkpoint yet");

  Result<ControlResponse> denied = ParseControlResponse(
      EncodeErrorResponse(0, ControlErrorCode::kPermissionDenied, "uid 1001 may not act"));
  ASSERT_TRUE(denied.ok());
  EXPECT_EQ(denied->error_code, "PermissionDenied");
  EXPECT_EQ(denied->id, 0u);

  // The wire shape is exactly what docs/control-protocol.md shows.
  json wire = json::parse(EncodeErrorResponse(3, InvalidArgumentError("bad")));
  EXPECT_EQ(wire, json::parse(
                      R"({"v":1,"id":3,"ok":false,"error":{"code":"InvalidArgument","message":"bad"}})"));
  EXPECT_EQ(json::parse(EncodeRequest(Req(5, "ping"))),
            json::parse(R"({"v":1,"id":5,"op":"ping","args":{}})"));
}

TEST(ControlProtocolTest, StatusCodesMapToWireCodes) {
  EXPECT_STREQ(ControlErrorCodeName(ControlErrorCodeFor(TimeoutError("x"))), "Unavailable");
  EXPECT_STREQ(ControlErrorCodeName(ControlErrorCodeFor(NotFoundError("x"))), "FailedPrecondition");
  EXPECT_STREQ(ControlErrorCodeName(ControlErrorCodeFor(IoError("x"))), "Internal");
  EXPECT_STREQ(ControlErrorCodeName(ControlErrorCodeFor(InvalidArgumentError("x"))),
               "InvalidArgument");
}

TEST(ControlProtocolTest, MalformedRequestsSayWhatIsWrong) {
  ExpectBadRequest("status please", "not JSON");
  ExpectBadRequest("{\"v\":1,", "not JSON");
  ExpectBadRequest("", "empty");
  ExpectBadRequest("[1,2]", "must be a JSON object, got array");
  ExpectBadRequest("17", "must be a JSON object, got number");
  ExpectBadRequest(R"({"id":1,"op":"ping"})", "supported protocol versions: 1");
  ExpectBadRequest(R"({"v":2,"id":1,"op":"ping"})", "protocol version 2; supported protocol versions: 1");
  ExpectBadRequest(R"({"v":"1","id":1,"op":"ping"})", "supported protocol versions: 1");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"reboot"})",
                   "unknown op \"reboot\"; the ops are: ping, status, checkpoint, stop, health");
  ExpectBadRequest(R"({"v":1,"id":1})", "one of: ping, status, checkpoint, stop, health");
  ExpectBadRequest(R"({"v":1,"id":1,"op":7})", "\"op\" as a string");
  ExpectBadRequest(R"({"v":1,"op":"ping"})", "no \"id\"");
  ExpectBadRequest(R"({"v":1,"id":-1,"op":"ping"})", "unsigned integer, got -1");
  ExpectBadRequest(R"({"v":1,"id":1.5,"op":"ping"})", "unsigned integer, got 1.5");
  ExpectBadRequest(R"({"v":1,"id":"1","op":"ping"})", "unsigned integer");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"ping","args":[]})", "\"args\" must be a JSON object, got array");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"ping","args":null})", "got null");
  ExpectBadRequest("{\"v\":1,\n\"id\":1,\"op\":\"ping\"}", "one line");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"ping","args":)" + std::string(40, '[') +
                       std::string(40, ']') + "}",
                   "nests deeper than 32");
}

// A stop whose run_id the daemon cannot read must be refused, not obeyed as
// if it named no run (the guard used to run only for a string run_id, and an
// empty one matched every run).
TEST(ControlProtocolTest, ARunIdThatIsNotANonEmptyStringIsRefused) {
  ExpectBadRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":123}})", "\"args.run_id\" must be a string");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":null}})", "got null");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":["x"]}})", "got array");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":{"a":1}}})", "got object");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"checkpoint","args":{"run_id":""}})", "is empty");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":"r 1"}})", "a character that no run id has");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":")" + std::string(129, 'r') + R"("}})",
                   "129 bytes; run ids are at most 128");
  auto ok = ParseControlRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":"r-2025"}})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_TRUE(ok->run_id.has_value());
  EXPECT_EQ(*ok->run_id, "r-2025");
  EXPECT_TRUE(RequestNamesRun(*ok, "r-20250101-a1b2"));
  EXPECT_FALSE(RequestNamesRun(*ok, "r-2024"));
  auto none = ParseControlRequest(R"({"v":1,"id":1,"op":"stop"})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->run_id.has_value());
  EXPECT_TRUE(RequestNamesRun(*none, "r-1"));
  ControlRequest latest;
  latest.run_id = "latest";
  EXPECT_TRUE(RequestNamesRun(latest, "r-1"));
}

TEST(ControlProtocolTest, AKeyTwiceInOneObjectIsRefused) {
  ExpectBadRequest(R"({"v":1,"id":1,"op":"status","op":"stop"})", "the key \"op\" twice");
  ExpectBadRequest(R"({"v":1,"id":1,"op":"stop","args":{"run_id":"a","run_id":"b"}})", "the key \"run_id\" twice");
  ExpectBadRequest(R"({"v":1,"id":1,"id":2,"op":"ping"})", "the key \"id\" twice");
  // The same key in two different objects is no duplicate.
  EXPECT_TRUE(ParseControlRequest(R"({"v":1,"id":1,"op":"stop","args":{"v":1,"id":"x"}})").ok());
}

TEST(ControlProtocolTest, EveryTruncationOfAValidRequestIsRejectedCleanly) {
  std::string line = EncodeRequest(Req(9, "status", R"({"verbose":true,"x":"\u00e9"})"));
  line.pop_back();
  for (size_t n = 0; n < line.size(); ++n) {
    Result<ControlRequest> r = ParseControlRequest(line.substr(0, n));
    EXPECT_FALSE(r.ok()) << line.substr(0, n);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(ParseControlResponse(line.substr(0, n)).ok());
  }
  // Invalid UTF-8 and NUL bytes are errors, not crashes.
  EXPECT_FALSE(ParseControlRequest(std::string("{\"v\":1,\"id\":1,\"op\":\"\xff\"}")).ok());
  EXPECT_FALSE(ParseControlRequest(std::string("{\"v\":1\0}", 8)).ok());
}

TEST(ControlProtocolTest, SizeLimitIsInclusiveOfTheNewline) {
  // Pad args so that the encoded line (with '\n') is exactly the limit.
  std::string base = EncodeRequest(Req(1, "ping", R"({"pad":""})"));
  std::string pad(kMaxControlMessageBytes - base.size(), 'x');
  std::string at_limit = EncodeRequest(Req(1, "ping", R"({"pad":")" + pad + R"("})"));
  ASSERT_EQ(at_limit.size(), kMaxControlMessageBytes);
  Result<ControlRequest> r = ParseControlRequest(at_limit);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(json::parse(r->args_json)["pad"].get<std::string>().size(), pad.size());
  // Without its newline it is the same message.
  EXPECT_TRUE(ParseControlRequest(std::string_view(at_limit).substr(0, at_limit.size() - 1)).ok());

  std::string over = EncodeRequest(Req(1, "ping", R"({"pad":")" + pad + R"(x"})"));
  ASSERT_EQ(over.size(), kMaxControlMessageBytes + 1);
  ExpectBadRequest(over, "65537 bytes with its newline; the limit is 65536");
}

TEST(ControlProtocolTest, MalformedResponsesAreRejected) {
  for (const char* bad : {
           R"({"v":1,"id":1})",
           R"({"v":1,"id":1,"ok":"yes","result":{}})",
           R"({"v":1,"id":1,"ok":true})",
           R"({"v":1,"id":1,"ok":true,"result":[]})",
           R"({"v":1,"id":1,"ok":false})",
           R"({"v":1,"id":1,"ok":false,"error":{"code":"Internal"}})",
           R"({"v":3,"id":1,"ok":true,"result":{}})",
       }) {
    Result<ControlResponse> r = ParseControlResponse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

RunStatus SampleStatus() {
  RunStatus s;
  s.run_id = "r-20250101-abcd";
  s.name = "gpt-small";
  s.state = "running";
  s.attempt = 2;
  s.generation = 1;
  s.step = 1234;
  s.world_size = 2;
  s.restarts_used = 1;
  s.restart_budget = 5;
  s.last_checkpoint_step = 1200;
  s.uptime_s = 61.5;
  NodeStatus node;
  node.node = 0;
  node.host = "gpu-a17";
  RankStatus r0;
  r0.rank = 0;
  r0.pid = 4242;
  r0.state = "running";
  r0.step = 1234;
  r0.phase = "collective";
  r0.heartbeat_age_s = 0.25;
  r0.last_step_ms = 812.5;
  r0.waiting_on = 9001;
  r0.collectives_issued = 9001;
  r0.steps_per_s = 1.21;
  r0.step_ms_p50 = 812.5;
  r0.step_ms_p99 = 840.25;
  r0.compute_ms_p50 = 210.5;
  r0.wait_ms_p50 = 600.75;
  r0.place = "tp 0, pp stage 0, dp 0";
  r0.waiting_kind = "allreduce";
  r0.waiting_group = "tp";
  r0.waiting_group_seq = 431;
  RankStatus r1 = r0;
  r1.waiting_kind.clear();
  r1.waiting_group.clear();
  r1.waiting_group_seq.reset();
  r1.rank = 1;
  r1.place = "tp 1, pp stage 0, dp 0";
  r1.pid = 4243;
  r1.phase = "forward";
  r1.waiting_on.reset();
  r1.last_step_ms.reset();
  r1.steps_per_s.reset();
  r1.step_ms_p50.reset();
  r1.step_ms_p99.reset();
  r1.compute_ms_p50.reset();
  r1.wait_ms_p50.reset();
  node.ranks = {r0, r1};
  s.nodes.push_back(node);
  s.last_incident = IncidentSummary{"hang", "rank 1 stuck", 1700000000000, "restarted", "runbooks/hang.md"};
  s.slowest_rank = 1;
  s.slowest_rank_note = "rank 1 computes 3.9x the median of the others for 45 s (812 ms vs 208 ms a step)";
  s.scheduler = "slurm";
  s.job_id = "42";
  s.restart_count = 1;
  s.hosts = {"gpu-a17", "gpu-a19"};
  s.mesh = "tp=2,pp=1,dp=1";
  return s;
}

// The device mesh and each rank's place in it travel; a daemon from before
// the mesh sends neither, and its status still parses.
TEST(ControlProtocolTest, StatusCarriesTheMeshAndEachRanksPlace) {
  const std::string text = EncodeStatusResult(SampleStatus());
  Result<RunStatus> back = ParseStatusResult(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->mesh, "tp=2,pp=1,dp=1");
  EXPECT_EQ(back->nodes[0].ranks[1].place, "tp 1, pp stage 0, dp 0");
  const RankStatus& waiting = back->nodes[0].ranks[0];
  EXPECT_EQ(waiting.waiting_kind + " #" + std::to_string(waiting.waiting_group_seq.value_or(0)) + " of " +
                waiting.waiting_group,
            "allreduce #431 of tp");
  EXPECT_FALSE(back->nodes[0].ranks[1].waiting_group_seq.has_value());
  json premesh = json::parse(text);
  premesh.erase("mesh");
  for (const char* key : {"place", "waiting_kind", "waiting_group", "waiting_group_seq"}) {
    premesh["nodes"][0]["ranks"][0].erase(key);
  }
  Result<RunStatus> before = ParseStatusResult(premesh.dump());
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->mesh, "");
  EXPECT_EQ(before->nodes[0].ranks[0].place, "");
  EXPECT_EQ(before->nodes[0].ranks[0].waiting_group, "");
  EXPECT_FALSE(before->nodes[0].ranks[0].waiting_group_seq.has_value());
  json bad = json::parse(text);
  bad["nodes"][0]["ranks"][0]["waiting_group_seq"] = "many";
  EXPECT_FALSE(ParseStatusResult(bad.dump()).ok()) << "a group number that is not one";
}

TEST(ControlProtocolTest, StatusResultRoundTrip) {
  RunStatus s = SampleStatus();
  std::string text = EncodeStatusResult(s);
  json j = json::parse(text);
  EXPECT_EQ(j["nodes"][0]["ranks"][0]["waiting_on"], 9001);
  EXPECT_TRUE(j["nodes"][0]["ranks"][1]["waiting_on"].is_null());
  EXPECT_EQ(j["last_incident"]["runbook"], "runbooks/hang.md");
  Result<RunStatus> back = ParseStatusResult(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeStatusResult(*back), text);
  EXPECT_EQ(back->nodes[0].ranks[1].phase, "forward");
  EXPECT_EQ(back->nodes[0].host, "gpu-a17") << "nodes are hosts";
  EXPECT_FALSE(back->nodes[0].ranks[1].waiting_on.has_value());
  // What gave the run its nodes.
  EXPECT_EQ(j["scheduler"], "slurm");
  EXPECT_EQ(j["job_id"], "42");
  EXPECT_EQ(j["restart_count"], 1);
  EXPECT_EQ(j["hosts"], json::array({"gpu-a17", "gpu-a19"}));
  EXPECT_EQ(back->scheduler, "slurm");
  EXPECT_EQ(back->job_id, "42");
  EXPECT_EQ(back->restart_count, 1);
  EXPECT_EQ(back->hosts, (std::vector<std::string>{"gpu-a17", "gpu-a19"}));

  s.last_incident.reset();
  s.last_checkpoint_step.reset();
  j = json::parse(EncodeStatusResult(s));
  EXPECT_TRUE(j["last_incident"].is_null());
  EXPECT_TRUE(j["last_checkpoint_step"].is_null());

  // A rank's pace and the slowest rank travel as numbers and a string, or null.
  j = json::parse(text);
  EXPECT_DOUBLE_EQ(j["nodes"][0]["ranks"][0]["steps_per_s"].get<double>(), 1.21);
  EXPECT_DOUBLE_EQ(j["nodes"][0]["ranks"][0]["compute_ms_p50"].get<double>(), 210.5);
  for (const char* key : {"steps_per_s", "step_ms_p50", "step_ms_p99", "compute_ms_p50", "wait_ms_p50"}) {
    EXPECT_TRUE(j["nodes"][0]["ranks"][1][key].is_null()) << key;
  }
  EXPECT_EQ(j["slowest_rank"], 1);
  EXPECT_EQ(j["slowest_rank_note"], "rank 1 computes 3.9x the median of the others for 45 s (812 ms vs 208 ms a step)");
  EXPECT_EQ(back->slowest_rank, 1);
  EXPECT_EQ(back->slowest_rank_note, s.slowest_rank_note);
  EXPECT_DOUBLE_EQ(back->nodes[0].ranks[0].wait_ms_p50.value_or(0), 600.75);
  EXPECT_DOUBLE_EQ(back->nodes[0].ranks[0].step_ms_p99.value_or(0), 840.25);
  EXPECT_FALSE(back->nodes[0].ranks[1].steps_per_s.has_value());

  // How old a follower's view is travels with its ranks; a daemon from before it sends none (0); a
  // negative age is refused, naming the field.
  s = SampleStatus();
  s.nodes[0].ranks[1].report_age_s = 0.075;
  text = EncodeStatusResult(s);
  back = ParseStatusResult(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ(back->nodes[0].ranks[1].report_age_s, 0.075);
  EXPECT_EQ(back->nodes[0].ranks[0].report_age_s, 0);
  j = json::parse(text);
  j["nodes"][0]["ranks"][1].erase("report_age_s");
  back = ParseStatusResult(j.dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->nodes[0].ranks[1].report_age_s, 0);
  j["nodes"][0]["ranks"][1]["report_age_s"] = -1;
  back = ParseStatusResult(j.dump());
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("report_age_s"), std::string::npos) << back.status().ToString();
  s.slowest_rank.reset();
  s.slowest_rank_note.reset();
  json unset = json::parse(EncodeStatusResult(s));
  EXPECT_TRUE(unset["slowest_rank"].is_null());
  EXPECT_TRUE(unset["slowest_rank_note"].is_null());

  // A daemon from before these fields: they are absent, and read as unset.
  json old = json::parse(text);
  old.erase("slowest_rank");
  old.erase("slowest_rank_note");
  old["nodes"][0]["ranks"][0].erase("steps_per_s");
  Result<RunStatus> older = ParseStatusResult(old.dump());
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_FALSE(older->slowest_rank.has_value());
  EXPECT_FALSE(older->nodes[0].ranks[0].steps_per_s.has_value());

  // A daemon from before Slurm support sends no scheduler fields: a local run.
  json pre_slurm = json::parse(text);
  for (const char* key : {"scheduler", "job_id", "restart_count", "hosts"}) pre_slurm.erase(key);
  Result<RunStatus> local = ParseStatusResult(pre_slurm.dump());
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(local->scheduler, "local");
  EXPECT_EQ(local->job_id, "");
  EXPECT_EQ(local->restart_count, 0);
  EXPECT_TRUE(local->hosts.empty());
  EXPECT_EQ(local->run_id, s.run_id) << "the other fields still parse";
  // Present but mistyped is still an error that names the field.
  for (auto [key, value, want] : {std::tuple<const char*, json, const char*>{"hosts", json::array({"n1", 3}),
                                                                             "\"hosts\" must be an array of strings"},
                                  {"restart_count", "1", "\"restart_count\" must be an integer"},
                                  {"job_id", 42, "\"job_id\" must be a string"}}) {
    json mistyped = json::parse(text);
    mistyped[key] = value;
    Result<RunStatus> r = ParseStatusResult(mistyped.dump());
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }

  json wrong = json::parse(text);
  wrong["slowest_rank_note"] = 3;
  Result<RunStatus> bad_note = ParseStatusResult(wrong.dump());
  ASSERT_FALSE(bad_note.ok());
  EXPECT_NE(bad_note.status().message().find("\"slowest_rank_note\" must be a string or null"), std::string::npos)
      << bad_note.status().message();

  j = json::parse(text);
  j["nodes"][0]["ranks"][1].erase("pid");
  Result<RunStatus> bad = ParseStatusResult(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nodes[0].ranks[1]: missing \"pid\""), std::string::npos)
      << bad.status().message();
}

TEST(ControlProtocolTest, StatusCarriesRoleProcesses) {
  RunStatus s = SampleStatus();
  RoleStatus a;
  a.role = "rollout";
  a.index = 1;
  a.pid = 5150;
  a.state = "restarting";
  a.restart = "alone";
  a.restarts = 2;
  a.step = 412;
  a.heartbeat_age_s = 0.25;
  RoleStatus b;
  b.role = "reward";
  b.state = "running";
  b.restart = "learner";  // no progress record yet: step and heartbeat unset
  s.roles = {a, b};
  const std::string text = EncodeStatusResult(s);
  json j = json::parse(text);
  EXPECT_EQ(j["roles"][0]["role"], "rollout");
  EXPECT_EQ(j["roles"][0]["restarts"], 2);
  EXPECT_TRUE(j["roles"][1]["step"].is_null());
  Result<RunStatus> back = ParseStatusResult(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeStatusResult(*back), text);
  ASSERT_EQ(back->roles.size(), 2u);
  EXPECT_EQ(back->roles[0].index, 1);
  EXPECT_EQ(back->roles[0].step, 412);
  EXPECT_DOUBLE_EQ(back->roles[0].heartbeat_age_s.value_or(0), 0.25);
  EXPECT_FALSE(back->roles[1].heartbeat_age_s.has_value());
  // A daemon from before roles sends no "roles": none.
  j.erase("roles");
  Result<RunStatus> old = ParseStatusResult(j.dump());
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(old->roles.empty());
  // Present but broken names the field.
  j = json::parse(text);
  j["roles"][1].erase("pid");
  Result<RunStatus> bad = ParseStatusResult(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("roles[1]: missing \"pid\""), std::string::npos) << bad.status().message();
  j = json::parse(text);
  j["roles"] = "rollout";
  EXPECT_FALSE(ParseStatusResult(j.dump()).ok());
}

TEST(ControlProtocolTest, PeerCredentials) {
  EXPECT_TRUE(CheckPeerAllowed(1000, 1000).ok());
  EXPECT_TRUE(CheckPeerAllowed(0, 1000).ok());
  Status denied = CheckPeerAllowed(1001, 1000);
  EXPECT_FALSE(denied.ok());
  EXPECT_NE(denied.message().find("uid 1001"), std::string::npos);
  EXPECT_NE(denied.message().find("owner (uid 1000)"), std::string::npos);

  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Result<PeerCredentials> cred = ReadPeerCredentials(sv[0]);
  ASSERT_TRUE(cred.ok()) << cred.status().ToString();
  EXPECT_EQ(cred->uid, getuid());
  EXPECT_EQ(cred->pid, getpid());
  close(sv[0]);
  close(sv[1]);
  EXPECT_FALSE(ReadPeerCredentials(-1).ok());
}

}  // namespace
}  // namespace holdfast
