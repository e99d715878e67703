// Small helpers the drafters share: kernel calls that return fresh tensors where their
// input is (so a drafter whose activations live on the device queues its kernels without
// a host wait), and the host row-append caches EAGLE-3-lite keeps its keys and values in.
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

// `t` on `device`: itself when it is there already, else a copy.
inline Tensor on_device(const Tensor& t, Device device) {
  return t.device() == device ? t : t.to(device);
}

// out = bf16(x W) through the registry's linear kernel, written into `out` (a view of
// rows of a larger tensor, on x's device).
inline void linear_into(const KernelContext& ctx, const Tensor& x, const Tensor& w, Tensor out) {
  LinearArgs a{&x, &w, &out};
  linear(ctx, a);
}

// bf16(x W) through the registry's linear kernel, on x's device.
inline Tensor apply_linear(const KernelContext& ctx, const Tensor& x, const Tensor& w) {
  Tensor out = Tensor::zeros(DType::kBF16, {x.dim(0), w.dim(1)}, x.device());
  linear_into(ctx, x, w, out);
  return out;
}

// rmsnorm(x, w) through the registry's rms_norm kernel, on x's device.
inline Tensor apply_norm(const KernelContext& ctx, const Tensor& x, const Tensor& w, float eps) {
  Tensor out = Tensor::zeros(DType::kBF16, x.shape(), x.device());
  RmsNormArgs a{&x, &w, eps, &out};
  rms_norm(ctx, a);
  return out;
}

}  // namespace splitcheck::draft
