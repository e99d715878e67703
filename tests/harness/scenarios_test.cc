// Every committed scenario is a regression test: the sweep must conclude what its
// `expect` block says (the must-pass list of the project), with every call it judges
// computed by the engine under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "harness/engine/generation.h"
#include "harness/engine/run.h"
#include "harness/reports/report.h"
#include "harness/sweep/sweep.h"
#include "reference/engine.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

std::vector<std::string> committed_scenarios() {
  std::vector<std::string> names;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios")) {
    // external-*.json name an engine outside the project: tests/runner/ sweeps them.
    if (e.path().extension() == ".json" && !e.path().string().ends_with(".schema.json") &&
        !e.path().filename().string().starts_with("external-"))
      names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CommittedScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(CommittedScenario, SweepConcludesWhatExpectSays) {
  const std::string path =
      std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + GetParam() + ".json";
  Result<Scenario> s = load_scenario(path);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_FALSE(s->expect.empty()) << path << " has no expect block";
  Result<SweepResult> r = run_sweep(*s, SweepOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const std::string& f : r->expect_failures) ADD_FAILURE() << GetParam() << ": " << f;
  for (const CaseResult& c : r->cases) {
    EXPECT_NE(c.verdict, Verdict::kError) << c.key << ": " << c.message;
    // Every failing case names a registered check.
    if (c.verdict == Verdict::kDiverged) {
      EXPECT_FALSE(c.failed_checks.empty()) << c.key;
    }
  }
  // The engine under test computed every call it is judged on: a partition that ran made
  // as many layer, head and drafter calls as PP=1 when the protocol is fixed (a serving
  // fault changes the schedule it runs, so there only that it computed).
  EXPECT_GT(r->pp1_computed.layers, 0);
  for (const CaseResult& c : r->cases) {
    if (c.verdict == Verdict::kConfigRejected || c.verdict == Verdict::kError) continue;
    EXPECT_GT(c.computed.layers, 0) << c.key;
    EXPECT_GT(c.computed.heads, 0) << c.key;
    if (s->faults.empty()) {
      EXPECT_EQ(c.computed.layers, r->pp1_computed.layers) << c.key;
      EXPECT_EQ(c.computed.heads, r->pp1_computed.heads) << c.key;
      EXPECT_EQ(c.computed.drafter, r->pp1_computed.drafter) << c.key;
    }
  }
  if (s->faults.empty()) {
    EXPECT_TRUE(r->conformant()) << "false alarm without faults in " << GetParam();
  } else {
    EXPECT_FALSE(r->conformant()) << "fault not caught in " << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, CommittedScenario, ::testing::ValuesIn(committed_scenarios()),
                         ParamTestName());

// scenarios/gpu/: scenarios that only run on a GPU (k3-shape: 79.5 GiB of weights). Each
// must parse as written (its backend cuda) and carry an expect block; its sweep is run by
// scripts/gpu-check.sh (inproc) or scripts/nccl-check.sh (nccl, under mpirun), minutes
// long, so here it is skipped, saying why: where no GPU is, the capability that is missing.
std::vector<std::string> gpu_scenarios() {
  std::vector<std::string> names;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/gpu")) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CommittedGpuScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(CommittedGpuScenario, ParsesAndIsSweptByTheGpuScripts) {
  const std::string dir = std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/gpu";
  const std::string path = dir + "/" + GetParam() + ".json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json j = nlohmann::json::parse(in);
  Result<Scenario> s = parse_scenario(j, path, dir);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->backend, "cuda") << path << ": scenarios/gpu/ holds GPU scenarios";
  EXPECT_FALSE(s->expect.empty()) << path << " has no expect block";
  EXPECT_EQ(s->dump_level, DumpLevel::kSummary) << path << ": large models dump summaries";
  ASSERT_FALSE(s->workload.file.empty());
  EXPECT_TRUE(std::filesystem::exists(s->workload.file)) << s->workload.file;
  const Status here = check_capabilities(*s, path);
  if (!here.is_ok()) GTEST_SKIP() << "not swept on this machine: " << here.message();
  GTEST_SKIP() << GetParam() << " is swept by scripts/"
               << (s->transport == "nccl" ? "nccl-check.sh (K3_SHAPE=1)" : "gpu-check.sh")
               << " (minutes on an H200), not by the unit tests";
}

INSTANTIATE_TEST_SUITE_P(Gpu, CommittedGpuScenario, ::testing::ValuesIn(gpu_scenarios()),
                         ParamTestName());

}  // namespace
}  // namespace splitcheck
