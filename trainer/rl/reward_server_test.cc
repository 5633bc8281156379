// The reward service in one process: RewardHandler's answers, RewardServer
// over real sockets, RewardClient's retries against a server that is
// replaced, silent or absent. (The real holdfast-reward process, SIGKILLed:
// reward_process_test.cc.)
#include "trainer/rl/reward_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "common/progress_record.h"
#include "trainer/rl/reward_client.h"
#include "trainer/rl/task.h"

namespace holdfast::rl {
namespace {

using json = nlohmann::json;

TaskSpec Spec(const std::string& text) {
  auto s = ParseTaskSpec(text);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

std::unique_ptr<Task> MakeTask(const std::string& text) {
  auto t = Task::Create(Spec(text));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::unique_ptr<RewardHandler> MakeHandler(const std::vector<std::string>& tasks) {
  std::vector<TaskSpec> specs;
  for (const auto& t : tasks) specs.push_back(Spec(t));
  auto h = RewardHandler::Create(specs);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return std::move(*h);
}

class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "rl_reward_test_XXXXXX").string();
    path_ = mkdtemp(templ.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::unique_ptr<RewardServer> StartServer(const std::vector<std::string>& tasks, size_t max_line = size_t{64} << 20,
                                          ProgressSink& progress = NoProgress()) {
  RewardServerOptions o;
  o.host = "127.0.0.1";
  for (const auto& t : tasks) o.tasks.push_back(Spec(t));
  o.max_line_bytes = max_line;
  auto s = RewardServer::Start(o, progress);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

void Advertise(const RewardServer& server, const std::string& addr_file) {
  ASSERT_TRUE(WriteFileAtomically(addr_file, server.address().ToString() + "\n").ok());
}

// A plain line-oriented TCP connection, to speak the protocol by hand.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  ~RawConnection() { ::close(fd_); }
  void Send(const std::string& text) {
    size_t off = 0;
    while (off < text.size()) {
      const ssize_t n = ::send(fd_, text.data() + off, text.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // The next line without its '\n'; "<closed>" at end of stream.
  std::string ReadLine() {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      char tmp[4096];
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return "<closed>";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

std::string Request(int64_t id, const std::string& task, const json& items) {
  return json{{"id", id}, {"task", task}, {"items", items}}.dump();
}

json Item(uint64_t index, const std::string& split, const std::string& completion) {
  return json{{"prompt_index", index}, {"split", split}, {"completion", completion}};
}

void ExpectError(const RewardHandler& h, const std::string& line, const std::string& needle) {
  const RewardHandler::Answer a = h.Handle(line);
  EXPECT_FALSE(a.ok) << line;
  const json j = json::parse(a.line);
  ASSERT_TRUE(j.contains("error")) << a.line;
  EXPECT_NE(j["error"].get<std::string>().find(needle), std::string::npos) << j["error"];
  EXPECT_FALSE(j.contains("rewards"));
}

TEST(RewardHandlerTest, ScoresEachItemWithTheTasksReward) {
  auto h = MakeHandler({"add2", "add3:max=9"});
  auto add2 = MakeTask("add2");
  auto add3 = MakeTask("add3:max=9");
  json items = json::array();
  std::vector<double> want;
  for (uint64_t i = 0; i < 50; ++i) {
    const Split split = i % 3 == 0 ? Split::kEval : Split::kTrain;
    const TaskPrompt p = add2->Prompt(i, split);
    // Right answers, right answers with trailing text, and wrong ones.
    std::string completion = i % 4 == 0   ? p.answer + "\n"
                             : i % 4 == 1 ? p.answer + "\nmore"
                             : i % 4 == 2 ? p.answer
                                          : "9" + p.answer + "\n";
    items.push_back(Item(i, SplitName(split), completion));
    want.push_back(add2->Reward(p, completion));
  }
  const RewardHandler::Answer a = h->Handle(Request(7, "add2", items));
  ASSERT_TRUE(a.ok) << a.line;
  const json j = json::parse(a.line);
  EXPECT_EQ(j["id"], 7);
  EXPECT_EQ(j["rewards"].get<std::vector<double>>(), want);
  EXPECT_EQ(a.items, 50u);
  EXPECT_EQ(std::count(want.begin(), want.end(), 1.0), 26);  // i % 4 == 0 or 1

  // The same task spelled differently; a second task; an empty batch.
  const TaskPrompt q = add3->Prompt(123, Split::kTrain);
  const json j3 =
      json::parse(h->Handle(Request(-5, "add3:max=9,min=0", json::array({Item(123, "train", q.answer + "\n")}))).line);
  EXPECT_EQ(j3["id"], -5);
  EXPECT_EQ(j3["rewards"], json::array({1.0}));
  const json je = json::parse(h->Handle(Request(8, "add2:max=99", json::array())).line);
  EXPECT_EQ(je["rewards"], json::array());
}

TEST(RewardHandlerTest, BadRequestsGetAnErrorNamingTheProblem) {
  auto h = MakeHandler({"add2"});
  ExpectError(*h, "", "empty line");
  ExpectError(*h, "{\"id\": 1, ", "not JSON");
  ExpectError(*h, "[1, 2]", "must be a JSON object");
  ExpectError(*h, R"({"task": "add2", "items": []})", "missing \"id\"");
  ExpectError(*h, R"({"id": "x", "task": "add2", "items": []})", "\"id\" must be an integer");
  ExpectError(*h, R"({"id": 1, "items": []})", "\"task\" must be a string");
  ExpectError(*h, R"({"id": 1, "task": "mul2", "items": []})", "unknown task name 'mul2'");
  ExpectError(*h, R"({"id": 1, "task": "add3", "items": []})",
              "task 'add3' is not served here; this service scores: add2. Start holdfast-reward with --task add3");
  ExpectError(*h, R"({"id": 1, "task": "add2"})", "\"items\" must be an array");
  ExpectError(*h, R"({"id": 1, "task": "add2", "items": [3]})", "items[0] must be an object");
  ExpectError(*h, R"({"id": 1, "task": "add2", "items": [{"split": "train", "completion": ""}]})",
              "items[0]: \"prompt_index\" must be an integer >= 0");
  ExpectError(*h, R"({"id": 1, "task": "add2", "items": [{"prompt_index": -1, "split": "train", "completion": ""}]})",
              "items[0]: \"prompt_index\" must be an integer >= 0");
  ExpectError(*h,
              R"({"id": 1, "task": "add2", "items": [{"prompt_index": 0, "split": "train", "completion": "1\n"},
                  {"prompt_index": 1, "split": "test", "completion": ""}]})",
              "items[1]: split 'test' is not one of: train, eval");
  ExpectError(*h, R"({"id": 1, "task": "add2", "items": [{"prompt_index": 0, "split": "train", "completion": 5}]})",
              "items[0]: \"completion\" must be a string");
  ExpectError(*h, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "nests deeper");
  // The id of a readable request comes back with its error.
  EXPECT_EQ(json::parse(h->Handle(R"({"id": 42, "task": "add2"})").line)["id"], 42);
}

TEST(RewardHandlerTest, RejectsNoTasksAndDuplicates) {
  EXPECT_FALSE(RewardHandler::Create({}).ok());
  auto dup = RewardHandler::Create({Spec("add2"), Spec("add2:max=99")});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("given twice"), std::string::npos);
}

TEST(ParseListenAddressTest, HostPortForms) {
  auto a = ParseListenAddress("10.0.0.5:0", "127.0.0.1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 0);
  auto b = ParseListenAddress(":7000", "10.1.2.3");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "10.1.2.3");
  EXPECT_EQ(b->port, 7000);
  auto c = ParseListenAddress("[::1]:5", "x");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_FALSE(ParseListenAddress("host", "x").ok());
  EXPECT_FALSE(ParseListenAddress("host:70000", "x").ok());
  EXPECT_FALSE(ParseListenAddress("::1:5", "x").ok());
}

TEST(RewardServerTest, BadLineKeepsTheConnectionAndAnswersInOrder) {
  auto server = StartServer({"add2"});
  auto task = MakeTask("add2");
  RawConnection c(server->address().port);
  c.Send("this is not json\n");
  const json bad = json::parse(c.ReadLine());
  EXPECT_TRUE(bad["id"].is_null());
  EXPECT_NE(bad["error"].get<std::string>().find("not JSON"), std::string::npos);
  // Two requests in one write: two answers, in order.
  const TaskPrompt p0 = task->Prompt(0, Split::kTrain);
  const TaskPrompt p1 = task->Prompt(1, Split::kEval);
  c.Send(Request(1, "add2", json::array({Item(0, "train", p0.response())})) + "\n" +
         Request(2, "add2", json::array({Item(1, "eval", p1.response()), Item(1, "eval", "x\n")})) + "\n");
  const json r1 = json::parse(c.ReadLine());
  const json r2 = json::parse(c.ReadLine());
  EXPECT_EQ(r1["id"], 1);
  EXPECT_EQ(r1["rewards"], json::array({1.0}));
  EXPECT_EQ(r2["id"], 2);
  EXPECT_EQ(r2["rewards"], json::array({1.0, 0.0}));
  const RewardServerStats st = server->stats();
  EXPECT_EQ(st.requests, 2u);
  EXPECT_EQ(st.errors, 1u);
  EXPECT_EQ(st.items, 3u);
}

TEST(RewardServerTest, OverlongLineGetsAnErrorThenTheConnectionCloses) {
  auto server = StartServer({"add2"}, /*max_line=*/256);
  RawConnection c(server->address().port);
  c.Send(std::string(1000, 'x') + "\n");
  const json bad = json::parse(c.ReadLine());
  EXPECT_NE(bad["error"].get<std::string>().find("longer than 256 bytes"), std::string::npos) << bad;
  EXPECT_EQ(c.ReadLine(), "<closed>");
  // The server itself serves on.
  RawConnection d(server->address().port);
  d.Send(Request(3, "add2", json::array()) + "\n");
  EXPECT_EQ(json::parse(d.ReadLine())["rewards"], json::array());
}

TEST(RewardServerTest, ManyConcurrentClients) {
  auto server = StartServer({"add2"});
  TempDir dir;
  Advertise(*server, dir / "reward.addr");
  auto task = MakeTask("add2");
  constexpr int kThreads = 16, kRequests = 40, kItems = 25;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RewardClient client(dir / "reward.addr");
      for (int r = 0; r < kRequests; ++r) {
        std::vector<RewardItem> items;
        std::vector<double> want;
        for (int k = 0; k < kItems; ++k) {
          const uint64_t index = static_cast<uint64_t>(t * 100000 + r * 100 + k);
          const TaskPrompt p = task->Prompt(index, Split::kTrain);
          const bool right = (index * 7 + 3) % 5 < 2;
          items.push_back({index, Split::kTrain, right ? p.response() : p.answer + "0\n"});
          want.push_back(right ? 1.0 : 0.0);
        }
        auto got = client.Score("add2", items);
        if (!got.ok() || *got != want) wrong.fetch_add(1);
      }
      if (client.connects() != 1) wrong.fetch_add(1000);  // one connection reused throughout
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(server->stats().requests, static_cast<uint64_t>(kThreads * kRequests));
  EXPECT_EQ(server->stats().items, static_cast<uint64_t>(kThreads * kRequests * kItems));
  EXPECT_EQ(server->stats().connections_accepted, static_cast<uint64_t>(kThreads));
}

TEST(RewardServerTest, WritesProgressStepPerRequest) {
  TempDir dir;
  const std::string record = dir / "progress";
  ASSERT_TRUE(CreateProgressFile(record, 0).ok());
  auto sink = OpenProgressSink(record, 0);
  ASSERT_TRUE(sink.ok());
  auto server = StartServer({"add2"}, size_t{64} << 20, **sink);
  Advertise(*server, dir / "reward.addr");
  RewardClient client(dir / "reward.addr");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client.Score("add2", {{0, Split::kTrain, "1\n"}}).ok());
  server->Stop();
  auto reader = ProgressReader::Open(record);
  ASSERT_TRUE(reader.ok());
  const ProgressSnapshot snap = (*reader)->Read();
  ASSERT_TRUE(snap.valid);
  EXPECT_EQ(snap.record.step, 5);
  EXPECT_EQ(snap.record.pid, getpid());
  EXPECT_GT(snap.record.heartbeat_ns, 0);
}

// A scorer whose reward is a text's length / 100, that records each call and
// can hold a call until released (to let requests pile up behind a batch) or
// fail the next call.
class GateScorer final : public TextScorer {
 public:
  explicit GateScorer(size_t max_batch) : max_batch_(max_batch) {}
  Result<std::vector<double>> Score(const std::vector<std::string>& texts) override {
    std::unique_lock<std::mutex> lock(mu_);
    calls_.push_back(texts);
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    if (fail_next_) {
      fail_next_ = false;
      return InternalError("the model fell over");
    }
    std::vector<double> out;
    for (const std::string& t : texts) out.push_back(static_cast<double>(t.size()) / 100.0);
    return out;
  }
  size_t max_batch() const override { return max_batch_; }
  std::string Describe() const override { return "gate"; }

  void Hold() { Set([&] { open_ = false; }); }
  void Release() { Set([&] { open_ = true; }); }
  void FailNext() { Set([&] { fail_next_ = true; }); }
  // Up to 60 s (a backstop, not a timing assertion): whether n calls came.
  bool WaitForCalls(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return calls_.size() >= n; });
  }
  std::vector<std::vector<std::string>> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  template <typename F>
  void Set(F f) {
    std::lock_guard<std::mutex> lock(mu_);
    f();
    cv_.notify_all();
  }
  const size_t max_batch_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  bool fail_next_ = false;
  std::vector<std::vector<std::string>> calls_;
};

std::unique_ptr<RewardServer> StartScoredServer(std::shared_ptr<TextScorer> scorer,
                                                ProgressSink& progress = NoProgress()) {
  RewardServerOptions o;
  o.host = "127.0.0.1";
  o.tasks.push_back(Spec("add2"));
  o.scorer = std::move(scorer);
  auto s = RewardServer::Start(o, progress);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

// What the scorer sees for an item: the prompt, then the completion up to and with its first newline.
std::string TextOf(const Task& task, uint64_t index, const std::string& completion) {
  const size_t nl = completion.find('\n');
  return task.Prompt(index, Split::kTrain).prompt + (nl == std::string::npos ? completion : completion.substr(0, nl + 1));
}

json Lengths(const Task& task, const std::vector<std::pair<uint64_t, std::string>>& items) {
  json out = json::array();
  for (const auto& [i, c] : items) out.push_back(static_cast<double>(TextOf(task, i, c).size()) / 100.0);
  return out;
}

TEST(RewardServerScorerTest, RequestsWaitingBehindABatchGoTogetherIntoTheNextAndAnswersKeepTheirOrder) {
  TempDir dir;
  const std::string record = dir / "progress";
  ASSERT_TRUE(CreateProgressFile(record, 0).ok());
  auto sink = OpenProgressSink(record, 0);
  ASSERT_TRUE(sink.ok());
  auto scorer = std::make_shared<GateScorer>(8);
  auto server = StartScoredServer(scorer, **sink);
  auto task = MakeTask("add2");
  const uint16_t port = server->address().port;
  RawConnection a(port), b(port), c(port);
  scorer->Hold();
  const std::vector<std::pair<uint64_t, std::string>> a1 = {{0, "79\n"}, {1, "93\nxyz"}};
  a.Send(Request(1, "add2", json::array({Item(0, "train", "79\n"), Item(1, "train", "93\nxyz")})) + "\n");
  if (!scorer->WaitForCalls(1)) {  // the first call is out, held
    scorer->Release();
    FAIL() << "the first request never reached the scorer";
  }
  auto reader = ProgressReader::Open(record);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->Read().record.phase, static_cast<uint8_t>(Phase::kForward));
  // Behind it: 3 + 4 + 1 texts from three connections, and a bad request on a.
  b.Send(Request(2, "add2", json::array({Item(2, "train", "1"), Item(3, "train", "22\n"), Item(4, "train", "")})) +
         "\n");
  c.Send(Request(3, "add2", json::array({Item(5, "train", "5\n"), Item(6, "train", "66\n"), Item(7, "train", "7\n"),
                                         Item(8, "train", "8")})) + "\n");
  a.Send(Request(4, "add2", json::array({Item(9, "train", "99\n")})) + "\n");
  a.Send(Request(5, "add2", json::array({Item(9, "tRain", "99\n")})) + "\n");
  // Backstop 60 s: the three requests queued behind the held call and the bad one answered.
  for (int i = 0; i < 12000 && (server->stats().waiting < 3 || server->stats().errors < 1); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server->stats().waiting, 3u);  // not ASSERT: the held call must be released either way
  EXPECT_EQ(server->stats().errors, 1u);
  scorer->Release();
  // a's answers in the order asked, the bad one (answered at once) after the two before it.
  const json r1 = json::parse(a.ReadLine()), r4 = json::parse(a.ReadLine()), r5 = json::parse(a.ReadLine());
  EXPECT_EQ(r1["id"], 1);
  EXPECT_EQ(r1["rewards"], Lengths(*task, a1));
  EXPECT_EQ(r4["id"], 4);
  EXPECT_EQ(r4["rewards"], Lengths(*task, {{9, "99\n"}}));
  EXPECT_EQ(r5["id"], 5);
  EXPECT_TRUE(r5.contains("error")) << r5;
  EXPECT_EQ(json::parse(b.ReadLine())["rewards"], Lengths(*task, {{2, "1"}, {3, "22\n"}, {4, ""}}));
  EXPECT_EQ(json::parse(c.ReadLine())["rewards"], Lengths(*task, {{5, "5\n"}, {6, "66\n"}, {7, "7\n"}, {8, "8"}}));
  // Two scorer calls: the held one, then all 8 texts that waited behind it.
  const auto calls = scorer->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], (std::vector<std::string>{TextOf(*task, 0, "79\n"), TextOf(*task, 1, "93\nxyz")}));
  EXPECT_EQ(calls[1].size(), 8u);
  const RewardServerStats st = server->stats();
  EXPECT_EQ(st.batches, 2u);
  EXPECT_EQ(st.requests, 4u);
  EXPECT_EQ(st.errors, 1u);
  EXPECT_EQ(st.items, 10u);
  EXPECT_EQ(st.waiting, 0u);
  server->Stop();
  const ProgressSnapshot snap = (*reader)->Read();
  EXPECT_EQ(snap.record.step, 5);  // requests answered, the bad one included
  EXPECT_EQ(snap.record.phase, static_cast<uint8_t>(Phase::kData));
}

