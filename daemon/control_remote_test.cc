// Control from other nodes, the parts that decide who asks
// (daemon/control_remote.h, daemon/munge_credential.h): the endpoint file,
// and MUNGE-authenticated request lines against a real munged of the test's
// own — a good credential names its uid; a missing, garbled, replayed,
// retargeted or tampered one is refused; another user's names that user.
#include "daemon/control_remote.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "daemon/munge_credential.h"
#include "tests/support/munged.h"

namespace holdfast {
namespace {

using testing::PrivateMunged;

constexpr char kWhere[] = "10.77.0.11:40123";
constexpr char kRequest[] = R"({"v":1,"id":7,"op":"status","args":{}})";

TEST(ControlEndpointTest, RoundTripsOnAndOff) {
  ControlEndpoint on{"n1", "10.77.0.11", 40123, 4242, "r-20261202-ab12", ""};
  const std::string text = EncodeControlEndpoint(on);
  EXPECT_EQ(text, R"({"v":1,"host":"n1","addr":"10.77.0.11","port":40123,"pid":4242,"run_id":"r-20261202-ab12",)"
                  R"("auth":"munge"})"
                  "\n");
  Result<ControlEndpoint> back = ParseControlEndpoint(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Where(), "10.77.0.11:40123");
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->run_id, "r-20261202-ab12");
  ControlEndpoint off{"n1", "10.77.0.11", 0, 4242, "r-1", "on n1, munged is not reachable"};
  back = ParseControlEndpoint(EncodeControlEndpoint(off));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->port, 0);
  EXPECT_EQ(back->off, "on n1, munged is not reachable");
}

TEST(ControlEndpointTest, ABadFileSaysWhichField) {
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"", "not a JSON object"},
           {R"({"v":2})", "\"v\" must be 1"},
           {R"({"v":1,"host":"n1","addr":"a","run_id":"r","port":70000,"pid":1})", "\"port\""},
           {R"({"v":1,"host":"n1","addr":"a","run_id":"r","port":1,"pid":-1})", "\"pid\""},
           {R"({"v":1,"host":7,"addr":"a","run_id":"r","port":1,"pid":1})", "\"host\""},
           {R"({"v":1,"host":"n1","addr":"","run_id":"r","port":1,"pid":1})", "a port without an address"}}) {
    Result<ControlEndpoint> e = ParseControlEndpoint(text);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().message();
  }
}

class MungeAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = munged_.Start();
    ASSERT_EQ(why, "");
  }
  std::string Line(std::string_view request = kRequest, const std::string& where = kWhere) {
    Result<std::string> line = AuthenticatedControlLine(munged_.socket(), where, request);
    EXPECT_TRUE(line.ok()) << line.status().ToString();
    return line.ok() ? *line : "";
  }
  Result<AuthenticatedRequest> Check(const std::string& line) {
    return AuthenticateControlLine(munged_.socket(), kWhere, line);
  }
  static void ExpectRefused(const Result<AuthenticatedRequest>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << "accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  }

  PrivateMunged munged_;
};

TEST_F(MungeAuthTest, AGoodCredentialNamesItsSendersUidAndCarriesTheRequest) {
  const std::string line = Line();
  EXPECT_EQ(line.rfind("MUNGE:", 0), 0u) << line;
  EXPECT_EQ(line.back(), '\n');
  Result<AuthenticatedRequest> r = Check(line);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->uid, getuid());
  EXPECT_EQ(r->gid, getgid());
  EXPECT_EQ(r->request, kRequest);
}

TEST_F(MungeAuthTest, AReplayedCredentialIsRefused) {
  const std::string line = Line();
  ASSERT_TRUE(Check(line).ok());
  ExpectRefused(Check(line), "Replayed");
}

