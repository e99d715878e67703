// Speculative decoding: the method registry's embedding placement rule (SPEC 2.7).
#include <gtest/gtest.h>

#include "reference/spec_methods.h"

namespace splitcheck {
namespace {

TEST(SpecMethods, RegistryDeclaresSharing) {
  const SpecMethodInfo* dspark = find_spec_method("dspark");
  ASSERT_NE(dspark, nullptr);
  EXPECT_TRUE(dspark->has_drafter);
  EXPECT_TRUE(dspark->shares_target_embedding);
  EXPECT_TRUE(dspark->shares_lm_head);
  const SpecMethodInfo* eagle3 = find_spec_method("eagle3");
  ASSERT_NE(eagle3, nullptr);
  EXPECT_TRUE(eagle3->shares_target_embedding);
  EXPECT_FALSE(eagle3->shares_lm_head);
  const SpecMethodInfo* none = find_spec_method("none");
  ASSERT_NE(none, nullptr);
  EXPECT_FALSE(none->has_drafter);
  EXPECT_EQ(find_spec_method("medusa"), nullptr);
}

TEST(SpecMethods, DefaultCaptureIds) {
  EXPECT_EQ(method_default_capture_ids("dspark", 32), (std::vector<int>{0, 7, 16, 25, 32}));
  EXPECT_EQ(method_default_capture_ids("eagle3", 32), (std::vector<int>{2, 16, 29}));
  EXPECT_EQ(method_default_capture_ids("none", 32), (std::vector<int>{0, 7, 16, 25, 32}));
}

TEST(SpecMethods, EmbeddingCopyOnlyOnTheLastStageOfADrafterThatSharesIt) {
  for (const char* m : {"dspark", "eagle3"}) {
    // First (also PP=1's single stage: it holds the embedding itself), middle, last.
    EXPECT_FALSE(last_stage_holds_embedding_copy(m, /*is_last=*/false, /*is_first=*/true, false));
    EXPECT_FALSE(last_stage_holds_embedding_copy(m, true, true, false)) << m;
    EXPECT_FALSE(last_stage_holds_embedding_copy(m, false, false, false)) << m;
    EXPECT_TRUE(last_stage_holds_embedding_copy(m, true, false, false)) << m;
    // A context-only producer proposes nothing and holds no copy.
    EXPECT_FALSE(last_stage_holds_embedding_copy(m, true, false, true)) << m;
  }
  // Without a drafter no stage holds a copy.
  for (bool last : {false, true})
    for (bool first : {false, true})
      for (bool producer : {false, true})
        EXPECT_FALSE(last_stage_holds_embedding_copy("none", last, first, producer));
  EXPECT_FALSE(last_stage_holds_embedding_copy("unknown", true, false, false));
}

}  // namespace
}  // namespace splitcheck
