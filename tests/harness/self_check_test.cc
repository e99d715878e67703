// The self-determinism gate (sweep --self-check): a PP=1 that does not reproduce itself
// makes the sweep refuse to judge (exit 4, the first difference named), never report a
// PP divergence. Nondeterminism is injected through the kernel registry's test-only
// variant rms_norm.nondeterministic_for_test, armed by its test hook.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/verdict/sweep.h"
#include "kernels/dispatch.h"

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
    // (Reuse off: with it on, the split point would take PP=1's flipped layer outcome.)
    ArmedNondeterminism armed;
    SweepOptions no_gate;
    no_gate.reuse = ReuseMode::kOff;
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

}  // namespace
}  // namespace splitcheck
