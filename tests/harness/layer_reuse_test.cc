// Layer reuse by content (reference/layer_memo.h): a partitioned run that takes layer
// outcomes from PP=1's memo records exactly what it records computing everything; every
// stage reuses, not only the first; only the first layer after each cut is computed on
// the fixed protocol; a stage that loaded other weights never reuses them; verify mode
// catches a key that misses an input; the memory bound only turns hits into misses.
#include <gtest/gtest.h>

#include "harness/engine/partitioned_engine.h"
#include "harness/engine/run.h"
#include "harness/verdict/sweep.h"
#include "reference/layer_memo.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

Scenario default_scenario() {
  Scenario out = committed_scenario("default");
  out.workload.max_new_tokens = 6;
  return out;
}

EngineOptions engine_options(const Scenario& s) {
  return EngineOptions{s.capture_ids, s.dump_level, s.speculative.method,
                       s.speculative.context_only_producer};
}

// PP=1 over the scenario's weights, filling a memo; returns it frozen.
std::unique_ptr<LayerMemo> pp1_memo(const Scenario& s, size_t max_bytes = 0,
                                    LayerKeyFn key = &layer_key, int32_t* forwards = nullptr) {
  auto memo = std::make_unique<LayerMemo>(max_bytes, key);
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<ReferenceRun> ref = run_reference(s, *source, memo.get());
  EXPECT_TRUE(ref.is_ok()) << ref.status().message();
  if (forwards != nullptr && ref.is_ok()) *forwards = ref->generation.forwards;
  memo->freeze();
  return memo;
}

struct SplitRun {
  Status status;
  RunRecord record;
  ReuseStats stats;
};

SplitRun run_split(const Scenario& s, const std::vector<int>& cuts, const LayerMemo* memo,
                   ReuseMode mode) {
  SplitRun out;
  Result<PreparedWorkload> w = prepare_workload(s);
  Result<Partition> p = Partition::from_cuts(cuts, s.model.num_hidden_layers);
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<std::unique_ptr<PartitionedEngine>> e = PartitionedEngine::create(
      s.model, *p, engine_options(s), FaultSet{s.faults}, *source, memo, mode);
  if (!e.is_ok()) {
    out.status = e.status();
    return out;
  }
  const int last = p->stages() - 1;
  ReuseStats drafter;
  Result<GenerationSummary> g =
      run_generation(s, **e, (*e)->last_stage_weights(), last, false, *source, *w, &out.record,
                     MemoUse{nullptr, memo, mode}, &drafter);
  out.status = g.is_ok() ? Status::ok() : g.status();
  out.stats = (*e)->reuse_stats();
  out.stats += drafter;
  return out;
}

void expect_same_records(const RunRecord& a, const RunRecord& b) {
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (size_t i = 0; i < a.entries().size(); ++i) {
    ASSERT_EQ(a.entries()[i].path, b.entries()[i].path) << "entry " << i;
    EXPECT_TRUE(a.entries()[i].tensor.bit_equal(b.entries()[i].tensor)) << a.entries()[i].path;
    // A hit hands the stage a copy, never PP=1's own storage.
    EXPECT_NE(a.entries()[i].tensor.bytes(), b.entries()[i].tensor.bytes());
  }
  EXPECT_EQ(a.attrs(), b.attrs());
}

TEST(LayerReuse, ReusedLayersRecordExactlyWhatComputingThemRecords) {
  const Scenario s = default_scenario();
  int32_t forwards = 0;
  const std::unique_ptr<LayerMemo> memo = pp1_memo(s, 0, &layer_key, &forwards);
  ASSERT_GT(forwards, 0);
  const int L = s.model.num_hidden_layers;
  for (const std::vector<int>& cuts :
       std::vector<std::vector<int>>{{1}, {13}, {16}, {31}, {5, 20}}) {
    const SplitRun off = run_split(s, cuts, nullptr, ReuseMode::kOff);
    const SplitRun on = run_split(s, cuts, memo.get(), ReuseMode::kOn);
    ASSERT_TRUE(off.status.is_ok()) << off.status.message();
    ASSERT_TRUE(on.status.is_ok()) << on.status.message();
    expect_same_records(off.record, on.record);
    // On the fixed protocol a later stage starts from hidden = bf16(P + D) and a zero
    // delta, which the layer reads as PP=1's P and D: every layer call is a hit, except
    // the first layer after a block-aligned cut, which is given no delta where PP=1 had
    // one.
    int64_t aligned = 0;
    for (int c : cuts) aligned += s.model.is_block_write_layer(c);
    EXPECT_EQ(on.stats.misses, forwards * aligned) << cuts.front();
    EXPECT_EQ(on.stats.hits, forwards * (L - aligned)) << cuts.front();
    EXPECT_EQ(off.stats.computed, int64_t{forwards} * L);
    EXPECT_EQ(off.stats.hits + off.stats.misses, 0);
  }
}

