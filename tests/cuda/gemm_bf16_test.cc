// gemm_bf16 (kernels/cuda/gemm.cu) on each of its paths (the skinny kernel, the
// tensor-core kernel, cuBLASLt with a bf16 output or through a float32 buffer): the bits
// of gemm()'s float32 product rounded once to bf16. Skipped, saying why, without a CUDA
// device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "kernels/tensor.h"
#include "tests/cuda/gpu_test_support.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/gemm.h"
#endif

namespace splitcheck {
namespace {

#ifdef SPLITCHECK_HAVE_CUDA
using testing::random_bf16;

TEST(CudaGemmBf16Test, IsTheFloatProductRoundedOnEveryPath) {
  SPLITCHECK_REQUIRE_GPU();
  // (m, n, k): skinny; tensor cores; cuBLASLt on a deep weight (a k3-shape projection of
  // a 16-token prefill); cuBLASLt on more rows than the tensor-core kernel takes.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {4, 300, 96}, {32, 256, 256}, {16, 1024, 7168}, {16, 512, 2048}, {80, 256, 64},
      {200, 384, 1000}};
  for (const auto& [m, n, k] : shapes) {
    SCOPED_TRACE(::testing::Message() << m << " x " << n << " x " << k);
    const Tensor a = random_bf16({m, k}, 41, 1.0f).to(Device::kCuda);
    const Tensor b =
        random_bf16({k, n}, 42, 1.0f / std::sqrt(static_cast<float>(k))).to(Device::kCuda);
    Tensor f = Tensor::zeros(DType::kF32, {m, n}, Device::kCuda);
    Tensor r = Tensor::zeros(DType::kBF16, {m, n}, Device::kCuda);
    const auto* pa = static_cast<const uint16_t*>(a.address());
    const auto* pb = static_cast<const uint16_t*>(b.address());
    cuda::gemm(pa, pb, static_cast<float*>(f.address()), m, n, k, false);
    cuda::gemm_bf16(pa, pb, static_cast<uint16_t*>(r.address()), m, n, k);
    const Tensor hf = f.on_host(), hr = r.on_host();
    int64_t differ = 0;
    for (int64_t i = 0; i < m * n; ++i)
      differ += to_bf16(hf.data<float>()[i]).bits != hr.data<bf16>()[i].bits;
    EXPECT_EQ(differ, 0) << "of " << m * n;
  }
}
#endif

}  // namespace
}  // namespace splitcheck
