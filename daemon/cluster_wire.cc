// Cluster protocol wire primitives: text bounds, encoder range checks, the typed JSON field reader.
#include <string>
#include <string_view>

#include "common/utf8.h"
#include "daemon/cluster_protocol_internal.h"

namespace holdfast {
namespace cluster_internal {
// Valid UTF-8 of at most max_bytes: cut at a character boundary.
std::string Text(std::string_view raw, size_t max_bytes) {
  std::string s = ValidUtf8(raw);
  if (s.size() <= max_bytes) return s;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s;
}

// ---- encoding checks ----

void CheckRange(int64_t v, int64_t lo, int64_t hi, const char* what) {
  HF_CHECK_MSG(v >= lo && v <= hi, std::string("EncodeClusterMessage: ") + what + " = " + std::to_string(v) +
                                       " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

void CheckCount(size_t n, size_t max, const char* what) {
  HF_CHECK_MSG(n <= max, std::string("EncodeClusterMessage: ") + std::to_string(n) + " " + what +
                             "; at most " + std::to_string(max) + " fit one message");
}

// ---- parsing ----

// A JSON value in a message, quoted for an error message (cut when long).
std::string Shown(const json& v) {
  std::string text = Dump(v);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

std::string RangeText(int64_t lo, int64_t hi) {
  if (hi == kInt64Max) return ">= " + std::to_string(lo);
  return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// Reads an integer JSON value in [lo, hi]; false when it is not one.
bool IntIn(const json& v, int64_t lo, int64_t hi, int64_t* out) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(kInt64Max)) return false;
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    return false;
  }
  if (x < lo || x > hi) return false;
  *out = x;
  return true;
}

// ---- Fields ----

Status Fields::Bool(const char* key, bool* out) {
  HF_ASSIGN_OR_RETURN(const json* v, Find(key, "true or false"));
  if (!v->is_boolean()) return Wrong(key, "true or false", *v);
  *out = v->get<bool>();
  return Status::Ok();
}

Status Fields::Double(const char* key, double lo, double hi, double* out) {
  HF_ASSIGN_OR_RETURN(const json* v, Find(key, "a number"));
  const std::string want = "a number in [" + Dump(json(lo)) + ", " + Dump(json(hi)) + "]";
  if (!v->is_number()) return Wrong(key, want, *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) return Wrong(key, want, *v);
  *out = x;
  return Status::Ok();
}

Status Fields::Text(const char* key, size_t max_bytes, std::string* out) {
  HF_ASSIGN_OR_RETURN(const json* v, Find(key, "a string"));
  if (!v->is_string()) return Wrong(key, "a string", *v);
  const std::string& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    return InvalidArgumentError(where_ + ": " + Named(key) + " is " + std::to_string(s.size()) +
                                " bytes; the limit is " + std::to_string(max_bytes));
  }
  *out = s;
  return Status::Ok();
}

Result<const json*> Fields::Array(const char* key, size_t max_entries) {
  HF_ASSIGN_OR_RETURN(const json* v, Find(key, "an array"));
  if (!v->is_array()) return Wrong(key, "an array", *v);
  if (v->size() > max_entries) {
    return InvalidArgumentError(where_ + ": " + Named(key) + " has " + std::to_string(v->size()) +
                                " entries; the limit is " + std::to_string(max_entries));
  }
  return v;
}

Status Fields::Error(const std::string& what) const { return InvalidArgumentError(where_ + ": " + what); }

Result<const json*> Fields::Find(const char* key, const char* want) const {
  if (items_ != nullptr) {
    const size_t n = items_->size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (next_ + k) % n;
      if ((*items_)[i] == key) {
        next_ = i + 1;
        return &j_[i];
      }
    }
    HF_CHECK_MSG(false, std::string("Fields: no item \"") + key + "\" in this encoding");  // the reader's bug
  }
  auto it = j_.find(key);
  if (it == j_.end()) return InvalidArgumentError(where_ + ": missing \"" + key + "\" (" + want + ")");
  return &*it;
}

Status Fields::Wrong(const char* key, const std::string& want, const json& got) const {
  return InvalidArgumentError(where_ + ": " + Named(key) + " must be " + want + ", got " + Shown(got));
}

std::string Fields::Named(const char* key) const {
  std::string s = std::string("\"") + key + "\"";
  if (items_ == nullptr) return s;
  for (size_t i = 0; i < items_->size(); ++i) {
    if ((*items_)[i] == key) return s + " (item " + std::to_string(i) + ")";
  }
  return s;
}

}  // namespace cluster_internal
}  // namespace holdfast
