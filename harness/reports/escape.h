// How text reaches each report form. Every string a report writes that it did not make
// itself (dataset names, attributes, an engine's stderr, paths, the command) passes through
// the function of the form it lands in, and nothing else escapes for that form:
//
//   form        function          what it neutralises
//   console     console_line      control bytes, ANSI/OSC sequences, invalid UTF-8, newlines
//   HTML, XML   xml_escape        & < > " ', control bytes XML 1.0 forbids
//   Markdown    markdown_text     HTML tags and entities, emphasis, links, code, headings,
//                                 table pipes, math, newlines
//               markdown_code     a code span that no backtick inside can close
//               markdown_fence    a fenced block that no backtick run inside can close
//
// Each of them first makes the bytes printable (harness/dump/printable.h), so a form never
// sees a control byte or invalid UTF-8 whatever the engine wrote.
#pragma once

#include <string>
#include <string_view>

namespace splitcheck {

// One line for a terminal: printable (tabs kept), newlines shown as "\x0a".
std::string console_line(std::string_view text);

// Escapes &, <, >, " and ' for HTML and XML text and attribute values; control characters
// other than tab and newline become a space (XML 1.0 allows no others).
std::string xml_escape(std::string_view text);

// Markdown inline text, safe in a table cell or a list item: every mark that would open
// markup where it stands (GitHub's flavour) is backslash-escaped, <, > and & become
// entities, newlines become spaces. What a reader sees is the text as it was; names such
// as `pre_attn` keep their bytes (an underscore inside a word opens nothing).
//
//   markdown_text("x<script>|[a](b)")  ==  "x&lt;script&gt;\\|\\[a\\](b)"
std::string markdown_text(std::string_view text);

// `text` as one Markdown code span, safe in a table cell: delimited by more backticks than
// its longest run of them, padded where it starts or ends with a backtick, pipes escaped
// (GitHub's tables split cells before code spans are read), newlines as spaces.
//
//   markdown_code("a`b")  ==  "``a`b``"
std::string markdown_code(std::string_view text);

// `text` as a fenced code block with info string `info` (e.g. "sh"): the fence is longer
// than any run of backticks inside, so no line of `text` can close it.
std::string markdown_fence(std::string_view text, std::string_view info);

}  // namespace splitcheck
