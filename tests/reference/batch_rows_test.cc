// A layer over a ragged batch (reference/batch.h) against the same layer on each segment
// alone: AttnRes and the MLP run once over the concatenated rows, attention per segment on
// views of its rows, and every segment's state, record and dispatch trace equal its own
// run_layer's, bit for bit, including where SPEC 2.2's BLOCK_L rule makes AttnRes run per
// segment (segments under 256 tokens, 256 or more rows in all); likewise the taps and the
// output head.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "reference/batch.h"
#include "reference/splitmix.h"
#include "reference/weights.h"

namespace splitcheck {
namespace {

// k3-tiny cut to 12 layers of AttnRes block 4: layer 8 writes block 2 (the fallback AttnRes,
// nb 2, KDA, MoE); layer 11 is MLA with the native AttnRes over 3 blocks.
ModelConfig config12() {
  ModelConfig c = *model_preset("k3-tiny");
  c.num_hidden_layers = 12;
  c.attn_res_block_size = 4;
  return c;
}

Tensor random_bf16(Shape shape, uint64_t seed) {
  Tensor t = Tensor::zeros(DType::kBF16, std::move(shape));
  bf16* p = t.data<bf16>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t r = splitmix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    p[i] = to_bf16(static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53 * 2.0 - 1.0));
  }
  return t;
}

