// Every committed scenario is a regression test: the sweep must conclude what its
// `expect` block says (the must-pass list of the project).
#include <gtest/gtest.h>

#include <filesystem>

#include "harness/sweep.h"

namespace splitcheck {
namespace {

std::vector<std::string> committed_scenarios() {
  std::vector<std::string> names;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios")) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
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
  if (s->faults.empty()) {
    EXPECT_TRUE(r->conformant()) << "false alarm without faults in " << GetParam();
  } else {
    EXPECT_FALSE(r->conformant()) << "fault not caught in " << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, CommittedScenario, ::testing::ValuesIn(committed_scenarios()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace splitcheck
