// The compare report shows who produced each input, how much of each dataset differs and
// where a divergence starts and grows (the per-layer chart), in all four forms.
#include <regex>

#include "tests/reports/report_fixture.h"

namespace splitcheck::testing {
namespace {

namespace fs = std::filesystem;

TEST(CompareReportTest, EachInputsProvenanceSideBySideWithTheDifferencesMarked) {
  const fs::path dir = compare_reports("provenance");
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "report.json"));
  std::map<std::string, nlohmann::json> rows;
  for (const auto& row : j["inputs_provenance"]) rows[row["field"]] = row;
  EXPECT_EQ(rows["producer"]["a"], "splitcheck");
  EXPECT_EQ(rows["producer"]["b"], "transformers-deepseek-v3");
  EXPECT_EQ(rows["producer"]["differs"], true);
  EXPECT_EQ(rows["producer"]["comparator"], "splitcheck");
  EXPECT_EQ(rows["version"]["b"], "4.46.0");
  EXPECT_EQ(rows["git_revision"]["a"], "990f7de");
  EXPECT_EQ(rows["backend"]["a"], "cpu");
  EXPECT_EQ(rows["backend"]["b"], "torch-cpu");
  EXPECT_EQ(rows["device"]["differs"], false);
  EXPECT_EQ(rows["compiler"]["b"], "torch 2.5.1");
  EXPECT_EQ(rows["format_version"]["a"], "2");
  // The comparator's own build stays, labelled as such.
  EXPECT_EQ(j["provenance"]["producer"], "splitcheck");

  const std::string html = read_text(dir / "report.html");
  EXPECT_NE(html.find("<table class=\"prov\" id=\"inputs-provenance\">"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"differs\" data-field=\"backend\" data-differs=\"true\">"),
            std::string::npos);
  EXPECT_NE(html.find("<tr class=\"same\" data-field=\"device\" data-differs=\"false\">"),
            std::string::npos);
  EXPECT_NE(html.find("<code>transformers-deepseek-v3</code>"), std::string::npos);
  EXPECT_NE(html.find("<td>comparator producer</td>"), std::string::npos);
  const std::string md = read_text(dir / "summary.md");
  EXPECT_NE(md.find("| **backend (differs)** | **`cpu`** | **`torch-cpu`** |"), std::string::npos)
      << md;
  const std::string junit = read_text(dir / "junit.xml");
  EXPECT_NE(junit.find("<property name=\"b.producer\" value=\"transformers-deepseek-v3\"/>"),
            std::string::npos);
  validate(dir);
}

TEST(CompareReportTest, PerDatasetMismatchesMaxUlpAndCosineInEveryForm) {
  const fs::path dir = compare_reports("figures");
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "report.json"));
  // Layers 2..5, two sites each, then the root attribute `backend` (compared: not volatile).
  ASSERT_EQ(j["cases"].size(), 9u);
  EXPECT_EQ(j["cases"][8]["key"], "/@backend");
  const nlohmann::json& l3 = j["cases"][2]["first_divergence"];
  EXPECT_EQ(j["cases"][2]["key"], "/forward/0/layers/3/pre_attn");
  EXPECT_EQ(l3["mismatches"], 32);
  EXPECT_EQ(l3["elements"], 512);
  EXPECT_DOUBLE_EQ(l3["mismatch_fraction"].get<double>(), 1.0 / 16);
  EXPECT_EQ(l3["max_ulp"], 1);
  EXPECT_LT(l3["cosine"].get<double>(), 1.0);

  const std::string html = read_text(dir / "report.html");
  EXPECT_NE(html.find("<th>#</th><th>dataset</th>"), std::string::npos);
  EXPECT_EQ(html.find("<th>split</th>"), std::string::npos);
  EXPECT_NE(html.find("<th>mismatching elements</th><th>max ULP</th><th>cosine</th>"),
            std::string::npos);
  EXPECT_NE(html.find(">32 of 512 (6.25%)</td><td class=\"num\">1</td>"), std::string::npos);
  const std::string md = read_text(dir / "summary.md");
  EXPECT_NE(md.find("| dataset | mismatching elements | fraction | max ULP | cosine |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `/forward/0/layers/3/pre_attn` | 32 of 512 | 6.25% | 1 |"),
            std::string::npos)
      << md;
  const std::string junit = read_text(dir / "junit.xml");
  EXPECT_NE(junit.find("32 of 512 elements differ (6.25%), max ULP 1, cosine"), std::string::npos);
}

TEST(CompareReportTest, LayerChartShowsWhereTheDivergenceStartsAndHowItGrows) {
  const fs::path dir = compare_reports("chart");
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "report.json"));
  ASSERT_EQ(j["layers"].size(), 6u);
  const double want[] = {0, 0, 1.0 / 512, 1.0 / 16, 0.25, 1};
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(j["layers"][l]["layer"], l);
    EXPECT_EQ(j["layers"][l]["datasets"], 2);
    EXPECT_DOUBLE_EQ(j["layers"][l]["mismatch_fraction"].get<double>(), want[l]) << l;
  }
  const std::string html = read_text(dir / "report.html");
  const size_t at = html.find("<svg id=\"layer-chart\"");
  ASSERT_NE(at, std::string::npos);
  const std::string svg = html.substr(at, html.find("</svg>", at) - at);
  EXPECT_EQ(count_of(svg, "class=\"layer-bar\""), 6u);
  // Bar heights grow with the fraction: layer 5 is the full 120 px, layer 4 a quarter,
  // layer 2 (one element in 512) the minimum visible sliver, layers 0-1 none.
  std::map<int, int> height;
  const std::regex bar(
      R"re(data-layer="(\d+)" data-fraction="[^"]*"><rect x="\d+" y="\d+" width="\d+" height="(\d+)")re");
  for (auto m = std::sregex_iterator(svg.begin(), svg.end(), bar); m != std::sregex_iterator(); ++m)
    height[std::stoi((*m)[1])] = std::stoi((*m)[2]);
  ASSERT_EQ(height.size(), 6u);
  EXPECT_EQ(height[0], 0);
  EXPECT_EQ(height[1], 0);
  EXPECT_EQ(height[2], 2);
  EXPECT_EQ(height[3], 8);
  EXPECT_EQ(height[4], 30);
  EXPECT_EQ(height[5], 120);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

}  // namespace
}  // namespace splitcheck::testing
