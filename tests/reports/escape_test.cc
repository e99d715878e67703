// Text an engine controls reaches every report form escaped for that form
// (harness/reports/escape.h): every byte 0x00-0xFF, HTML tags, backticks, pipes, link syntax and
// ANSI sequences, through dataset names, attributes and stderr. Markdown is checked by rendering it
// the way a PR comment is rendered (cmark-gfm, GitHub's flavour, with raw HTML let through so that
// any tag that survives escaping shows); XML is checked by parsing it.
#include "harness/reports/escape.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "harness/reports/writers.h"
#include "tests/cli_fixture.h"
#include "tests/reports/report_fixture.h"

namespace splitcheck::testing {
namespace {

using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
namespace fs = std::filesystem;

// Every byte, then the strings that break out of each form.
std::string hostile_text() {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  return "x<script>alert(3)</script>`code` | cell ](http://e.test) **b** $m$ "
         "\x1b[31mred\x1b]0;t\x07 " +
         all;
}

bool have_cmark() { return std::system("command -v cmark-gfm >/dev/null 2>&1") == 0; }

// summary.md rendered as GitHub renders a PR comment, raw HTML kept (so an unescaped tag shows).
std::string rendered_markdown(const fs::path& md) {
  const fs::path html = md.string() + ".rendered.html";
  const std::string cmd = "cmark-gfm --unsafe -e table -e strikethrough -e autolink " +
                          quote(md.string()) + " >" + quote(html.string());
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return file_text(html);
}

bool xml_parses(const fs::path& xml) {
  const std::string cmd =
      "/usr/bin/python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' " +
      quote(xml.string()) + " 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

TEST(EscapeTest, MarkdownTextNeutralisesEveryMarkupCharacter) {
  EXPECT_EQ(markdown_text("x<script>|[a](b)"), "x&lt;script&gt;\\|\\[a\\](b)");
  EXPECT_EQ(markdown_text("a\nb\r c"), "a b\\\\x0d c");
  EXPECT_EQ(markdown_text("*_`~$#"), "\\*\\_\\`\\~\\$#");
  EXPECT_EQ(markdown_text("layers/2/pre_attn _x_"), "layers/2/pre_attn \\_x\\_");
  EXPECT_EQ(markdown_text("# h"), "\\# h");
  EXPECT_EQ(markdown_text("12. item"), "12\\. item");
  EXPECT_EQ(markdown_text("\x1b[1m"), "\\\\x1b\\[1m");
  const std::string all = markdown_text(hostile_text());
  for (const char bad : std::string("<>\n\r\x1b\x07")) EXPECT_EQ(all.find(bad), std::string::npos);
}

TEST(EscapeTest, CodeSpansAndFencesHoldAnyBackticks) {
  EXPECT_EQ(markdown_code("plain"), "`plain`");
  EXPECT_EQ(markdown_code("a`b"), "``a`b``");
  EXPECT_EQ(markdown_code("`x`"), "`` `x` ``");
  EXPECT_EQ(markdown_code("a|b"), "`a\\|b`");
  EXPECT_EQ(markdown_code(""), "` `");
  EXPECT_EQ(markdown_fence("run ```x```", "sh"), "````sh\nrun ```x```\n````\n");
  EXPECT_EQ(markdown_fence("a\n", "sh"), "```sh\na\n```\n");
}

TEST(EscapeTest, XmlAndConsoleKeepNoControlByte) {
  const std::string xml = xml_escape(hostile_text());
  const std::string line = console_line(hostile_text());
  for (int b = 0; b < 0x20; ++b) {
    if (b != '\t' && b != '\n') {
      EXPECT_EQ(xml.find(static_cast<char>(b)), std::string::npos) << b;
    }
    if (b != '\t') {
      EXPECT_EQ(line.find(static_cast<char>(b)), std::string::npos) << b;
    }
  }
  EXPECT_EQ(xml.find('<'), std::string::npos);
  EXPECT_NE(line.find("\\x1b[31mred"), std::string::npos);
}

// Every form of a report whose engine-controlled strings are hostile: the case's message and
// dataset, the engine's producer and PP=1 outcome, a stderr tail, a not-judged reason.
TEST(EscapeTest, EveryFormOfAHostileReport) {
  nlohmann::json j = nlohmann::json::parse(read_text(fault_reports() / "report.json"));
  const std::string h = hostile_text();
  j["cases"][0]["message"] = "forward/0/layers/2/" + h;
  j["cases"][0]["stderr_tail"] = h;
  j["cases"][0]["not_judged"] = {{{"check", "memory"}, {"reason", h}}};
  j["engine"] = {{"producer", {{"producer", "eng`|ine " + h}}}, {"pp1_outcome", h}};
  j["command"] = "splitcheck sweep ```" + h;
  const fs::path dir = fault_reports().string() + "_hostile";
  ASSERT_TRUE(write_reports(dir.string(), j).is_ok());
  // Markup forms hold no tag of the engine's (summary.md's code spans hold the text as is:
  // its rendering is checked below); no form holds a control byte.
  for (const char* form : {"summary.md", "junit.xml", "report.html", "report.json"}) {
    const std::string text = file_text(dir / form);
    if (std::string(form) != "summary.md" && std::string(form) != "report.json") {
      EXPECT_EQ(text.find("<script"), std::string::npos) << form;
    }
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << form;
    EXPECT_NE(text.find("alert(3)"), std::string::npos) << form;
  }
  EXPECT_TRUE(xml_parses(dir / "junit.xml"));
  if (!have_cmark()) GTEST_SKIP() << "cmark-gfm is not installed (scripts/setup.sh)";
  const std::string page = rendered_markdown(dir / "summary.md");
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(3)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(page.find("cell ](http://e.test"), std::string::npos) << "a link was made";
  EXPECT_EQ(page.find("<strong>b</strong>"), std::string::npos) << "emphasis was made";
  // The producer stays one code span, backtick and pipe included.
  EXPECT_NE(page.find("<code>eng`|ine x&lt;script&gt;"), std::string::npos);
  // The reproduce block holds the whole command: the ``` inside does not close it.
  EXPECT_NE(page.find("splitcheck sweep ```x&lt;script&gt;"), std::string::npos);
}

class HostileTextEngineTest : public cli_test::CliFixture {
 protected:
  HostileTextEngineTest() : CliFixture("splitcheck-escape-") {}
};

// An engine of its own: `splitcheck run`, then its dump edited by h5py: the producer attribute
// holds a backtick, a pipe and a tag, and at split 2 a layer's dataset is renamed
// `x<script>alert(3)</script>`; its stderr carries ANSI escapes. Every form stays clean.
TEST_F(HostileTextEngineTest, DatasetNamesAttributesAndStderrReachEveryFormEscaped) {
  if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0)
    GTEST_SKIP() << "Debian's python3-h5py is not installed (scripts/setup.sh)";
  write_text(path("edit.py"), R"(import sys, h5py
out, cuts = sys.argv[1], sys.argv[2]
with h5py.File(out, "r+") as f:
    f.attrs["producer"] = '{"name": "eng`ine | <b>x</b>", "version": "1`2"}'
    if cuts == "2":
        f.copy("forward/0/layers/2/attn_out", "forward/0/layers/2/x<script>alert(3)</script>")
)");
  const fs::path engine = path("engine.sh");
  write_text(engine,
             "#!/bin/sh\nscenario=\"$1\" cuts=\"$2\" out=\"$3\"\n" + quote(SPLITCHECK_BINARY) +
                 " run \"$scenario\" --split \"$cuts\" --out \"$out\" >/dev/null || exit 1\n"
                 "/usr/bin/printf 'warn \\033[31m<i>red</i>\\033]0;t\\007 `x` |\\n' >&2\n"
                 "exec /usr/bin/python3 " +
                 quote(path("edit.py").string()) + " \"$out\" \"$cuts\"\n");
  fs::permissions(engine, fs::perms::owner_all);
  nlohmann::json s = nlohmann::json::parse(
      file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios" / "external-self.json"));
  s["engine"]["command"] = {engine.string(), "{scenario}", "{cuts}", "{out}"};
  s["partitions"] = {{"pp", 2}, {"splits", {{2}, {5}}}};
  s.erase("expect");
  write_text(path("scenario.json"), s.dump(2));
  const cli_test::CliResult r = cli("sweep " + quote(path("scenario.json").string()) +
                                    " --jobs 2 --report " + quote(path("rep").string()));
  // split-2's dump names its dataset with another's order: a corrupt dump, an error.
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_NE(r.out.find("x<script>alert(3)</script>"), std::string::npos) << r.out;
  for (const char* form : {"junit.xml", "report.html"}) {
    const std::string text = file_text(path("rep") / form);
    EXPECT_EQ(text.find("<script"), std::string::npos) << form;
    EXPECT_EQ(text.find("<b>x</b>"), std::string::npos) << form;
    EXPECT_NE(text.find("alert(3)"), std::string::npos) << form;
  }
  EXPECT_NE(file_text(path("rep") / "summary.md").find("alert(3)"), std::string::npos);
  EXPECT_TRUE(xml_parses(path("rep") / "junit.xml"));
  if (!have_cmark()) GTEST_SKIP() << "cmark-gfm is not installed (scripts/setup.sh)";
  const std::string page = rendered_markdown(path("rep") / "summary.md");
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<b>x</b>"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(3)&lt;/script&gt;"), std::string::npos);
}

}  // namespace
}  // namespace splitcheck::testing
