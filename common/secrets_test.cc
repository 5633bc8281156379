#include "common/secrets.h"

#include <gtest/gtest.h>

#include "common/toml_reader.h"

namespace holdfast {
namespace {

TEST(LooksLikeSecretName, CommonSecretNamesAreSecrets) {
  for (const char* name : {"HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "DB_PASSWORD",
                           "MYSQL_PASSWD", "GITHUB_TOKEN", "OPENAI_APIKEY", "GOOGLE_APPLICATION_CREDENTIALS",
                           "HTTP_AUTH", "hf_token", "NPM_AUTHTOKEN", "S3.SECRET", "SSH_PRIVATE_KEY", "HUGGINGFACEHUB_API_TOKEN"}) {
    EXPECT_TRUE(LooksLikeSecretName(name)) << name;
  }
}

TEST(LooksLikeSecretName, OrdinaryVariablesAreNot) {
  for (const char* name : {"NCCL_DEBUG", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MASTER_PORT", "PYTHONHASHSEED",
                           "TOKENIZERS_PARALLELISM", "KEYBOARD", "MONKEY_PATCH", "tokens_per_step", "PATH", "HOME"}) {
    EXPECT_FALSE(LooksLikeSecretName(name)) << name;
  }
}

constexpr char kJob[] = R"([job]
name = "tiny"
command = ["train", "--flag"]
tokens_per_step = 4096

[job.env]
HF_TOKEN = "hf_abcdefSECRET1"
"WANDB_API_KEY" = 'wandb-SECRET2'
NCCL_DEBUG = "INFO"

[[roles]]
name = "reward"
command = ["reward"]
env = { REWARD_AUTH = "SECRET3", OMP_NUM_THREADS = "2" }
)";

TEST(RedactJobText, SecretValuesOfEnvTablesAreRedactedTheRestKept) {
  const std::string out = RedactJobText(kJob);
  for (const char* secret : {"hf_abcdefSECRET1", "wandb-SECRET2", "SECRET3"}) {
    EXPECT_EQ(out.find(secret), std::string::npos) << secret << " in\n" << out;
  }
  // Still a job file with the same keys; ordinary values untouched.
  auto t = ParseToml(out, "redacted");
  ASSERT_TRUE(t.ok()) << t.status().ToString() << "\n" << out;
  EXPECT_EQ((*t)["job"]["env"]["HF_TOKEN"].value_or(std::string()), kRedacted);
  EXPECT_EQ((*t)["job"]["env"]["WANDB_API_KEY"].value_or(std::string()), kRedacted);
  EXPECT_EQ((*t)["job"]["env"]["NCCL_DEBUG"].value_or(std::string()), "INFO");
  EXPECT_EQ((*t)["roles"][0]["env"]["REWARD_AUTH"].value_or(std::string()), kRedacted);
  EXPECT_EQ((*t)["roles"][0]["env"]["OMP_NUM_THREADS"].value_or(std::string()), "2");
  EXPECT_EQ((*t)["job"]["tokens_per_step"].value_or(int64_t{0}), 4096);
  EXPECT_EQ(RedactJobText(out), out);  // idempotent
}

TEST(RedactJobText, AMultiLineValueOrOneRepeatedElsewhereIsStillRemoved) {
  const std::string job = "[job]\nname = \"x\"\ncommand = [\"t\", \"--token\", \"abcdefgh\"]\n"
                          "[job.env]\nHF_TOKEN = \"\"\"abcdefgh\"\"\"\n";
  const std::string out = RedactJobText(job);
  EXPECT_EQ(out.find("abcdefgh"), std::string::npos) << out;
}

TEST(RedactJobText, TextThatIsNotTomlHasSecretLinesRedacted) {
  const std::string out = RedactJobText("[job.env\nHF_TOKEN = \"hf_zzzz\"\nNCCL_DEBUG = \"WARN\"\n");
  EXPECT_EQ(out.find("hf_zzzz"), std::string::npos) << out;
  EXPECT_NE(out.find("NCCL_DEBUG = \"WARN\""), std::string::npos) << out;
}

}  // namespace
}  // namespace holdfast
