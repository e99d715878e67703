// Float32 building blocks of the CPU kernels (kernels/cpu/primitives.h) on inputs whose
// exact results are known: small integers, powers of two, and sums whose value depends on
// the documented summation order.
#include "kernels/cpu/primitives.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace splitcheck {
namespace {

std::vector<bf16> bf16_vector(const std::vector<float>& values) {
  std::vector<bf16> out;
  for (float v : values) out.push_back(to_bf16(v));
  return out;
}

TEST(MatmulTest, SmallIntegerInputsGiveExactProducts) {
  // x [2, 3], W [3, 4] row-major.
  const std::vector<float> x = {1, 2, 3, -4, 5, -6};
  const std::vector<bf16> w = bf16_vector({1, 0, -1, 2,  //
                                           3, 1, 0, -2,  //
                                           -1, 4, 2, 1});
  std::vector<float> out(8, -99.0f);
  cpu::matmul(x.data(), 2, 3, w.data(), 4, out.data());
  const std::vector<float> want = {4,  14,  5,  1,  //
                                   17, -19, -8, -24};
  EXPECT_EQ(out, want);
}

TEST(MatmulTest, SumsTheInnerDimensionInAscendingOrder) {
  // 2^24 + 1 rounds back to 2^24 in float32, so ascending order gives 0, any other 1.
  const std::vector<float> x = {16777216.0f, 1.0f, -16777216.0f};
  const std::vector<bf16> w = bf16_vector({1, 1, 1});  // [3, 1]
  float out = -1;
  cpu::matmul(x.data(), 1, 3, w.data(), 1, &out);
  EXPECT_EQ(out, 0.0f);
}

// Inputs whose sums round differently in any other order than ascending k.
struct ProductCase {
  std::vector<float> x;
  std::vector<bf16> w;
};
ProductCase product_case(int64_t rows, int64_t k_dim, int64_t n_dim) {
  ProductCase c;
  c.x.resize(static_cast<size_t>(rows * k_dim));
  for (size_t i = 0; i < c.x.size(); ++i)
    c.x[i] = std::ldexp(static_cast<float>(i % 13) - 6.0f, static_cast<int>(i % 29) - 14);
  c.w.resize(static_cast<size_t>(k_dim * n_dim));
  for (size_t i = 0; i < c.w.size(); ++i)
    c.w[i] = to_bf16(std::ldexp(static_cast<float>(i % 11) - 5.25f, static_cast<int>(i % 7)));
  return c;
}

// The products as matmul() and matmul_nt() run them here, and every variant compiled in
// that this machine runs (baseline SSE2 and AVX2 on x86-64).
std::vector<cpu::MatmulVariant> products_here() {
  std::vector<cpu::MatmulVariant> out = {{"dispatched", true, cpu::matmul, cpu::matmul_nt}};
  for (const cpu::MatmulVariant& v : cpu::matmul_variants())
    if (v.runs_here) out.push_back(v);
  return out;
}

// Runs `product` (a variant's matmul or matmul_nt) on product_case(rows, k_dim, n_dim) and
// checks every output against the plain loop over k ascending, the weight of (k, n) at
// w[at(k, n)].
template <typename At>
void expect_plain_loop(const char* name, cpu::MatmulFn product, int64_t rows, int64_t k_dim,
                       int64_t n_dim, At at) {
  const ProductCase c = product_case(rows, k_dim, n_dim);
  std::vector<float> out(static_cast<size_t>(rows * n_dim), -99.0f);
  product(c.x.data(), rows, k_dim, c.w.data(), n_dim, out.data());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t n = 0; n < n_dim; ++n) {
      float want = 0.0f;
      for (int64_t k = 0; k < k_dim; ++k) {
        const float product_term = c.x[t * k_dim + k] * to_f32(c.w[at(k, n)]);
        want += product_term;
      }
      ASSERT_EQ(std::bit_cast<uint32_t>(out[t * n_dim + n]), std::bit_cast<uint32_t>(want))
          << name << ": rows " << rows << " n " << n_dim << " at [" << t << ", " << n << "]";
    }
  }
}

