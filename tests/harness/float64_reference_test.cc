// The float64 judge's reference on cases whose exact result is known by hand.
#include "harness/lanes/float64_reference.h"

#include <gtest/gtest.h>

#include <cmath>

namespace splitcheck {
namespace {

using f64::Matrix;

TEST(Float64ReferenceTest, RoundsToBf16NearestTiesToEven) {
  EXPECT_EQ(f64::round_to_bf16(1.0 + std::ldexp(1.0, -8)), 1.0);  // tie, down to even
  EXPECT_EQ(f64::round_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 1.0 + std::ldexp(1.0, -6));
  EXPECT_EQ(f64::round_to_bf16(1.0 + 1.1 * std::ldexp(1.0, -8)), 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(f64::round_to_bf16(-3.0), -3.0);
  EXPECT_EQ(f64::round_to_bf16(1.4621171572600098), 1.4609375);
  // One float32 rounding first would tie and go to even (1.0); exactly from the double it
  // is just above the tie.
  EXPECT_EQ(f64::round_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)),
            1.0 + std::ldexp(1.0, -7));
}

TEST(Float64ReferenceTest, MatmulAndRmsNorm) {
  const Matrix x = {{1, 2}, {3, 4}};
  const Matrix w = {{5, 6}, {7, 8}};
  const Matrix p = f64::matmul(x, w);
  EXPECT_EQ(p(0, 0), 19);
  EXPECT_EQ(p(0, 1), 22);
  EXPECT_EQ(p(1, 0), 43);
  EXPECT_EQ(p(1, 1), 50);
  const Matrix r = f64::rms_norm(Matrix{{3, 4}}, Matrix{{1, 2}}, 0.0);
  EXPECT_DOUBLE_EQ(r(0, 0), 3 / std::sqrt(12.5));
  EXPECT_DOUBLE_EQ(r(0, 1), 8 / std::sqrt(12.5));
  const Matrix logits = f64::lm_head(Matrix{{1, 1}}, Matrix{{1, 0}, {2, 3}, {0, 5}});
  EXPECT_EQ(logits(0, 0), 1);
  EXPECT_EQ(logits(0, 1), 5);
  EXPECT_EQ(logits(0, 2), 5);
  EXPECT_EQ(f64::argmax(logits)(0, 0), 1);  // tie between 1 and 2: the lower index
}

TEST(Float64ReferenceTest, AttnResMixesRawSourcesAndNormalisesTheOutput) {
  // Bank row [1, 1] and prefix [2, 2] score equally ((1+1)/1 and (2+2)/2): m = [1.5, 1.5].
  const Matrix bank = {{1, 1}};
  const Matrix ones = {{1, 1}};
  const Matrix m = f64::attn_res(Matrix{{2, 2}}, Matrix(), bank, 1, ones, ones, Matrix(), 1, 0, 0);
  EXPECT_EQ(m(0, 0), 1.5);
  EXPECT_EQ(m(0, 1), 1.5);
  // With out_w [1, 2]: m / rms(m) * out_w = [1, 2].
  const Matrix o =
      f64::attn_res(Matrix{{2, 2}}, Matrix(), bank, 1, ones, ones, Matrix{{1, 2}}, 1, 0, 0);
  EXPECT_DOUBLE_EQ(o(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(o(0, 1), 2.0);
  // Unequal scores: bank [1, 0] scores 1 / sqrt(0.5), prefix [0, 1] scores the same with
  // proj [1, 1]; with proj [1, 0] the prefix scores 0: a = softmax(sqrt 2, 0).
  const Matrix u = f64::attn_res(Matrix{{0, 1}}, Matrix(), Matrix{{1, 0}}, 1, ones, Matrix{{1, 0}},
                                 Matrix(), 1, 0, 0);
  const double a0 = std::exp(std::sqrt(2.0)) / (std::exp(std::sqrt(2.0)) + 1.0);
  EXPECT_DOUBLE_EQ(u(0, 0), a0);
  EXPECT_DOUBLE_EQ(u(0, 1), 1 - a0);
  // The delta is folded into the prefix with one bf16 rounding (SPEC 2.2 step 1); nb = 0
  // returns that prefix.
  const Matrix d = f64::attn_res(Matrix{{1, 1}}, Matrix{{1, std::ldexp(1.0, -9)}}, Matrix(), 0,
                                 ones, ones, Matrix(), 0, 0, 0);
  EXPECT_EQ(d(0, 0), 2.0);
  EXPECT_EQ(d(0, 1), 1.0);
}

TEST(Float64ReferenceTest, SwiGluRoundsAfterEachProduct) {
  // gate 1, up 2: bf16(silu(1) * 2) = bf16(1.46211715726) = 1.4609375, times down 1.
  const f64::SwiGlu w{Matrix{{1}}, Matrix{{2}}, Matrix{{1}}};
  EXPECT_EQ(f64::swiglu(Matrix{{1}}, w)(0, 0), 1.4609375);
  // MoE, 2 experts, top-1: the router picks expert 1 (logit 1 > 0) with weight 1; no shared.
  const f64::SwiGlu zero{Matrix{{0}}, Matrix{{0}}, Matrix{{0}}};
  const Matrix out = f64::moe(Matrix{{1}}, Matrix{{0, 1}}, {zero, w}, {}, 1);
  EXPECT_EQ(out(0, 0), 1.4609375);
  // Ties go to the lower index: both logits 0, expert 0 (output 0) is chosen.
  EXPECT_EQ(f64::moe(Matrix{{1}}, Matrix{{0, 0}}, {zero, w}, {}, 1)(0, 0), 0.0);
}

TEST(Float64ReferenceTest, KdaAndMlaOnOneChannel) {
  // KDA, one head of width 1, empty state: q = k = 1 (l2norm), v = 2, beta = alpha = 0.5;
  // St = 0.5 * 1 * (2 - 0) = 1; o = 1; rmsnorm(o) = 1, gate sigmoid(0) = 0.5; W_o 2: 1.
  const f64::KdaWeights k{Matrix{{1}}, Matrix{{1}}, Matrix{{2}}, Matrix{{0}},
                          Matrix{{0}}, Matrix{{0}}, Matrix{{1}}, Matrix{{2}}};
  EXPECT_DOUBLE_EQ(f64::kda(Matrix{{1}}, k, Matrix{{0}}, 1, 1, 0)(0, 0), 1.0);
  // With state 1 entering: St = 0.5 * 1 = 0.5 (decay), u = kᵀSt = 0.5,
  // St = 0.5 + 0.5 * (2 - 0.5) = 1.25; o = 1.25, rmsnorm(o) = 1: the output is 1 again.
  EXPECT_DOUBLE_EQ(f64::kda(Matrix{{1}}, k, Matrix{{1}}, 1, 1, 0)(0, 0), 1.0);
  // MLA, r = 1, one head of width 1: c = 2 -> c' = 1 (kv_norm 1); K = 3, V = 4; the only
  // visible position has weight 1: O = 4; gate 0.5; W_o 1: 2.
  const f64::MlaWeights m{Matrix{{1}}, Matrix{{2}}, Matrix{{1}}, Matrix{{3}},
                          Matrix{{4}}, Matrix{{0}}, Matrix{{1}}};
  EXPECT_DOUBLE_EQ(f64::mla(Matrix{{1}}, m, Matrix(), 1, 1, 0)(0, 0), 2.0);
  // With one cached latent of value 2 (same K, V): the mixture of two equal V is still 4.
  EXPECT_DOUBLE_EQ(f64::mla(Matrix{{1}}, m, Matrix{{2}}, 1, 1, 0)(0, 0), 2.0);
}

TEST(Float64ReferenceTest, DenseAttentionWeighsValuesBySoftmax) {
  // Two keys with scores 0 and 1 (q.k / sqrt(1)): weights 1/(1+e) and e/(1+e).
  const Matrix out = f64::dense_attention(Matrix{{1}}, Matrix{{0}, {1}}, Matrix{{0}, {1}}, 1, 1);
  EXPECT_DOUBLE_EQ(out(0, 0), std::exp(1.0) / (1.0 + std::exp(1.0)));
}

}  // namespace
}  // namespace splitcheck
