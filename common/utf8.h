// UTF-8 repair: text that came from a job (a progress record's error text, a
// log line) made safe to put in JSON, lineage and a terminal. One definition
// of "well-formed" (Unicode table 3-7) for the whole project.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace holdfast {

// `s` with every byte that does not start a well-formed sequence replaced by U+FFFD.
std::string ValidUtf8(std::string_view s);

}  // namespace holdfast
