#include "kernels/elementwise.h"

#include <stdexcept>

#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {

Tensor add_bf16(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::kBF16 || b.dtype() != DType::kBF16 || a.shape() != b.shape() ||
      a.device() != b.device())
    throw std::invalid_argument("add_bf16: operands of shapes " + shape_string(a.shape()) +
                                " and " + shape_string(b.shape()) +
                                " (or dtypes, devices) differ");
  Tensor out = Tensor::zeros(DType::kBF16, a.shape(), a.device());
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

}  // namespace splitcheck
