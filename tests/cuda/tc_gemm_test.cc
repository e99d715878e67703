// The tensor-core product of 9 to 64 rows (kernels/cuda/tc_gemm.cu): close to the float64
// product; each row's bits independent of the row count, of the rows beside it and of the
// weights sharing its launch; the bf16 output the rounding of the float one; the registry's
// products of 9 to 64 rows take it. Skipped, saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/math.h"
#include "kernels/ops.h"
#include "tests/cuda/gpu_test_support.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/tc.h"
#endif

namespace splitcheck {
namespace {

#ifdef SPLITCHECK_HAVE_CUDA
using testing::random_bf16;

// (k, n): whole chunks of an aligned weight, a short last chunk, a k that is no multiple
// of 8 (A read without 16-byte loads), an odd width (B likewise), a weight of one partial
// tile in one chunk.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {7168, 512}, {512, 7168}, {300, 256}, {1000, 333}, {64, 40}};

Tensor weight(int64_t k, int64_t n, uint64_t seed) {
  return random_bf16({k, n}, seed, 1.0f / std::sqrt(static_cast<float>(k))).to(Device::kCuda);
}

// Rows [begin, end) of x times each weight by tc_multi_gemm, on the host: [G * m, n]; with
// `tile`, in blocks of that shape (else the kernel's choice).
Tensor product(const Tensor& x, int64_t begin, int64_t end, const std::vector<const Tensor*>& ws,
               DType out_type, std::optional<cuda::TcTile> tile = std::nullopt) {
  const int64_t m = end - begin, k = x.dim(1), n = ws[0]->dim(1);
  std::vector<const uint16_t*> bs;
  for (const Tensor* w : ws) bs.push_back(static_cast<const uint16_t*>(w->address()));
  Tensor out = Tensor::zeros(out_type, {static_cast<int64_t>(ws.size()) * m, n}, Device::kCuda);
  const Tensor rows = x.rows(begin, end);
  const bool f32 = out_type == DType::kF32;
  cuda::tc_multi_gemm(static_cast<const uint16_t*>(rows.address()), bs,
                      f32 ? static_cast<float*>(out.address()) : nullptr,
                      f32 ? nullptr : static_cast<uint16_t*>(out.address()), m, n, k, tile);
  return out.on_host();
}

// Elements of rows [0, rows) of `got` whose bits differ from rows [at, at + rows) of `want`.
int64_t differing_rows(const Tensor& got, const Tensor& want, int64_t at, int64_t rows) {
  const int64_t n = got.dim(1);
  const auto g = got.span<const float>(), w = want.span<const float>();
  int64_t differ = 0;
  for (int64_t i = 0; i < rows * n; ++i)
    differ += std::bit_cast<uint32_t>(g[i]) != std::bit_cast<uint32_t>(w[at * n + i]);
  return differ;
}

// The chunking (host only, no GPU needed): whole stages, at most 32 chunks, and a weight
// at most kTcMaxDepth deep (every one gemm() hands the kernel) one chunk, its sums straight
// into C; deeper weights several, about 528 blocks of a weight where k allows.
TEST(CudaTcGemmTest, ChunksAreWholeStagesAndAShallowWeightIsOne) {
  for (int64_t k : {1, 16, 64, 255, 256}) {
    for (int64_t n : {16, 256, 7168}) EXPECT_GE(cuda::tc_chunk_rows(n, k), k) << k << " x " << n;
  }
  for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{257, 16},
                                                              {512, 7168},
                                                              {7168, 16},
                                                              {7168, 512},
                                                              {7168, 7168},
                                                              {1000, 333},
                                                              {16384, 128}}) {
    const int64_t kc = cuda::tc_chunk_rows(n, k), chunks = (k + kc - 1) / kc;
    const int64_t tiles = (n + cuda::kTcTile - 1) / cuda::kTcTile;
    EXPECT_EQ(kc % cuda::kTcStep, 0) << k << " x " << n;
    EXPECT_GE(kc, cuda::kTcMaxDepth) << k << " x " << n;
    EXPECT_GE(chunks, 2) << k << " x " << n;
    EXPECT_LE(chunks, 32) << k << " x " << n;
    if (k >= 32 * cuda::kTcMaxDepth) {
      EXPECT_EQ(chunks, 32) << k << " x " << n;
    }
    if (tiles >= 56) {
      EXPECT_LE(tiles * chunks, 2 * 528) << k << " x " << n;
    }
  }
}

