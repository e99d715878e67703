// IEEE 754 binary16 (float16) as the dump stores it: the bits an outside engine computed,
// read exactly. Nothing in K3-mini computes in float16; the harness compares and prints it.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace splitcheck {

// The float32 value of float16 bits (exact: every float16 is a float32), NaN payloads kept
// in the top mantissa bits.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  const float sub = std::ldexp(static_cast<float>(mant), -24);  // subnormal or zero
  return sign ? -sub : sub;
}

}  // namespace splitcheck
