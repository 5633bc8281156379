#include "daemon/json_line.h"

#include <algorithm>
#include <optional>
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

// nlohmann's DOM builder (the parser json::parse uses), with the nesting
// bounded and a key repeated in one object found. Returning false stops the
// parse; errors throw json::parse_error, as json::parse does.
class CheckedDomParser {
 public:
  CheckedDomParser(json& out, int max_depth) : dom_(out, /*allow_exceptions=*/true), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!Enter()) return false;
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (!keys_.empty()) {
      std::vector<std::string>& seen = keys_.back();
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) {
        duplicate_ = k;
        return false;
      }
      seen.push_back(k);
    }
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    if (!keys_.empty()) keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return Enter() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
    return dom_.parse_error(position, token, e);
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

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int max_depth_;
  int depth_ = 0;
  bool too_deep_ = false;
  std::optional<std::string> duplicate_;
  std::vector<std::vector<std::string>> keys_;  // one per open object
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
