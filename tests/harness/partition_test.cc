#include "harness/scenario/partition.h"

#include <gtest/gtest.h>

#include <set>

namespace splitcheck {
namespace {

TEST(Partition, RejectsBoundsThatDoNotIncreaseOrMissTheEnds) {
  EXPECT_FALSE(Partition::make({0, 12, 12, 32}, 32).is_ok());
  EXPECT_FALSE(Partition::make({1, 12, 32}, 32).is_ok());
  EXPECT_FALSE(Partition::make({0, 12, 31}, 32).is_ok());
  EXPECT_FALSE(Partition::from_cuts({0}, 32).is_ok());
  EXPECT_TRUE(Partition::from_cuts({12}, 32).is_ok());
}

TEST(Partition, NamesAndLayoutComeFromTheCuts) {
  Partition p = *Partition::from_cuts({8, 20}, 32);
  EXPECT_EQ(p.key(), "split-8-20");
  EXPECT_EQ(p.layout(), "0-8|8-20|20-32");
  EXPECT_EQ(p.stages(), 3);
  EXPECT_EQ(p.stage(1).begin, 8);
  EXPECT_EQ(p.stage(1).end, 20);
}

TEST(Partition, AllSplitPointsOfPp2) {
  auto parts = *enumerate_partitions(PartitionSpec{2, "all", {}}, 32);
  ASSERT_EQ(parts.size(), 31u);
  for (int i = 0; i < 31; ++i) EXPECT_EQ(parts[i].cuts(), std::vector<int>{i + 1});
}

TEST(Partition, ExhaustiveCountsCombinations) {
  auto parts = *enumerate_partitions(PartitionSpec{3, "exhaustive", {}}, 12);
  EXPECT_EQ(parts.size(), 55u);  // C(11, 2)
}

TEST(Partition, PairwiseCoversEveryPairOfCutPositions) {
  const int layers = 16;
  auto parts = *enumerate_partitions(PartitionSpec{4, "pairwise", {}}, layers);
  std::set<std::pair<int, int>> covered;
  for (const Partition& p : parts) {
    const auto cuts = p.cuts();
    ASSERT_EQ(cuts.size(), 3u);
    for (size_t i = 0; i < cuts.size(); ++i)
      for (size_t j = i + 1; j < cuts.size(); ++j) covered.insert({cuts[i], cuts[j]});
  }
  EXPECT_EQ(covered.size(), static_cast<size_t>((layers - 1) * (layers - 2) / 2));
  EXPECT_LT(parts.size(), 455u);  // far fewer than all C(15, 3) partitions
  // Deterministic.
  auto again = *enumerate_partitions(PartitionSpec{4, "pairwise", {}}, layers);
  ASSERT_EQ(again.size(), parts.size());
  for (size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(again[i].layout(), parts[i].layout());
}

TEST(Partition, EveryLayerMakesEachLayerAStage) {
  auto parts = *enumerate_partitions(PartitionSpec{32, "every-layer", {}}, 32);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].stages(), 32);
  EXPECT_EQ(parts[0].key(), "every-layer");
}

TEST(Partition, BalancedStagesDifferByAtMostOne) {
  auto parts = *enumerate_partitions(PartitionSpec{3, "balanced", {}}, 32);
  ASSERT_EQ(parts.size(), 1u);
  for (int s = 0; s < 3; ++s) {
    const int n = parts[0].stage(s).end - parts[0].stage(s).begin;
    EXPECT_TRUE(n == 10 || n == 11) << n;
  }
}

TEST(Partition, OwnershipNamesLayersOwnedByNoStageOrByTwo) {
  EXPECT_EQ(Partition::from_cuts({12}, 32)->ownership_problem(), "");
  // partition.remainder_dropped: 30 layers at PP=4 became 28.
  Result<std::vector<Partition>> dropped = enumerate_partitions(
      PartitionSpec{4, "balanced", {}}, 30, FaultSet{{"partition.remainder_dropped"}});
  ASSERT_TRUE(dropped.is_ok());
  ASSERT_EQ(dropped->size(), 1u);
  EXPECT_EQ((*dropped)[0].layout(), "0-7|7-14|14-21|21-28");
  EXPECT_EQ((*dropped)[0].ownership_problem(), "layers 28-29 are owned by no stage");
  // 10 layers on 3 ranks: layer 9 dropped.
  EXPECT_EQ((*enumerate_partitions(PartitionSpec{3, "balanced", {}}, 10,
                                   FaultSet{{"partition.remainder_dropped"}}))[0]
                .ownership_problem(),
            "layer 9 is owned by no stage");
  // Without the fault the same planner covers every layer.
  EXPECT_EQ((*enumerate_partitions(PartitionSpec{4, "balanced", {}}, 30))[0].ownership_problem(),
            "");
  // Overlaps and gaps between stages are named too.
  EXPECT_EQ(Partition::from_ranges({{0, 6}, {5, 10}}, 10).ownership_problem(),
            "layer 5 is owned by more than one stage");
  EXPECT_EQ(Partition::from_ranges({{0, 4}, {6, 10}}, 10).ownership_problem(),
            "layers 4-5 are owned by no stage");
  EXPECT_EQ(Partition::from_ranges({}, 3).ownership_problem(),
            "layers 0-2 are owned by no stage; no stage");
}

TEST(Partition, ExplicitListIsValidated) {
  EXPECT_TRUE(enumerate_partitions(PartitionSpec{2, "list", {{12}, {20}}}, 32).is_ok());
  EXPECT_FALSE(enumerate_partitions(PartitionSpec{2, "list", {{40}}}, 32).is_ok());
}

}  // namespace
}  // namespace splitcheck