ResidualState random_state(const ModelConfig& c, int64_t t, uint64_t seed) {
  ResidualState st;
  st.prefix = random_bf16({t, c.hidden_size}, 3 * seed);
  st.delta = random_bf16({t, c.hidden_size}, 3 * seed + 1);
  st.has_delta = true;
  st.bank = random_bf16({t, c.num_blocks(), c.hidden_size}, 3 * seed + 2);
  return st;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

// The batch's dispatch events of segment i against its own call's, one by one.
void expect_same_events(const DispatchTrace& batch, const DispatchTrace& alone, size_t i) {
  ASSERT_EQ(batch.events.size(), alone.events.size()) << "segment " << i;
  for (size_t k = 0; k < alone.events.size(); ++k) {
    const DispatchEvent& a = alone.events[k];
    const DispatchEvent& b = batch.events[k];
    EXPECT_EQ(b.forward, a.forward) << "segment " << i << ", event " << k;
    EXPECT_EQ(b.layer, a.layer) << "segment " << i << ", event " << k;
    EXPECT_EQ(b.site, a.site) << "segment " << i << ", event " << k;
    EXPECT_EQ(b.aux, a.aux) << "segment " << i << ", event " << k;
    EXPECT_EQ(b.kernel, a.kernel) << "segment " << i << ", event " << k;
  }
}

class BatchRowsTest : public ::testing::TestWithParam<std::tuple<int, std::vector<int64_t>>> {
 protected:
  static void SetUpTestSuite() {
    Result<WeightStore> w = generate_weights(config12());
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    weights_ = new WeightStore(std::move(w).value());
  }
  static void TearDownTestSuite() { delete weights_; }
  static WeightStore* weights_;
};
WeightStore* BatchRowsTest::weights_ = nullptr;

TEST_P(BatchRowsTest, EverySegmentEqualsItsLayerAlone) {
  const ModelConfig c = config12();
  const auto& [l, sizes] = GetParam();
  Result<LayerWeights> w = bind_layer(c, *weights_, l);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  const size_t n = sizes.size();

  // Each segment alone.
  std::vector<ResidualState> alone(n), parts(n);
  std::vector<LayerCache> alone_caches(n), batch_caches(n);
  std::vector<DispatchTrace> alone_traces(n), batch_traces(n);
  std::vector<RunRecord> alone_records(n), batch_records(n);
  std::vector<KernelContext> ctxs;
  std::vector<LayerCache*> caches;
  std::vector<LayerRecording> recs;
  for (size_t i = 0; i < n; ++i) {
    const ResidualState st = random_state(c, sizes[i], 7 + i);
    alone[i] = ResidualState{st.prefix.clone(), st.delta.clone(), true, st.bank.clone()};
    parts[i] = ResidualState{st.prefix.clone(), st.delta.clone(), true, st.bank.clone()};
    const int32_t forward = static_cast<int32_t>(10 + i);
    const std::string path = "forward/" + std::to_string(forward) + "/";
    run_layer(KernelContext{&alone_traces[i], forward}, c, l, *w, alone[i], alone_caches[i],
              LayerRecording{&alone_records[i], path, DumpLevel::kLayer});
    ctxs.push_back(KernelContext{&batch_traces[i], forward});
    caches.push_back(&batch_caches[i]);
    recs.push_back(LayerRecording{&batch_records[i], path, DumpLevel::kLayer});
  }

  // The batch.
  BatchRows rows = concat_rows(parts);
  run_layer_batch(ctxs, c, l, *w, rows, caches, recs);

  for (size_t i = 0; i < n; ++i) {
    const ResidualState got = rows.segment(i);
    EXPECT_TRUE(same(got.prefix, alone[i].prefix)) << "segment " << i;
    EXPECT_TRUE(same(got.delta, alone[i].delta)) << "segment " << i;
    EXPECT_TRUE(same(got.bank, alone[i].bank)) << "segment " << i;
    ASSERT_EQ(batch_records[i].entries().size(), alone_records[i].entries().size());
    for (size_t k = 0; k < alone_records[i].entries().size(); ++k) {
      const RecordEntry& a = alone_records[i].entries()[k];
      const RecordEntry& b = batch_records[i].entries()[k];
      EXPECT_EQ(b.path, a.path);
      EXPECT_TRUE(same(b.tensor, a.tensor)) << a.path;
    }
    expect_same_events(batch_traces[i], alone_traces[i], i);
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, BatchRowsTest,
                         ::testing::Values(std::make_tuple(8, std::vector<int64_t>{3, 5, 1}),
                                           std::make_tuple(8, std::vector<int64_t>{130, 130}),
                                           std::make_tuple(11, std::vector<int64_t>{3, 5, 1}),
                                           std::make_tuple(11, std::vector<int64_t>{130, 130})));

// Taps and the head over a batch (read_tap_rows, run_head_rows) against each segment's own
// read_tap and run_head: the same bits and the same dispatch events, whether they run once
// over all rows (3 + 5 + 1) or per segment (130 + 130 rows, where BLOCK_L differs).
class BatchEndsTest : public BatchRowsTest {};

TEST_P(BatchEndsTest, TapsAndHeadEqualEachSegmentsOwn) {
  const ModelConfig c = config12();
  const std::vector<int64_t>& sizes = std::get<1>(GetParam());
  const size_t n = sizes.size();
  std::vector<ResidualState> alone(n), parts(n);
  std::vector<DispatchTrace> alone_traces(n), batch_traces(n);
  std::vector<KernelContext> ctxs;
  for (size_t i = 0; i < n; ++i) {
    const ResidualState st = random_state(c, sizes[i], 40 + i);
    alone[i] = ResidualState{st.prefix.clone(), st.delta.clone(), true, st.bank.clone()};
    parts[i] = ResidualState{st.prefix.clone(), st.delta.clone(), true, st.bank.clone()};
    ctxs.push_back(KernelContext{&batch_traces[i], static_cast<int32_t>(20 + i)});
  }
  BatchRows rows = concat_rows(parts);
  for (int k : {4, 8}) {  // one block, then two
    Result<LayerWeights> w = bind_layer(c, *weights_, k);
    ASSERT_TRUE(w.is_ok());
    const std::vector<Tensor> taps =
        read_tap_rows(ctxs, c, k, rows, [&](const KernelContext& ctx, const ResidualState& st) {
          return read_tap(ctx, c, k, st, *w->sa_res_norm, *w->sa_res_proj);
        });
    for (size_t i = 0; i < n; ++i) {
      const Tensor own = read_tap(KernelContext{&alone_traces[i], static_cast<int32_t>(20 + i)}, c,
                                  k, alone[i], *w->sa_res_norm, *w->sa_res_proj);
      EXPECT_TRUE(same(taps[i], own)) << "tap " << k << ", segment " << i;
    }
  }
  const std::vector<HeadOutput> heads = run_head_rows(ctxs, c, rows, *weights_);
  for (size_t i = 0; i < n; ++i) {
    const HeadOutput own = run_head(KernelContext{&alone_traces[i], static_cast<int32_t>(20 + i)},
                                    c, alone[i], *weights_);
    EXPECT_TRUE(same(heads[i].output, own.output)) << "segment " << i;
    EXPECT_TRUE(same(heads[i].logits, own.logits)) << "segment " << i;
    EXPECT_TRUE(same(heads[i].next_tokens, own.next_tokens)) << "segment " << i;
    EXPECT_TRUE(same(rows.segment(i).prefix, alone[i].prefix)) << "segment " << i;
    expect_same_events(batch_traces[i], alone_traces[i], i);
  }
}

INSTANTIATE_TEST_SUITE_P(Segments, BatchEndsTest,
                         ::testing::Values(std::make_tuple(0, std::vector<int64_t>{3, 5, 1}),
                                           std::make_tuple(0, std::vector<int64_t>{130, 130})));

// Why the batch must run layer 8's AttnRes per segment at 130 + 130 rows: one call over all
// 260 rows takes BLOCK_L 1 where each segment's own takes 4, and gives other bits.
TEST(BatchRowsBlockL, OneCallOverAllRowsWouldGiveOtherBits) {
  const ModelConfig c = config12();
  Result<WeightStore> store = generate_weights(c);
  ASSERT_TRUE(store.is_ok());
  Result<LayerWeights> w = bind_layer(c, *store, 8);
  ASSERT_TRUE(w.is_ok());
  ASSERT_NE(attn_res_fallback_block_l(260, 2), attn_res_fallback_block_l(130, 2));
  const std::vector<int> native = native_sizes(c);
  std::vector<ResidualState> parts = {random_state(c, 130, 1), random_state(c, 130, 2)};
  BatchRows all = concat_rows(parts);
  Tensor x_all = Tensor::zeros(DType::kBF16, {260, c.hidden_size});
  AttnResArgs once = pre_attn_args(c, 8, *w, all.all, native, &x_all);
  ASSERT_FALSE(attn_res_native_eligible(once));
  run_variant("attn_res", "fallback", &once);
  bool differs = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    Tensor x = Tensor::zeros(DType::kBF16, {130, c.hidden_size});
    AttnResArgs own = pre_attn_args(c, 8, *w, parts[i], native, &x);
    run_variant("attn_res", "fallback", &own);
    differs = differs || !same(x, x_all.rows(static_cast<int64_t>(130 * i),
                                             static_cast<int64_t>(130 * (i + 1))));
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace splitcheck
