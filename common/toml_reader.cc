#include "common/toml_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

namespace holdfast {
namespace {

Status MustBe(const std::string& where, const std::string& name, const std::string& what) {
  return InvalidArgumentError(where + ": key '" + name + "' must be " + what);
}

}  // namespace

std::string TomlWhere(const std::string& file, const toml::source_region& region) {
  if (region.begin.line == 0) return file;
  return file + ":" + std::to_string(region.begin.line);
}

Result<toml::table> ParseToml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return InvalidArgumentError(TomlWhere(source, e.source()) + ": TOML syntax error: " + std::string(e.description()));
  }
}

Result<toml::table> ParseTomlFile(const std::string& path, std::string* text) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return NotFoundError("config file " + path + " does not exist (pass --config with a TOML file, see examples/)");
  }
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgumentError("config file " + path + " is a directory; pass a TOML file");
  }
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  if (!in) return IoError("config file " + path + " cannot be read; check its permissions");
  std::string read = content.str();
  HF_ASSIGN_OR_RETURN(toml::table root, ParseToml(read, path));
  if (text != nullptr) *text = std::move(read);
  return root;
}

std::string FormatTomlNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

Result<int64_t> ReadTomlInt(const toml::node& node, const std::string& where, const std::string& name, int64_t lo,
                            int64_t hi) {
  if (!node.is_integer()) return MustBe(where, name, "an integer");
  const int64_t v = node.as_integer()->get();
  if (v < lo || v > hi) {
    return MustBe(where, name,
                  "between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + std::to_string(v));
  }
  return v;
}

Result<double> ReadTomlDouble(const toml::node& node, const std::string& where, const std::string& name, double lo,
                              double hi) {
  double v;
  if (node.is_floating_point()) {
    v = node.as_floating_point()->get();
  } else if (node.is_integer()) {
    v = static_cast<double>(node.as_integer()->get());
  } else {
    return MustBe(where, name, "a number");
  }
  // NaN fails both comparisons; an infinity passes only against an infinite bound.
  if (!(v >= lo && v <= hi)) {
    const std::string range = "between " + FormatTomlNumber(lo) + " and " + FormatTomlNumber(hi);
    return MustBe(where, name, (std::isfinite(v) ? "" : "a finite number ") + range + ", got " + FormatTomlNumber(v));
  }
  return v;
}

Result<std::string> ReadTomlString(const toml::node& node, const std::string& where, const std::string& name,
                                   const char* choices) {
  if (!node.is_string()) return MustBe(where, name, "a string");
  std::string v = node.as_string()->get();
  if (choices != nullptr) {
    const std::string all = std::string("|") + choices + "|";
    if (all.find("|" + v + "|") == std::string::npos) {
      return MustBe(where, name, std::string("one of ") + choices + ", got '" + v + "'");
    }
  }
  return v;
}

Result<bool> ReadTomlBool(const toml::node& node, const std::string& where, const std::string& name) {
  if (!node.is_boolean()) return MustBe(where, name, "true or false");
  return node.as_boolean()->get();
}

TomlTableReader::TomlTableReader(std::string file, std::string section, const toml::table& table)
    : file_(std::move(file)), section_(std::move(section)), table_(table) {}

const toml::node* TomlTableReader::Find(std::string_view key, std::string known_as) {
  read_.emplace_back(key);
  known_.push_back(known_as.empty() ? std::string(key) : std::move(known_as));
  return table_.get(key);
}

Status TomlTableReader::Int(std::string_view key, int* out, int lo, int hi) {
  int64_t v = *out;
  HF_RETURN_IF_ERROR(Int(key, &v, lo, hi));
  *out = static_cast<int>(v);  // within [lo, hi], so it fits
  return Status::Ok();
}

Status TomlTableReader::Int(std::string_view key, int64_t* out, int64_t lo, int64_t hi) {
  const toml::node* n = Find(key);
  if (n == nullptr) return Status::Ok();
  HF_ASSIGN_OR_RETURN(*out, ReadTomlInt(*n, TomlWhere(file_, n->source()), Name(key), lo, hi));
  return Status::Ok();
}

Status TomlTableReader::Double(std::string_view key, double* out, double lo, double hi) {
  const toml::node* n = Find(key);
  if (n == nullptr) return Status::Ok();
  HF_ASSIGN_OR_RETURN(*out, ReadTomlDouble(*n, TomlWhere(file_, n->source()), Name(key), lo, hi));
  return Status::Ok();
}

Status TomlTableReader::String(std::string_view key, std::string* out, const char* choices) {
  const toml::node* n = Find(key);
  if (n == nullptr) return Status::Ok();
  HF_ASSIGN_OR_RETURN(*out, ReadTomlString(*n, TomlWhere(file_, n->source()), Name(key), choices));
  return Status::Ok();
}

Status TomlTableReader::Bool(std::string_view key, bool* out) {
  const toml::node* n = Find(key);
  if (n == nullptr) return Status::Ok();
  HF_ASSIGN_OR_RETURN(*out, ReadTomlBool(*n, TomlWhere(file_, n->source()), Name(key)));
  return Status::Ok();
}

Status TomlTableReader::StringArray(std::string_view key, std::vector<std::string>* out, const char* what) {
  const toml::node* n = Find(key);
  if (n == nullptr) return Status::Ok();
  const toml::array* arr = n->as_array();
  if (arr == nullptr) return MustBe(TomlWhere(file_, n->source()), Name(key), what);
  std::vector<std::string> values;
  for (const toml::node& e : *arr) {
    // Points at the offending element, which may sit on a later line.
    if (!e.is_string()) return MustBe(TomlWhere(file_, e.source()), Name(key), what);
    values.push_back(e.as_string()->get());
  }
  *out = std::move(values);
  return Status::Ok();
}

Status TomlTableReader::StringTable(std::string_view key, std::map<std::string, std::string>* out) {
  const toml::node* n = Find(key);
  if (n == nullptr) return Status::Ok();
  const toml::table* t = n->as_table();
  if (t == nullptr) return MustBe(TomlWhere(file_, n->source()), Name(key), "a table of strings");
  for (auto&& [k, v] : *t) {
    if (!v.is_string()) return MustBe(TomlWhere(file_, v.source()), Name(key), "a table of strings");
    (*out)[std::string(k.str())] = v.as_string()->get();
  }
  return Status::Ok();
}

Status TomlTableReader::Table(std::string_view key, const toml::table** out) {
  const toml::node* n = Find(key, "[" + Name(key) + "]");
  *out = nullptr;
  if (n == nullptr) return Status::Ok();
  if (!n->is_table()) return MustBe(TomlWhere(file_, n->source()), Name(key), "a table ([" + Name(key) + "])");
  *out = n->as_table();
  return Status::Ok();
}

Status TomlTableReader::RejectUnknown() const {
  for (auto&& [k, v] : table_) {
    const std::string key(k.str());
    if (std::find(read_.begin(), read_.end(), key) != read_.end()) continue;
    std::string known;
    for (const std::string& s : known_) known += (known.empty() ? "" : ", ") + s;
    return InvalidArgumentError(TomlWhere(file_, k.source()) + ": unknown key '" + Name(key) + "' (known keys in [" +
                                section_ + "]: " + known + ")");
  }
  return Status::Ok();
}

}  // namespace holdfast