TEST(CudaTcGemmTest, IsCloseToTheFloat64Product) {
  SPLITCHECK_REQUIRE_GPU();
  for (auto [k, n] : kShapes) {
    const Tensor w_host = random_bf16({k, n}, 70 + n, 1.0f / std::sqrt(static_cast<float>(k)));
    const Tensor w = w_host.to(Device::kCuda);
    for (int64_t m : {9, 16, 17, 40, 64}) {
      const Tensor x_host = random_bf16({m, k}, 71 + k + m, 1.0f);
      const Tensor got = product(x_host.to(Device::kCuda), 0, m, {&w}, DType::kF32);
      const bf16* a = x_host.data<bf16>();
      const bf16* b = w_host.data<bf16>();
      double worst = 0.0;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
          double exact = 0.0, scale = 0.0;
          for (int64_t i = 0; i < k; ++i) {
            const double p = double{to_f32(a[r * k + i])} * to_f32(b[i * n + c]);
            exact += p;
            scale += std::fabs(p);
          }
          worst = std::max(worst, std::fabs(got.data<float>()[r * n + c] - exact) / scale);
        }
      // Float32 sums of k products: far below one bf16 step (2^-8) of the sum of |products|,
      // far above the float32 rounding of up to 448 tensor-core steps and 32 chunk sums.
      EXPECT_LT(worst, 5e-5) << "k " << k << " n " << n << " m " << m;
    }
  }
}

TEST(CudaTcGemmTest, ARowHasTheSameBitsWhateverRowsShareItsProduct) {
  SPLITCHECK_REQUIRE_GPU();
  for (auto [k, n] : kShapes) {
    const Tensor w = weight(k, n, 80 + n);
    const Tensor x = random_bf16({64, k}, 81 + k, 1.0f).to(Device::kCuda);
    const Tensor all = product(x, 0, 64, {&w}, DType::kF32);
    for (auto [begin, m] :
         {std::pair<int64_t, int64_t>{0, 9}, {5, 16}, {3, 17}, {20, 33}, {1, 48}, {7, 57}}) {
      const Tensor some = product(x, begin, begin + m, {&w}, DType::kF32);
      EXPECT_EQ(differing_rows(some, all, begin, m), 0)
          << "k " << k << " n " << n << ": rows " << begin << ".." << begin + m - 1
          << " alone against the same rows among 64 (chunks of " << cuda::tc_chunk_rows(n, k)
          << " rows)";
    }
  }
}

