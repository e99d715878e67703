// Serving with the EAGLE-3-lite drafter (SPEC 3.4 with SPEC 3.2's eagle3): one drafter per
// request fed by the target's three taps. Conformant at cuts around the capture ids, and
// every serving fault, and the tap fault, caught there.
#include <gtest/gtest.h>

#include "harness/sweep/sweep.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

Scenario eagle3_serving(std::vector<std::string> faults) {
  Scenario s = committed_scenario("serving-eagle3");
  s.partitions.mode = "list";
  s.partitions.cuts = {{2}, {16}};  // capture ids 2 and 16: each tap at a stage's end
  s.faults = std::move(faults);
  s.expect = nlohmann::json::object();
  return s;
}

TEST(ServingEagle3, EveryRequestSpeculatesWithItsOwnDrafterBitIdenticalToPP1) {
  Result<SweepResult> r = run_sweep(eagle3_serving({}), SweepOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->cases.size(), 2u);
  for (const CaseResult& c : r->cases) EXPECT_EQ(c.verdict, Verdict::kPass) << c.message;
  EXPECT_TRUE(r->pp1_acceptance.speculative);
  EXPECT_EQ(r->pp1_drafter.method, "eagle3");
  // Some verify was partly rejected, so rollbacks ran in every engine.
  EXPECT_GT(r->pp1_acceptance.accepted_histogram.front(), 0);
  EXPECT_EQ(r->batch_invariance.identical, r->batch_invariance.requests);
  EXPECT_GT(r->batch_invariance.requests, 1);
}

class ServingEagle3Fault : public ::testing::TestWithParam<std::string> {};

TEST_P(ServingEagle3Fault, CaughtAtEveryCut) {
  Result<SweepResult> r = run_sweep(eagle3_serving({GetParam()}), SweepOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const CaseResult& c : r->cases) {
    EXPECT_EQ(c.verdict, Verdict::kDiverged) << c.key;
    EXPECT_FALSE(c.diverged_requests.empty()) << c.key;
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, ServingEagle3Fault,
                         ::testing::Values("spec.rollback_last_stage_only",
                                           "batch.stale_microbatch_state",
                                           "prefill.chunk_token_dropped",
                                           "tap.boundary_uses_prefix"),
                         ParamTestName());

}  // namespace
}  // namespace splitcheck
