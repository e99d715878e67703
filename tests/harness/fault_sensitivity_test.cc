// Fault sensitivity (issue 14): every committed fault scenario is caught by the check SPEC 6
// names, silent at the split points its fault cannot reach, and the same scenarios without
// their faults (the fixed protocol) raise no false alarm. Prints the table. The scenarios
// without serving run at three model seeds, one test each, at the representative split
// points of their fault's reach (faults.h: one split point per class the code under test
// tells apart, reached and not); the committed-scenario test sweeps every split point at the
// preset's seed. The three serving ones (each sweep serves 16 requests per split point)
// at one seed other than their committed one. `splitcheck sensitivity` runs any of them
// at any seeds, every split point.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "harness/gates/sensitivity.h"
#include "harness/scenario/faults.h"

namespace splitcheck {
namespace {

// The preset's seed ("K3MINI") and two others.
const std::vector<uint64_t> kSeeds = {0x4b334d494e49ull, 1234, 7};
// Seed 1234 found batch.stale_microbatch_state's heap corruption (serving_test.cc).
const std::vector<uint64_t> kServingSeeds = {1234};

// The committed fault scenarios that serve (`serving` block) or not.
std::vector<std::string> fault_scenarios(bool serving) {
  std::vector<std::string> out;
  for (const std::string& path : committed_fault_scenarios()) {
    Result<Scenario> s = load_scenario(path);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (s.is_ok() && s->serving.enabled == serving) out.push_back(path);
  }
  return out;
}

void expect_every_row_caught(const std::vector<std::string>& paths,
                             const std::vector<uint64_t>& seeds) {
  ASSERT_FALSE(paths.empty());
  SweepOptions options;
  options.threads = 2;
  Result<SensitivityTable> t =
      fault_sensitivity(paths, seeds, options, SensitivitySplits::kRepresentative);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  std::cout << sensitivity_table_text(*t);
  ASSERT_EQ(t->rows.size(), paths.size() * seeds.size());
  for (const SensitivityRow& r : t->rows) {
    SCOPED_TRACE(r.scenario + " seed " + std::to_string(r.seed));
    const FaultInfo* info = find_fault(r.fault);
    ASSERT_NE(info, nullptr);
    EXPECT_TRUE(r.caught_as_specified)
        << r.caught << " caught, " << r.failing_elsewhere << " failed elsewhere";
    EXPECT_EQ(r.false_alarms, 0);
    EXPECT_GT(r.fixed_split_points, 0);
    // Caught wherever the fault reaches, identical to PP=1 wherever it cannot; a fault that
    // does not reach every partition is swept where it does and where it does not.
    EXPECT_GT(r.reached, 0);
    EXPECT_EQ(r.reached_caught, r.reached);
    EXPECT_EQ(r.unreached_identical, r.unreached);
    if (info->reach == FaultReach::kTapAtStageEnd || info->reach == FaultReach::kOffBlockBoundary) {
      EXPECT_GT(r.unreached, 0);
    }
    if (r.fault == "handoff.no_zero_delta") {
      EXPECT_GT(r.non_aligned, 0);
      EXPECT_GT(r.aligned, 0);
      EXPECT_EQ(r.non_aligned_dispatch, r.non_aligned);
      EXPECT_EQ(r.aligned_identical, r.aligned);
    }
    // Every split point, at default settings: the stage under test computes every layer.
    if (r.fault == "weights.stage_layer_offset" || r.fault == "dispatch.stage_context_fallback" ||
        r.fault == "weights.rebound_after_load") {
      EXPECT_EQ(r.caught, r.split_points);
    }
  }
  EXPECT_TRUE(t->all_caught());
}

// One test per seed (so ctest runs them side by side); in each, PP=1 runs once per fixed
// protocol and every fault of that protocol is judged against it.
class FaultSensitivityAtSeed : public ::testing::TestWithParam<uint64_t> {};

TEST_P(FaultSensitivityAtSeed, EveryFaultCaughtWithNoFalseAlarm) {
  expect_every_row_caught(fault_scenarios(false), {GetParam()});
}

INSTANTIATE_TEST_SUITE_P(ThreeSeeds, FaultSensitivityAtSeed, ::testing::ValuesIn(kSeeds),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return "seed_" + std::to_string(info.param);
                         });

TEST(FaultSensitivity, EveryServingFaultCaughtAtAnotherSeedWithNoFalseAlarm) {
  expect_every_row_caught(fault_scenarios(true), kServingSeeds);
}

// The representative split points of each reach, on k3-tiny (32 layers, blocks of 8, taps
// at 0, 7, 16, 25, 32): the first and last split points (a stage of one layer), one between
// blocks and taps, one at a tap off a block boundary, one on a block boundary, one at both.
TEST(FaultSensitivity, RepresentativeSplitPointsCoverEveryClassReachedAndNot) {
  const std::vector<int> taps = {0, 7, 16, 25, 32};
  const std::vector<int> want = {1, 2, 7, 8, 16, 31};
  for (FaultReach reach : {FaultReach::kEveryPartition, FaultReach::kTapAtStageEnd,
                           FaultReach::kOffBlockBoundary, FaultReach::kPartitionPlan})
    EXPECT_EQ(representative_split_points(reach, 32, 8, taps), want);
  // 8 layers, blocks of 4, taps at 3 and 5: the second tap off a block boundary adds nothing.
  const std::vector<int> two_taps = {3, 5};
  EXPECT_EQ(representative_split_points(FaultReach::kEveryPartition, 8, 4, two_taps),
            (std::vector<int>{1, 2, 3, 4, 7}));
  const int at7[] = {7}, at8[] = {8}, at7_8[] = {7, 8};
  EXPECT_TRUE(fault_reaches(FaultReach::kTapAtStageEnd, at7, 8, taps));
  EXPECT_FALSE(fault_reaches(FaultReach::kTapAtStageEnd, at8, 8, taps));
  EXPECT_FALSE(fault_reaches(FaultReach::kOffBlockBoundary, at8, 8, taps));
  EXPECT_TRUE(fault_reaches(FaultReach::kOffBlockBoundary, at7_8, 8, taps));
  EXPECT_FALSE(fault_reaches(FaultReach::kEveryPartition, {}, 8, taps));
}

// Every fault of the registry has a committed scenario that the two tests above sweep.
TEST(FaultSensitivity, EveryRegisteredFaultHasACommittedScenario) {
  const std::vector<std::string> paths = committed_fault_scenarios();
  ASSERT_GE(paths.size(), fault_registry().size());
  std::vector<std::string> swept;
  for (const std::string& path : paths) {
    Result<Scenario> s = load_scenario(path);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ASSERT_FALSE(s->faults.empty()) << path;
    swept.push_back(s->faults.front());
  }
  for (const FaultInfo& f : fault_registry())
    EXPECT_NE(std::find(swept.begin(), swept.end(), f.id), swept.end()) << f.id;
}

// The table fails closed: a scenario with no fault is refused, and a row that is not
// caught or raised a false alarm makes all_caught() false.
TEST(FaultSensitivity, FailsClosed) {
  Result<SensitivityTable> t = fault_sensitivity(
      {std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json"}, {1234}, SweepOptions{});
  EXPECT_FALSE(t.is_ok());
  SensitivityTable empty;
  EXPECT_FALSE(empty.all_caught());
  SensitivityRow row;
  row.fault = "tap.boundary_uses_prefix";
  row.caught_as_specified = true;
  row.fixed_split_points = 31;
  SensitivityTable one{{1234}, {row}};
  EXPECT_TRUE(one.all_caught());
  one.rows[0].false_alarms = 1;
  EXPECT_FALSE(one.all_caught());
  one.rows[0].false_alarms = 0;
  one.rows[0].unreached = 28;
  one.rows[0].unreached_identical = 27;
  EXPECT_FALSE(one.all_caught());
  one.rows[0].unreached_identical = 28;
  EXPECT_TRUE(one.all_caught());
  one.rows[0].caught_as_specified = false;
  EXPECT_FALSE(one.all_caught());
}

}  // namespace
}  // namespace splitcheck
