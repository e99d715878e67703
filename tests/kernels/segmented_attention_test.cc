// A segmented MLA or KDA call (a batched forward's requests in one call, MlaArgs::begin)
// gives each segment the bits, the cache and the state its own call gives it. On the CPU
// always; on CUDA while every product has at most 8 rows (beyond, cuBLASLt picks per
// shape, so a batch's rows may differ from a request's alone: kernels/batch.h). A call
// whose segments share a cache, or whose bounds do not cover its rows, is refused before
// anything is written. The approximate lane's capture (harness/lanes/op_cases.h) takes
// such a call as one call a segment, each replaying to the segment's rows.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/lanes/op_cases.h"
#include "kernels/ops.h"
#include "tests/cuda/gpu_test_support.h"

namespace splitcheck {
namespace {

using testing::random_bf16;

constexpr int64_t kH = 64, kR = 16;
constexpr int kHeads = 2, kHd = 16;
constexpr int64_t kQd = kHeads * kHd;

// Random [in, out] weights, scaled by 1 / sqrt(in), then the [n] norm weights, on `device`.
std::vector<Tensor> weights(const std::vector<std::pair<int64_t, int64_t>>& shapes,
                            std::vector<int64_t> norms, uint64_t seed, Device device) {
  std::vector<Tensor> w;
  for (auto [in, out] : shapes)
    w.push_back(random_bf16({in, out}, seed++, 1.0f / std::sqrt(static_cast<float>(in))));
  for (int64_t n : norms) w.push_back(random_bf16({n}, seed++, 0.1f, 1.0f));
  for (Tensor& t : w) t = t.to(device);
  return w;
}

// The two ops under test: their weights, arguments, and what each segment owns (MLA's
// latent cache, KDA's state).
struct Mla {
  using Owner = LatentCache;
  static constexpr const char* kOp = "mla";
  static constexpr const char* kVariant = "latent_cache";
  std::vector<Tensor> w;
  Device device;
  explicit Mla(Device d)
      : w(weights({{kH, kQd}, {kH, kR}, {kR, kQd}, {kR, kQd}, {kH, kQd}, {kQd, kH}}, {kR}, 1, d)),
        device(d) {}
  MlaArgs args(const Tensor* x, LatentCache* cache, Tensor* out) const {
    return MlaArgs{x, &w[0], &w[1], &w[6], &w[2], &w[3], &w[4], &w[5], kHeads, kHd, 1e-6f,
                   cache, out};
  }
  Owner fresh() const { return {}; }
  static void segments(MlaArgs& a, std::span<const int64_t> begin, std::span<Owner* const> own) {
    a.begin = begin;
    a.caches = own;
  }
  static bool same(const Owner& a, const Owner& b) {
    return a.positions == b.positions && latents_on_host(a, kR).bit_equal(latents_on_host(b, kR));
  }
};

struct Kda {
  using Owner = Tensor;
  static constexpr const char* kOp = "kda";
  static constexpr const char* kVariant = "recurrent";
  std::vector<Tensor> w;
  Device device;
  explicit Kda(Device d)
      : w(weights({{kH, kQd}, {kH, kQd}, {kH, kQd}, {kH, kHeads}, {kH, kQd}, {kH, kQd}, {kQd, kH}},
                  {kHd}, 20, d)),
        device(d) {}
  KdaArgs args(const Tensor* x, Tensor* state, Tensor* out) const {
    return KdaArgs{x,     &w[0], &w[1], &w[2], &w[3], &w[4], &w[5], &w[7], &w[6],
                   kHeads, kHd,  1e-6f, state, out};
  }
  Owner fresh() const { return Tensor::zeros(DType::kF32, {int64_t{kHeads} * kHd * kHd}, device); }
  static void segments(KdaArgs& a, std::span<const int64_t> begin, std::span<Owner* const> own) {
    a.begin = begin;
    a.states = own;
  }
  static bool same(const Owner& a, const Owner& b) { return a.bit_equal(b); }
};

std::vector<int64_t> bounds(const std::vector<int64_t>& rows) {
  std::vector<int64_t> begin{0};
  for (int64_t r : rows) begin.push_back(begin.back() + r);
  return begin;
}

// Rounds of calls over the same segments: the segmented call on one set of caches or
// states, each segment's own call on another; every round's outputs and the caches or
// states must be equal.
template <typename Op>
void rounds(Device device, const std::vector<std::vector<int64_t>>& rounds) {
  const Op op(device);
  std::vector<typename Op::Owner> together, alone;
  for (size_t i = 0; i < rounds.front().size(); ++i) {
    together.push_back(op.fresh());
    alone.push_back(op.fresh());
  }
  uint64_t seed = 100;
  for (const std::vector<int64_t>& rows : rounds) {
    const std::vector<int64_t> begin = bounds(rows);
    const Tensor x = random_bf16({begin.back(), kH}, seed++, 1.0f).to(device);
    Tensor out = Tensor::zeros(DType::kBF16, {begin.back(), kH}, device);
    std::vector<typename Op::Owner*> owners;
    for (typename Op::Owner& o : together) owners.push_back(&o);
    auto a = op.args(&x, nullptr, &out);
    Op::segments(a, begin, owners);
    const std::vector<OpCase> cases =
        op_cases_of_call(find_kernel(Op::kOp, Op::kVariant), KernelContext{}, &a);
    ASSERT_EQ(cases.size(), rows.size()) << Op::kOp << ": one case a segment";
    run_variant(Op::kOp, Op::kVariant, &a);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Tensor xi = x.rows(begin[i], begin[i + 1]);
      Tensor oi = Tensor::zeros(DType::kBF16, {rows[i], kH}, device);
      auto one = op.args(&xi, &alone[i], &oi);
      run_variant(Op::kOp, Op::kVariant, &one);
      EXPECT_TRUE(oi.bit_equal(out.rows(begin[i], begin[i + 1])))
          << Op::kOp << " segment " << i << " of rows " << ::testing::PrintToString(rows);
      EXPECT_TRUE(Op::same(together[i], alone[i])) << Op::kOp << " cache of segment " << i;
      if (device == Device::kCpu) {  // the case replayed: the segment's rows, bit for bit
        EXPECT_TRUE(run_op_case(cases[i], device).bit_equal(oi)) << Op::kOp << " case " << i;
      }
    }
  }
}

// A prefill of three requests, then decode and verify blocks, one request idle.
const std::vector<std::vector<int64_t>> kCpuRounds = {{5, 3, 7}, {1, 0, 4}, {2, 1, 1}};
// On CUDA at most 8 rows in every product: inputs and contexts (6, then 8 in all).
const std::vector<std::vector<int64_t>> kGpuRounds = {{2, 1, 3}, {1, 0, 1}};

TEST(SegmentedAttentionTest, MlaGivesEachSegmentItsOwnCallsBitsAndCache) {
  rounds<Mla>(Device::kCpu, kCpuRounds);
}

TEST(SegmentedAttentionTest, KdaGivesEachSegmentItsOwnCallsBitsAndState) {
  rounds<Kda>(Device::kCpu, kCpuRounds);
}

TEST(SegmentedAttentionTest, SharedCachesAndBadBoundsAreRefusedBeforeAnyWrite) {
  const Mla mla(Device::kCpu);
  const Tensor x = random_bf16({4, kH}, 7, 1.0f);
  Tensor out = Tensor::zeros(DType::kBF16, {4, kH});
  LatentCache c0, c1;
  Tensor short_out = Tensor::zeros(DType::kBF16, {3, kH});
  auto refused = [&](std::vector<int64_t> begin, std::vector<LatentCache*> caches,
                     const std::string& why, Tensor* into = nullptr) {
    MlaArgs a = mla.args(&x, nullptr, into != nullptr ? into : &out);
    a.begin = begin;
    a.caches = caches;
    try {
      run_variant("mla", "latent_cache", &a);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    EXPECT_EQ(c0.positions, 0);
    EXPECT_EQ(c1.positions, 0);
  };
  refused({0, 2, 4}, {&c0, &c0}, "share a cache");
  refused({0, 2, 3}, {&c0, &c1}, "rise from 0 to the row count");
  refused({0, 3, 2, 4}, {&c0, &c1, nullptr}, "rise from 0");
  refused({0, 4}, {&c0, &c1}, "2 segments, 2 bounds");
  refused({0, 2, 4}, {&c0, &c1}, "x has 4 rows, out 3", &short_out);

  const Kda kda(Device::kCpu);
  Tensor s = Tensor::zeros(DType::kF32, {int64_t{kHeads} * kHd * kHd});
  std::vector<Tensor*> states{&s, &s};
  KdaArgs k = kda.args(&x, nullptr, &out);
  const std::vector<int64_t> begin{0, 1, 4};
  k.begin = begin;
  k.states = states;
  EXPECT_THROW(run_variant("kda", "recurrent", &k), std::invalid_argument);
  EXPECT_TRUE(s.bit_equal(Tensor::zeros(DType::kF32, {int64_t{kHeads} * kHd * kHd})));
}

TEST(CudaSegmentedAttentionTest, MlaGivesEachSegmentItsOwnCallsBitsAndCache) {
  SPLITCHECK_REQUIRE_GPU();
  rounds<Mla>(Device::kCuda, kGpuRounds);
}

TEST(CudaSegmentedAttentionTest, KdaGivesEachSegmentItsOwnCallsBitsAndState) {
  SPLITCHECK_REQUIRE_GPU();
  rounds<Kda>(Device::kCuda, kGpuRounds);
}

// More segments than one launch takes (16): the launches after the first keep their rows
// (5 rows in all, then 3 more: the contexts 8 rows in all).
TEST(CudaSegmentedAttentionTest, MoreSegmentsThanALaunchTakesKeepTheirOwnBits) {
  SPLITCHECK_REQUIRE_GPU();
  std::vector<int64_t> first(19, 0), second(19, 0);
  first[0] = 1, first[9] = 1, first[17] = 1, first[18] = 2;
  second[16] = 2, second[18] = 1;
  rounds<Mla>(Device::kCuda, {first, second});
  rounds<Kda>(Device::kCuda, {first, second});
}

}  // namespace
}  // namespace splitcheck
