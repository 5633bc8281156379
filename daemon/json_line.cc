#include "daemon/json_line.h"

#include <optional>
#include <set>
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
  // Fast path: count each open object's keys and compare with the size of the
  // object it became (a duplicate collapses into one entry); only a line that
  // has one is parsed again to name the key (issue 28: a set of key strings per
  // object was a fifth of the leader's CPU at 2048 ranks).
  bool too_deep = false;
  bool has_duplicate = false;
  std::vector<size_t> counts;  // keys seen, one per open object
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth) {
      too_deep = true;
      return false;  // discard the subtree; the flag rejects the message below
    }
    if (event == json::parse_event_t::object_start) {
      counts.push_back(0);
    } else if (event == json::parse_event_t::key) {
      if (!counts.empty()) ++counts.back();
    } else if (event == json::parse_event_t::object_end) {
      if (!counts.empty()) {
        if (parsed.is_object() && parsed.size() != counts.back()) has_duplicate = true;
        counts.pop_back();
      }
    }
    return true;
  };
  json j;
  try {
    j = json::parse(line.begin(), line.end(), check);
  } catch (const json::exception& e) {
    return InvalidArgumentError(what + " is not JSON: " + CleanJsonError(e.what()));
  }
  if (too_deep) {
    return InvalidArgumentError(what + " nests deeper than " + std::to_string(max_depth) + " levels");
  }
  if (has_duplicate) {
    std::vector<std::set<std::string>> keys;  // one per open object
    std::optional<std::string> duplicate;
    json::parser_callback_t name = [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) {
        keys.emplace_back();
      } else if (event == json::parse_event_t::object_end) {
        if (!keys.empty()) keys.pop_back();
      } else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
        if (!keys.back().insert(parsed.get<std::string>()).second && !duplicate) duplicate = parsed.get<std::string>();
      }
      return true;
    };
    const json again = json::parse(line.begin(), line.end(), name);  // parsed once already: cannot throw
    static_cast<void>(again);
    return InvalidArgumentError(what + " has the key \"" + duplicate.value_or("?") +
                                "\" twice in one object; send each key once");
  }
  if (!j.is_object()) {
    return InvalidArgumentError(what + " must be a JSON object, got " + std::string(j.type_name()));
  }
  return j;
}

}  // namespace holdfast
