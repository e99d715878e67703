// Waivers (harness/judge/waivers.h): a covered divergence is `waived`, apart from passes
// in every report form; a waiver that does not cover every failed check, or names another
// split point or scenario, waives nothing; an expired waiver fails the gate; a malformed
// waiver file exits 2 naming the file and the JSON pointer. Through the real binary, on a
// small model with a fault every split point catches.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/judge/waivers.h"
#include "harness/sweep/sweep.h"
#include "tests/cli_fixture.h"
#include "tests/reports/report_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::expect_one_line_refusal;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using json = nlohmann::json;

Waiver waiver(const std::string& split, const std::string& check, const std::string& expires) {
  return Waiver{
      "s", split, check, "known", "https://bugs.invalid/1", expires, "w.json: /waivers/0"};
}

SweepResult two_diverged_cases() {
  SweepResult r;
  r.scenario_name = "s";
  r.cases.resize(2);
  r.cases[0].key = "split-1";
  r.cases[1].key = "split-2";
  for (CaseResult& c : r.cases) {
    c.verdict = Verdict::kDiverged;
    c.failed_checks = {"tensors", "logits"};
    c.datasets_compared = 10;  // the divergences were found in data
    c.datasets_differing = 2;
  }
  return r;
}

TEST(WaiverApply, ACaseIsWaivedOnlyWhenEveryFailedCheckIsCovered) {
  SweepResult r = two_diverged_cases();
  apply_waivers({waiver("split-1", "tensors", "2030-01-01")}, "2029-06-01", r);
  EXPECT_EQ(r.count(Verdict::kWaived), 0) << "logits is not covered";
  EXPECT_EQ(r.exit_code(), 1);

  r = two_diverged_cases();
  apply_waivers(
      {waiver("split-1", "tensors", "2030-01-01"), waiver("split-1", "logits", "2030-01-01")},
      "2029-06-01", r);
  EXPECT_EQ(r.cases[0].verdict, Verdict::kWaived);
  EXPECT_EQ(r.cases[0].waivers.size(), 2u);
  EXPECT_EQ(r.cases[1].verdict, Verdict::kDiverged) << "another split point";
  EXPECT_EQ(r.exit_code(), 1);

  // Every split point of the check set: the gate passes, with nothing counted as a pass.
  r = two_diverged_cases();
  apply_waivers({waiver("", "tensors", "2030-01-01"), waiver("", "logits", "2030-01-01")},
                "2030-01-01", r);  // the expiry day itself still holds
  EXPECT_EQ(r.count(Verdict::kWaived), 2);
  EXPECT_EQ(r.count(Verdict::kPass), 0);
  EXPECT_EQ(r.exit_code(), 0);

  // Another scenario's waiver matches nothing.
  r = two_diverged_cases();
  Waiver other = waiver("split-1", "", "2030-01-01");
  other.scenario = "t";
  apply_waivers({other}, "2029-06-01", r);
  EXPECT_EQ(r.count(Verdict::kWaived), 0);
  EXPECT_TRUE(r.waiver_failures.empty());
}

TEST(WaiverApply, AnExpiredWaiverWaivesNothingAndFailsTheGate) {
  SweepResult r = two_diverged_cases();
  r.cases[1].verdict = Verdict::kPass;
  r.cases[1].failed_checks.clear();
  apply_waivers({waiver("split-1", "", "2030-01-01")}, "2030-01-02", r);
  EXPECT_EQ(r.cases[0].verdict, Verdict::kDiverged);
  ASSERT_EQ(r.waiver_failures.size(), 1u);
  EXPECT_NE(r.waiver_failures[0].find("expired on 2030-01-01"), std::string::npos);
  EXPECT_NE(r.waiver_failures[0].find("w.json: /waivers/0"), std::string::npos);
  EXPECT_EQ(r.exit_code(), 1);
  // Even when every case passes, an expired waiver of the scenario fails the gate.
  r.cases[0].verdict = Verdict::kPass;
  EXPECT_TRUE(r.conformant());
  EXPECT_EQ(r.exit_code(), 1);
}

