// The approximate lane: the CPU backend is within it on the default scenario, and it
// fails when an op's output is perturbed (one bf16 ulp per element, or an error of the
// threshold plus one ulp at the output's scale) or when attn_res runs with a wrong eps.
#include "harness/lanes/approx_lane.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <xtensor/xbuilder.hpp>

#include "harness/gates/environment.h"
#include "tests/cli_fixture.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

// The default scenario's calls, captured once for the suite (a PP=1 run of k3-tiny).
const CapturedCalls& default_capture() {
  static const CapturedCalls captured = [] {
    Result<CapturedCalls> c = capture_op_cases(committed_scenario("default"), CaptureOptions{16});
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.is_ok() ? *c : CapturedCalls{};
  }();
  return captured;
}
const std::vector<OpCase>& default_cases() { return default_capture().cases; }

const OpCase* first_case(const std::string& row) {
  for (const OpCase& c : default_cases())
    if (c.row_name() == row) return &c;
  return nullptr;
}

TEST(ApproxLaneTest, CpuIsWithinTheLaneOnTheDefaultScenario) {
  const ApproxLaneResult r = judge_approx_lane(default_cases(), /*cpu=*/true, /*cuda=*/false);
  std::set<std::string> rows;
  for (const RowJudgement& j : r.rows) {
    rows.insert(j.row);
    EXPECT_TRUE(j.cpu_within) << j.row << ": max_rel " << j.cpu.max_rel << ", beyond "
                              << j.cpu.beyond_fraction();
  }
  // Every op of SPEC 2 the engine runs on this scenario is judged.
  for (const char* want : {"attn_res.native", "attn_res.fallback", "embed.gather", "rms_norm.rows",
                           "lm_head.matmul_nt", "argmax.lowest_index", "mla.latent_cache",
                           "kda.recurrent", "dense_mlp.swiglu", "moe.grouped", "linear.matmul",
                           "dense_attention.softmax", kDecoderLayerRow})
    EXPECT_TRUE(rows.count(want)) << want << " was not captured";
  // What it does not judge it names: only the Markov head (an argmax chain over float32
  // scores, compared bit for bit by the sweep), with every call it made.
  const std::map<std::string, int64_t>& not_judged = default_capture().not_judged;
  ASSERT_EQ(not_judged.size(), 1u) << ::testing::PrintToString(not_judged);
  EXPECT_TRUE(not_judged.count("markov_chain.greedy"));
  EXPECT_GT(not_judged.begin()->second, 0);
  EXPECT_TRUE(r.within()) << approx_lane_text(r);
  // And the kernels are not trivially exact: something is not correctly rounded.
  const auto moe = std::find_if(r.rows.begin(), r.rows.end(),
                                [](const RowJudgement& j) { return j.row == "moe.grouped"; });
  ASSERT_NE(moe, r.rows.end());
  EXPECT_GT(moe->cpu.beyond, 0);
}

// Adds `ulps` bf16 ulps (of each element, or of `at_scale` when positive) to every element.
Tensor bumped(const Tensor& out, int ulps, double at_scale = 0) {
  Tensor t = out.clone();
  for (bf16& v : t.span<bf16>()) {
    const float f = to_f32(v);
    const double ulp = at_scale > 0 ? std::ldexp(1.0, std::ilogb(at_scale) - 7)
                                    : std::ldexp(1.0, std::ilogb(f == 0 ? 1e-30f : f) - 7);
    v = to_bf16(static_cast<float>(f + ulps * ulp));
  }
  return t;
}

TEST(ApproxLaneTest, FailsWhenEveryElementIsOneUlpOff) {
  for (const char* row : {"attn_res.native", "moe.grouped", "kda.recurrent", "rms_norm.rows"}) {
    const OpCase* c = first_case(row);
    ASSERT_NE(c, nullptr) << row;
    const f64::Matrix ref = reference_op_case(*c);
    const Tensor out = run_op_case(*c, Device::kCpu);
    LaneErrors good, bad;
    accumulate_errors(good, ref, out);
    accumulate_errors(bad, ref, bumped(out, 1));
    EXPECT_TRUE(within_lane(good, DType::kBF16)) << row;
    EXPECT_FALSE(within_lane(bad, DType::kBF16))
        << row << ": one ulp per element passed: beyond " << bad.beyond_fraction();
  }
}

TEST(ApproxLaneTest, FailsWhenTheErrorIsOneUlpBeyondTheThresholdAtScale) {
  const OpCase* c = first_case("mla.latent_cache");
  ASSERT_NE(c, nullptr);
  const f64::Matrix ref = reference_op_case(*c);
  const Tensor out = run_op_case(*c, Device::kCpu);
  double scale = 0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  // The threshold in ulps at scale, plus one, on one element only.
  const int ulps = static_cast<int>(lane_thresholds(DType::kBF16).max_rel * 128) + 1;
  Tensor one = out.clone();
  const double ulp = std::ldexp(1.0, std::ilogb(scale) - 7);
  one.data<bf16>()[0] = to_bf16(static_cast<float>(to_f32(one.data<bf16>()[0]) + ulps * ulp));
  LaneErrors e;
  accumulate_errors(e, ref, one);
  EXPECT_FALSE(within_lane(e, DType::kBF16)) << "max_rel " << e.max_rel;
}

