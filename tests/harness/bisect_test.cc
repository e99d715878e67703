// bisect on every committed fault scenario: the cause SPEC 6 expects, a smaller repro,
// and the repro, loaded and swept again, failing the same way.
#include "harness/verdict/bisect.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

// The cause each fault of SPEC 6 must be bisected to.
const std::map<std::string, std::string>& expected_causes() {
  static const std::map<std::string, std::string> m = {
      {"handoff.no_zero_delta", kCauseDispatch},
      {"tap.boundary_uses_prefix", kCauseTapSource},
      {"tap.boundary_rejected", kCauseConfigRejected},
      {"weights.no_boundary_copy", kCauseConfigRejected},
      {"pd.producer_embedding", kCauseEmbedding},
      {"draft.own_embedding", kCauseEmbedding},
      {"draft.vocab_from_embedding", kCauseEmbedding},
      {"tap.embed_resident_by_module", kCauseTapSource},
  };
  return m;
}

std::vector<std::string> fault_scenarios() {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios")) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("fault-") && name.ends_with(".json")) paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

class BisectFaultTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BisectFaultTest, NamesTheCauseAndWritesASmallerReproThatFailsTheSameWay) {
  Result<Scenario> s = load_scenario(GetParam());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_EQ(s->faults.size(), 1u);
  auto want = expected_causes().find(s->faults.front());
  if (want == expected_causes().end())
    GTEST_SKIP() << "no expected cause for " << s->faults.front();

  Result<BisectResult> r = bisect(*s, BisectOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_FALSE(r->conformant);
  EXPECT_EQ(r->finding.cause, want->second) << r->finding.key << ": " << r->finding.message;
  const ScenarioSize& b = r->before;
  const ScenarioSize& a = r->after;
  EXPECT_TRUE(a.layers < b.layers || a.max_new_tokens < b.max_new_tokens ||
              (a.max_prompt_tokens != 0 &&
               (b.max_prompt_tokens == 0 || a.max_prompt_tokens < b.max_prompt_tokens)))
      << "layers " << a.layers << "/" << b.layers << ", tokens " << a.max_new_tokens << "/"
      << b.max_new_tokens;
  EXPECT_EQ(a.partitions, 1);

  const fs::path dir = fs::temp_directory_path() / ("bisect_test_" + s->name);
  fs::create_directories(dir);
  const std::string path = (dir / "repro.json").string();
  ASSERT_TRUE(write_json_atomically(path, r->repro).is_ok());
  Result<Scenario> repro = load_scenario(path);
  ASSERT_TRUE(repro.is_ok()) << repro.status().message();
  Result<SweepResult> again = run_sweep(*repro, SweepOptions{});
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  std::optional<BisectFinding> f = first_failure(*again);
  ASSERT_TRUE(f.has_value()) << "the repro passes";
  EXPECT_EQ(f->cause, want->second);
  EXPECT_EQ(f->key, r->finding.key);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(FaultScenarios, BisectFaultTest, ::testing::ValuesIn(fault_scenarios()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return param_test_name(fs::path(info.param).stem().string());
                         });

TEST(BisectTest, ConformantScenarioHasNothingToBisect) {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  // One split is enough to show the conformant path.
  nlohmann::json j = resolved_scenario_json(*s);
  j["partitions"] = {{"pp", 2}, {"splits", {{16}}}};
  j["workload"]["prompts"] = 1;
  j["workload"]["max_new_tokens"] = 2;
  Result<Scenario> small = parse_scenario(j, "default-small", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  Result<BisectResult> r = bisect(*small, BisectOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->conformant);
  EXPECT_GE(r->sweeps, 1);
}

// A serving fault shows only with several requests in flight: bisect names the request
// that diverged first and shrinks the request count (1 is too few, so it must try more)
// while the cause stays the same, and the repro still fails that way.
TEST(BisectTest, ServingFaultNamesTheRequestAndKeepsOnlyTheRequestsItNeeds) {
  Result<Scenario> s = load_scenario(std::string(SPLITCHECK_SOURCE_DIR) +
                                     "/scenarios/fault-batch-stale-microbatch-state.json");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  // Already small in every other size, so the test spends its sweeps on the requests.
  nlohmann::json j = resolved_scenario_json(*s);
  j["partitions"] = {{"pp", 2}, {"splits", {{4}}}};
  j["model"]["overrides"]["num_hidden_layers"] = 8;
  j["capture_ids"] = {2, 4, 8};
  j["workload"]["max_new_tokens"] = 2;
  j["workload"]["max_prompt_tokens"] = 4;
  Result<Scenario> small = parse_scenario(j, "stale-small", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  ASSERT_GT(small->workload.prompts, 2);

  Result<BisectResult> r = bisect(*small, BisectOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_FALSE(r->conformant);
  EXPECT_GE(r->finding.request, 0) << r->finding.message;
  EXPECT_GT(r->after.prompts, 1);
  EXPECT_LT(r->after.prompts, r->before.prompts);
  EXPECT_GT(r->after.max_in_flight, 0);

  Result<Scenario> repro = parse_scenario(r->repro, "stale-repro", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(repro.is_ok()) << repro.status().message();
  EXPECT_EQ(repro->workload.prompts, r->after.prompts);
  Result<SweepResult> again = run_sweep(*repro, SweepOptions{});
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  std::optional<BisectFinding> f = first_failure(*again);
  ASSERT_TRUE(f.has_value()) << "the repro passes";
  EXPECT_EQ(f->cause, r->finding.cause);
  EXPECT_GE(f->request, 0);
}

}  // namespace
}  // namespace splitcheck