TEST(LayerReuse, VerifyComputesEveryHitAndFindsItEqual) {
  const Scenario s = default_scenario();
  const std::unique_ptr<LayerMemo> memo = pp1_memo(s);
  const SplitRun on = run_split(s, {13}, memo.get(), ReuseMode::kOn);
  const SplitRun verify = run_split(s, {13}, memo.get(), ReuseMode::kVerify);
  ASSERT_TRUE(verify.status.is_ok()) << verify.status.message();
  EXPECT_EQ(verify.stats.verified, on.stats.hits);
  EXPECT_EQ(verify.stats.hits, 0);
  // The head, the drafter's context rows and its proposals are reused by content too,
  // and verify computes each of them.
  EXPECT_GT(on.stats.head_hits, 0);
  EXPECT_GT(on.stats.proposal_hits, 0);
  EXPECT_GT(on.stats.draft_rows_hits, 0);
  EXPECT_EQ(verify.stats.head_verified, on.stats.head_hits);
  EXPECT_EQ(verify.stats.proposal_verified, on.stats.proposal_hits);
  EXPECT_EQ(verify.stats.draft_rows_verified, on.stats.draft_rows_hits);
  EXPECT_EQ(verify.stats.head_hits + verify.stats.proposal_hits + verify.stats.draft_rows_hits, 0);
  expect_same_records(on.record, verify.record);
}

// The head's key covers its weights through the digest the caller passes: given the digest
// of other weights (a key that misses the weights it really holds), mode on would take the
// other weights' outcome, and verify computes it and refuses.
TEST(LayerReuse, HeadVerifyCatchesAKeyThatMissesItsWeights) {
  const ModelConfig c = default_scenario().model;
  const std::vector<std::string> names = {"output_attn_res_norm.weight",
                                          "output_attn_res_proj.weight", "norm.weight",
                                          "lm_head.weight"};
  Result<WeightStore> right = generate_weights(c, names);
  ASSERT_TRUE(right.is_ok()) << right.status().message();
  ModelConfig other_seed = c;
  other_seed.seed += 1;
  Result<WeightStore> wrong = generate_weights(other_seed, names);
  ASSERT_TRUE(wrong.is_ok()) << wrong.status().message();
  ResidualState st;
  st.prefix = Tensor::zeros(DType::kBF16, {3, c.hidden_size});
  for (int64_t i = 0; i < st.prefix.numel(); ++i)
    st.prefix.data<bf16>()[i] = to_bf16(static_cast<float>(i % 17) / 8.0f - 1.0f);
  st.bank = Tensor::zeros(DType::kBF16, {3, c.num_blocks(), c.hidden_size});
  const Digest128 right_digest = head_weights_digest(*right);
  ASSERT_FALSE(right_digest == head_weights_digest(*wrong));

  LayerMemo memo(0);
  DispatchTrace trace;
  const KernelContext ctx{&trace, 0, -1, Site::kEmbed, 0, -1};
  ResidualState fill_state = clone_state(st);
  ASSERT_TRUE(run_head_reusing(ctx, c, fill_state, *right, right_digest,
                               MemoUse{&memo, nullptr, ReuseMode::kOff}, nullptr)
                  .is_ok());
  memo.freeze();

  ReuseStats stats;
  ResidualState a = clone_state(st);
  Result<HeadOutput> hit = run_head_reusing(ctx, c, a, *wrong, right_digest,
                                            MemoUse{nullptr, &memo, ReuseMode::kOn}, &stats);
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(stats.head_hits, 1);
  ResidualState b = clone_state(st);
  Result<HeadOutput> verified = run_head_reusing(
      ctx, c, b, *wrong, right_digest, MemoUse{nullptr, &memo, ReuseMode::kVerify}, &stats);
  ASSERT_FALSE(verified.is_ok());
  EXPECT_EQ(verified.status().code(), StatusCode::kInternal);
  EXPECT_NE(verified.status().message().find("head reuse would change"), std::string::npos)
      << verified.status().message();
  // With its own digest the wrong store misses and computes.
  ResidualState d = clone_state(st);
  Result<HeadOutput> missed = run_head_reusing(ctx, c, d, *wrong, head_weights_digest(*wrong),
                                               MemoUse{nullptr, &memo, ReuseMode::kVerify}, &stats);
  ASSERT_TRUE(missed.is_ok());
  EXPECT_EQ(stats.head_verified, 0);
}

