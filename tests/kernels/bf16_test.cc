// bf16 conversion (SPEC 1): float32 -> bfloat16 rounds to nearest, ties to even, NaN stays
// NaN; bfloat16 -> float32 is exact. Every case states its input and output bit patterns.
#include "kernels/bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace splitcheck {
namespace {

uint16_t round_bits(uint32_t f32_bits) { return to_bf16(std::bit_cast<float>(f32_bits)).bits; }

bool is_bf16_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

// An independent reference for finite inputs: the two bf16 neighbours of x, compared in
// double (exact for these magnitudes), ties to the even pattern.
uint16_t reference_round(uint32_t u) {
  const uint32_t lo = u & 0xffff0000u;
  const uint32_t hi = lo + 0x10000u;  // next bf16 pattern away from zero (may be Inf)
  const double x = std::bit_cast<float>(u);
  const double a = std::bit_cast<float>(lo);
  double b;
  if ((hi & 0x7f800000u) == 0x7f800000u) {
    // The neighbour beyond the largest finite bf16 is Inf; for rounding it stands for 2^128.
    b = std::copysign(std::ldexp(1.0, 128), x);
  } else {
    b = std::bit_cast<float>(hi);
  }
  const double da = std::fabs(x - a);
  const double db = std::fabs(b - x);
  if (da < db) return static_cast<uint16_t>(lo >> 16);
  if (db < da) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1u) == 0 ? lo >> 16 : hi >> 16);
}

TEST(Bf16RoundTest, ExactValuesPassUnchanged) {
  EXPECT_EQ(round_bits(0x3f800000u), 0x3f80u);  // 1.0
  EXPECT_EQ(round_bits(0x00000000u), 0x0000u);  // +0
  EXPECT_EQ(round_bits(0x80000000u), 0x8000u);  // -0 keeps its sign
  EXPECT_EQ(round_bits(0xc0400000u), 0xc040u);  // -3.0
}

TEST(Bf16RoundTest, TieRoundsDownToEvenPattern) {
  // 1 + 2^-8 lies exactly between 0x3f80 (even) and 0x3f81 (odd).
  EXPECT_EQ(round_bits(0x3f808000u), 0x3f80u);
}

TEST(Bf16RoundTest, TieRoundsUpToEvenPattern) {
  // Between 0x3f81 (odd) and 0x3f82 (even).
  EXPECT_EQ(round_bits(0x3f818000u), 0x3f82u);
}

TEST(Bf16RoundTest, JustOffTheTieRoundsToNearest) {
  EXPECT_EQ(round_bits(0x3f808001u), 0x3f81u);
  EXPECT_EQ(round_bits(0x3f807fffu), 0x3f80u);
  EXPECT_EQ(round_bits(0x3f818001u), 0x3f82u);
  EXPECT_EQ(round_bits(0x3f817fffu), 0x3f81u);
}

TEST(Bf16RoundTest, MantissaCarryIntoExponent) {
  // 0x3fff is the largest bf16 below 2.0; a tie above it (odd) carries to 2.0 = 0x4000.
  EXPECT_EQ(round_bits(0x3fff8000u), 0x4000u);
  EXPECT_EQ(round_bits(0x3fffffffu), 0x4000u);
  EXPECT_EQ(round_bits(0xbfffffffu), 0xc000u);
  // The largest finite float rounds up to Inf, as IEEE round-to-nearest does.
  EXPECT_EQ(round_bits(0x7f7fffffu), 0x7f80u);
  EXPECT_EQ(round_bits(0x7f7f7fffu), 0x7f7fu);
}

TEST(Bf16RoundTest, NegativeValuesRoundByMagnitude) {
  EXPECT_EQ(round_bits(0xbf808000u), 0xbf80u);  // tie, even magnitude kept
  EXPECT_EQ(round_bits(0xbf818000u), 0xbf82u);  // tie, rounds away to even
  EXPECT_EQ(round_bits(0xbf808001u), 0xbf81u);
}

TEST(Bf16RoundTest, SubnormalsRoundToNearestEven) {
  EXPECT_EQ(round_bits(0x00008000u), 0x0000u);
  EXPECT_EQ(round_bits(0x00018000u), 0x0002u);
  EXPECT_EQ(round_bits(0x80008000u), 0x8000u);
  EXPECT_EQ(round_bits(0x007fffffu), 0x0080u);  // largest subnormal carries to min normal
}

TEST(Bf16RoundTest, InfinityStaysInfinity) {
  EXPECT_EQ(round_bits(0x7f800000u), 0x7f80u);
  EXPECT_EQ(round_bits(0xff800000u), 0xff80u);
}

TEST(Bf16RoundTest, NanStaysNanAndNeverBecomesInfinity) {
  // NaNs whose payload sits only in the low 16 bits would become Inf under plain rounding.
  for (uint32_t u : {0x7f800001u, 0x7f80ffffu, 0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u,
                     0xffc00000u, 0xffffffffu}) {
    const uint16_t b = round_bits(u);
    EXPECT_TRUE(is_bf16_nan(b)) << std::hex << u << " -> " << b;
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << "sign of " << std::hex << u;
  }
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Bf16RoundTest, AgreesWithIndependentReferenceOnStridedFloat32Sweep) {
  // Every 4099th float32 pattern plus its neighbours around a tie (about 3 million inputs).
  int64_t checked = 0;
  for (uint64_t base = 0; base <= 0xffffffffull; base += 4099) {
    for (uint32_t u : {static_cast<uint32_t>(base), static_cast<uint32_t>(base | 0x8000u),
                       static_cast<uint32_t>((base | 0x8000u) - 1)}) {
      if ((u & 0x7f800000u) == 0x7f800000u) continue;  // Inf and NaN covered above
      ASSERT_EQ(round_bits(u), reference_round(u)) << "input 0x" << std::hex << u;
      ++checked;
    }
  }
  EXPECT_GT(checked, 3000000);
}

TEST(Bf16RoundTripTest, EveryNonNanPatternSurvivesWidenAndRound) {
  int nan_patterns = 0;
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const bf16 v{static_cast<uint16_t>(b)};
    const float f = to_f32(v);
    // Widening is a 16-bit shift.
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    const uint16_t back = to_bf16(f).bits;
    if (is_bf16_nan(static_cast<uint16_t>(b))) {
      ++nan_patterns;
      // NaN payload rule: sign and payload kept, quiet bit forced.
      ASSERT_TRUE(is_bf16_nan(back)) << std::hex << b;
      ASSERT_EQ(back, b | 0x0040u) << std::hex << b;
      continue;
    }
    ASSERT_EQ(back, b) << "pattern 0x" << std::hex << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(round_bf16(f)), b << 16);
  }
  EXPECT_EQ(nan_patterns, 2 * 127);  // 127 non-zero mantissas, two signs
}

}  // namespace
}  // namespace splitcheck
