// The two calls a group of drafters makes for all its requests at once (reference/dspark.h):
// copy_runs (kernels/tensor_copy.h), rows of one tensor scattered to several, and the
// segmented dense attention (DenseAttentionArgs::begin), each block over its own keys and
// values. On either device each gives every run and every segment what a call of its own
// gives, bit for bit; the approximate lane's capture (harness/lanes/op_cases.h) takes a
// segmented call as one call a segment, each replaying to its rows. The GPU rows are
// skipped, saying why, without a CUDA device; the CPU rows run everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "harness/lanes/op_cases.h"
#include "kernels/ops.h"
#include "kernels/tensor_copy.h"
#include "tests/cuda/gpu_test_support.h"

namespace splitcheck {
namespace {

using testing::random_bf16;

// 40 runs (more than one launch takes) from one source into 5 tensors, none overlapping
// another's destination: row runs of 16-byte multiples and odd byte runs from odd offsets.
// Each destination ends with the source's bytes where a run wrote and its own elsewhere.
void expect_runs_copied(Device device) {
  const Tensor src_host = random_bf16({64, 24}, 51, 1.0f);
  const Tensor src = src_host.to(device);
  std::vector<Tensor> dst_host, dst;
  for (int i = 0; i < 5; ++i) {
    dst_host.push_back(random_bf16({32, 24}, 60 + static_cast<uint64_t>(i), 1.0f));
    dst.push_back(dst_host.back().to(device));
  }
  std::vector<CopyRun> runs;
  for (size_t r = 0; r < 40; ++r) {
    const size_t to = r % 5, row = 48;  // bytes a row
    const bool odd = r % 3 == 2;
    const size_t bytes = odd ? 7 + r : row * (1 + r % 2);
    const size_t from = odd ? 3 * r + 1 : row * r;
    const size_t at = odd ? 1200 + 100 * (r / 15) : row * 2 * (r / 5);
    runs.push_back(CopyRun{&dst[to], at, &src, from, bytes});
    std::memcpy(static_cast<std::byte*>(dst_host[to].address()) + at,
                static_cast<const std::byte*>(src_host.address()) + from, bytes);
  }
  copy_runs(runs);
  for (size_t i = 0; i < dst.size(); ++i)
    EXPECT_TRUE(dst[i].to(Device::kCpu).bit_equal(dst_host[i])) << "destination " << i;
  std::vector<CopyRun> outside = {CopyRun{&dst[0], dst[0].nbytes() - 4, &src, 0, 8}};
  EXPECT_THROW(copy_runs(outside), std::out_of_range);
}

// 20 segments (more than one launch takes) of 1-6 query rows, each over its own 3-40 keys:
// the segmented call's rows are each segment's own call's.
void expect_segments_alone(Device device) {
  const int heads = 4, hd = 16;
  const int64_t qd = heads * hd;
  std::vector<int64_t> begin = {0};
  std::vector<Tensor> keys, values;
  for (int i = 0; i < 20; ++i) {
    begin.push_back(begin.back() + 1 + i % 6);
    const int64_t tk = 3 + (i * 7) % 38;
    keys.push_back(random_bf16({tk, qd}, 70 + static_cast<uint64_t>(i), 1.0f).to(device));
    values.push_back(random_bf16({tk, qd}, 90 + static_cast<uint64_t>(i), 1.0f).to(device));
  }
  const Tensor q = random_bf16({begin.back(), qd}, 69, 1.0f).to(device);
  Tensor together = Tensor::zeros(DType::kBF16, q.shape(), device);
  DenseAttentionArgs a{&q, nullptr, nullptr, heads, hd, &together, begin, {}, {}};
  for (size_t i = 0; i < keys.size(); ++i) {
    a.keys.push_back(&keys[i]);
    a.values.push_back(&values[i]);
  }
  const KernelContext ctx{nullptr, 0, -1, Site::kDraft, 0, -1};
  const std::vector<OpCase> cases =
      op_cases_of_call(find_kernel("dense_attention", "softmax"), ctx, &a);
  ASSERT_EQ(cases.size(), keys.size()) << "one case a segment";
  dense_attention(ctx, a);
  const Tensor got = together.to(Device::kCpu);
  for (size_t i = 0; i < keys.size(); ++i) {
    const Tensor qi = q.rows(begin[i], begin[i + 1]).clone();
    Tensor alone = Tensor::zeros(DType::kBF16, qi.shape(), device);
    DenseAttentionArgs one{&qi, &keys[i], &values[i], heads, hd, &alone, {}, {}, {}};
    dense_attention(ctx, one);
    EXPECT_TRUE(got.rows(begin[i], begin[i + 1]).clone().bit_equal(alone.to(Device::kCpu)))
        << "segment " << i;
    if (device == Device::kCpu) {  // the case replayed: the segment's rows, bit for bit
      EXPECT_TRUE(run_op_case(cases[i], device).bit_equal(alone)) << "case " << i;
    }
  }
}

TEST(GroupOpsTest, OnTheCpuCopyRunsCopiesEveryRun) { expect_runs_copied(Device::kCpu); }

TEST(GroupOpsTest, OnTheCpuSegmentedAttentionIsEachSegmentAlone) {
  expect_segments_alone(Device::kCpu);
}

TEST(CudaGroupOpsTest, CopyRunsCopiesEveryRun) {
  SPLITCHECK_REQUIRE_GPU();
  expect_runs_copied(Device::kCuda);
}

TEST(CudaGroupOpsTest, SegmentedAttentionIsEachSegmentAlone) {
  SPLITCHECK_REQUIRE_GPU();
  expect_segments_alone(Device::kCuda);
}

}  // namespace
}  // namespace splitcheck