// A key that forgets the entering prefix and the layer's cache: every decode-sized call
// of a layer with an empty bank looks alike.
Digest128 key_without_prefix_and_cache(const ModelConfig& config, int l, const Digest128& weights,
                                       const ResidualState& state, const LayerCache&,
                                       DumpLevel level, bool traced) {
  ResidualState blind;
  blind.prefix = Tensor::zeros(state.prefix.dtype(), state.prefix.shape());
  blind.has_delta = state.has_delta;
  if (state.has_delta) blind.delta = state.delta;
  blind.bank = state.bank;
  return layer_key(config, l, weights, blind, LayerCache{}, level, traced);
}

TEST(LayerReuse, VerifyCatchesAKeyThatMissesAnInput) {
  Scenario s = default_scenario();
  s.partitions.mode = "list";
  s.partitions.cuts = {{13}};
  SweepOptions verify;
  verify.threads = 1;
  verify.reuse = ReuseMode::kVerify;
  verify.reuse_key = &key_without_prefix_and_cache;
  Result<SweepResult> r = run_sweep(s, verify);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->cases.size(), 1u);
  EXPECT_EQ(r->cases[0].verdict, Verdict::kError) << r->cases[0].message;
  EXPECT_NE(r->cases[0].message.find("misses an input"), std::string::npos) << r->cases[0].message;
  // The real key: the same sweep verifies clean.
  verify.reuse_key = &layer_key;
  Result<SweepResult> good = run_sweep(s, verify);
  ASSERT_TRUE(good.is_ok()) << good.status().message();
  EXPECT_EQ(good->cases[0].verdict, Verdict::kPass) << good->cases[0].message;
  EXPECT_GT(good->reuse.calls.verified, 0);
}

TEST(LayerReuse, AStageWithOtherWeightsNeverTakesPp1sOutcomes) {
  // weights.stage_layer_offset: the first stage's last layer holds the next layer's
  // tensors; its key differs, so it computes, and the divergence shows with reuse on.
  Scenario s = default_scenario();
  s.faults = {"weights.stage_layer_offset"};
  const std::unique_ptr<LayerMemo> memo = pp1_memo(s);
  const SplitRun on = run_split(s, {13}, memo.get(), ReuseMode::kOn);
  const SplitRun off = run_split(s, {13}, nullptr, ReuseMode::kOff);
  ASSERT_TRUE(on.status.is_ok()) << on.status.message();
  expect_same_records(off.record, on.record);
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<ReferenceRun> ref = run_reference(s, *source);
  ASSERT_TRUE(ref.is_ok());
  const Tensor* want = ref->record.find("forward/0/layers/12/pre_mlp");
  const Tensor* got = on.record.find("forward/0/layers/12/pre_mlp");
  ASSERT_NE(want, nullptr);
  ASSERT_NE(got, nullptr);
  EXPECT_FALSE(want->bit_equal(*got)) << "layer 12 ran with layer 13's weights";
  const Tensor* before = on.record.find("forward/0/layers/11/prefix");
  EXPECT_TRUE(before->bit_equal(*ref->record.find("forward/0/layers/11/prefix")));
}

