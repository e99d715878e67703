// bfloat16 storage type and the one conversion the whole project uses.
//
// SPEC 1: float32 -> bfloat16 rounds to nearest, ties to even; NaN stays NaN.
// bf16 -> float32 is exact (a shift).
#pragma once

#include <bit>
#include <cstdint>

namespace splitcheck {

struct bf16 {
  uint16_t bits = 0;
};

inline float to_f32(bf16 v) { return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16); }

inline bf16 to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    // NaN: keep sign and the top mantissa bits, force quiet so it never becomes Inf.
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// Round a float32 through bf16 and back: the value a kernel stores.
inline float round_bf16(float x) { return to_f32(to_bf16(x)); }

}  // namespace splitcheck
