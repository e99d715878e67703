// The report's four forms agree on every count, and report.json validates against
// harness/reports/report.schema.json.
#include <unistd.h>

#include <cstdlib>

#include "tests/reports/report_fixture.h"

namespace splitcheck::testing {
namespace {

namespace fs = std::filesystem;

struct Counts {
  int64_t pass = 0, diverged = 0, config_rejected = 0, error = 0, skipped = 0, total = 0;
  bool operator==(const Counts&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << c.pass << "/" << c.diverged << "/" << c.config_rejected << "/" << c.error << "/"
            << c.skipped << "/" << c.total;
}

int64_t attr(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(name + "=\"(\\d+)\""))) return -1;
  return std::stoll(m[1]);
}

void check_agreement(const fs::path& dir) {
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "report.json"));
  const auto& jc = j["counts"];
  const Counts json_counts{jc["pass"],  jc["diverged"], jc["config_rejected"],
                           jc["error"], jc["skipped"],  jc["total"]};
  ASSERT_EQ(json_counts.total, static_cast<int64_t>(j["cases"].size()));
  Counts from_cases;
  for (const auto& c : j["cases"]) {
    const std::string v = c["verdict"];
    from_cases.pass += v == "pass";
    from_cases.diverged += v == "diverged";
    from_cases.config_rejected += v == "config-rejected";
    from_cases.error += v == "error";
    from_cases.skipped += v == "skipped";
    ++from_cases.total;
  }
  EXPECT_EQ(from_cases, json_counts);

  const std::string junit = read_text(dir / "junit.xml");
  const Counts junit_counts{
      static_cast<int64_t>(count_of(junit, "<testcase")) -
          static_cast<int64_t>(count_of(junit, "<failure")) -
          static_cast<int64_t>(count_of(junit, "<error")) -
          static_cast<int64_t>(count_of(junit, "<skipped")),
      static_cast<int64_t>(count_of(junit, "<failure type=\"diverged\"")),
      static_cast<int64_t>(count_of(junit, "<failure type=\"config-rejected\"")),
      static_cast<int64_t>(count_of(junit, "<error")),
      static_cast<int64_t>(count_of(junit, "<skipped")),
      static_cast<int64_t>(count_of(junit, "<testcase"))};
  EXPECT_EQ(junit_counts, json_counts);
  EXPECT_EQ(attr(junit, "tests"), json_counts.total);
  EXPECT_EQ(attr(junit, "failures"), json_counts.diverged + json_counts.config_rejected);
  EXPECT_EQ(attr(junit, "errors"), json_counts.error);

  const std::string md = read_text(dir / "summary.md");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      md, m,
      std::regex(
          R"(\|(?:---:\|){9}\n\| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|(?: \d+ \|){3} (\d+) \|)")));
  const Counts md_counts{std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]),
                         std::stoll(m[4]), std::stoll(m[5]), std::stoll(m[6])};
  EXPECT_EQ(md_counts, json_counts);
  EXPECT_NE(md.find(j["verdict"] == "conformant" ? "CONFORMANT" : "DIVERGENT"), std::string::npos);

  const std::string html = read_text(dir / "report.html");
  const Counts html_rows{
      static_cast<int64_t>(count_of(html, "<tr class=\"case case-pass\"")),
      static_cast<int64_t>(count_of(html, "<tr class=\"case case-diverged\"")),
      static_cast<int64_t>(count_of(html, "<tr class=\"case case-config-rejected\"")),
      static_cast<int64_t>(count_of(html, "<tr class=\"case case-error\"")),
      static_cast<int64_t>(count_of(html, "<tr class=\"case case-skipped\"")),
      static_cast<int64_t>(count_of(html, "<tr class=\"case "))};
  EXPECT_EQ(html_rows, json_counts);
  auto html_count = [&](const char* k) {
    std::smatch hm;
    EXPECT_TRUE(
        std::regex_search(html, hm, std::regex(std::string("data-count=\"") + k + "\">(\\d+)<")));
    return hm.empty() ? -1 : std::stoll(hm[1]);
  };
  const Counts html_counts{
      html_count("pass"),  html_count("diverged"), html_count("config_rejected"),
      html_count("error"), html_count("skipped"),  html_count("total")};
  EXPECT_EQ(html_counts, json_counts);
  EXPECT_EQ(static_cast<int64_t>(count_of(html, "<g class=\"map-row\"")), json_counts.total);
  EXPECT_EQ(html.find("http://"),
            html.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(ReportTest, PairwiseFormsAgree) { check_agreement(pairwise_reports()); }
TEST(ReportTest, FaultFormsAgree) { check_agreement(fault_reports()); }
TEST(ReportTest, PairwiseValidates) { validate(pairwise_reports()); }
TEST(ReportTest, FaultValidates) { validate(fault_reports()); }

TEST(ReportTest, EscapesEveryString) {
  nlohmann::json j = nlohmann::json::parse(read_text(fault_reports() / "report.json"));
  j["cases"][0]["message"] = "<script>alert('x')</script> & \"q\"";
  j["command"] = "a <b> & c";
  const fs::path dir = fault_reports().string() + "_escaped";
  ASSERT_TRUE(write_reports(dir.string(), j).is_ok());
  for (const char* f : {"report.html", "junit.xml"}) {
    const std::string text = read_text(dir / f);
    EXPECT_EQ(text.find("<script>"), std::string::npos) << f;
    EXPECT_NE(text.find("&lt;script&gt;"), std::string::npos) << f;
  }
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".partial");
}

}  // namespace
}  // namespace splitcheck::testing

namespace splitcheck::testing {
namespace {

// SPEC 3.3: the histogram of accepted lengths appears in every form, PP=1's and every
// split point's, compared against PP=1.
TEST(ReportTest, AcceptedLengthHistogramInEveryForm) {
  const std::filesystem::path& dir = pairwise_reports();
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "report.json"));
  ASSERT_TRUE(j.contains("acceptance"));
  const nlohmann::json& pp1 = j["acceptance"][0];
  ASSERT_TRUE(pp1.contains("accepted_histogram"));
  const nlohmann::json& h = pp1["accepted_histogram"];
  ASSERT_EQ(h.size(), static_cast<size_t>(j["scenario"]["resolved"]["speculative"]["gamma"]) + 1)
      << pp1.dump();
  int64_t steps = 0;
  std::string text;
  for (size_t a = 0; a < h.size(); ++a) {
    steps += h[a].get<int64_t>();
    text += (a ? ", " : "") + std::string("a=") + std::to_string(a) + ": " + h[a].dump();
  }
  EXPECT_EQ(steps, pp1["steps"].get<int64_t>());
  for (const auto& row : j["acceptance"]) {
    EXPECT_EQ(row["accepted_histogram"], h) << row.dump();
    EXPECT_TRUE(row["equal_to_pp1"].get<bool>()) << row.dump();
  }
  EXPECT_NE(read_text(dir / "summary.md").find(text), std::string::npos) << text;
  EXPECT_NE(read_text(dir / "junit.xml").find(text), std::string::npos) << text;
  const std::string html = read_text(dir / "report.html");
  EXPECT_NE(html.find("id=\"accepted-histogram\""), std::string::npos);
  for (size_t a = 0; a < h.size(); ++a)
    EXPECT_NE(html.find("/></svg><br>" + h[a].dump() + "</td>"), std::string::npos) << a;
}

}  // namespace
}  // namespace splitcheck::testing