// A block's tile (rows of A by columns of a weight) is the kernel's choice for speed: every
// shape, from 16 x 32 to every row by 128, gives every element the bits of the kernel's own
// choice: in one chunk or two (k 300) with aligned operands, in several with an odd width
// (B without 16-byte loads), in one partial tile; one weight, and three in one launch with
// their bf16 outputs too. 17 and 48 rows take every row-tile instance (16 to 64 rows).
// (The shapes are few: compute-sanitizer's racecheck runs this test in gpu-check.sh.)
TEST(CudaTcGemmTest, EveryTileShapeGivesTheSameBits) {
  SPLITCHECK_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{300, 256}, {1000, 333}, {64, 40}};
  for (auto [k, n] : shapes) {
    const Tensor w0 = weight(k, n, 120 + n), w1 = weight(k, n, 121 + n), w2 = weight(k, n, 122);
    for (int64_t m : {17, 48}) {
      const Tensor x = random_bf16({m, k}, 123 + k + m, 1.0f).to(Device::kCuda);
      for (const std::vector<const Tensor*>& ws :
           {std::vector<const Tensor*>{&w0}, std::vector<const Tensor*>{&w0, &w1, &w2}}) {
        const int64_t g = static_cast<int64_t>(ws.size());
        const Tensor chosen = product(x, 0, m, ws, DType::kF32);
        const Tensor chosen_bf16 = g > 1 ? product(x, 0, m, ws, DType::kBF16) : Tensor();
        for (int rows : {0, 16, 32, 48, 64}) {
          for (int cols : {32, 64, 128}) {
            const cuda::TcTile tile{rows, cols};
            EXPECT_EQ(differing_rows(product(x, 0, m, ws, DType::kF32, tile), chosen, 0, g * m), 0)
                << "k " << k << " n " << n << " m " << m << " weights " << g << ": tile " << rows
                << " x " << cols;
            if (g > 1) {
              EXPECT_TRUE(product(x, 0, m, ws, DType::kBF16, tile).bit_equal(chosen_bf16))
                  << "k " << k << " n " << n << " m " << m << " weights " << g << ": tile " << rows
                  << " x " << cols << " (bf16)";
            }
          }
        }
      }
    }
  }
}

TEST(CudaTcGemmTest, EachWeightOfALaunchHasItsOwnProductsBitsAndBf16IsTheRoundedFloat) {
  SPLITCHECK_REQUIRE_GPU();
  for (auto [k, n] : kShapes) {
    std::vector<Tensor> ws;
    for (uint64_t i = 0; i < 5; ++i) ws.push_back(weight(k, n, 90 + i));
    const std::vector<const Tensor*> all = {&ws[0], &ws[1], &ws[2], &ws[3], &ws[4]};
    const int64_t m = 24;
    const Tensor x = random_bf16({m, k}, 91 + k, 1.0f).to(Device::kCuda);
    const Tensor together = product(x, 0, m, all, DType::kF32);
    const Tensor rounded = product(x, 0, m, all, DType::kBF16);
    for (size_t g = 0; g < ws.size(); ++g) {
      const Tensor alone = product(x, 0, m, {&ws[g]}, DType::kF32);
      EXPECT_EQ(differing_rows(alone, together, static_cast<int64_t>(g) * m, m), 0)
          << "k " << k << " n " << n << ": weight " << g << " of 5 against alone";
    }
    int64_t differ = 0;
    for (int64_t i = 0; i < together.numel(); ++i)
      differ += to_bf16(together.data<float>()[i]).bits != rounded.data<bf16>()[i].bits;
    EXPECT_EQ(differ, 0) << "k " << k << " n " << n << ": bf16 outputs not the rounded floats";
  }
}

TEST(CudaTcGemmTest, TheRegistrysProductsOfNineTo64RowsTakeIt) {
  SPLITCHECK_REQUIRE_GPU();
  const int64_t k = cuda::kTcMaxDepth, n = 384;
  const Tensor w = weight(k, n, 100);
  for (int64_t m : {9, 24, 64}) {
    const Tensor x = random_bf16({m, k}, 101 + m, 1.0f).to(Device::kCuda);
    Tensor out = Tensor::zeros(DType::kBF16, {m, n}, Device::kCuda);
    LinearArgs args{&x, &w, &out};
    run_variant("linear", "matmul", &args);
    EXPECT_TRUE(out.on_host().bit_equal(product(x, 0, m, {&w}, DType::kBF16))) << "m " << m;
  }
}

