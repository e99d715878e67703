// Small helpers the drafters share: kernel calls that return fresh tensors, and the
// row-append cache they keep their keys and values in.
#pragma once

#include <vector>

#include "kernels/ops.h"

namespace splitcheck::draft {

// A [n, h] tensor holding the rows of a flat cache.
inline Tensor rows_tensor(const std::vector<bf16>& v, int64_t h) {
  Tensor t = Tensor::zeros(DType::kBF16, {static_cast<int64_t>(v.size()) / h, h});
  std::copy(v.begin(), v.end(), t.data<bf16>());
  return t;
}

// Appends every row of `t` to a flat cache.
inline void append_rows(std::vector<bf16>& cache, const Tensor& t) {
  cache.insert(cache.end(), t.data<bf16>(), t.data<bf16>() + t.numel());
}

// bf16(x W) through the registry's linear kernel.
inline Tensor apply_linear(const KernelContext& ctx, const Tensor& x, const Tensor& w) {
  Tensor out = Tensor::zeros(DType::kBF16, {x.dim(0), w.dim(1)});
  LinearArgs a{&x, &w, &out};
  linear(ctx, a);
  return out;
}

// rmsnorm(x, w) through the registry's rms_norm kernel.
inline Tensor apply_norm(const KernelContext& ctx, const Tensor& x, const Tensor& w, float eps) {
  Tensor out = Tensor::zeros(DType::kBF16, x.shape());
  RmsNormArgs a{&x, &w, eps, &out};
  rms_norm(ctx, a);
  return out;
}

}  // namespace splitcheck::draft
