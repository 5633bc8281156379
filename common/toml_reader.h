// TomlTableReader: typed, range-checked reads of one TOML table's keys, for the
// config loaders (job, health, trainer), so that they all speak one error
// language: "run.toml:12: key 'optim.lr' must be between 0 and 10, got -1" and
// "run.toml:3: unknown key 'model.n_layr' (known keys in [model]: n_layer, ...)".
// Each read of an absent key leaves the output untouched (the default stands);
// after the reads, RejectUnknown() reports any key nobody asked for, listing the
// keys that were asked for, in the order they were read. The ReadToml* functions
// check one value that did not come from a table (e.g. a `--set k=v` flag).
//
// This header exposes toml++ types: include it only from the .cc files of config
// loaders, never from a widely-included header.
//
// Thread-safety: a TomlTableReader is used by one thread; it refers to (does not
// own) the table it reads, which must outlive it. The free functions are pure.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "common/status.h"

namespace holdfast {

// "file:line" for a source region; just "file" when toml++ has no line for it.
std::string TomlWhere(const std::string& file, const toml::source_region& region);

// Parses TOML text; a syntax error reads "source:line: TOML syntax error: ...".
Result<toml::table> ParseToml(const std::string& text, const std::string& source);
// Reads and parses a config file. A missing file, a folder or an unreadable
// file gets a message that says what to pass instead. `text` (may be null)
// receives the file's content.
Result<toml::table> ParseTomlFile(const std::string& path, std::string* text = nullptr);

// Numbers for messages: the shortest text that reads back as the same double
// ("0.999", "1e+12", "inf").
std::string FormatTomlNumber(double value);

// Single-value checks. `where` prefixes the message ("run.toml:4", "flag --set
// 'optim.lr=x'"), `name` is the dotted key ("optim.lr").
// An integer in [lo, hi].
Result<int64_t> ReadTomlInt(const toml::node& node, const std::string& where, const std::string& name, int64_t lo,
                            int64_t hi);
// A number (integer or float) in [lo, hi]; NaN is always refused, and an infinity
// only when the bound on its side is that infinity.
Result<double> ReadTomlDouble(const toml::node& node, const std::string& where, const std::string& name, double lo,
                              double hi);
// A string; when `choices` ("a|b|c") is not null, one of them.
Result<std::string> ReadTomlString(const toml::node& node, const std::string& where, const std::string& name,
                                   const char* choices = nullptr);
Result<bool> ReadTomlBool(const toml::node& node, const std::string& where, const std::string& name);

class TomlTableReader {
 public:
  // What an array-of-strings key "must be" unless the caller words it otherwise.
  static constexpr const char* kArrayOfStrings = "an array of strings, e.g. [\"a\", \"b\"]";

  // `file` names the config in messages; `section` is the table's dotted name
  // ("supervise", "health"). `table` is not owned and must outlive the reader.
  TomlTableReader(std::string file, std::string section, const toml::table& table);

  Status Int(std::string_view key, int* out, int lo, int hi);
  Status Int(std::string_view key, int64_t* out, int64_t lo, int64_t hi);
  Status Double(std::string_view key, double* out, double lo, double hi);
  Status String(std::string_view key, std::string* out, const char* choices = nullptr);
  Status Bool(std::string_view key, bool* out);
  // A string that must be one of `names`, read into its enum value; absent
  // leaves *out as it is. The error lists the choices ("wal|delete|truncate").
  template <typename E>
  Status Enum(std::string_view key, std::initializer_list<std::pair<const char*, E>> names, E* out) {
    std::string choices;
    for (const auto& [name, value] : names) choices += (choices.empty() ? "" : "|") + std::string(name);
    std::string text;
    HF_RETURN_IF_ERROR(String(key, &text, choices.c_str()));
    for (const auto& [name, value] : names) {
      if (text == name) *out = value;
    }
    return Status::Ok();
  }
  // Replaces *out with the array's strings.
  Status StringArray(std::string_view key, std::vector<std::string>* out, const char* what = kArrayOfStrings);
  // Adds the table's string values to *out.
  Status StringTable(std::string_view key, std::map<std::string, std::string>* out);
  // A sub-table the caller reads itself; *out is null when the key is absent.
  // Listed as "[section.key]" among the known keys. `out` is not owned.
  Status Table(std::string_view key, const toml::table** out);

  // After all reads: the first key that was never read is an error.
  Status RejectUnknown() const;

  // The keys asked for so far, in order (for references that list every key:
  // docs/job-file.md's test).
  const std::vector<std::string>& keys_read() const { return read_; }

 private:
  const toml::node* Find(std::string_view key, std::string known_as = "");
  std::string Name(std::string_view key) const { return section_ + "." + std::string(key); }

  std::string file_;
  std::string section_;
  const toml::table& table_;
  std::vector<std::string> read_;   // keys asked for, in order
  std::vector<std::string> known_;  // the same, as listed in the unknown-key message
};

}  // namespace holdfast
