#include "harness/reports/escape.h"

#include <algorithm>
#include <cctype>

#include "harness/dump/printable.h"

namespace splitcheck {
namespace {

// The longest run of backticks in `text`.
size_t longest_backtick_run(std::string_view text) {
  size_t longest = 0, run = 0;
  for (const char ch : text) {
    run = ch == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

// Newlines and carriage returns (kept by printable) as spaces: a table row is one line.
std::string one_line(std::string_view text) {
  std::string out = printable(text);
  std::replace_if(
      out.begin(), out.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return out;
}

}  // namespace

std::string console_line(std::string_view text) { return printable(text, false); }

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : printable(text)) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // printable() leaves tab and newline; carriage return is the one other XML allows.
        out += ch;
    }
  }
  return out;
}

std::string markdown_text(std::string_view text) {
  // Marks that open markup anywhere in a line: emphasis and strikethrough (* ~), code (`),
  // links and images ([ ]), table cells (|), math ($), escapes (\\); `_` where a word does not
  // surround it (GitHub never opens emphasis inside a word); and at the text's start, a
  // heading, a list item, a quote or a setext line (# + - = >) and an ordered list ("1.").
  static constexpr std::string_view kAnywhere = "\\`*[]|~$";
  const std::string line = one_line(text);
  auto word = [&](size_t i) {
    return i < line.size() && std::isalnum(static_cast<unsigned char>(line[i]));
  };
  const size_t digits = line.find_first_not_of("0123456789");
  const size_t ordered =
      digits > 0 && digits != std::string::npos && (line[digits] == '.' || line[digits] == ')')
          ? digits
          : std::string::npos;
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (ch == '<') {
      out += "&lt;";
    } else if (ch == '>') {
      out += "&gt;";
    } else if (ch == '&') {
      out += "&amp;";
    } else {
      const bool escape = kAnywhere.find(ch) != std::string_view::npos ||
                          (ch == '_' && !(i > 0 && word(i - 1) && word(i + 1))) ||
                          (i == 0 && std::string_view("#+-=").find(ch) != std::string_view::npos) ||
                          i == ordered;
      if (escape) out += '\\';
      out += ch;
    }
  }
  return out;
}

std::string markdown_code(std::string_view text) {
  std::string body;
  for (const char ch : one_line(text)) {
    if (ch == '|') body += '\\';
    body += ch;
  }
  if (body.empty()) return "` `";
  const std::string ticks(longest_backtick_run(body) + 1, '`');
  const bool pad =
      body.front() == '`' || body.back() == '`' || (body.front() == ' ' && body.back() == ' ');
  return ticks + (pad ? " " : "") + body + (pad ? " " : "") + ticks;
}

std::string markdown_fence(std::string_view text, std::string_view info) {
  std::string body = printable(text);
  if (!body.empty() && body.back() != '\n') body += '\n';
  const std::string fence(std::max<size_t>(3, longest_backtick_run(body) + 1), '`');
  return fence + std::string(info) + "\n" + body + fence + "\n";
}

}  // namespace splitcheck