TEST(ApproxLaneTest, FailsWhenAttnResRunsWithAWrongEps) {
  // The real kernel, run with an epsilon of 0.05 instead of the model's 1e-6, against the
  // float64 reference with the right one.
  const OpCase* c = first_case("attn_res.native");
  ASSERT_NE(c, nullptr);
  OpCase wrong = *c;
  wrong.params["eps"] = 0.05;
  wrong.params["out_eps"] = 0.05;
  LaneErrors e;
  accumulate_errors(e, reference_op_case(*c), run_op_case(wrong, Device::kCpu));
  EXPECT_FALSE(within_lane(e, DType::kBF16))
      << "max_rel " << e.max_rel << ", beyond " << e.beyond_fraction();
}

TEST(ApproxLaneTest, FailsWhenAnArgmaxDisagrees) {
  const OpCase* c = first_case("argmax.lowest_index");
  ASSERT_NE(c, nullptr);
  Tensor out = run_op_case(*c, Device::kCpu);
  LaneErrors good, bad;
  accumulate_errors(good, reference_op_case(*c), out);
  out.data<int32_t>()[0] += 1;
  accumulate_errors(bad, reference_op_case(*c), out);
  EXPECT_TRUE(within_lane(good, DType::kI32));
  EXPECT_FALSE(within_lane(bad, DType::kI32));
}

// A NaN or an infinity on either side that the other does not match is outside the lane:
// NaN against a number, an infinity against a finite value, +inf against -inf, NaN
// against inf. Matched ones (inf and inf, NaN and NaN) are not counted.
TEST(ApproxLaneTest, AnUnmatchedNonFiniteValueIsOutsideTheLane) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto judge = [](double ref, float out) {
    f64::Matrix m = xt::zeros<double>({size_t{1}, size_t{4}});
    Tensor t = Tensor::zeros(DType::kF32, {1, 4});
    for (int i = 0; i < 3; ++i) {
      m(0, i) = 1.0 + i;
      t.data<float>()[i] = static_cast<float>(1.0 + i);
    }
    m(0, 3) = ref;
    t.data<float>()[3] = out;
    LaneErrors e;
    accumulate_errors(e, m, t);
    return e;
  };
  const float finf = std::numeric_limits<float>::infinity();
  const float fnan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* name;
    double ref;
    float out;
  };
  for (const Case& c : {Case{"nan_vs_number", 4.0, fnan}, Case{"inf_vs_number", 4.0, finf},
                        Case{"number_vs_inf", inf, 4.0f}, Case{"inf_vs_neg_inf", -inf, finf},
                        Case{"neg_inf_vs_inf", inf, -finf}, Case{"nan_vs_inf", inf, fnan},
                        Case{"inf_vs_nan", nan, finf}}) {
    const LaneErrors e = judge(c.ref, c.out);
    EXPECT_EQ(e.non_finite, 1) << c.name;
    EXPECT_FALSE(within_lane(e, DType::kF32)) << c.name;
  }
  for (const Case& c : {Case{"inf", inf, finf}, Case{"neg_inf", -inf, -finf},
                        Case{"nan", nan, fnan}, Case{"finite", 4.0, 4.0f}}) {
    const LaneErrors e = judge(c.ref, c.out);
    EXPECT_EQ(e.non_finite, 0) << c.name;
    EXPECT_TRUE(within_lane(e, DType::kF32)) << c.name;
  }
}

TEST(ApproxLaneTest, NothingJudgedIsNotWithin) {
  EXPECT_FALSE(judge_approx_lane({}, true, false).within());
  EXPECT_FALSE(within_lane(LaneErrors{}, DType::kBF16));
}

TEST(ApproxLaneTest, ThresholdsAndFiguresAreInTheJson) {
  const ApproxLaneResult r = judge_approx_lane(default_cases(), true, false);
  const nlohmann::json j = approx_lane_json(r);
  EXPECT_EQ(j["thresholds"]["bfloat16"]["max_rel_error"], lane_thresholds(DType::kBF16).max_rel);
  EXPECT_FALSE(j["thresholds"]["bfloat16"]["why"].get<std::string>().empty());
  ASSERT_FALSE(j["rows"].empty());
  EXPECT_TRUE(j["rows"][0]["cpu"].contains("beyond_rounding_fraction"));
  EXPECT_EQ(j["within"], r.within());
}

}  // namespace
}  // namespace splitcheck

namespace splitcheck {
namespace {

class ApproxCliTest : public cli_test::CliFixture {
 protected:
  ApproxCliTest() : CliFixture("splitcheck-approx-cli-test-") {}
};

TEST_F(ApproxCliTest, CpuLaneExitsZeroAndWritesItsFigures) {
  const cli_test::CliResult r =
      cli("approx --backend cpu --max-calls 4 --json " + cli_test::quote(path("a.json").string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("every op within the approximate lane"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("thresholds bfloat16"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(cli_test::file_text(path("a.json")));
  EXPECT_EQ(j["within"], true);
  EXPECT_EQ(j["backends"]["cuda"], false);
  EXPECT_NE(r.out.find("not judged (no float64 evaluation): markov_chain.greedy"),
            std::string::npos)
      << r.out;
  EXPECT_GT(j["rows_not_judged"].value("markov_chain.greedy", 0), 0) << j.dump();
}

TEST_F(ApproxCliTest, ABackendThisMachineCannotRunIsRefused) {
  if (environment_fingerprint("cuda").value("device", "") == "cuda")
    GTEST_SKIP() << "a CUDA device is usable here";
  for (const char* backend : {"cuda", "both"}) {
    const cli_test::CliResult r = cli(std::string("approx --backend ") + backend);
    EXPECT_EQ(r.code, 2) << backend << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace splitcheck
