// The nccl transport gives each rank one GPU of its host (NCCL refuses two ranks of one
// communicator on one GPU): more ranks on a host than GPUs is refused, naming both counts,
// before any communicator exists (partition.remainder_dropped's PP=4 on two GPUs).
#include <gtest/gtest.h>

#if SPLITCHECK_HAVE_NCCL
#include "harness/transport/nccl_channel.h"
#endif

namespace splitcheck {
namespace {

TEST(NcclRanksTest, MoreRanksThanGpusOnAHostIsRefusedNamingBothCounts) {
#if !SPLITCHECK_HAVE_NCCL
  GTEST_SKIP() << "built without SPLITCHECK_NCCL";
#else
  const std::string four_on_two = ranks_per_gpu_problem(4, 2);
  ASSERT_FALSE(four_on_two.empty());
  EXPECT_NE(four_on_two.find("4 ranks"), std::string::npos) << four_on_two;
  EXPECT_NE(four_on_two.find("2 visible GPU"), std::string::npos) << four_on_two;
  EXPECT_NE(four_on_two.find("needs one GPU per rank"), std::string::npos) << four_on_two;
  EXPECT_FALSE(ranks_per_gpu_problem(1, 0).empty());
  EXPECT_FALSE(ranks_per_gpu_problem(3, 2).empty());
  EXPECT_TRUE(ranks_per_gpu_problem(2, 2).empty());
  EXPECT_TRUE(ranks_per_gpu_problem(1, 8).empty());
#endif
}

}  // namespace
}  // namespace splitcheck
