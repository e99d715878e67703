// EAGLE-3-lite (SPEC 3.2): its tensors, and that speculative decoding with it and with
// DSpark-lite is lossless against plain greedy decoding, rollback included (SPEC 3.3); and
// that DSpark's draft cache (spare rows, growth by doubling) holds what one observation
// of every position would, and that a group of DSpark drafters gives each request its
// calls alone.
#include "reference/eagle3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "reference/spec_methods.h"
#include "reference/weight_source.h"
#include "reference/workload.h"

namespace splitcheck {
namespace {

ModelConfig small_config() {
  ModelConfig c = *model_preset("k3-tiny");
  c.num_hidden_layers = 8;
  return c;
}

std::vector<std::vector<int32_t>> workload_prompts(int n) {
  std::vector<std::vector<int32_t>> prompts;
  for (const Problem& p : generate_gsm8k_style(2026, n)) {
    std::vector<int32_t> ids = tokenize_bytes(p.prompt());
    ids.resize(std::min<size_t>(ids.size(), 40));
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

std::unique_ptr<ReferenceEngine> make_engine(const ModelConfig& c, std::vector<int> ids,
                                             const std::string& method) {
  Result<WeightStore> w = generate_weights(c);
  EXPECT_TRUE(w.is_ok());
  EngineOptions o{std::move(ids), DumpLevel::kSummary, method};
  auto engine = ReferenceEngine::create(c, std::move(*w), o);
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  return std::move(*engine);
}

std::vector<std::string> names_of(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const TensorSpec& t : specs) names.push_back(t.name);
  return names;
}

std::unique_ptr<Drafter> make_drafter(const ModelConfig& c, const ReferenceEngine& target,
                                      const std::string& method, int n_taps, WeightStore& own) {
  GeneratedWeights source(c);
  const std::vector<TensorSpec> specs =
      method == "eagle3" ? eagle3_tensor_specs(c) : drafter_tensor_specs(c, method, n_taps);
  Result<WeightStore> loaded = load_weights(source, names_of(specs));
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().message();
  own = std::move(*loaded);
  const DrafterBinding binding = share_with_target(target.weights());
  EXPECT_TRUE(check_shared_embedding(binding, c, 0, method, false).is_ok());
  if (method == "eagle3") {
    auto d = Eagle3Drafter::create(c, own, binding);
    EXPECT_TRUE(d.is_ok()) << d.status().message();
    return std::move(*d);
  }
  auto d = DsparkDrafter::create(c, own, binding, n_taps);
  EXPECT_TRUE(d.is_ok()) << d.status().message();
  return std::move(*d);
}

TEST(Eagle3, TensorNamesAreRegistered) {
  const ModelConfig c = small_config();
  const std::vector<TensorSpec> specs = eagle3_tensor_specs(c);
  ASSERT_FALSE(specs.empty());
  const int64_t h = c.hidden_size;
  for (const TensorSpec& t : specs) {
    EXPECT_EQ(t.name.rfind("drafter.eagle3.", 0), 0u) << t.name;
    const std::optional<TensorSpec> found = find_tensor_spec(c, t.name);
    ASSERT_TRUE(found.has_value()) << t.name;
    EXPECT_EQ(found->shape, t.shape) << t.name;
  }
  EXPECT_EQ(find_tensor_spec(c, "drafter.eagle3.fc.weight")->shape, (Shape{3 * h, h}));
  EXPECT_EQ(find_tensor_spec(c, "drafter.eagle3.lm_head.weight")->shape, (Shape{c.vocab_size, h}));
  EXPECT_FALSE(find_tensor_spec(c, "drafter.eagle3.nonexistent").has_value());
  // The registry row: shares the target's embedding, owns its head.
  const SpecMethodInfo* m = find_spec_method("eagle3");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->shares_target_embedding);
  EXPECT_FALSE(m->shares_lm_head);
  // Its head holds the target's lm_head values under its own name (derived), and the
  // generated store of the drafter loads through GeneratedWeights.
  GeneratedWeights source(c);
  Result<WeightStore> own = load_weights(source, names_of(specs));
  ASSERT_TRUE(own.is_ok()) << own.status().message();
  Result<WeightStore> target = generate_weights(c, {"lm_head.weight"});
  ASSERT_TRUE(target.is_ok());
  const Tensor& a = own->get("drafter.eagle3.lm_head.weight");
  const Tensor& b = target->get("lm_head.weight");
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.data<bf16>(), b.data<bf16>(), a.nbytes()), 0);
}

struct Case {
  std::string method;
  std::vector<int> capture_ids;
};

class Lossless : public ::testing::TestWithParam<Case> {};

