// Speculative decoding: the method registry's embedding placement rule (SPEC 2.7).
#include "reference/speculative.h"

#include <gtest/gtest.h>

#include "reference/dspark.h"
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

namespace splitcheck {
namespace {

// Proposes the true greedy continuation for the first `good` tokens, then wrong ones, so
// every step accepts exactly `good` tokens (when gamma > good) and rolls back the rest.
class OracleDrafter : public Drafter {
 public:
  OracleDrafter(std::vector<int32_t> greedy, size_t prompt_len, int good, int vocab)
      : greedy_(std::move(greedy)), prompt_len_(prompt_len), good_(good), vocab_(vocab) {}
  void reset(int64_t) override { seen_ = 0; }
  Status observe(const std::vector<int32_t>& ids, const Tensor&) override {
    seen_ += ids.size();
    return Status::ok();
  }
  Result<std::vector<int32_t>> propose(int32_t anchor, int gamma) override {
    const size_t i = seen_ - prompt_len_;  // greedy_[i] is the anchor
    std::vector<int32_t> x;
    for (int k = 1; k <= gamma; ++k) {
      const size_t j = i + static_cast<size_t>(k);
      const bool good = k <= good_ && j < greedy_.size();
      x.push_back(good ? greedy_[j] : (anchor + k) % vocab_);
      if (!good && j < greedy_.size() && x.back() == greedy_[j]) x.back() = (x.back() + 1) % vocab_;
    }
    return x;
  }

 private:
  std::vector<int32_t> greedy_;
  size_t prompt_len_;
  size_t seen_ = 0;
  int good_;
  int vocab_;
};

TEST(Speculative, RollbackAndReplayAreLossless) {
  ModelConfig c = *model_preset("k3-tiny");
  c.num_hidden_layers = 8;
  Result<WeightStore> w = generate_weights(c);
  ASSERT_TRUE(w.is_ok());
  const std::vector<std::vector<int32_t>> prompts = {{81, 117, 101, 115, 116, 105, 111, 110}};
  auto engine = ReferenceEngine::create(c, *w, EngineOptions{{0, 8}, DumpLevel::kSummary});
  ASSERT_TRUE(engine.is_ok());
  const GenerationOptions gen{12, 0};
  Result<GenerationResult> greedy = generate_greedy(**engine, prompts, gen, nullptr);
  ASSERT_TRUE(greedy.is_ok());
  const std::vector<int32_t>& want = greedy->sequences[0].emitted;
  for (int good : {0, 2, 4}) {
    OracleDrafter drafter(want, prompts[0].size(), good, c.vocab_size);
    RunRecord rec;
    Result<SpeculativeResult> r =
        generate_speculative(**engine, drafter, prompts, SpeculativeOptions{gen, 4}, &rec);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->generation.sequences[0].emitted, want) << "good=" << good;
    for (int32_t a : r->sequences[0].accepted) EXPECT_LE(a, good);
    EXPECT_GT(r->steps, 0);
  }
}

}  // namespace
}  // namespace splitcheck

namespace splitcheck {
namespace {

Tensor bf16_matrix(int64_t rows, int64_t cols, const std::vector<float>& values) {
  Tensor t = Tensor::zeros(DType::kBF16, {rows, cols});
  for (size_t i = 0; i < values.size(); ++i) t.data<bf16>()[i] = to_bf16(values[i]);
  return t;
}

TEST(MarkovHead, FollowsTheBigramChainThenTheBlockLogits) {
  // V = 4, r = 2. W1[0] = e0, W1[2] = e1; W2[2] = e0, W2[3] = e1: the chain 0 -> 2 -> 3.
  const Tensor w1 = bf16_matrix(4, 2, {1, 0, 0, 0, 0, 1, 0, 0});
  const Tensor w2 = bf16_matrix(4, 2, {0, 0, 0, 0, 1, 0, 0, 1});
  Tensor u = Tensor::zeros(DType::kF32, {3, 4});
  DispatchTrace trace;
  const KernelContext ctx{&trace, 0, -1, Site::kDraft, 0, -1};
  // Step 3: W1[3] = 0, U all zero: a tie over the vocabulary, lowest index wins.
  EXPECT_EQ(markov_head(ctx, u, w1, w2, std::vector<int32_t>{0}), (std::vector<int32_t>{2, 3, 0}));
  // The block logits dominate where they are larger than the bigram bias.
  u.data<float>()[0 * 4 + 1] = 5.0f;
  EXPECT_EQ(markov_head(ctx, u, w1, w2, std::vector<int32_t>{0}), (std::vector<int32_t>{1, 0, 2}));
  // Every kernel call went through the registry at site draft.
  ASSERT_FALSE(trace.events.empty());
  for (const DispatchEvent& e : trace.events) EXPECT_EQ(e.site, Site::kDraft);
}

TEST(DrafterSpecs, FoundByName) {
  const ModelConfig c = *model_preset("k3-tiny");
  // One [H, H] slice of W_ctx per tap slot; stacked they are W_ctx [n*H, H].
  std::optional<TensorSpec> s = find_tensor_spec(c, "drafter.ctx_proj.4.weight");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->shape, (Shape{c.hidden_size, c.hidden_size}));
  std::optional<TensorSpec> w1 = find_tensor_spec(c, "drafter.markov.w1");
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(w1->shape, (Shape{c.vocab_size, dspark_markov_rank(c)}));
  EXPECT_FALSE(find_tensor_spec(c, "drafter.nothing").has_value());
  EXPECT_TRUE(drafter_tensor_specs(c, "eagle3", 3).empty());
}

}  // namespace
}  // namespace splitcheck