TEST(RewardServerScorerTest, ARequestLargerThanABatchIsABatchOfItsOwn) {
  auto scorer = std::make_shared<GateScorer>(4);
  auto server = StartScoredServer(scorer);
  RawConnection a(server->address().port);
  json items = json::array();
  for (uint64_t i = 0; i < 10; ++i) items.push_back(Item(i, "train", "1\n"));
  a.Send(Request(1, "add2", items) + "\n");
  EXPECT_EQ(json::parse(a.ReadLine())["rewards"].size(), 10u);
  ASSERT_EQ(scorer->calls().size(), 1u);
  EXPECT_EQ(scorer->calls()[0].size(), 10u);
}

TEST(RewardServerScorerTest, AFailedBatchClosesItsConnectionsAndTheClientsRetry) {
  auto scorer = std::make_shared<GateScorer>(64);
  auto server = StartScoredServer(scorer);
  TempDir dir;
  Advertise(*server, dir / "reward.addr");
  auto task = MakeTask("add2");
  RawConnection raw(server->address().port);
  scorer->FailNext();
  raw.Send(Request(1, "add2", json::array({Item(0, "train", "79\n")})) + "\n");
  EXPECT_EQ(raw.ReadLine(), "<closed>");  // no answer: not the request's fault
  scorer->FailNext();
  RewardClient client(dir / "reward.addr");
  auto got = client.Score("add2", {{0, Split::kTrain, "79\n"}});  // fails once, then is sent again
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::vector<double>{static_cast<double>(TextOf(*task, 0, "79\n").size()) / 100.0});
  EXPECT_EQ(client.connects(), 2u);
  EXPECT_EQ(server->stats().requests, 1u);
  EXPECT_EQ(server->stats().batches, 3u);
}