TEST_P(Lossless, SpeculativeEmitsTheGreedyTokensAndLeavesTheSameState) {
  const ModelConfig c = small_config();
  const Case& k = GetParam();
  const int n_taps = static_cast<int>(k.capture_ids.size());
  const std::vector<std::vector<int32_t>> prompts = workload_prompts(2);
  const GenerationOptions gen{12, 0};
  auto greedy_engine = make_engine(c, k.capture_ids, k.method);
  auto spec_engine = make_engine(c, k.capture_ids, k.method);
  WeightStore own;
  std::unique_ptr<Drafter> drafter = make_drafter(c, *spec_engine, k.method, n_taps, own);

  Result<GenerationResult> greedy = generate_greedy(*greedy_engine, prompts, gen, nullptr);
  ASSERT_TRUE(greedy.is_ok()) << greedy.status().message();
  Result<SpeculativeResult> spec =
      generate_speculative(*spec_engine, *drafter, prompts, SpeculativeOptions{gen, 7}, nullptr);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  for (size_t p = 0; p < prompts.size(); ++p)
    EXPECT_EQ(spec->generation.sequences[p].emitted, greedy->sequences[p].emitted)
        << k.method << " prompt " << p;
  EXPECT_GT(spec->steps, 0);
  std::printf("[ %s ] steps %lld, mean accepted length %.3f, acceptance rate %.3f\n",
              k.method.c_str(), static_cast<long long>(spec->steps), spec->mean_accepted,
              spec->acceptance_rate);

  // Rollback and replay leave the engine as a run that never drafted: after the last
  // prompt both engines take one more decode forward with the same token at the same
  // position and must produce bit-identical logits.
  const std::vector<int32_t>& prompt = prompts.back();
  const std::vector<int32_t>& acc = spec->sequences.back().accepted;
  // Emitted tokens of the speculative run, overshoot included: the first, then a + 1 per step.
  const int total = 1 + static_cast<int>(acc.size()) + std::accumulate(acc.begin(), acc.end(), 0);
  Result<GenerationResult> longer =
      generate_greedy(*greedy_engine, {prompt}, GenerationOptions{total, 0}, nullptr);
  ASSERT_TRUE(longer.is_ok());
  const std::vector<int32_t>& want = longer->sequences[0].emitted;
  ASSERT_EQ(static_cast<int>(want.size()), total);
  const int32_t next = want.back();
  const int64_t position = static_cast<int64_t>(prompt.size()) + total - 1;
  const ForwardRequest req{{next}, ForwardKind::kDecode, position, 0};
  Result<ForwardResult> a = greedy_engine->forward(req, nullptr);
  Result<ForwardResult> b = spec_engine->forward(req, nullptr);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ(a->logits.nbytes(), b->logits.nbytes());
  EXPECT_EQ(std::memcmp(a->logits.data<float>(), b->logits.data<float>(), a->logits.nbytes()), 0)
      << k.method << ": the engine's state after rollback and replay differs from greedy";
}

// DSpark's draft cache keeps spare rows: a proposal writes its block after the observed
// rows (the next observation overwrites them) and the cache grows by doubling, keeping the
// observed rows. A drafter fed 100 positions in chunks of 1 to 7, proposing after each
// chunk and growing past 64 rows, ends with the draft cache (every layer's keys and
// values, bit for bit) and the proposals of one fed them all at once.
TEST(Dspark, ObservingInChunksWithProposalsBetweenKeepsTheCacheOfObservingAtOnce) {
  const ModelConfig c = small_config();
  const std::vector<int> ids = method_default_capture_ids("dspark", 8);
  const int n_taps = static_cast<int>(ids.size());
  auto engine = make_engine(c, ids, "dspark");
  auto drafter = [&](WeightStore& own) {
    GeneratedWeights source(c);
    Result<WeightStore> loaded =
        load_weights(source, names_of(drafter_tensor_specs(c, "dspark", n_taps)));
    EXPECT_TRUE(loaded.is_ok());
    own = std::move(*loaded);
    auto d = DsparkDrafter::create(c, own, share_with_target(engine->weights()), n_taps);
    EXPECT_TRUE(d.is_ok());
    return std::move(*d);
  };
  WeightStore own_a, own_b;
  std::unique_ptr<DsparkDrafter> whole = drafter(own_a), chunked = drafter(own_b);
  whole->reset(0);
  chunked->reset(0);
  const int64_t t = 100, width = n_taps * c.hidden_size;
  Tensor taps = Tensor::zeros(DType::kBF16, {t, width});
  for (int64_t i = 0; i < taps.numel(); ++i)
    taps.data<bf16>()[i] = to_bf16(std::sin(0.37f * static_cast<float>(i % 9973)));
  std::vector<int32_t> positions(static_cast<size_t>(t));
  std::iota(positions.begin(), positions.end(), 7);
  ASSERT_TRUE(whole->observe(positions, taps).is_ok());
  for (int64_t at = 0, size = 1; at < t; at += size, size = size % 7 + 1) {
    const int64_t end = std::min(t, at + size);
    ASSERT_TRUE(chunked
                    ->observe(std::vector<int32_t>(positions.begin() + at, positions.begin() + end),
                              taps.rows(at, end))
                    .is_ok());
    ASSERT_TRUE(chunked->propose(static_cast<int32_t>(at % 50), 7).is_ok());
  }
  for (int layer = 0; layer < kDsparkLayers; ++layer) {
    for (bool values : {false, true}) {
      const Tensor a = whole->observed_rows(layer, values);
      const Tensor b = chunked->observed_rows(layer, values);
      ASSERT_EQ(a.dim(0), t);
      EXPECT_TRUE(a.bit_equal(b)) << "layer " << layer << (values ? " values" : " keys");
    }
  }
  for (int32_t anchor : {3, 41, 97}) {
    Result<std::vector<int32_t>> a = whole->propose(anchor, 7), b = chunked->propose(anchor, 7);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(*a, *b) << "anchor " << anchor;
  }
}

