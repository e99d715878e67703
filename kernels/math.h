// Scalar float32 functions with results fixed by this code, not by the C library.
//
// SPEC 1 asks for the same bits on every machine of one architecture. glibc picks
// exp/expf implementations at run time (FMA or not), so exp is computed here with a
// fixed range reduction and polynomial; sqrt and division are IEEE-exact already.
// Built with -ffp-contract=off so no multiply-add is fused behind our back.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace splitcheck::fmath {

// exp(x) for float32: x = k*ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 Taylor
// polynomial in Horner form (error below 1 ulp in float32), then scaled by 2^k.
inline float exp(float x) {
  if (std::isnan(x)) return x;
  if (x > 88.72283f) return std::numeric_limits<float>::infinity();
  if (x < -103.97208f) return 0.0f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;          // exact in float32 (few bits)
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;  // ln2 - kLn2Hi
  const float kf = std::nearbyint(x * kLog2e);
  const float r = (x - kf * kLn2Hi) - kf * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int k = static_cast<int>(kf);
  // Scale by 2^k in two steps so subnormal results stay exact-ish and no overflow occurs.
  int k1 = k / 2;
  int k2 = k - k1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  return p * s1 * s2;
}

inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }

inline float sigmoid(float x) { return 1.0f / (1.0f + fmath::exp(-x)); }

inline float silu(float x) { return x * sigmoid(x); }

// softplus(x) = log(1 + exp(x)); used only inside exp(-softplus(x)) = 1 / (1 + exp(x)),
// which is what KDA's decay needs, so the decay is computed directly without a log.
inline float decay_from_logit(float x) { return 1.0f / (1.0f + fmath::exp(x)); }

}  // namespace splitcheck::fmath
