// Secrets in a job's environment (docs/cli.md, "Secrets"): which variable names look like
// they hold one, and a job file's text with those values taken out, for what is recorded or
// shown (lineage's config text, reports). The running job always gets the real values; only
// copies meant for reading are redacted. Pure functions, safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace holdfast {

// What a redacted value reads as.
inline constexpr char kRedacted[] = "<redacted>";

// True when an environment variable's name looks like it holds a secret: split at '_', '-'
// and '.' (case ignored), a word is TOKEN, SECRET, PASSWORD, PASSWD, PASS, PASSPHRASE, KEY,
// APIKEY, ACCESSKEY, SECRETKEY, PRIVATEKEY, CREDENTIAL(S), AUTH, AUTHORIZATION, COOKIE,
// PRIVATE, SIGNATURE or SAS, or ends in TOKEN, SECRET or PASSWORD (HF_TOKEN, WANDB_API_KEY,
// AWS_SECRET_ACCESS_KEY, NPM_AUTHTOKEN; GITHUB_PAT is not: name it *_TOKEN). NCCL_*, CUDA_*,
// OMP_*, MONKEY_PATCH and the like are not secrets.
bool LooksLikeSecretName(std::string_view name);

// `text`, a job file, with the value of every secret-looking key of an `env` table
// ([job.env], [[roles]] env, inline or not) replaced by "<redacted>", and any other
// occurrence of such a value in the text too. Text that is not TOML is returned with every
// secret-looking `KEY = value` line redacted. Idempotent.
std::string RedactJobText(const std::string& text);

}  // namespace holdfast