// A group of DSpark drafters (a serving step's requests) runs its calls together: the
// ops once over every request's rows, the attention per request, the Markov chains in one
// call. On the CPU, whose rows keep their bits whatever the row count, three requests fed
// and asked together end with the draft caches and the proposals of three fed and asked
// one by one, departures included (each request its own); their proposals differ, so a
// group that mixed up requests would fail.
TEST(Dspark, AGroupsCallsGiveEachRequestItsCallsAlone) {
  const ModelConfig c = small_config();
  const std::vector<int> ids = method_default_capture_ids("dspark", 8);
  const int n_taps = static_cast<int>(ids.size());
  auto engine = make_engine(c, ids, "dspark");
  GeneratedWeights source(c);
  Result<WeightStore> own =
      load_weights(source, names_of(drafter_tensor_specs(c, "dspark", n_taps)));
  ASSERT_TRUE(own.is_ok());
  constexpr int kRequests = 3, kGamma = 5;
  std::vector<std::unique_ptr<DsparkDrafter>> alone, grouped;
  for (int r = 0; r < 2 * kRequests; ++r) {
    auto d = DsparkDrafter::create(c, *own, share_with_target(engine->weights()), n_taps);
    ASSERT_TRUE(d.is_ok());
    (*d)->set_departure(Departure{c.seed, 0.3});
    (*d)->reset(r % kRequests);
    (r < kRequests ? alone : grouped).push_back(std::move(*d));
  }
  std::vector<Drafter*> group;
  for (auto& d : grouped) group.push_back(d.get());
  const int64_t width = n_taps * c.hidden_size;
  std::vector<int64_t> positions(kRequests, 0);
  for (int round = 0; round < 4; ++round) {
    // Request r observes 3 + (r + round) % 4 positions, then proposes from its anchor.
    std::vector<std::vector<int32_t>> seen(kRequests);
    std::vector<Tensor> taps;
    std::vector<Observation> observations;
    std::vector<int32_t> anchors;
    for (int r = 0; r < kRequests; ++r) {
      const int64_t t = 3 + (r + round) % 4;
      Tensor x = Tensor::zeros(DType::kBF16, {t, width});
      for (int64_t i = 0; i < x.numel(); ++i)
        x.data<bf16>()[i] = to_bf16(std::sin(0.37f * static_cast<float>(i + 131 * r + 17 * round)));
      for (int64_t i = 0; i < t; ++i) seen[r].push_back(static_cast<int32_t>(positions[r] + i));
      positions[r] += t;
      taps.push_back(std::move(x));
      anchors.push_back(static_cast<int32_t>((37 * r + 11 * round) % c.vocab_size));
    }
    for (int r = 0; r < kRequests; ++r) {
      observations.push_back(Observation{&seen[r], &taps[r]});
      ASSERT_TRUE(alone[r]->observe(seen[r], taps[r]).is_ok());
    }
    ASSERT_TRUE(group.front()->observe_group(group, observations).is_ok());
    std::vector<std::vector<int32_t>> together(kRequests);
    ASSERT_TRUE(group.front()->propose_group(group, anchors, kGamma, together).is_ok());
    for (int r = 0; r < kRequests; ++r) {
      Result<std::vector<int32_t>> mine = alone[r]->propose(anchors[r], kGamma);
      ASSERT_TRUE(mine.is_ok());
      EXPECT_EQ(together[r], *mine) << "round " << round << ", request " << r;
    }
    EXPECT_NE(together[0], together[1]);
    EXPECT_NE(together[1], together[2]);
  }
  for (int r = 0; r < kRequests; ++r) {
    for (int layer = 0; layer < kDsparkLayers; ++layer) {
      for (bool values : {false, true}) {
        const Tensor a = alone[r]->observed_rows(layer, values);
        const Tensor b = grouped[r]->observed_rows(layer, values);
        ASSERT_EQ(a.dim(0), positions[r]);
        EXPECT_TRUE(a.bit_equal(b))
            << "request " << r << ", layer " << layer << (values ? " values" : " keys");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, Lossless,
                         ::testing::Values(Case{"eagle3", {2, 4, 6}},
                                           Case{"dspark", method_default_capture_ids("dspark", 8)}),
                         [](const auto& info) { return info.param.method; });

}  // namespace
}  // namespace splitcheck
