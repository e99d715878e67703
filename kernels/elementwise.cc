#include "kernels/elementwise.h"

#include <stdexcept>
#include <string>

#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {

namespace {

// The result tensor of a + b, once their dtypes (both `dtype`), shapes and devices agree.
Tensor sum_of(const char* name, DType dtype, const Tensor& a, const Tensor& b) {
  if (a.dtype() != dtype || b.dtype() != dtype || a.shape() != b.shape() ||
      a.device() != b.device())
    throw std::invalid_argument(std::string(name) + ": operands of shapes " +
                                shape_string(a.shape()) + " and " + shape_string(b.shape()) +
                                " (or dtypes, devices) differ");
  return Tensor::for_overwrite(dtype, a.shape(), a.device());
}

}  // namespace

Tensor add_bf16(const Tensor& a, const Tensor& b) {
  Tensor out = sum_of("add_bf16", DType::kBF16, a, b);
#ifdef SPLITCHECK_HAVE_CUDA
  if (a.device() == Device::kCuda) {
    cuda::add_bf16(static_cast<const uint16_t*>(a.address()),
                   static_cast<const uint16_t*>(b.address()), static_cast<uint16_t*>(out.address()),
                   a.numel());
    return out;
  }
#endif
  const bf16* x = a.data<bf16>();
  const bf16* y = b.data<bf16>();
  bf16* o = out.data<bf16>();
  for (int64_t i = 0; i < a.numel(); ++i) o[i] = to_bf16(to_f32(x[i]) + to_f32(y[i]));
  return out;
}

Tensor add_f32(const Tensor& a, const Tensor& b) {
  Tensor out = sum_of("add_f32", DType::kF32, a, b);
#ifdef SPLITCHECK_HAVE_CUDA
  if (a.device() == Device::kCuda) {
    cuda::add_f32(static_cast<const float*>(a.address()), static_cast<const float*>(b.address()),
                  static_cast<float*>(out.address()), a.numel());
    return out;
  }
#endif
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) o[i] = x[i] + y[i];
  return out;
}

}  // namespace splitcheck
