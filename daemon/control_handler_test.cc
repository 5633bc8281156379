// ControlHandler on a recording target: who may act, which run a request is
// about, and what the run can do now — each refusal leaves the run untouched.
// Lines go through ParseControlRequest first, as ControlServer does.
#include "daemon/control_handler.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

constexpr uid_t kOwner = 1000;
constexpr uid_t kOther = 1001;

class RecordingTarget : public ControlTarget {
 public:
  const std::string& run_id() const override { return id; }
  RunStatus BuildStatus() const override {
    RunStatus s;
    s.run_id = id;
    s.state = running ? "running" : "restarting";
    return s;
  }
  bool RanksRunning() const override { return running; }
  int64_t RequestCheckpoint() override {
    ++checkpoints;
    return 42;
  }
  void RequestStop(const std::string& why) override { stops.push_back(why); }

  std::string id = "20260101-abcdef";
  bool running = true;
  int checkpoints = 0;
  std::vector<std::string> stops;
};

class ControlHandlerTest : public ::testing::Test {
 protected:
  // The reply to `line` from `peer`, parsed.
  ControlResponse Ask(const std::string& line, uid_t peer = kOwner) {
    auto req = ParseControlRequest(line);
    const std::string reply = req.ok() ? handler_.Handle(*req, peer) : EncodeErrorResponse(0, req.status());
    auto resp = ParseControlResponse(reply);
    EXPECT_TRUE(resp.ok()) << reply;
    return resp.ok() ? *resp : ControlResponse{};
  }
  bool Untouched() const { return target_.stops.empty() && target_.checkpoints == 0; }

  RecordingTarget target_;
  ControlHandler handler_{&target_, kOwner};
};

TEST_F(ControlHandlerTest, MalformedAndHostileRequestsAreRefusedBeforeAnythingChanges) {
  const char* lines[] = {
      R"({"v":1,"id":1,"op":"stop","args":{"run_id":123}})",
      R"({"v":1,"id":1,"op":"stop","args":{"run_id":null}})",
      R"({"v":1,"id":1,"op":"stop","args":{"run_id":["x"]}})",
      R"({"v":1,"id":1,"op":"stop","args":{"run_id":""}})",
      R"({"v":1,"id":1,"op":"status","op":"stop"})",
      R"({"v":1,"id":1,"op":"stop","args":"now"})",
      R"(["stop"])",
      "stop",
      "",
  };
  for (const char* line : lines) {
    const ControlResponse r = Ask(line);
    EXPECT_FALSE(r.ok) << line;
    EXPECT_EQ(r.error_code, "InvalidArgument") << line;
  }
  EXPECT_TRUE(Untouched());
}

TEST_F(ControlHandlerTest, ARequestAboutAnotherRunIsFailedPreconditionNamingBoth) {
  for (const char* op : {"stop", "checkpoint", "status"}) {
    const ControlResponse r =
        Ask(std::string(R"({"v":1,"id":7,"op":")") + op + R"(","args":{"run_id":"20250101-ffffff"}})");
    EXPECT_FALSE(r.ok) << op;
    EXPECT_EQ(r.error_code, "FailedPrecondition") << op;
    EXPECT_EQ(r.error.message(), "this holdfastd supervises run 20260101-abcdef, not 20250101-ffffff") << op;
  }
  EXPECT_TRUE(Untouched());
  // A prefix, "latest" and no run id all mean this run.
  EXPECT_TRUE(Ask(R"({"v":1,"id":1,"op":"status","args":{"run_id":"20260101-ab"}})").ok);
  EXPECT_TRUE(Ask(R"({"v":1,"id":1,"op":"status","args":{"run_id":"latest"}})").ok);
  EXPECT_TRUE(Ask(R"({"v":1,"id":1,"op":"status"})").ok);
}

// Another user may only ping: the run's state is its owner's, like lineage.db
// (0600), whichever way the request came (the Unix socket or TCP with MUNGE).
TEST_F(ControlHandlerTest, AnotherUserMayNotLookAtOrActOnTheRunOnlyPing) {
  for (const char* op : {"stop", "checkpoint", "status", "health"}) {
    const ControlResponse r = Ask(std::string(R"({"v":1,"id":3,"op":")") + op + R"("})", kOther);
    EXPECT_FALSE(r.ok) << op;
    EXPECT_EQ(r.error_code, "PermissionDenied") << op;
    EXPECT_NE(r.error.message().find("may not look at or act on this run: only its owner (uid"), std::string::npos)
        << r.error.message();
  }
  EXPECT_TRUE(Untouched());
  EXPECT_TRUE(Ask(R"({"v":1,"id":5,"op":"ping"})", kOther).ok);
  EXPECT_TRUE(Ask(R"({"v":1,"id":4,"op":"status"})", /*root=*/0).ok) << "root may look at any run";
  EXPECT_TRUE(Ask(R"({"v":1,"id":6,"op":"stop"})", /*root=*/0).ok) << "root may act on any run";
  EXPECT_EQ(target_.stops.size(), 1u);
}

TEST_F(ControlHandlerTest, ACheckpointWhenNoRanksRunIsFailedPreconditionAndSignalsNothing) {
  target_.running = false;
  const ControlResponse r = Ask(R"({"v":1,"id":9,"op":"checkpoint"})");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error_code, "FailedPrecondition");
  EXPECT_EQ(r.error.message(), "no ranks are running right now");
  EXPECT_EQ(target_.checkpoints, 0);
}

TEST_F(ControlHandlerTest, ACheckpointWhileRunningSaysTheStepItWasRequestedAt) {
  const ControlResponse r = Ask(R"({"v":1,"id":9,"op":"checkpoint"})");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.id, 9u);
  EXPECT_EQ(nlohmann::json::parse(r.result_json).at("requested_at_step"), 42);
  EXPECT_EQ(target_.checkpoints, 1);
}

TEST_F(ControlHandlerTest, StopAndStatusAnswerAsTheProtocolSays) {
  const ControlResponse stop = Ask(R"({"v":1,"id":2,"op":"stop"})");
  ASSERT_TRUE(stop.ok);
  EXPECT_EQ(nlohmann::json::parse(stop.result_json).at("stopping"), true);
  EXPECT_EQ(target_.stops, (std::vector<std::string>{"stopped with runctl"}));
  const ControlResponse st = Ask(R"({"v":1,"id":3,"op":"status"})");
  ASSERT_TRUE(st.ok);
  auto parsed = ParseStatusResult(st.result_json);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->run_id, "20260101-abcdef");
  const ControlResponse other = Ask(R"({"v":1,"id":4,"op":"resume"})");
  EXPECT_FALSE(other.ok);
}

}  // namespace
}  // namespace holdfast
