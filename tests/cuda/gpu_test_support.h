// Shared by the CUDA tests: skip (with the reason) unless a CUDA device can run kernels
// here, and deterministic test tensors on either device.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/tensor.h"
#include "reference/splitmix.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck::testing {

// Why the CUDA tests cannot run here, or empty.
inline std::string gpu_unavailable() {
#ifdef SPLITCHECK_HAVE_CUDA
  return cuda::unavailable_reason();
#else
  return "this build has no CUDA backend (configure with -DSPLITCHECK_CUDA=ON)";
#endif
}

#define SPLITCHECK_REQUIRE_GPU()                                      \
  do {                                                                \
    const std::string why = ::splitcheck::testing::gpu_unavailable(); \
    if (!why.empty()) GTEST_SKIP() << "CUDA test skipped: " << why;   \
  } while (0)

// A bf16 tensor of values scale * u (+ offset), u uniform in [-1, 1) from `seed`.
inline Tensor random_bf16(Shape shape, uint64_t seed, float scale, float offset = 0.0f) {
  Tensor t = Tensor::zeros(DType::kBF16, std::move(shape));
  bf16* d = t.data<bf16>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t r = splitmix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(static_cast<int32_t>(r >> 40) - (1 << 23)) / 8388608.0f;
    d[i] = to_bf16(offset + scale * u);
  }
  return t;
}

// Elements of two same-shaped tensors (bf16 or float32) whose values differ, and the
// largest |a - b| relative to the largest |a|.
struct Difference {
  int64_t differing = 0;
  int64_t total = 0;
  double max_rel = 0.0;
};
inline double value_at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kBF16) return to_f32(t.data<bf16>()[i]);
  if (t.dtype() == DType::kI32) return t.data<int32_t>()[i];
  return t.data<float>()[i];
}
inline Difference difference(const Tensor& a0, const Tensor& b0) {
  const Tensor a = a0.to(Device::kCpu), b = b0.to(Device::kCpu);
  Difference d;
  d.total = a.numel();
  double max_abs = 0.0, max_diff = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = value_at(a, i), y = value_at(b, i);
    max_abs = std::max(max_abs, std::fabs(x));
    if (x != y || std::isnan(x) != std::isnan(y)) ++d.differing;
    max_diff = std::max(max_diff, std::fabs(x - y));
  }
  d.max_rel = max_abs > 0 ? max_diff / max_abs : max_diff;
  return d;
}

}  // namespace splitcheck::testing
