#include "common/secrets.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <regex>
#include <set>
#include <vector>

#include "common/toml_reader.h"

namespace holdfast {
namespace {

bool IsSecretWord(const std::string& w) {
  static const std::set<std::string> kWords = {
      "TOKEN",   "SECRET",      "PASSWORD", "PASSWD",    "PASS",    "PASSPHRASE", "KEY", "APIKEY", "CREDENTIAL",
      "CREDENTIALS", "AUTH", "AUTHORIZATION", "COOKIE", "PRIVATE", "SIGNATURE", "SAS", "ACCESSKEY", "SECRETKEY",
      "PRIVATEKEY"};
  if (kWords.count(w) > 0) return true;
  // Not *KEY: MONKEY, HOCKEY, TURNKEY.
  for (const char* suffix : {"TOKEN", "SECRET", "PASSWORD"}) {
    const std::string s = suffix;
    if (w.size() > s.size() && w.compare(w.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

std::string RegexEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::strchr("\\^$.|?*+()[]{}", c) != nullptr) out += '\\';
    out += c;
  }
  return out;
}

// Every secret-looking key of every `env` table in `t`, with its value.
void CollectSecrets(const toml::table& t, bool in_env, std::vector<std::pair<std::string, std::string>>* out) {
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (in_env && v.is_string() && LooksLikeSecretName(key)) out->emplace_back(key, v.as_string()->get());
    if (const toml::table* sub = v.as_table()) CollectSecrets(*sub, key == "env", out);
    if (const toml::array* arr = v.as_array()) {
      for (const toml::node& n : *arr) {
        if (const toml::table* sub = n.as_table()) CollectSecrets(*sub, false, out);
      }
    }
  }
}

// KEY = "value" (KEY bare or quoted; the value a basic or literal string, one line).
std::string RedactKey(const std::string& text, const std::string& key) {
  const std::regex assignment("((?:^|[\\s{,])[\"']?" + RegexEscape(key) +
                              "[\"']?[ \\t]*=[ \\t]*)(\"(?:[^\"\\\\\\n]|\\\\.)*\"|'[^'\\n]*')");
  return std::regex_replace(text, assignment, std::string("$1\"") + kRedacted + "\"");
}

}  // namespace

bool LooksLikeSecretName(std::string_view name) {
  std::string word;
  auto flush = [&]() {
    const bool secret = !word.empty() && IsSecretWord(word);
    word.clear();
    return secret;
  };
  for (char c : name) {
    if (c == '_' || c == '-' || c == '.') {
      if (flush()) return true;
    } else {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  return flush();
}

std::string RedactJobText(const std::string& text) {
  Result<toml::table> parsed = ParseToml(text, "job");
  if (!parsed.ok()) {
    // Not TOML: every secret-looking `KEY = value` line, wherever it is.
    const std::regex line("([ \\t]*[\"']?([A-Za-z0-9_.-]+)[\"']?[ \\t]*=[ \\t]*)(.*)");
    std::string out;
    size_t begin = 0;
    while (begin <= text.size()) {
      size_t end = text.find('\n', begin);
      const bool last = end == std::string::npos;
      if (last) end = text.size();
      const std::string l = text.substr(begin, end - begin);
      std::smatch m;
      if (std::regex_match(l, m, line) && LooksLikeSecretName(m[2].str())) {
        out += m[1].str() + "\"" + kRedacted + "\"";
      } else {
        out += l;
      }
      if (last) break;
      out += '\n';
      begin = end + 1;
    }
    return out;
  }
  std::vector<std::pair<std::string, std::string>> secrets;
  CollectSecrets(*parsed, false, &secrets);
  std::string out = text;
  for (const auto& [key, value] : secrets) {
    out = RedactKey(out, key);
    // A value written another way (escapes, a multi-line string) or repeated elsewhere.
    if (value.size() >= 4 && value != kRedacted) {
      for (size_t at = out.find(value); at != std::string::npos; at = out.find(value, at + 1)) {
        out.replace(at, value.size(), kRedacted);
      }
    }
  }
  return out;
}

}  // namespace holdfast
