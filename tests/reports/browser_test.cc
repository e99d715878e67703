// report.html in headless Chromium (Debian's package; never downloaded at test time): the
// rendered DOM shows the verdict, one SVG map row and one table row per split point with
// the report's counts, the page logs no console error, its SVG charts are laid out with a
// non-empty box, and screenshots are saved as <build>/report-screenshot.png (a sweep with
// a fault) and <build>/compare-report-screenshot.png (a compare of two engines' dumps).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "tests/reports/report_fixture.h"

namespace splitcheck::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kChromium = "/usr/bin/chromium";

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct BrowserRun {
  int code = -1;
  std::string out, err;
};

// Runs Chromium headless on `page` with a fresh profile and `extra` flags.
BrowserRun chromium(const fs::path& page, const std::string& extra, const fs::path& work) {
  const fs::path profile = work / "profile";
  fs::remove_all(profile);
  fs::create_directories(profile);
  const fs::path out = work / "chromium.out", err = work / "chromium.err";
  const std::string cmd =
      std::string(kChromium) +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --enable-logging=stderr --v=0 --user-data-dir=" +
      quote(profile.string()) + " --virtual-time-budget=2000 " + extra + " " +
      quote("file://" + page.string()) + " >" + quote(out.string()) + " 2>" + quote(err.string());
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
}

// Lines of Chromium's log that report an error from the page: console messages and
// uncaught exceptions. D-Bus noise (no session bus in a container) is not the page's.
std::vector<std::string> page_errors(const std::string& log) {
  std::vector<std::string> bad;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("dbus") != std::string::npos || line.find("D-Bus") != std::string::npos) continue;
    if (line.find("Uncaught") != std::string::npos || line.find("CONSOLE") != std::string::npos ||
        line.find("Console") != std::string::npos)
      bad.push_back(line);
  }
  return bad;
}

class BrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kChromium)) GTEST_SKIP() << kChromium << " is absent";
    work_ = fs::temp_directory_path() /
            ("splitcheck-browser-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override {
    if (!work_.empty()) fs::remove_all(work_);
  }

  // A small diverging sweep: the handoff fault at the split points whose key has split-1.
  static const fs::path& reports() {
    return sweep_reports("browser", "fault-handoff-no-zero-delta", "split-1");
  }

  fs::path work_;
};

TEST_F(BrowserTest, RendersVerdictMapAndTableWithTheReportsCounts) {
  const fs::path dir = reports();
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "report.json"));
  const auto& counts = j["counts"];
  const int64_t total = counts["total"];
  ASSERT_GT(total, 1);
  ASSERT_EQ(j["verdict"], "divergent");
  ASSERT_GT(counts["diverged"].get<int64_t>(), 0);

  const BrowserRun r = chromium(dir / "report.html", "--dump-dom", work_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string& dom = r.out;
  ASSERT_NE(dom.find("</html>"), std::string::npos) << r.err;

  // The verdict, first.
  EXPECT_NE(dom.find("id=\"verdict\""), std::string::npos);
  EXPECT_NE(dom.find("data-verdict=\"divergent\""), std::string::npos);
  EXPECT_NE(dom.find(">DIVERGENT<"), std::string::npos);
  EXPECT_LT(dom.find("id=\"verdict\""), dom.find("id=\"split-map\""));

  // The map: one SVG row per split point, diverged rows as many as the report says.
  EXPECT_EQ(count_of(dom, "<svg id=\"split-map\""), 1u);
  EXPECT_EQ(count_of(dom, "class=\"map-row\""), static_cast<size_t>(total));
  const size_t svg_at = dom.find("<svg id=\"split-map\"");
  ASSERT_NE(svg_at, std::string::npos);
  const std::string svg = dom.substr(svg_at, dom.find("</svg>", svg_at) - svg_at);
  EXPECT_EQ(count_of(svg, "data-verdict=\"diverged\""), counts["diverged"].get<size_t>());
  EXPECT_EQ(count_of(svg, "<rect class=\"cell\""),
            static_cast<size_t>(total * j["scenario"]["layers"].get<int64_t>()));

  // The table: one row per split point, by verdict.
  EXPECT_EQ(count_of(dom, "<tr class=\"case"), static_cast<size_t>(total));
  EXPECT_EQ(count_of(dom, "<tr class=\"case case-pass\""), counts["pass"].get<size_t>());
  EXPECT_EQ(count_of(dom, "<tr class=\"case case-diverged\""), counts["diverged"].get<size_t>());
  EXPECT_EQ(count_of(dom, "<tr class=\"case case-config-rejected\""),
            counts["config_rejected"].get<size_t>());
  for (const auto& c : j["cases"])
    EXPECT_NE(dom.find("data-key=\"" + c["key"].get<std::string>() + "\""), std::string::npos)
        << c["key"];

  const std::vector<std::string> errors = page_errors(r.err);
  EXPECT_TRUE(errors.empty()) << errors.size() << " console errors, first: " << errors.front();
}

