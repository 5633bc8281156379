// The run key: its file (owner-only, created once, refused when others may
// read it), and the proofs a peer answers a challenge with.
#include "common/peer_auth.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

TEST(PeerAuthTest, AKeyFileIsCreatedOwnerOnlyAndReadBackTheSame) {
  TempDir dir("peer-auth");
  const std::string path = RunKeyPath(dir.path());
  Result<RunKey> made = EnsureRunKey(path);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadFile(path), made->Hex() + "\n");
  Result<RunKey> again = EnsureRunKey(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Hex(), made->Hex()) << "an existing key is kept";
  Result<RunKey> read = ReadRunKey(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->Hex(), made->Hex());
}

TEST(PeerAuthTest, ProcessesCreatingTheKeyAtOnceAllEndWithTheSameKey) {
  TempDir dir("peer-auth-race");
  const std::string path = RunKeyPath(dir.path());
  std::vector<pid_t> kids;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      Result<RunKey> k = EnsureRunKey(path);
      if (!k.ok()) _exit(1);
      WriteFile(dir / ("seen." + std::to_string(i)), k->Hex());
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int ws = 0;
    ASSERT_EQ(waitpid(pid, &ws, 0), pid);
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  }
  const std::string key = ReadFile(path);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ReadFile(dir / ("seen." + std::to_string(i))) + "\n", key) << i;
}

TEST(PeerAuthTest, AKeyOthersMayReadIsRefusedWithWhatToDo) {
  TempDir dir("peer-auth-mode");
  const std::string path = RunKeyPath(dir.path());
  ASSERT_TRUE(EnsureRunKey(path).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  Result<RunKey> k = ReadRunKey(path);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(k.status().message().find("mode 0644"), std::string::npos) << k.status().message();
  EXPECT_NE(k.status().message().find("chmod 600 " + path), std::string::npos) << k.status().message();
  EXPECT_FALSE(EnsureRunKey(path).ok()) << "a key that proves nothing is not used, nor silently replaced";
}

TEST(PeerAuthTest, AMissingOrGarbledKeyFileSaysSo) {
  TempDir dir("peer-auth-bad");
  Result<RunKey> missing = ReadRunKey(dir / "none");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  WriteFile(dir / "bad", "not a key\n");
  ASSERT_EQ(::chmod((dir / "bad").c_str(), 0600), 0);
  Result<RunKey> bad = ReadRunKey(dir / "bad");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(dir / "bad"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(RunKey::FromHex(std::string(64, 'g')).ok());
  EXPECT_FALSE(RunKey::FromHex("abcd").ok());
}

TEST(PeerAuthTest, AProofVerifiesOnlyForItsKeyLabelAndNonces) {
  Result<RunKey> key = RunKey::Generate();
  Result<RunKey> other = RunKey::Generate();
  ASSERT_TRUE(key.ok() && other.ok());
  EXPECT_NE(key->Hex(), other->Hex());
  const std::string a = *RandomBytes(kAuthNonceBytes), b = *RandomBytes(kAuthNonceBytes);
  const std::string proof = key->Proof("client", a, b);
  EXPECT_EQ(proof.size(), kAuthProofBytes);
  EXPECT_TRUE(key->Verify("client", a, b, proof));
  EXPECT_FALSE(other->Verify("client", a, b, proof)) << "another key";
  EXPECT_FALSE(key->Verify("server", a, b, proof)) << "the other side's label";
  EXPECT_FALSE(key->Verify("client", b, a, proof)) << "nonces swapped";
  EXPECT_FALSE(key->Verify("client", a, b, proof.substr(1))) << "truncated";
  EXPECT_FALSE(key->Verify("client", a, b, "")) << "no proof at all";
}

TEST(PeerAuthTest, HexAndSha256) {
  EXPECT_EQ(HexEncode(std::string("\x00\xff\x10", 3)), "00ff10");
  EXPECT_EQ(*HexDecode("00FF10"), std::string("\x00\xff\x10", 3));
  EXPECT_FALSE(HexDecode("abc").ok());
  EXPECT_FALSE(HexDecode("zz").ok());
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace holdfast
