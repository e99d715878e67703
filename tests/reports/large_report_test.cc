// A report of any size renders a page of bounded size: the model of a small sweep, its cases
// copied to 10,000 split points (a few diverged), rendered as the report writers render it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "harness/reports/writers.h"
#include "tests/reports/report_fixture.h"

namespace splitcheck::testing {
namespace {

// The fault report's model with `n` cases: every 97th a copy of its diverged case, the
// rest passes, each with its own key and index; counts and acceptance rows to match.
nlohmann::json report_of(size_t n) {
  nlohmann::json j = nlohmann::json::parse(read_text(fault_reports() / "report.json"));
  const nlohmann::json& cases = j["cases"];
  nlohmann::json diverged, passed;
  for (const nlohmann::json& c : cases) (c.value("verdict", "") == "pass" ? passed : diverged) = c;
  if (passed.is_null()) {
    passed = diverged;
    passed["verdict"] = "pass";
    passed.erase("first_divergence");
    passed.erase("dispatch");
  }
  nlohmann::json out = nlohmann::json::array(), acceptance = nlohmann::json::array();
  if (j.contains("acceptance")) acceptance.push_back(j["acceptance"][0]);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    nlohmann::json c = i % 97 == 5 ? diverged : passed;
    bad += i % 97 == 5;
    c["key"] = "split-" + std::to_string(i);
    c["index"] = i;
    out.push_back(c);
    if (j.contains("acceptance")) {
      nlohmann::json row = j["acceptance"][1];
      row["split"] = c["key"];
      acceptance.push_back(row);
    }
  }
  j["cases"] = out;
  if (j.contains("acceptance")) j["acceptance"] = acceptance;
  j["counts"]["total"] = n;
  j["counts"]["diverged"] = bad;
  j["counts"]["pass"] = n - bad;
  return j;
}

TEST(LargeReportTest, TenThousandSplitPointsRenderAPageOfAFewMegabytes) {
  const nlohmann::json j = report_of(10000);
  const std::string html = render_html(j);
  EXPECT_LE(html.size(), size_t{5} << 20) << html.size() << " bytes";
  // Every split point that did not pass is drawn; the page says how many it shows of all.
  const size_t diverged = j["counts"]["diverged"].get<size_t>();
  EXPECT_EQ(count_of(html, "class=\"map-row\" data-key=\"split-"), 300u);
  EXPECT_EQ(count_of(html, "data-verdict=\"diverged\" data-first-layer"), 2 * diverged);
  EXPECT_NE(html.find("data-shown=\"300\" data-total=\"10000\""), std::string::npos);
  EXPECT_NE(html.find("id=\"first-divergence-by-layer\""), std::string::npos);
  // The counts still cover every case.
  EXPECT_NE(html.find("data-count=\"total\">10000<"), std::string::npos);
  // The page of a small sweep draws every case and says nothing of omissions.
  const std::string small = render_html(report_of(40));
  EXPECT_EQ(count_of(small, "class=\"map-row\""), 40u);
  EXPECT_EQ(small.find("cases-omitted"), std::string::npos);
  std::printf("report.html at 10,000 split points: %zu bytes; at 40: %zu bytes\n", html.size(),
              small.size());
}

}  // namespace
}  // namespace splitcheck::testing
