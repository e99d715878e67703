// Text that came from outside splitcheck (an engine's stderr, dataset and file names,
// attribute values) made safe to print and to write into any report form.
//
// Whatever the bytes, the result is valid UTF-8 with no control character a terminal or a
// viewer would act on: invalid UTF-8 becomes U+FFFD (the JSON library's replacement),
// control characters (C0 but newline and tab, DEL, C1) are shown escaped as "\x1b" or
// "\u009b", the same on the console as in the files.
//
//   printable("ok\x1b[31m red \xff")  ==  "ok\\x1b[31m red \uFFFD"
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace splitcheck {

// `bytes` as printable text; with `keep_newlines` false a newline is escaped too ("\x0a").
std::string printable(std::string_view bytes, bool keep_newlines = true);

// Every string of `j`, object keys included, through printable() (newlines kept).
nlohmann::json printable_json(const nlohmann::json& j);

}  // namespace splitcheck