TEST_F(MungeAuthTest, ACredentialIsGoodForItsRequestToItsDaemonOnly) {
  const std::string line = Line();
  const std::string cred = line.substr(0, line.find(' '));
  // The same credential in front of another request: a stop instead of a status.
  ExpectRefused(Check(cred + R"( {"v":1,"id":7,"op":"stop","args":{}})" + "\n"), "made for another request");
  // Made for another daemon's endpoint.
  ExpectRefused(Check(Line(kRequest, "10.77.0.12:40123")), "made for another request or another holdfastd");
}

TEST_F(MungeAuthTest, NoOrAGarbledCredentialIsRefused) {
  ExpectRefused(Check(std::string(kRequest) + "\n"), "must start with a MUNGE credential");
  ExpectRefused(Check(""), "must start with a MUNGE credential");
  ExpectRefused(Check("MUNGE:" + std::string(kRequest)), "must start with a MUNGE credential");  // no space
  ExpectRefused(Check("MUNGE:AAAAAAAAAAAAAAAAAAAA: " + std::string(kRequest)), "MUNGE credential");
  ExpectRefused(Check("MUNGE:" + std::string(5000, 'A') + ": " + kRequest), "must start with a MUNGE credential");
  // A credential of another cluster (another munged key).
  PrivateMunged other;
  ASSERT_EQ(other.Start(), "");
  Result<std::string> foreign = AuthenticatedControlLine(other.socket(), kWhere, kRequest);
  ASSERT_TRUE(foreign.ok()) << foreign.status().ToString();
  ExpectRefused(Check(*foreign), "MUNGE credential");
}

// Another user's credential decodes to that user: the daemon's owner-or-root
// rule then decides (daemon/control_handler.h).
TEST_F(MungeAuthTest, AnotherUsersCredentialNamesThatUser) {
  if (geteuid() != 0) GTEST_SKIP() << "making a credential as another user needs root (the CI runs as root)";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    Result<std::string> line = AuthenticatedControlLine(munged_.socket(), kWhere, kRequest);
    if (!line.ok()) _exit(4);
    (void)!::write(fds[1], line->data(), line->size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string line;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) line.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int ws = 0;
  ASSERT_EQ(waitpid(pid, &ws, 0), pid);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << ws;
  Result<AuthenticatedRequest> r = Check(line);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->uid, 65534u);
}

TEST(MungeUnreachableTest, NoMungedSaysWhatToDo) {
  Result<std::string> cred = MungeEncode("/nonexistent/munge.socket", "x");
  ASSERT_FALSE(cred.ok());
  EXPECT_EQ(cred.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(cred.status().message().find("munged is not reachable"), std::string::npos) << cred.status().message();
  EXPECT_NE(cred.status().message().find("/nonexistent/munge.socket"), std::string::npos) << cred.status().message();
  EXPECT_NE(cred.status().message().find("HOLDFAST_MUNGE_SOCKET"), std::string::npos) << cred.status().message();
  Result<AuthenticatedRequest> r =
      AuthenticateControlLine("/nonexistent/munge.socket", kWhere, "MUNGE:abc: " + std::string(kRequest));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << "the daemon's own munged is away: not the peer's fault";
}

TEST(MungeSocketTest, TheEnvironmentThenSlurmsAuthInfoNameTheSocket) {
  testing::TempDir dir("munge-socket");
  testing::WriteFile(dir / "slurm.conf", "ClusterName=x\n# AuthInfo=socket=/commented\nAuthInfo = ttl=60, socket=/srv/munge/s\n");
  ::setenv("SLURM_CONF", (dir / "slurm.conf").c_str(), 1);
  ::unsetenv(kEnvMungeSocket);
  EXPECT_EQ(MungeSocket(), "/srv/munge/s");
  ::setenv(kEnvMungeSocket, "/run/other.socket", 1);
  EXPECT_EQ(MungeSocket(), "/run/other.socket");
  ::unsetenv(kEnvMungeSocket);
  testing::WriteFile(dir / "slurm.conf", "ClusterName=x\n");
  EXPECT_EQ(MungeSocket(), "");
  ::unsetenv("SLURM_CONF");
}

}  // namespace
}  // namespace holdfast