TEST(LayerReuse, TheMemoryBoundTurnsHitsIntoMissesAndNothingElse) {
  const Scenario s = default_scenario();
  const std::unique_ptr<LayerMemo> full = pp1_memo(s);
  const std::unique_ptr<LayerMemo> small = pp1_memo(s, full->bytes() / 4);
  EXPECT_GT(small->dropped(), 0);
  EXPECT_LE(small->bytes(), full->bytes() / 4);
  const SplitRun a = run_split(s, {13}, full.get(), ReuseMode::kOn);
  const SplitRun b = run_split(s, {13}, small.get(), ReuseMode::kOn);
  ASSERT_TRUE(b.status.is_ok()) << b.status.message();
  expect_same_records(a.record, b.record);
  EXPECT_LT(b.stats.hits, a.stats.hits);
  EXPECT_EQ(b.stats.hits + b.stats.misses, a.stats.hits + a.stats.misses);
}

TEST(LayerReuse, KeysFollowEveryInput) {
  const ModelConfig c = *model_preset("k3-tiny");
  ResidualState st;
  st.prefix = Tensor::zeros(DType::kBF16, {2, c.hidden_size});
  st.bank = Tensor::zeros(DType::kBF16, {2, c.num_blocks(), c.hidden_size});
  LayerCache cache = empty_layer_cache(c, 1);
  const Digest128 w{1, 2};
  const Digest128 base = layer_key(c, 1, w, st, cache, DumpLevel::kLayer, true);
  EXPECT_EQ(base, layer_key(c, 1, w, st, cache, DumpLevel::kLayer, true));
  EXPECT_NE(base, layer_key(c, 2, w, st, cache, DumpLevel::kLayer, true));
  EXPECT_NE(base, layer_key(c, 1, Digest128{1, 3}, st, cache, DumpLevel::kLayer, true));
  EXPECT_NE(base, layer_key(c, 1, w, st, cache, DumpLevel::kSummary, true));
  EXPECT_NE(base, layer_key(c, 1, w, st, cache, DumpLevel::kLayer, false));
  ResidualState p = clone_state(st);
  p.prefix.data<bf16>()[5] = bf16{1};
  EXPECT_NE(base, layer_key(c, 1, w, p, cache, DumpLevel::kLayer, true));
  ResidualState d = clone_state(st);
  d.has_delta = true;
  d.delta = Tensor::zeros(DType::kBF16, {2, c.hidden_size});
  EXPECT_NE(base, layer_key(c, 1, w, d, cache, DumpLevel::kLayer, true));
  // P and D enter as their fold: PP=1's (P, D) and a receiver's (bf16(P + D), 0) agree.
  ResidualState pd = clone_state(d);
  pd.prefix.data<bf16>()[3] = to_bf16(1.5f);
  pd.delta.data<bf16>()[3] = to_bf16(0.25f);
  ResidualState received = clone_state(pd);
  received.prefix = folded_hidden(pd);
  received.delta = Tensor::zeros(DType::kBF16, {2, c.hidden_size});
  EXPECT_EQ(layer_key(c, 1, w, pd, cache, DumpLevel::kLayer, true),
            layer_key(c, 1, w, received, cache, DumpLevel::kLayer, true));
  ResidualState no_delta = clone_state(received);
  no_delta.has_delta = false;
  EXPECT_NE(layer_key(c, 1, w, pd, cache, DumpLevel::kLayer, true),
            layer_key(c, 1, w, no_delta, cache, DumpLevel::kLayer, true));
  ResidualState b = clone_state(st);
  b.bank.data<bf16>()[7] = bf16{1};
  EXPECT_NE(base, layer_key(c, 1, w, b, cache, DumpLevel::kLayer, true));
  LayerCache k = cache;
  if (!k.kda_state.empty()) k.kda_state[0] = 1.0f;
  k.mla_latent.push_back(bf16{1});
  EXPECT_NE(base, layer_key(c, 1, w, st, k, DumpLevel::kLayer, true));
  ModelConfig other = c;
  other.rms_norm_eps = 1e-5f;
  EXPECT_NE(base, layer_key(other, 1, w, st, cache, DumpLevel::kLayer, true));
}

TEST(LayerReuse, ModeNamesRoundTrip) {
  for (ReuseMode m : {ReuseMode::kOff, ReuseMode::kOn, ReuseMode::kVerify})
    EXPECT_EQ(parse_reuse_mode(reuse_mode_name(m)), m);
  EXPECT_FALSE(parse_reuse_mode("maybe").has_value());
}

}  // namespace
}  // namespace splitcheck
