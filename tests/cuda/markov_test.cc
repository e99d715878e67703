// The DSpark Markov head's chain (MarkovChainArgs; kernels/cpu/basic.cc and
// kernels/cuda/markov.cu): on either device the tokens of the float64 chain where its
// scores are well apart, each step scored from the token the step before it picked, the
// second choice where a step departs; several chains in one call each giving its tokens
// alone; ties to the lowest index, NaN never picked; an anchor outside the vocabulary
// refused. The GPU rows are skipped, saying why, without a
// CUDA device; the CPU rows run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/ops.h"
#include "tests/cuda/gpu_test_support.h"

namespace splitcheck {
namespace {

using testing::random_bf16;

struct Chain {
  std::vector<int32_t> tokens;
  double min_gap = std::numeric_limits<double>::infinity();  // between the picks and the rest
};

// The chain in float64 from the same bf16 and float32 inputs, with the smallest gap
// between the three best scores of any step (the float32 chains agree where it is wide).
Chain float64_chain(const Tensor& u, const Tensor& w1, const Tensor& w2, int32_t anchor,
                    const std::vector<bool>& departs, bool follow = true) {
  const int64_t gamma = u.dim(0), v = u.dim(1), r = w1.dim(1);
  Chain c;
  int64_t prev = anchor;
  for (int64_t k = 0; k < gamma; ++k) {
    std::vector<std::pair<double, int64_t>> s(static_cast<size_t>(v));
    for (int64_t j = 0; j < v; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < r; ++d)
        dot += static_cast<double>(to_f32(w1.data<bf16>()[prev * r + d])) *
               to_f32(w2.data<bf16>()[j * r + d]);
      s[static_cast<size_t>(j)] = {u.data<float>()[k * v + j] + dot, j};
    }
    std::partial_sort(s.begin(), s.begin() + 3, s.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    c.min_gap = std::min({c.min_gap, s[0].first - s[1].first, s[1].first - s[2].first});
    const int64_t pick = departs[static_cast<size_t>(k)] ? s[1].second : s[0].second;
    c.tokens.push_back(static_cast<int32_t>(pick));
    if (follow) prev = pick;
  }
  return c;
}

Tensor as_f32(const Tensor& t) {
  Tensor out = Tensor::zeros(DType::kF32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = to_f32(t.data<bf16>()[i]);
  return out;
}

// The chains anchored at `anchors`, all in one call (U's rows and `departs` chain after
// chain).
std::vector<int32_t> chains_on(Device device, const Tensor& u, const Tensor& w1, const Tensor& w2,
                               const std::vector<int32_t>& anchors,
                               const std::vector<bool>& departs) {
  const Tensor du = u.to(device), d1 = w1.to(device), d2 = w2.to(device);
  std::vector<int32_t> tokens;
  MarkovChainArgs a{&du, &d1, &d2, anchors, &departs, &tokens};
  markov_chain(KernelContext{nullptr, 0, -1, Site::kDraft, 0, -1}, a);
  return tokens;
}

std::vector<int32_t> chain_on(Device device, const Tensor& u, const Tensor& w1, const Tensor& w2,
                              int32_t anchor, const std::vector<bool>& departs) {
  return chains_on(device, u, w1, w2, {anchor}, departs);
}

// (V, r): fewer rows than a block's warps short of a whole block, and more blocks than
// the merging block has threads.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{300, 40}, {5000, 64}};
const std::vector<bool> kDeparts = {false, true, false, false, true, false, true};

void expect_float64_chain(Device device) {
  for (const auto& [v, r] : kShapes) {
    SCOPED_TRACE(::testing::Message() << "V " << v << ", r " << r);
    // Scores of the bigram term and of U alike in size, so each step's pick depends on
    // the token before it.
    const Tensor w1 = random_bf16({v, r}, 11, 1.0f), w2 = random_bf16({v, r}, 12, 1.0f);
    const Tensor u = as_f32(random_bf16({7, v}, 13, 2.0f));
    const Chain want = float64_chain(u, w1, w2, 3, kDeparts);
    ASSERT_GT(want.min_gap, 1e-4) << "inputs too close to a tie for a float32 chain";
    // The test can tell a chain that scores every step from the anchor.
    ASSERT_NE(float64_chain(u, w1, w2, 3, kDeparts, false).tokens, want.tokens);
    EXPECT_EQ(chain_on(device, u, w1, w2, 3, kDeparts), want.tokens);
  }
}

// Three chains in one call (V 5000, r 64, 7 steps each, their own departures): each
// chain's tokens are those it has alone, and the three differ, so a call that read
// another chain's anchor, U rows or departures would fail.
void expect_chains_alone(Device device) {
  const int64_t v = 5000, r = 64, gamma = 7;
  const Tensor w1 = random_bf16({v, r}, 41, 1.0f), w2 = random_bf16({v, r}, 42, 1.0f);
  const Tensor u = as_f32(random_bf16({3 * gamma, v}, 43, 2.0f));
  const std::vector<int32_t> anchors = {3, 4999, 17};
  std::vector<bool> departs(3 * gamma);
  for (size_t i = 0; i < departs.size(); ++i) departs[i] = i % 5 == 1 || i % 7 == 3;
  std::vector<int32_t> alone;
  std::vector<std::vector<int32_t>> each;
  for (int64_t c = 0; c < 3; ++c) {
    const std::vector<bool> mine(departs.begin() + c * gamma, departs.begin() + (c + 1) * gamma);
    each.push_back(chain_on(device, u.rows(c * gamma, (c + 1) * gamma).clone(), w1, w2,
                            anchors[static_cast<size_t>(c)], mine));
    alone.insert(alone.end(), each.back().begin(), each.back().end());
  }
  ASSERT_NE(each[0], each[1]);
  ASSERT_NE(each[1], each[2]);
  EXPECT_EQ(chains_on(device, u, w1, w2, anchors, departs), alone);
}

// U rows with two equal maxima (indices 5 and 9), a NaN ahead of them, and all NaN; a
// zero W2 makes the bigram term exactly 0.
void expect_ties_and_nan(Device device) {
  const int64_t v = 40, r = 8;
  const Tensor w1 = random_bf16({v, r}, 21, 1.0f);
  const Tensor w2 = Tensor::zeros(DType::kBF16, {v, r});
  Tensor u = Tensor::zeros(DType::kF32, {4, v});
  float* p = u.data<float>();
  for (int64_t k = 0; k < 3; ++k) {
    for (int64_t j = 0; j < v; ++j) p[k * v + j] = -1.0f - static_cast<float>(j % 7);
    p[k * v + 5] = p[k * v + 9] = 3.0f;
    p[k * v + 0] = std::numeric_limits<float>::quiet_NaN();
  }
  p[2 * v + 9] = 2.0f;  // row 2: 5 best, 9 second
  for (int64_t j = 0; j < v; ++j) p[3 * v + j] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(chain_on(device, u, w1, w2, 1, {false, true, true, false}),
            (std::vector<int32_t>{5, 9, 9, 0}));
  EXPECT_EQ(chain_on(device, u, w1, w2, 1, {}), (std::vector<int32_t>{5, 5, 5, 0}));
}

TEST(MarkovChainTest, OnTheCpuIsTheFloat64Chain) { expect_float64_chain(Device::kCpu); }

TEST(MarkovChainTest, OnTheCpuTiesGoLowAndNaNIsNeverPicked) { expect_ties_and_nan(Device::kCpu); }

TEST(MarkovChainTest, OnTheCpuChainsAtOnceAreEachChainAlone) { expect_chains_alone(Device::kCpu); }

TEST(MarkovChainTest, RefusesAnAnchorOutsideTheVocabulary) {
  const Tensor w = random_bf16({10, 4}, 31, 1.0f);
  const Tensor u = Tensor::zeros(DType::kF32, {2, 10});
  for (int32_t anchor : {-1, 10}) {
    std::vector<int32_t> tokens;
    const std::vector<bool> none;
    const std::vector<int32_t> anchors = {2, anchor};
    MarkovChainArgs a{&u, &w, &w, anchors, &none, &tokens};
    EXPECT_THROW(markov_chain(KernelContext{nullptr, 0, -1, Site::kDraft, 0, -1}, a),
                 std::out_of_range);
  }
}

TEST(MarkovChainTest, RefusesURowsThatDoNotShareOutOverTheChains) {
  const Tensor w = random_bf16({10, 4}, 31, 1.0f);
  const Tensor u = Tensor::zeros(DType::kF32, {5, 10});
  std::vector<int32_t> tokens;
  const std::vector<bool> none;
  const std::vector<int32_t> anchors = {1, 2};
  MarkovChainArgs a{&u, &w, &w, anchors, &none, &tokens};
  EXPECT_THROW(markov_chain(KernelContext{nullptr, 0, -1, Site::kDraft, 0, -1}, a),
               std::invalid_argument);
}

TEST(CudaMarkovTest, IsTheFloat64Chain) {
  SPLITCHECK_REQUIRE_GPU();
  expect_float64_chain(Device::kCuda);
}

TEST(CudaMarkovTest, ChainsAtOnceAreEachChainAlone) {
  SPLITCHECK_REQUIRE_GPU();
  expect_chains_alone(Device::kCuda);
}

TEST(CudaMarkovTest, TiesGoLowAndNaNIsNeverPicked) {
  SPLITCHECK_REQUIRE_GPU();
  expect_ties_and_nan(Device::kCuda);
}

}  // namespace
}  // namespace splitcheck
