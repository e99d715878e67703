// CacheSnapshot (reference/cache_snapshot.h): what a restore returns to, and what it refuses.
#include "reference/cache_snapshot.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace splitcheck {
namespace {

ModelConfig tiny_model() { return *model_preset("k3-tiny"); }

// Caches of layers [first, first + n) with every KDA state allocated and filled from
// `base`, and each MLA cache holding `positions` latents.
std::vector<LayerCache> caches_filled_from(const ModelConfig& c, int first, int n, float base,
                               int64_t positions) {
  std::vector<LayerCache> caches;
  for (int l = first; l < first + n; ++l) {
    LayerCache lc = empty_layer_cache(c, l);
    if (c.is_mla_layer(l)) {
      reserve_latents(lc.mla_latent, positions, c.kv_lora_rank, Device::kCpu);
      lc.mla_latent.positions = positions;
    } else {
      lc.kda_state = zero_kda_state(c, Device::kCpu);
      for (int64_t i = 0; i < lc.kda_state.numel(); ++i)
        lc.kda_state.data<float>()[i] = base + static_cast<float>(l) + static_cast<float>(i % 31);
    }
    caches.push_back(std::move(lc));
  }
  return caches;
}

TEST(CacheSnapshotTest, ARestoreWithoutASnapshotChangesNothing) {
  const ModelConfig c = tiny_model();
  std::vector<LayerCache> caches = caches_filled_from(c, 0, 8, 1.0f, 5);
  const std::vector<LayerCache> before = caches;
  CacheSnapshot s;
  EXPECT_FALSE(s.restore(c, 0, caches));
  for (size_t i = 0; i < caches.size(); ++i) {
    EXPECT_EQ(caches[i].mla_latent.positions, before[i].mla_latent.positions);
    if (!c.is_mla_layer(static_cast<int>(i))) {
      EXPECT_TRUE(caches[i].kda_state.bit_equal(before[i].kda_state)) << "layer " << i;
    }
  }
}

// The states and latent counts return after the caches moved on, once and again, and a
// second snapshot of the same caches takes their new values (the states stay gathered).
TEST(CacheSnapshotTest, ARestoreReturnsTheStatesAndLatentCountsOfTheLastSnapshot) {
  const ModelConfig c = tiny_model();
  const int first = 5, n = 9;  // KDA layers 5, 6, 8, 9, 10, 12, 13; MLA layers 7, 11
  std::vector<LayerCache> caches = caches_filled_from(c, first, n, 1.0f, 6);
  CacheSnapshot s;
  for (float base : {1.0f, 500.0f}) {
    if (base != 1.0f) {  // the second snapshot, of values written in place
      for (LayerCache& lc : caches) {
        if (lc.kda_state.shape().empty()) continue;
        for (int64_t i = 0; i < lc.kda_state.numel(); ++i) lc.kda_state.data<float>()[i] += 499.0f;
      }
    }
    const std::vector<LayerCache> want = caches;
    s.take(c, first, caches);
    for (int round = 0; round < 2; ++round) {
      for (LayerCache& lc : caches) {
        lc.mla_latent.positions = 0;
        if (lc.kda_state.shape().empty()) continue;
        for (int64_t i = 0; i < lc.kda_state.numel(); ++i) lc.kda_state.data<float>()[i] = -1.0f;
      }
      ASSERT_TRUE(s.restore(c, first, caches));
      for (size_t i = 0; i < caches.size(); ++i) {
        SCOPED_TRACE(testing::Message() << "base " << base << " round " << round << " layer "
                                        << first + static_cast<int>(i));
        EXPECT_EQ(caches[i].mla_latent.positions, want[i].mla_latent.positions);
        if (!want[i].kda_state.shape().empty()) {
          EXPECT_TRUE(caches[i].kda_state.bit_equal(want[i].kda_state));
        }
      }
    }
  }
}

// Caches replaced since the snapshot (a new sequence's, without a new snapshot) are
// refused rather than given another request's states or latent counts past their rows.
TEST(CacheSnapshotTest, CachesThatAreNotTheSnapshotsAreRefused) {
  const ModelConfig c = tiny_model();
  std::vector<LayerCache> caches = caches_filled_from(c, 0, 8, 1.0f, 5);
  CacheSnapshot s;
  s.take(c, 0, caches);
  std::vector<LayerCache> other = caches_filled_from(c, 0, 8, 2.0f, 5);
  EXPECT_THROW(s.restore(c, 0, other), std::logic_error);
  std::vector<LayerCache> fresh;
  for (int l = 0; l < 8; ++l) fresh.push_back(empty_layer_cache(c, l));
  EXPECT_THROW(s.restore(c, 0, fresh), std::logic_error);
  std::vector<LayerCache> fewer = caches_filled_from(c, 0, 4, 1.0f, 5);
  EXPECT_THROW(s.restore(c, 0, fewer), std::logic_error);
}

}  // namespace
}  // namespace splitcheck
