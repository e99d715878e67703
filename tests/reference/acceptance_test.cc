// SPEC 3.3: the weights make acceptance meaningful and the verify loop fully exercised.
// On the default workload both drafters stay lossless against plain greedy decoding,
// every accepted length 0..gamma occurs (full acceptance with its bonus token, and a
// rejection at every position), acceptance lies in the range real drafters reach, and
// the seeded departure rate controls it.
#include <gtest/gtest.h>

#include <string>

#include "harness/engine/run.h"
#include "harness/scenario/scenario.h"
#include "reference/spec_methods.h"
#include "reference/speculative.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

Scenario default_scenario() {
  Scenario out = committed_scenario("default");
  out.dump_level = DumpLevel::kSummary;
  return out;
}

Scenario with_method(Scenario s, const std::string& method) {
  s.speculative.method = method;
  s.capture_ids = method_default_capture_ids(method, s.model.num_hidden_layers);
  return s;
}

TEST(Departure, IsAPureFunctionOfSeedRequestPositionAndProposal) {
  const Departure none{7, 0.0}, all{7, 1.0}, half{7, 0.5};
  int departed = 0, n = 0;
  for (int64_t request = 0; request < 4; ++request) {
    for (int64_t position = 0; position < 64; ++position) {
      for (int k = 1; k <= 7; ++k) {
        EXPECT_FALSE(none.departs(request, position, k));
        EXPECT_TRUE(all.departs(request, position, k));
        EXPECT_EQ(half.departs(request, position, k), half.departs(request, position, k));
        departed += half.departs(request, position, k);
        ++n;
      }
    }
  }
  // The rate is the departure probability: 1792 draws at 0.5.
  EXPECT_GT(departed, n * 4 / 10);
  EXPECT_LT(departed, n * 6 / 10);
  // Another seed departs elsewhere.
  int differ = 0;
  for (int64_t position = 0; position < 64; ++position)
    differ += half.departs(0, position, 1) != Departure{8, 0.5}.departs(0, position, 1);
  EXPECT_GT(differ, 0);
}

TEST(Departure, SecondChoiceIsTheLowestIndexMaximumBesideTheBest) {
  const float scores[] = {1.0f, 3.0f, 2.0f, 2.0f};
  EXPECT_EQ(second_choice(scores, 4, 1), 2);
  EXPECT_EQ(second_choice(scores, 4, 2), 1);
  const float one[] = {5.0f};
  EXPECT_EQ(second_choice(one, 1, 0), 0);
}

class DefaultWorkload : public ::testing::TestWithParam<std::string> {};

TEST_P(DefaultWorkload, LosslessWithEveryAcceptedLengthAndRealisticAcceptance) {
  const Scenario base = default_scenario();
  Result<ReferenceRun> greedy = run_reference(with_method(base, "none"));
  ASSERT_TRUE(greedy.is_ok()) << greedy.status().message();
  Result<ReferenceRun> spec = run_reference(with_method(base, GetParam()));
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  ASSERT_TRUE(spec->summary.speculative);
  ASSERT_EQ(spec->generation.sequences.size(), greedy->generation.sequences.size());
  for (size_t p = 0; p < greedy->generation.sequences.size(); ++p)
    EXPECT_EQ(spec->generation.sequences[p].emitted, greedy->generation.sequences[p].emitted)
        << GetParam() << " prompt " << p;
  const SpeculativeResult& r = spec->summary.spec;
  ASSERT_EQ(r.accepted_histogram.size(), static_cast<size_t>(base.speculative.gamma) + 1);
  int64_t steps = 0, accepted = 0;
  for (size_t a = 0; a < r.accepted_histogram.size(); ++a) {
    EXPECT_GT(r.accepted_histogram[a], 0) << GetParam() << ": accepted length " << a << " never";
    steps += r.accepted_histogram[a];
    accepted += static_cast<int64_t>(a) * r.accepted_histogram[a];
  }
  EXPECT_EQ(steps, r.steps);
  EXPECT_EQ(accepted, r.accepted_total);
  // The range real drafters reach (the seed's DSpark: 53.6%, 4.75 tokens per forward).
  EXPECT_GE(r.acceptance_rate, 0.3) << GetParam();
  EXPECT_LE(r.acceptance_rate, 0.8) << GetParam();
  std::printf("[ %s ] %lld steps, acceptance rate %.3f, tokens per forward %.3f\n",
              GetParam().c_str(), static_cast<long long>(r.steps), r.acceptance_rate,
              r.tokens_per_forward);
}

INSTANTIATE_TEST_SUITE_P(Methods, DefaultWorkload, ::testing::Values("dspark", "eagle3"),
                         [](const auto& info) { return info.param; });

TEST(DefaultWorkload, AHighDepartureRateLowersAcceptanceAndStaysLossless) {
  Scenario s = default_scenario();
  s.workload.max_new_tokens = 16;
  Result<ReferenceRun> greedy = run_reference(with_method(s, "none"));
  ASSERT_TRUE(greedy.is_ok()) << greedy.status().message();
  double rate[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    s.speculative.departure_rate = i == 0 ? 0.0 : 0.8;
    Result<ReferenceRun> spec = run_reference(with_method(s, "dspark"));
    ASSERT_TRUE(spec.is_ok()) << spec.status().message();
    for (size_t p = 0; p < greedy->generation.sequences.size(); ++p)
      EXPECT_EQ(spec->generation.sequences[p].emitted, greedy->generation.sequences[p].emitted);
    rate[i] = spec->summary.spec.acceptance_rate;
  }
  EXPECT_GT(rate[0], 0.3);
  EXPECT_LT(rate[1], 0.1);
}

}  // namespace
}  // namespace splitcheck
