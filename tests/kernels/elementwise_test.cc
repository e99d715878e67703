// add_bf16 and add_f32 (kernels/elementwise.h): the sum with one rounding, the same bits
// on the CPU and on a GPU, on sums that round up, down and to even, and a refusal of
// operands that differ.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "kernels/elementwise.h"
#include "tests/cuda/gpu_test_support.h"

namespace splitcheck {
namespace {

using testing::random_bf16;

// Random operands, then sums that fall exactly between two bf16 values (1 + 2^-8 rounds to
// even: 1; 1 + 3 * 2^-8 rounds up) and an infinity.
std::pair<Tensor, Tensor> operands() {
  Tensor a = random_bf16({37, 19}, 1, 4.0f), b = random_bf16({37, 19}, 2, 4.0f);
  bf16* x = a.data<bf16>();
  bf16* y = b.data<bf16>();
  x[0] = to_bf16(1.0f), y[0] = to_bf16(0x1.0p-8f);
  x[1] = to_bf16(1.0f), y[1] = to_bf16(0x1.8p-7f);
  x[2] = to_bf16(0x1.0p127f), y[2] = to_bf16(0x1.0p127f);
  return {a, b};
}

TEST(AddBf16Test, RoundsTheFloatSumOnce) {
  const auto [a, b] = operands();
  const Tensor sum = add_bf16(a, b);
  ASSERT_EQ(sum.shape(), a.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(sum.data<bf16>()[i].bits,
              to_bf16(to_f32(a.data<bf16>()[i]) + to_f32(b.data<bf16>()[i])).bits)
        << "element " << i;
  EXPECT_EQ(to_f32(sum.data<bf16>()[0]), 1.0f);                 // a tie, to even
  EXPECT_EQ(to_f32(sum.data<bf16>()[1]), 1.0f + 0x1.0p-6f);     // above the tie, up
  EXPECT_TRUE(std::isinf(to_f32(sum.data<bf16>()[2])));
}

TEST(AddBf16Test, OperandsThatDifferAreRefused) {
  const Tensor a = random_bf16({4, 8}, 3, 1.0f);
  EXPECT_THROW(add_bf16(a, random_bf16({8, 4}, 4, 1.0f)), std::invalid_argument);
  EXPECT_THROW(add_bf16(a, Tensor::zeros(DType::kF32, {4, 8})), std::invalid_argument);
}

TEST(CudaAddBf16Test, GivesTheCpusBits) {
  SPLITCHECK_REQUIRE_GPU();
  const auto [a, b] = operands();
  const Tensor on_gpu = add_bf16(a.to(Device::kCuda), b.to(Device::kCuda));
  EXPECT_EQ(on_gpu.device(), Device::kCuda);
  EXPECT_TRUE(on_gpu.to(Device::kCpu).bit_equal(add_bf16(a, b)));
}

// Float32 operands: bf16 values scaled off the bf16 grid, plus two sums that fall halfway
// between floats (1 + 2^-24 and 1 + 3 * 2^-24: to even, 1 and 1 + 2^-22) and an overflow.
std::pair<Tensor, Tensor> f32_operands() {
  const auto [a16, b16] = operands();
  Tensor a = Tensor::zeros(DType::kF32, a16.shape()), b = Tensor::zeros(DType::kF32, b16.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    a.data<float>()[i] = to_f32(a16.data<bf16>()[i]) * 1.001f;
    b.data<float>()[i] = to_f32(b16.data<bf16>()[i]) * 0.999f;
  }
  a.data<float>()[0] = 1.0f, b.data<float>()[0] = 0x1.0p-24f;
  a.data<float>()[1] = 1.0f, b.data<float>()[1] = 0x1.8p-23f;
  a.data<float>()[2] = 0x1.0p127f, b.data<float>()[2] = 0x1.0p127f;
  return {a, b};
}

TEST(AddF32Test, AddsInFloat) {
  const auto [a, b] = f32_operands();
  const Tensor sum = add_f32(a, b);
  ASSERT_EQ(sum.shape(), a.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(sum.data<float>()[i], a.data<float>()[i] + b.data<float>()[i]) << "element " << i;
  EXPECT_EQ(sum.data<float>()[0], 1.0f);               // a tie, down to even
  EXPECT_EQ(sum.data<float>()[1], 1.0f + 0x1.0p-22f);  // a tie, up to even
  EXPECT_TRUE(std::isinf(sum.data<float>()[2]));
  EXPECT_THROW(add_f32(a, Tensor::zeros(DType::kF32, {19, 37})), std::invalid_argument);
  EXPECT_THROW(add_f32(a, random_bf16({37, 19}, 5, 1.0f)), std::invalid_argument);
}

TEST(CudaAddF32Test, GivesTheCpusBits) {
  SPLITCHECK_REQUIRE_GPU();
  const auto [a, b] = f32_operands();
  const Tensor on_gpu = add_f32(a.to(Device::kCuda), b.to(Device::kCuda));
  EXPECT_EQ(on_gpu.device(), Device::kCuda);
  EXPECT_TRUE(on_gpu.to(Device::kCpu).bit_equal(add_f32(a, b)));
}

}  // namespace
}  // namespace splitcheck
