// Private to the cluster protocol's .cc files (cluster_protocol.cc,
// cluster_rank_view.cc, cluster_wire.cc): the JSON helpers, bounds checks and
// typed field reader that the message codec and the RankView codec share.
// Not part of any public header: it brings in nlohmann/json.
//
// Thread-safety: pure functions; Fields reads one JSON object it does not own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/rank_progress.h"  // RankView
#include "common/utf8.h"

namespace holdfast {
namespace cluster_internal {

using json = nlohmann::json;
// Encoding keeps keys in the order written, so that a line reads
// {"v":3,"type":"progress",...} in a log.
using ojson = nlohmann::ordered_json;

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kPidMax = std::numeric_limits<int32_t>::max();

template <typename J>
std::string Dump(const J& j) {
  return j.dump(-1, ' ', false, J::error_handler_t::replace);
}

// ---- text (cluster_wire.cc) ----

// (ValidUtf8: common/utf8.h.)
// Valid UTF-8 of at most max_bytes: cut at a character boundary.
std::string Text(std::string_view raw, size_t max_bytes);

// ---- encoding checks: a value out of range is the caller's bug (cluster_wire.cc) ----

void CheckRange(int64_t v, int64_t lo, int64_t hi, const char* what);
void CheckCount(size_t n, size_t max, const char* what);

// ---- parsing (cluster_wire.cc) ----

// A JSON value in a message, quoted for an error message (cut when long).
std::string Shown(const json& v);
std::string RangeText(int64_t lo, int64_t hi);
// Reads an integer JSON value in [lo, hi]; false when it is not one.
bool IntIn(const json& v, int64_t lo, int64_t hi, int64_t* out);

// Typed, range-checked access to the keys of one JSON object; errors name
// the place ("progress: ranks[2]") and the key. `j` must outlive the Fields.
//
// The same reader takes a compact encoding too: an array read by position,
// where `items[i]` names item i (a rank view, cluster_rank_view.cc). Keys are
// then looked up in `items` (from the item after the last one read, so reads
// in the encoding's order cost one comparison) and errors say
// `"step" (item 9)`. `j` must be an array of exactly items.size() values.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  Fields(const json& j, std::string where, const std::vector<std::string_view>& items)
      : j_(j), where_(std::move(where)), items_(&items) {}

  template <typename T>
  Status Int(const char* key, int64_t lo, int64_t hi, T* out) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "an integer"));
    int64_t x = 0;
    if (!IntIn(*v, lo, hi, &x)) return Wrong(key, "an integer " + RangeText(lo, hi), *v);
    *out = static_cast<T>(x);
    return Status::Ok();
  }
  template <typename T>
  Status Unsigned(const char* key, T* out) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "an unsigned integer"));
    if (!v->is_number_unsigned() || v->get<uint64_t>() > std::numeric_limits<T>::max()) {
      return Wrong(key, "an integer in [0, " + std::to_string(std::numeric_limits<T>::max()) + "]", *v);
    }
    *out = v->get<T>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out);
  Status Double(const char* key, double lo, double hi, double* out);
  Status Text(const char* key, size_t max_bytes, std::string* out);
  Result<const json*> Array(const char* key, size_t max_entries);
  Status Error(const std::string& what) const;

 private:
  Result<const json*> Find(const char* key, const char* want) const;
  Status Wrong(const char* key, const std::string& want, const json& got) const;
  // "\"key\"", or "\"key\" (item N)" in a compact encoding.
  std::string Named(const char* key) const;

  const json& j_;
  std::string where_;
  const std::vector<std::string_view>* items_ = nullptr;  // positional: the items' names
  mutable size_t next_ = 0;                               // positional: where the next lookup starts
};

// ---- RankView <-> JSON (cluster_rank_view.cc) ----

// The "ranks" array of a progress or rank_exit message; clock readings become
// ages at `now`.
ojson ViewsToJson(const std::vector<RankView>& views, int64_t now);
// Reads f's "ranks" array back; ages become readings of the clock at `now`.
Result<std::vector<RankView>> ParseViews(Fields& f, const std::string& where, int64_t now);

}  // namespace cluster_internal
}  // namespace holdfast
