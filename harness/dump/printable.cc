#include "harness/dump/printable.h"

#include <fmt/format.h>

namespace splitcheck {
namespace {

// Invalid UTF-8 replaced by U+FFFD, by the JSON library's own decoder.
std::string valid_utf8(std::string_view bytes) {
  const std::string quoted = nlohmann::json(std::string(bytes))
                                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(quoted).get<std::string>();
}

}  // namespace

std::string printable(std::string_view bytes, bool keep_newlines) {
  const std::string text = valid_utf8(bytes);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && !(c == '\t' || (c == '\n' && keep_newlines))) || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      // U+0080..U+009F, the C1 controls (U+009B is a one-byte CSI to some terminals).
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

nlohmann::json printable_json(const nlohmann::json& j) {
  if (j.is_string()) return printable(j.get_ref<const std::string&>());
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(printable_json(v));
    return out;
  }
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : j.items()) out[printable(k)] = printable_json(v);
    return out;
  }
  return j;
}

}  // namespace splitcheck