// The tiled product (register tiles of rows and columns, tails one output at a time, one
// row streamed) is bit for bit the plain loop that sums k ascending, for every row count
// and column count around the tile sizes, in every instruction-set variant this machine
// runs.
TEST(MatmulTest, TiledProductEqualsThePlainAscendingLoopAtEveryShape) {
  constexpr int64_t kK = 37;
  EXPECT_GE(products_here().size(), 2u);
  for (const cpu::MatmulVariant& v : products_here())
    for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9})
      for (int64_t n_dim : {1, 15, 16, 17, 33, 48, 50})
        expect_plain_loop(v.name, v.matmul, rows, kK, n_dim,
                          [&](int64_t k, int64_t n) { return k * n_dim + n; });
}

// The same for W stored [N, K] (the tied head), blocks of 8 columns and a tail.
TEST(MatmulNtTest, EveryVariantEqualsThePlainAscendingLoopAtEveryShape) {
  constexpr int64_t kK = 37;
  for (const cpu::MatmulVariant& v : products_here())
    for (int64_t rows : {1, 2, 3})
      for (int64_t n_dim : {1, 7, 8, 9, 17, 40})
        expect_plain_loop(v.name, v.matmul_nt, rows, kK, n_dim,
                          [](int64_t k, int64_t n) { return n * kK + k; });
}

TEST(MatmulNtTest, SmallIntegerInputsGiveExactProductsInBlockedAndTailColumns) {
  // N = 11 covers one block of 8 output columns and a tail of 3.
  constexpr int64_t kRows = 2, kK = 3, kN = 11;
  const std::vector<float> x = {1, 2, 3, -4, 5, -6};
  std::vector<float> wf;
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t k = 0; k < kK; ++k)
      wf.push_back(static_cast<float>((n + 1) * (k % 2 ? -1 : 1) + k));
  }
  const std::vector<bf16> w = bf16_vector(wf);  // [N, K]
  std::vector<float> out(kRows * kN, -99.0f);
  cpu::matmul_nt(x.data(), kRows, kK, w.data(), kN, out.data());
  for (int64_t t = 0; t < kRows; ++t) {
    for (int64_t n = 0; n < kN; ++n) {
      float want = 0;
      for (int64_t k = 0; k < kK; ++k) want += x[t * kK + k] * wf[n * kK + k];
      EXPECT_EQ(out[t * kN + n], want) << "row " << t << " col " << n;
    }
  }
}

TEST(MatmulNtTest, SumsTheInnerDimensionInAscendingOrder) {
  const std::vector<float> x = {16777216.0f, 1.0f, -16777216.0f};
  const std::vector<bf16> w = bf16_vector(std::vector<float>(9 * 3, 1.0f));  // [9, 3]
  std::vector<float> out(9, -1.0f);
  cpu::matmul_nt(x.data(), 1, 3, w.data(), 9, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(SoftmaxTest, EqualInputsGiveExactlyOneOverNForPowersOfTwo) {
  for (int64_t n = 1; n <= 1024; n *= 2) {
    std::vector<float> s(n, 3.25f);
    cpu::softmax(s.data(), n);
    for (float v : s) ASSERT_EQ(v, 1.0f / static_cast<float>(n)) << "n = " << n;
  }
}

TEST(SoftmaxTest, LargeEqualInputsDoNotOverflow) {
  std::vector<float> s = {1000.0f, 1000.0f, 1000.0f, 1000.0f};
  cpu::softmax(s.data(), 4);
  for (float v : s) EXPECT_EQ(v, 0.25f);
}

TEST(SoftmaxTest, MinusInfinityGetsZeroWeight) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> s = {-inf, 0.0f, -inf, 0.0f};
  cpu::softmax(s.data(), 4);
  EXPECT_EQ(s, (std::vector<float>{0.0f, 0.5f, 0.0f, 0.5f}));
}

TEST(SoftmaxTest, GapBeyondExpUnderflowGivesOneHot) {
  std::vector<float> s = {0.0f, 200.0f, -50.0f};
  cpu::softmax(s.data(), 3);
  EXPECT_EQ(s, (std::vector<float>{0.0f, 1.0f, 0.0f}));
}

TEST(ArgmaxTest, TiesGoToTheLowestIndex) {
  const std::vector<float> v = {1, 3, 3, 2, 3};
  EXPECT_EQ(cpu::argmax(v.data(), 5), 1);
  const std::vector<float> flat(7, -2.5f);
  EXPECT_EQ(cpu::argmax(flat.data(), 7), 0);
}

TEST(ArgmaxTest, NanNeverWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {nan, 1.0f, nan, 2.0f, nan};
  EXPECT_EQ(cpu::argmax(v.data(), 5), 3);
  const std::vector<float> first_number_after_nan = {nan, -1.0f, -1.0f};
  EXPECT_EQ(cpu::argmax(first_number_after_nan.data(), 3), 1);
  const std::vector<float> all_nan = {nan, nan};
  EXPECT_EQ(cpu::argmax(all_nan.data(), 2), 0);
}

TEST(ArgmaxTest, NegativeInfinityStillCounts) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {-inf, -inf, -inf};
  EXPECT_EQ(cpu::argmax(v.data(), 3), 0);
}

