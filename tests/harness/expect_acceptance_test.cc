// A scenario's `expect` block on acceptance (SPEC 3.3): its range and every accepted
// length 0..gamma, each failing closed.
#include <gtest/gtest.h>

#include "harness/judge/expect.h"
#include "harness/sweep/sweep.h"

namespace splitcheck {
namespace {

SweepResult with_histogram(std::vector<int64_t> h, double rate) {
  SweepResult r;
  r.pp1_acceptance.speculative = true;
  r.pp1_acceptance.accepted_histogram = std::move(h);
  r.pp1_acceptance.acceptance_rate = rate;
  return r;
}

TEST(ExpectAcceptance, EveryAcceptedLengthFailsWhenOneNeverOccurs) {
  const nlohmann::json expect = {{"every_accepted_length", true}};
  EXPECT_TRUE(evaluate_expect(expect, with_histogram({1, 2, 3, 1}, 0.5)).empty());
  const std::vector<std::string> f = evaluate_expect(expect, with_histogram({1, 0, 3, 0}, 0.5));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].find("never accepted: 1, 3"), std::string::npos) << f[0];
  // Without a drafter there is no histogram: the expectation is not met either.
  EXPECT_EQ(evaluate_expect(expect, SweepResult{}).size(), 1u);
}

TEST(ExpectAcceptance, RateBoundsFailOutsideTheRange) {
  const nlohmann::json low = {{"acceptance_rate_at_most", 0.2}};
  const nlohmann::json high = {{"acceptance_rate_at_least", 0.3}};
  EXPECT_TRUE(evaluate_expect(low, with_histogram({4, 1}, 0.1)).empty());
  EXPECT_EQ(evaluate_expect(low, with_histogram({1, 4}, 0.5)).size(), 1u);
  EXPECT_TRUE(evaluate_expect(high, with_histogram({1, 4}, 0.5)).empty());
  EXPECT_EQ(evaluate_expect(high, with_histogram({4, 1}, 0.1)).size(), 1u);
  EXPECT_EQ(evaluate_expect(high, SweepResult{}).size(), 1u);
}

}  // namespace
}  // namespace splitcheck