TEST(RewardClientTest, FollowsTheAddressFileToAReplacementServer) {
  TempDir dir;
  const std::string addr = dir / "reward.addr";
  auto task = MakeTask("add2");
  const TaskPrompt p = task->Prompt(9, Split::kTrain);
  std::vector<RewardItem> items = {{9, Split::kTrain, p.response()}, {9, Split::kTrain, "no\n"}};
  auto first = StartServer({"add2"});
  Advertise(*first, addr);
  RewardClient client(addr);
  auto a = client.Score("add2", items);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, (std::vector<double>{1.0, 0.0}));

  // The service goes away; a new one comes up on another port.
  const uint16_t old_port = first->address().port;
  first->Stop();
  first.reset();
  auto second = StartServer({"add2"});
  ASSERT_NE(second->address().port, old_port);
  Advertise(*second, addr);
  auto b = client.Score("add2", items);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, (std::vector<double>{1.0, 0.0}));
  EXPECT_EQ(client.connects(), 2u);
  EXPECT_EQ(second->stats().requests, 1u);
}

// A service that accepts connections (the kernel does, from its backlog) but
// never answers, like a hung or SIGSTOPped one: each attempt times out, the
// client looks at the address file again and gets its answer from the
// replacement written there.
TEST(RewardClientTest, SilentServiceTimesOutAndTheReplacementAnswers) {
  TempDir dir;
  const std::string addr = dir / "reward.addr";
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(silent, 16), 0);
  socklen_t len = sizeof(a);
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len);
  ASSERT_TRUE(WriteFileAtomically(addr, "127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "\n").ok());

  std::unique_ptr<RewardServer> replacement;
  std::vector<RewardClientEvent> events;
  RewardClientOptions o;
  o.attempt_timeout_s = 0.2;
  o.observer = [&](const RewardClientEvent& e) {
    events.push_back(e);
    // After the first silent attempt, the replacement takes over the address file.
    if (e.kind == RewardClientEvent::kFailed && !replacement) {
      replacement = StartServer({"add2"});
      Advertise(*replacement, addr);
    }
  };
  RewardClient client(addr, o);
  auto task = MakeTask("add2");
  const TaskPrompt p = task->Prompt(4, Split::kEval);
  auto got = client.Score("add2", {{4, Split::kEval, p.response()}});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::vector<double>{1.0});
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0].kind, RewardClientEvent::kSent);
  EXPECT_EQ(events[1].kind, RewardClientEvent::kFailed);
  EXPECT_NE(events[1].error.find("no answer from"), std::string::npos) << events[1].error;
  EXPECT_EQ(events.back().kind, RewardClientEvent::kSent);
  EXPECT_EQ(events.back().address, replacement->address().ToString());
  ::close(silent);
}

