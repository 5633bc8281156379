#include "daemon/json_line.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace holdfast {

using json = nlohmann::json;

std::string CleanJsonError(const char* what) {
  std::string s(what);
  if (!s.empty() && s[0] == '[') {
    size_t end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

namespace {

// A DOM builder for json::sax_parse (what json::parse builds), with the
// nesting bounded and a key repeated in one object found; returning false
// stops the parse, and a syntax error throws json::parse_error as json::parse
// does. Arrays start with room for 8 values: a rank view (29 items) grows
// twice instead of six times, a ring entry (5) not at all (issue 28: the
// leader parses 2048 views a second at 2048 ranks).
class CheckedDomParser {
 public:
  CheckedDomParser(json& out, int max_depth) : root_(out), max_depth_(max_depth) {}

  bool null() { return Put(nullptr); }
  bool boolean(bool v) { return Put(v); }
  bool number_integer(json::number_integer_t v) { return Put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Put(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return Put(v); }
  bool string(json::string_t& v) { return Put(std::move(v)); }
  bool binary(json::binary_t& v) { return Put(json::binary(std::move(v))); }
  bool start_object(std::size_t) {
    if (!Enter()) return false;
    stack_.push_back(Place(json::object()));
    keys_.emplace_back();
    return true;
  }
  bool key(json::string_t& k) {
    std::vector<std::string>& seen = keys_.back();
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) {
      duplicate_ = k;
      return false;
    }
    seen.push_back(k);
    slot_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    if (!Enter()) return false;
    json* a = Place(json::array());
    a->get_ref<json::array_t&>().reserve(8);
    stack_.push_back(a);
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    --depth_;
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& e) {
    throw e;
  }

  bool too_deep() const { return too_deep_; }
  const std::optional<std::string>& duplicate() const { return duplicate_; }

 private:
  bool Enter() {
    if (depth_ >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    ++depth_;
    return true;
  }
  // Where the next value goes: the root, the end of the open array, or the
  // slot of the open object's last key.
  json* Place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      json::array_t& a = top->get_ref<json::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  template <class V>
  bool Put(V&& v) {
    Place(json(std::forward<V>(v)));
    return true;
  }

  json& root_;
  int max_depth_;
  int depth_ = 0;
  bool too_deep_ = false;
  std::optional<std::string> duplicate_;
  std::vector<json*> stack_;                    // the open arrays and objects
  std::vector<std::vector<std::string>> keys_;  // the keys of each open object
  json* slot_ = nullptr;                        // the value of the open object's last key
};

}  // namespace

Result<json> ParseJsonObjectLine(std::string_view line, size_t max_bytes, int max_depth, const std::string& what) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.size() + 1 > max_bytes) {
    return InvalidArgumentError(what + " is " + std::to_string(line.size() + 1) +
                                " bytes with its newline; the limit is " + std::to_string(max_bytes));
  }
  if (line.find('\n') != std::string_view::npos) {
    return InvalidArgumentError(what + " must be one line: newline at byte " + std::to_string(line.find('\n')));
  }
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return InvalidArgumentError(what + " is an empty line; expected a JSON object");
  }
  // A key twice in one object: nlohmann keeps the last value, so
  // {"op":"status","op":"stop"} would act as a stop that a reader of the line
  // (or a proxy that keeps the first) takes for a status. Refused instead.
  // Parsed by nlohmann's own DOM builder through a SAX filter that counts the
  // depth and compares each object's keys (issue 28: the callback parser cost
  // a third of the leader's CPU at 2048 ranks; the keyed objects left are
  // small — a rank view is an array — so a linear scan per key is cheap).
  json j;
  CheckedDomParser sax(j, max_depth);
  try {
    json::sax_parse(line.begin(), line.end(), &sax);
  } catch (const json::exception& e) {
    return InvalidArgumentError(what + " is not JSON: " + CleanJsonError(e.what()));
  }
  if (sax.too_deep()) {
    return InvalidArgumentError(what + " nests deeper than " + std::to_string(max_depth) + " levels");
  }
  if (sax.duplicate()) {
    return InvalidArgumentError(what + " has the key \"" + *sax.duplicate() + "\" twice in one object; send each key once");
  }
  if (!j.is_object()) {
    return InvalidArgumentError(what + " must be a JSON object, got " + std::string(j.type_name()));
  }
  return j;
}

}  // namespace holdfast