class WaiverCliTest : public cli_test::CliFixture {
 protected:
  WaiverCliTest() : CliFixture("splitcheck-waiver-test-") {}
  void SetUp() override {
    CliFixture::SetUp();
    // Three layers, so split-1 and split-2; the fault makes both diverge.
    const json s = {{"name", "waived"},
                    {"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 3}}}}},
                    {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
                    {"partitions", {{"pp", 2}}},
                    {"faults", {"weights.stage_layer_offset"}}};
    write_text(path("s.json"), s.dump(2));
  }
  CliResult sweep(const json& waivers, const std::string& report) {
    write_text(path("waivers.json"), waivers.dump(2));
    return cli("sweep " + quote(path("s.json").string()) + " --waivers " +
               quote(path("waivers.json").string()) + " --report " + quote(path(report).string()));
  }
  static json entry(const std::string& split, const std::string& expires) {
    return {{"scenario", "waived"},
            {"split", split},
            {"reason", "stage offset under investigation"},
            {"link", "https://bugs.invalid/42"},
            {"expires", expires}};
  }
};

TEST_F(WaiverCliTest, WaivedResultsAreReportedApartFromPassesInEveryForm) {
  const CliResult none = sweep({{"waivers", json::array()}}, "none");
  ASSERT_EQ(none.code, 1) << none.out << none.err;

  const CliResult one = sweep({{"waivers", {entry("split-1", "2999-12-31")}}}, "one");
  EXPECT_EQ(one.code, 1) << "split-2 still diverges: " << one.out << one.err;
  EXPECT_NE(one.out.find("0 pass, 1 diverged"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("0 skipped, 1 waived"), std::string::npos) << one.out;

  const CliResult all =
      sweep({{"waivers", {entry("split-1", "2999-12-31"), entry("split-2", "2999-12-31")}}}, "all");
  ASSERT_EQ(all.code, 0) << all.out << all.err;
  const fs::path dir = path("all");
  testing::validate(dir);
  const json r = json::parse(file_text(dir / "report.json"));
  EXPECT_EQ(r["counts"]["waived"], 2);
  EXPECT_EQ(r["counts"]["pass"], 0);
  for (const json& c : r["cases"]) {
    EXPECT_EQ(c["verdict"], "waived");
    ASSERT_EQ(c["waivers"].size(), 1u);
    EXPECT_EQ(c["waivers"][0]["link"], "https://bugs.invalid/42");
  }
  const std::string junit = file_text(dir / "junit.xml");
  EXPECT_EQ(testing::count_of(junit, "<skipped type=\"waived\""), 2u) << junit;
  const std::string md = file_text(dir / "summary.md");
  EXPECT_NE(md.find("### Waived"), std::string::npos) << md;
  EXPECT_NE(md.find("https://bugs.invalid/42"), std::string::npos) << md;
  const std::string html = file_text(dir / "report.html");
  EXPECT_NE(html.find("id=\"waived\""), std::string::npos);
  EXPECT_NE(html.find("data-state=\"waived\""), std::string::npos);
}

TEST_F(WaiverCliTest, AnExpiredWaiverFailsTheGateInEveryForm) {
  const CliResult r = sweep(
      {{"waivers", {entry("split-1", "2999-12-31"), entry("split-2", "2001-01-01")}}}, "expired");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("waiver: EXPIRED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/waivers/1"), std::string::npos) << r.out;
  const fs::path dir = path("expired");
  testing::validate(dir);
  const json j = json::parse(file_text(dir / "report.json"));
  EXPECT_EQ(j["exit_code"], 1);
  ASSERT_EQ(j["waivers"]["failures"].size(), 1u);
  EXPECT_EQ(j["counts"]["waived"], 1);
  EXPECT_EQ(j["counts"]["diverged"], 1);
  EXPECT_NE(file_text(dir / "junit.xml").find("type=\"waiver-expired\""), std::string::npos);
  EXPECT_NE(file_text(dir / "summary.md").find("Expired waivers"), std::string::npos);
  EXPECT_NE(file_text(dir / "report.html").find("id=\"waivers-expired\""), std::string::npos);
}

TEST_F(WaiverCliTest, AWaiverThatDoesNotMatchLeavesTheDivergenceFailing) {
  json wrong_check = entry("split-1", "2999-12-31");
  wrong_check["check"] = "dispatch";  // split-1 fails tensors (and more), not only dispatch
  json wrong_split = entry("split-7", "2999-12-31");
  json wrong_scenario = entry("split-2", "2999-12-31");
  wrong_scenario["scenario"] = "default";
  const CliResult r = sweep({{"waivers", {wrong_check, wrong_split, wrong_scenario}}}, "unmatched");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json j = json::parse(file_text(path("unmatched") / "report.json"));
  EXPECT_EQ(j["counts"]["waived"], 0);
  EXPECT_EQ(j["counts"]["diverged"], 2);
}

TEST_F(WaiverCliTest, AMalformedWaiverFileExitsTwoNamingFileAndPointer) {
  json no_reason = entry("split-1", "2999-12-31");
  no_reason.erase("reason");
  json bad_date = entry("split-1", "2999-02-30");
  json unknown = entry("split-1", "2999-12-31");
  unknown["owner"] = "me";
  json nothing = entry("", "2999-12-31");
  nothing.erase("split");
  json bad_check = entry("split-1", "2999-12-31");
  bad_check["check"] = "vibes";
  const struct {
    json entry;
    std::string place;
  } cases[] = {{no_reason, "/waivers/0/reason"},
               {bad_date, "/waivers/0/expires"},
               {unknown, "/waivers/0/owner"},
               {nothing, "/waivers/0"},
               {bad_check, "/waivers/0/check"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.place);
    expect_one_line_refusal(sweep({{"waivers", {c.entry}}}, "bad"),
                            {path("waivers.json").string(), c.place});
  }
}

// A waiver file nested 10,000 deep (arrays, and objects under an unknown key) is refused
// before the JSON library parses it, exit 2 naming the file, line and column, as a
// scenario file is.
TEST_F(WaiverCliTest, ADeeplyNestedWaiverFileExitsTwoNamingFileLineAndColumn) {
  const int depth = 10000;
  std::string objects;
  for (int i = 0; i < depth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(depth, '}');
  for (const std::string& deep :
       {"{\"waivers\": " + std::string(depth, '[') + std::string(depth, ']') + "}",
        "{\"waivers\": [], \"deep\": " + objects + "}"}) {
    write_text(path("deep.json"), deep);
    expect_one_line_refusal(cli("sweep " + quote(path("s.json").string()) + " --waivers " +
                                quote(path("deep.json").string())),
                            {path("deep.json").string() + ":1:", "nested deeper than 16 levels"});
  }
}

}  // namespace
}  // namespace splitcheck
