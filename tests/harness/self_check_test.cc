// The self-determinism gate (sweep --self-check): a PP=1 that does not reproduce itself
// makes the sweep refuse to judge (exit 4, the first difference named), never report a
// PP divergence. Nondeterminism is injected through the kernel registry's test-only
// variant rms_norm.nondeterministic_for_test, armed by its test hook.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "harness/cli/sweep_cli.h"
#include "harness/sweep/sweep.h"
#include "kernels/dispatch.h"
#include "tests/reports/report_fixture.h"

namespace splitcheck {
namespace {

// A two-layer k3-tiny scenario with one short prompt and its one PP=2 split point.
Scenario small_scenario() {
  const nlohmann::json j = {
      {"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}},
      {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
      {"partitions", {{"pp", 2}}}};
  Result<Scenario> s = parse_scenario(j, "self-check.json", "/");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(*s) : Scenario{};
}

// Disarms the hook however the test ends.
struct ArmedNondeterminism {
  ArmedNondeterminism() { arm_nondeterministic_kernel_for_test(true); }
  ~ArmedNondeterminism() { arm_nondeterministic_kernel_for_test(false); }
};

TEST(SelfCheck, ADeterministicPp1PassesAndTheSweepJudges) {
  SweepOptions opts;
  opts.self_check = true;
  Result<SweepResult> r = run_sweep(small_scenario(), opts);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->self_check.ran);
  EXPECT_TRUE(r->self_check.reproduced) << r->self_check.first_difference;
  EXPECT_GT(r->self_check.datasets_compared, 0);
  EXPECT_FALSE(r->refused_to_judge());
  ASSERT_EQ(r->cases.size(), 1u);
  EXPECT_EQ(r->cases[0].verdict, Verdict::kPass) << r->cases[0].message;
  EXPECT_EQ(r->exit_code(), 0);
}

TEST(SelfCheck, ANondeterministicKernelIsRefusedNeverReportedAsADivergence) {
  ASSERT_GE(find_kernel("rms_norm", "nondeterministic_for_test"), 0);
  {
    // Without the gate the injected difference is blamed on the partition: the lie the
    // gate exists to prevent.
    ArmedNondeterminism armed;
    SweepOptions no_gate;
    Result<SweepResult> r = run_sweep(small_scenario(), no_gate);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->cases.size(), 1u);
    EXPECT_EQ(r->cases[0].verdict, Verdict::kDiverged);
  }
  ArmedNondeterminism armed;
  SweepOptions opts;
  opts.self_check = true;
  Result<SweepResult> r = run_sweep(small_scenario(), opts);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->refused_to_judge());
  EXPECT_FALSE(r->self_check.reproduced);
  EXPECT_TRUE(r->cases.empty()) << "no split point may be judged";
  EXPECT_EQ(r->count(Verdict::kDiverged), 0);
  EXPECT_EQ(r->exit_code(), 4);
  EXPECT_GT(r->self_check.datasets_differing, 0);
  // The first difference names where and the two bit patterns: the flip hit the first
  // rms_norm call, the final norm of forward 0, so its logits are the first to differ.
  EXPECT_NE(r->self_check.first_difference.find("forward 0 logits token 0"), std::string::npos)
      << r->self_check.first_difference;
  EXPECT_NE(r->self_check.first_difference.find(" != "), std::string::npos)
      << r->self_check.first_difference;
}

// A refusal writes the report it was asked for (sweep --self-check --report, run in this
// process so that the test-only kernel is armed): verdict "refused", exit code 4, the
// first difference, no case and no pass in any of the four forms.
TEST(SelfCheck, ARefusalWritesAReportThatShowsItAndNoPass) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("splitcheck_self_check_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path scenario = dir / "self-check.json";
  {
    std::ofstream out(scenario);
    out << resolved_scenario_json(small_scenario()).dump(2);
  }
  const fs::path report = dir / "report";
  CLI::App app;
  SweepCli sweep;
  sweep.add_to(app);
  app.parse("sweep " + scenario.string() + " --self-check --threads 1 --report " + report.string(),
            false);
  int code = -1;
  {
    ArmedNondeterminism armed;
    code = sweep.run();
  }
  EXPECT_EQ(code, 4);
  ASSERT_TRUE(fs::exists(report / "report.json"));
  const nlohmann::json r = nlohmann::json::parse(testing::read_text(report / "report.json"));
  EXPECT_EQ(r["verdict"], "refused");
  EXPECT_EQ(r["exit_code"], 4);
  EXPECT_TRUE(r["cases"].empty());
  EXPECT_EQ(r["counts"]["pass"], 0);
  EXPECT_EQ(r["counts"]["total"], 0);
  EXPECT_EQ(r["self_check"]["reproduced"], false);
  const std::string first = r["self_check"]["first_difference"];
  EXPECT_NE(first.find("forward 0 logits token 0"), std::string::npos) << first;
  testing::validate(report);
  const std::string html = testing::read_text(report / "report.html");
  EXPECT_NE(html.find("REFUSED"), std::string::npos);
  EXPECT_NE(html.find("forward 0 logits token 0"), std::string::npos);
  EXPECT_EQ(html.find("CONFORMANT"), std::string::npos);
  const std::string md = testing::read_text(report / "summary.md");
  EXPECT_NE(md.find("REFUSED"), std::string::npos);
  EXPECT_NE(md.find("forward 0 logits token 0"), std::string::npos);
  EXPECT_EQ(md.find("CONFORMANT"), std::string::npos);
  const std::string junit = testing::read_text(report / "junit.xml");
  EXPECT_NE(junit.find("name=\"self-check\""), std::string::npos);
  EXPECT_NE(junit.find("<error type=\"not-reproducible\""), std::string::npos);
  EXPECT_NE(junit.find("forward 0 logits token 0"), std::string::npos);
  EXPECT_EQ(junit.find("failures=\"0\" errors=\"0\""), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace splitcheck