TEST(RewardClientTest, GivesUpAtTheDeadlineNamingTheAddressFile) {
  TempDir dir;
  RewardClientOptions o;
  o.deadline_s = 0.3;
  RewardClient client(dir / "never.addr", o);
  auto got = client.Score("add2", {{0, Split::kTrain, "1\n"}});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find(dir / "never.addr"), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("does not exist"), std::string::npos) << got.status().message();

  // A garbled address file is named with what it holds.
  ASSERT_TRUE(WriteFileAtomically(dir / "bad.addr", "not an address\n").ok());
  RewardClient bad(dir / "bad.addr", o);
  auto got2 = bad.Score("add2", {{0, Split::kTrain, "1\n"}});
  ASSERT_FALSE(got2.ok());
  EXPECT_NE(got2.status().message().find("holds 'not an address'"), std::string::npos) << got2.status().message();
}

TEST(RewardClientTest, ServiceErrorsReturnAtOnceWithoutRetrying) {
  auto server = StartServer({"add2"});
  TempDir dir;
  Advertise(*server, dir / "reward.addr");
  int failures = 0;
  RewardClientOptions o;
  o.observer = [&](const RewardClientEvent& e) { failures += e.kind == RewardClientEvent::kFailed; };
  RewardClient client(dir / "reward.addr", o);
  auto got = client.Score("add3", {{0, Split::kTrain, "1\n"}});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("task 'add3' is not served here"), std::string::npos) << got.status().message();
  EXPECT_EQ(failures, 0);
  // The connection is still good for the next call.
  EXPECT_TRUE(client.Score("add2", {{0, Split::kTrain, "1\n"}}).ok());
  EXPECT_EQ(client.connects(), 1u);
  EXPECT_TRUE(client.Score("add2", {}).ok());
}

}  // namespace
}  // namespace holdfast::rl