TEST_F(BrowserTest, SavesAScreenshotWithoutConsoleErrors) {
  const fs::path dir = reports();
  const fs::path png = fs::path(SPLITCHECK_BUILD_DIR) / "report-screenshot.png";
  fs::remove(png);
  const BrowserRun r =
      chromium(dir / "report.html",
               "--screenshot=" + quote(png.string()) + " --window-size=1280,2000", work_);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(fs::exists(png)) << r.err;
  EXPECT_GT(fs::file_size(png), 20000u);
  const std::string head = read_text(png).substr(0, 8);
  EXPECT_EQ(head, std::string("\x89PNG\r\n\x1a\n", 8));
  const std::vector<std::string> errors = page_errors(r.err);
  EXPECT_TRUE(errors.empty()) << errors.size() << " console errors, first: " << errors.front();
}

// The rendered size of each SVG named in `ids`, measured in the browser: the report
// (which runs no script) is copied without its CSP and with a script appended that writes
// each element's bounding box into the DOM as <pre id="box-ID">WxH</pre>. Missing: "none".
std::map<std::string, std::string> rendered_boxes(const fs::path& page,
                                                  const std::vector<std::string>& ids,
                                                  const fs::path& work) {
  std::string html = read_text(page);
  const size_t csp = html.find("<meta http-equiv=\"Content-Security-Policy\"");
  if (csp != std::string::npos) html.erase(csp, html.find('>', csp) + 1 - csp);
  std::string script = "<script>for (const id of [";
  for (const std::string& id : ids) script += "'" + id + "',";
  script +=
      "]) { const e = document.getElementById(id); const p = document.createElement('pre');"
      " p.id = 'box-' + id; if (e) { const r = e.getBoundingClientRect();"
      " p.textContent = Math.round(r.width) + 'x' + Math.round(r.height); }"
      " else { p.textContent = 'none'; } document.body.appendChild(p); }</script>";
  html.insert(html.rfind("</body>"), script);
  const fs::path probe = work / "probe.html";
  std::ofstream(probe) << html;
  const BrowserRun r = chromium(probe, "--dump-dom", work);
  std::map<std::string, std::string> out;
  for (const std::string& id : ids) {
    std::smatch m;
    out[id] = std::regex_search(r.out, m, std::regex("<pre id=\"box-" + id + "\">([^<]*)</pre>"))
                  ? m[1].str()
                  : "not measured";
  }
  return out;
}

// Width and height of "WxH"; zero when it is not that.
std::pair<int, int> box_size(const std::string& box) {
  std::smatch m;
  if (!std::regex_match(box, m, std::regex(R"((\d+)x(\d+))"))) return {0, 0};
  return {std::stoi(m[1]), std::stoi(m[2])};
}

TEST_F(BrowserTest, SweepMapAndCompareLayerChartRenderWithANonEmptyBox) {
  const auto sweep = rendered_boxes(reports() / "report.html", {"split-map"}, work_);
  const auto [sw, sh] = box_size(sweep.at("split-map"));
  EXPECT_GT(sw, 100) << sweep.at("split-map");
  EXPECT_GT(sh, 20) << sweep.at("split-map");
  const auto cmp = rendered_boxes(compare_reports("browser") / "report.html",
                                  {"layer-chart", "inputs-provenance"}, work_);
  const auto [cw, ch] = box_size(cmp.at("layer-chart"));
  EXPECT_GT(cw, 100) << cmp.at("layer-chart");
  EXPECT_GT(ch, 100) << cmp.at("layer-chart");
  EXPECT_GT(box_size(cmp.at("inputs-provenance")).second, 0) << cmp.at("inputs-provenance");
  // The probe is live: an id the page lacks measures as absent.
  EXPECT_EQ(rendered_boxes(reports() / "report.html", {"layer-chart"}, work_).at("layer-chart"),
            "none");
}

TEST_F(BrowserTest, SavesAScreenshotOfACompareReport) {
  const fs::path png = fs::path(SPLITCHECK_BUILD_DIR) / "compare-report-screenshot.png";
  fs::remove(png);
  const BrowserRun r =
      chromium(compare_reports("browser") / "report.html",
               "--screenshot=" + quote(png.string()) + " --window-size=1280,1400", work_);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(fs::exists(png)) << r.err;
  EXPECT_GT(fs::file_size(png), 20000u);
  EXPECT_EQ(read_text(png).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const std::vector<std::string> errors = page_errors(r.err);
  EXPECT_TRUE(errors.empty()) << errors.size() << " console errors, first: " << errors.front();
}

// The console check is live: a page that logs an error and throws is caught.
TEST_F(BrowserTest, ConsoleCheckCatchesAPageThatThrows) {
  const fs::path page = work_ / "throws.html";
  std::ofstream(page) << "<!DOCTYPE html><html><body><script>console.error('boom');"
                         "throw new Error('x');</script></body></html>\n";
  const BrowserRun r = chromium(page, "--dump-dom", work_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> errors = page_errors(r.err);
  EXPECT_EQ(errors.size(), 2u) << r.err;
}

}  // namespace
}  // namespace splitcheck::testing