// SwiGLU's hidden in one launch (tc_swiglu) is, element for element, bf16(silu(bf16(g)) *
// bf16(u)) of the floats tc_multi_gemm gives the gate and the up (the silu of
// kernels/math.h, which the device's matches operation for operation), whatever the
// tile: k3-tiny's experts (256 x 64), a k that is no multiple of 8 and an odd width, a
// weight of one partial tile, and no k at all; 9 to 64 rows.
TEST(CudaTcGemmTest, SwigluIsTheHiddenOfItsTwoProducts) {
  SPLITCHECK_REQUIRE_GPU();
  for (auto [k, n] :
       std::vector<std::pair<int64_t, int64_t>>{{256, 64}, {100, 333}, {64, 40}, {0, 64}}) {
    const Tensor gate = weight(k, n, 130 + n), up = weight(k, n, 131 + n);
    for (int64_t m : {9, 17, 48, 64}) {
      const Tensor x = random_bf16({m, k}, 132 + k + m, 1.0f).to(Device::kCuda);
      const Tensor gu = product(x, 0, m, {&gate, &up}, DType::kF32);
      const float* g = gu.data<float>();
      const float* u = g + m * n;
      for (const std::optional<cuda::TcTile> tile :
           {std::optional<cuda::TcTile>{}, std::optional{cuda::TcTile{16, 32}},
            std::optional{cuda::TcTile{64, 128}}, std::optional{cuda::TcTile{0, 64}}}) {
        Tensor hidden = Tensor::for_overwrite(DType::kBF16, {m, n}, Device::kCuda);
        cuda::tc_swiglu(static_cast<const uint16_t*>(x.address()),
                        static_cast<const uint16_t*>(gate.address()),
                        static_cast<const uint16_t*>(up.address()),
                        static_cast<uint16_t*>(hidden.address()), m, n, k, tile);
        const Tensor got = hidden.on_host();
        int64_t differ = 0;
        for (int64_t i = 0; i < m * n; ++i) {
          const bf16 want = to_bf16(fmath::silu(round_bf16(g[i])) * round_bf16(u[i]));
          differ += got.data<bf16>()[i].bits != want.bits;
        }
        EXPECT_EQ(differ, 0) << "k " << k << " n " << n << " m " << m << " tile "
                             << (tile ? std::to_string(tile->rows) + " x " +
                                            std::to_string(tile->cols)
                                      : std::string("chosen"));
      }
    }
  }
  const Tensor w = weight(64, 64, 140), deep = weight(257, 64, 141);
  const Tensor x = random_bf16({65, 257}, 142, 1.0f).to(Device::kCuda);
  Tensor out = Tensor::zeros(DType::kBF16, {65, 64}, Device::kCuda);
  const auto swiglu = [&](const Tensor& wt, int64_t m, int64_t k) {
    cuda::tc_swiglu(static_cast<const uint16_t*>(x.address()),
                    static_cast<const uint16_t*>(wt.address()),
                    static_cast<const uint16_t*>(wt.address()),
                    static_cast<uint16_t*>(out.address()), m, 64, k);
  };
  EXPECT_THROW(swiglu(w, 65, 64), std::logic_error);      // more rows than it takes
  EXPECT_THROW(swiglu(deep, 16, 257), std::logic_error);  // a weight of more than one chunk
}

TEST(CudaTcGemmTest, RefusesMoreRowsOrWeightsThanItTakes) {
  SPLITCHECK_REQUIRE_GPU();
  const Tensor w = weight(64, 64, 110);
  const Tensor x = random_bf16({65, 64}, 111, 1.0f).to(Device::kCuda);
  EXPECT_THROW(product(x, 0, 65, {&w}, DType::kF32), std::logic_error);
  std::vector<const Tensor*> nine(9, &w);
  EXPECT_THROW(product(x, 0, 16, nine, DType::kF32), std::logic_error);
  for (const cuda::TcTile tile :
       {cuda::TcTile{8, 128}, cuda::TcTile{80, 128}, cuda::TcTile{16, 48}})
    EXPECT_THROW(product(x, 0, 16, {&w}, DType::kF32, tile), std::logic_error)
        << tile.rows << " x " << tile.cols;
}
#endif  // SPLITCHECK_HAVE_CUDA

}  // namespace
}  // namespace splitcheck
