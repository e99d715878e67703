// The project's own float32 exp/sigmoid/rsqrt (kernels/math.h): exact where the answer is
// exact, within 2^-22 relative of the true value elsewhere, and saturating at the ends.
#include "kernels/math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace splitcheck {
namespace {

constexpr double kMaxRelError = 0x1p-22;  // two float32 ULP at most; SPEC allows own exp

double rel_error(float got, double want) { return std::fabs(got - want) / std::fabs(want); }

TEST(FmathExpTest, ExactAtZero) {
  EXPECT_EQ(std::bit_cast<uint32_t>(fmath::exp(0.0f)), std::bit_cast<uint32_t>(1.0f));
  EXPECT_EQ(std::bit_cast<uint32_t>(fmath::exp(-0.0f)), std::bit_cast<uint32_t>(1.0f));
}

TEST(FmathExpTest, MultiplesOfLn2GivePowersOfTwo) {
  const double ln2 = std::log(2.0);
  for (int k = -120; k <= 120; ++k) {
    const float x = static_cast<float>(ln2 * k);
    // x is k*ln2 rounded to float32; that rounding alone moves exp(x) away from 2^k by
    // |x - k ln2| relatively, so the bound adds it.
    const double tol = kMaxRelError + 1.01 * std::fabs(static_cast<double>(x) - ln2 * k);
    EXPECT_LE(rel_error(fmath::exp(x), std::ldexp(1.0, k)), tol) << "k = " << k;
  }
}

TEST(FmathExpTest, RelativeErrorAgainstDoubleExpOverMinus80To80) {
  double worst = 0;
  float worst_x = 0;
  for (int i = 0; i <= 1600000; ++i) {
    const float x = -80.0f + static_cast<float>(i) * 1e-4f;
    const double err = rel_error(fmath::exp(x), std::exp(static_cast<double>(x)));
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  EXPECT_LT(worst, kMaxRelError) << "worst at x = " << worst_x;
}

TEST(FmathExpTest, OverflowsToInfinity) {
  EXPECT_TRUE(std::isfinite(fmath::exp(88.0f)));
  EXPECT_LT(rel_error(fmath::exp(88.0f), std::exp(88.0)), kMaxRelError);
  EXPECT_TRUE(std::isfinite(fmath::exp(88.72f)));
  EXPECT_EQ(fmath::exp(88.73f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fmath::exp(1000.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fmath::exp(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
}

TEST(FmathExpTest, UnderflowsToSubnormalsThenZero) {
  // exp(-100) ~ 3.7e-44 is subnormal: within one subnormal step (2^-149) of the truth.
  const float sub = fmath::exp(-100.0f);
  EXPECT_GT(sub, 0.0f);
  EXPECT_LE(std::fabs(sub - std::exp(-100.0)), std::ldexp(1.0, -149));
  EXPECT_LT(rel_error(fmath::exp(-87.0f), std::exp(-87.0)), kMaxRelError);  // still normal
  EXPECT_EQ(fmath::exp(-104.0f), 0.0f);
  EXPECT_EQ(fmath::exp(-1000.0f), 0.0f);
  EXPECT_EQ(fmath::exp(-std::numeric_limits<float>::infinity()), 0.0f);
}

TEST(FmathExpTest, NanStaysNan) {
  EXPECT_TRUE(std::isnan(fmath::exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FmathSigmoidTest, ExactAtZeroAndSaturatesAtTheEnds) {
  EXPECT_EQ(fmath::sigmoid(0.0f), 0.5f);
  EXPECT_EQ(fmath::sigmoid(200.0f), 1.0f);
  EXPECT_EQ(fmath::sigmoid(-200.0f), 0.0f);
  EXPECT_EQ(fmath::silu(0.0f), 0.0f);
  EXPECT_EQ(fmath::decay_from_logit(0.0f), 0.5f);  // exp(-softplus(0)) = 1/2
  EXPECT_LT(rel_error(fmath::sigmoid(1.0f), 1.0 / (1.0 + std::exp(-1.0))), kMaxRelError);
}

TEST(FmathRsqrtTest, ExactOnPowersOfFour) {
  EXPECT_EQ(fmath::rsqrt(4.0f), 0.5f);
  EXPECT_EQ(fmath::rsqrt(0.25f), 2.0f);
  EXPECT_EQ(fmath::rsqrt(1.0f), 1.0f);
}

}  // namespace
}  // namespace splitcheck