TEST(RmsScaleTest, AllTwosWithZeroEpsGiveOneHalf) {
  const std::vector<float> v(256, 2.0f);
  EXPECT_EQ(cpu::rms_scale(v.data(), 256, 0.0f), 0.5f);
}

TEST(RmsScaleTest, EpsIsAddedToTheMeanSquare) {
  const std::vector<float> v(4, 1.0f);
  EXPECT_EQ(cpu::rms_scale(v.data(), 4, 3.0f), 0.5f);  // rsqrt(1 + 3)
  const std::vector<float> mixed = {4.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(cpu::rms_scale(mixed.data(), 4, 0.0f), 0.5f);  // rsqrt(16 / 4)
}

TEST(WidenTest, IsExact) {
  const std::vector<bf16> b = {{0x3f80}, {0xc040}, {0x0001}, {0x7f80}};
  std::vector<float> f(4);
  cpu::widen(b.data(), 4, f.data());
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -3.0f);
  EXPECT_EQ(f[2], std::ldexp(1.0f, -133));
  EXPECT_EQ(f[3], std::numeric_limits<float>::infinity());
}

// The registered kernels built on these blocks, on the same kind of inputs.
TEST(RmsNormKernelTest, ConstantRowsNormaliseToTheWeight) {
  Tensor x = Tensor::zeros(DType::kBF16, {2, 8});
  Tensor w = Tensor::zeros(DType::kBF16, {8});
  Tensor out = Tensor::zeros(DType::kBF16, {2, 8});
  for (int64_t i = 0; i < 16; ++i) x.data<bf16>()[i] = to_bf16(i < 8 ? 2.0f : -0.5f);
  for (int64_t d = 0; d < 8; ++d) w.data<bf16>()[d] = to_bf16(0.25f * static_cast<float>(d + 1));
  RmsNormArgs args{&x, &w, 0.0f, &out};
  run_variant("rms_norm", "rows", &args);
  for (int64_t d = 0; d < 8; ++d) {
    EXPECT_EQ(to_f32(out.data<bf16>()[d]), 0.25f * static_cast<float>(d + 1));
    EXPECT_EQ(to_f32(out.data<bf16>()[8 + d]), -0.25f * static_cast<float>(d + 1));
  }
}

TEST(ArgmaxKernelTest, PicksLowestIndexPerRow) {
  Tensor logits = Tensor::zeros(DType::kF32, {2, 4});
  const float v[8] = {0, 5, 5, 1, -1, -1, -1, -1};
  std::copy(v, v + 8, logits.data<float>());
  Tensor tokens = Tensor::zeros(DType::kI32, {2});
  ArgmaxArgs args{&logits, &tokens};
  run_variant("argmax", "lowest_index", &args);
  EXPECT_EQ(tokens.data<int32_t>()[0], 1);
  EXPECT_EQ(tokens.data<int32_t>()[1], 0);
}

}  // namespace
}  // namespace splitcheck
