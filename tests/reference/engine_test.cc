// The PP=1 reference engine on a small K3-mini (k3-tiny cut to 8 layers, AttnRes block 4,
// so layers 0 and 4 are block-write layers and 3 and 7 are MLA): chunked prefill equals
// whole prefill, two runs are identical, dispatch follows SPEC 2.2/2.3, taps 0 and L are
// what SPEC 2.6 says, and save/restore of the caches replays bit for bit.
#include "reference/engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/engine/run.h"
#include "reference/generate.h"
#include "reference/weights.h"
#include "reference/workload.h"

namespace splitcheck {
namespace {

ModelConfig small_config() {
  ModelConfig c = *model_preset("k3-tiny");
  c.num_hidden_layers = 8;
  c.attn_res_block_size = 4;
  return c;
}

class ReferenceEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<WeightStore> w = generate_weights(small_config());
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    weights_ = new WeightStore(std::move(w).value());
    // The first default-workload problem, the whole prompt (about 100 byte tokens).
    Result<Scenario> s = load_scenario(SPLITCHECK_SOURCE_DIR "/scenarios/default.json");
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    Result<PreparedWorkload> wl = prepare_workload(*s);
    ASSERT_TRUE(wl.is_ok()) << wl.status().message();
    prompt_ = new std::vector<int32_t>(tokenize_bytes(wl->problems[0].prompt()));
  }
  static void TearDownTestSuite() {
    delete weights_;
    delete prompt_;
  }

  static std::unique_ptr<ReferenceEngine> make_engine(std::vector<int> capture_ids = {}) {
    auto e = ReferenceEngine::create(small_config(), *weights_,
                                     EngineOptions{std::move(capture_ids), DumpLevel::kLayer});
    if (!e.is_ok()) throw std::runtime_error(e.status().message());
    return std::move(e).value();
  }

  static const Tensor& find(const RunRecord& r, const std::string& path) {
    const Tensor* t = r.find(path);
    if (t == nullptr) throw std::runtime_error("record lacks " + path);
    return *t;
  }

  static WeightStore* weights_;
  static std::vector<int32_t>* prompt_;
};

WeightStore* ReferenceEngineTest::weights_ = nullptr;
std::vector<int32_t>* ReferenceEngineTest::prompt_ = nullptr;

TEST_F(ReferenceEngineTest, ChunkedPrefillGivesTheSameLogitsAndTokensAsWholePrefill) {
  constexpr int kChunk = 16;
  constexpr int kNewTokens = 4;
  const int64_t t = static_cast<int64_t>(prompt_->size());
  ASSERT_GT(t, 2 * kChunk);
  const int chunks = static_cast<int>((t + kChunk - 1) / kChunk);
  const int64_t v = small_config().vocab_size;

  auto whole_engine = make_engine();
  RunRecord whole;
  auto a = generate_greedy(*whole_engine, {*prompt_}, {kNewTokens, 0}, &whole);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  auto chunked_engine = make_engine();
  RunRecord chunked;
  auto b = generate_greedy(*chunked_engine, {*prompt_}, {kNewTokens, kChunk}, &chunked);
  ASSERT_TRUE(b.is_ok()) << b.status().message();

  EXPECT_EQ(a->forwards, 1 + kNewTokens - 1);
  EXPECT_EQ(b->forwards, chunks + kNewTokens - 1);
  EXPECT_EQ(a->sequences[0].emitted, b->sequences[0].emitted);

  // Every prompt row's logits, the last one above all, are bitwise equal.
  const Tensor& whole_logits = find(whole, "forward/0/logits");
  ASSERT_EQ(whole_logits.shape(), (Shape{t, v}));
  for (int c = 0; c < chunks; ++c) {
    const Tensor& part = find(chunked, "forward/" + std::to_string(c) + "/logits");
    const int64_t first = int64_t{c} * kChunk;
    ASSERT_EQ(part.dim(0), std::min<int64_t>(kChunk, t - first));
    EXPECT_TRUE(part.bit_equal(whole_logits.rows(first, first + part.dim(0)))) << "chunk " << c;
  }
  const Tensor& last_chunk = find(chunked, "forward/" + std::to_string(chunks - 1) + "/logits");
  EXPECT_TRUE(last_chunk.rows(last_chunk.dim(0) - 1, last_chunk.dim(0))
                  .bit_equal(whole_logits.rows(t - 1, t)))
      << "last prompt token";
  // The decode forwards that follow see equal caches.
  for (int k = 1; k < kNewTokens; ++k) {
    EXPECT_TRUE(
        find(whole, "forward/" + std::to_string(k) + "/logits")
            .bit_equal(find(chunked, "forward/" + std::to_string(chunks - 1 + k) + "/logits")))
        << "decode step " << k;
  }
}

TEST_F(ReferenceEngineTest, TwoRunsGiveIdenticalRecords) {
  RunRecord first, second;
  auto e1 = make_engine({0, 3, 8});
  ASSERT_TRUE(generate_greedy(*e1, {*prompt_}, {3, 0}, &first).is_ok());
  auto e2 = make_engine({0, 3, 8});
  ASSERT_TRUE(generate_greedy(*e2, {*prompt_}, {3, 0}, &second).is_ok());
  ASSERT_EQ(first.entries().size(), second.entries().size());
  EXPECT_GT(first.entries().size(), 3u * 8u * 5u);
  for (size_t i = 0; i < first.entries().size(); ++i) {
    const RecordEntry& x = first.entries()[i];
    const RecordEntry& y = second.entries()[i];
    ASSERT_EQ(x.path, y.path) << "entry " << i;
    EXPECT_TRUE(x.tensor.bit_equal(y.tensor)) << x.path;
  }
  EXPECT_EQ(first.attrs(), second.attrs());
}

TEST_F(ReferenceEngineTest, DispatchAtPp1FollowsSpec) {
  const ModelConfig c = small_config();
  auto engine = make_engine({0, 3, 4, 8});
  RunRecord record;
  ForwardRequest req{*prompt_, ForwardKind::kPrefill, 0, 0};
  ASSERT_TRUE(engine->forward(req, &record).is_ok());
  const Tensor& table = find(record, "forward/0/dispatch");
  ASSERT_EQ(table.dim(1), 4);
  const int32_t native = find_kernel("attn_res", "native");
  const int32_t fallback = find_kernel("attn_res", "fallback");
  const auto registry = kernel_registry();

  // Expected attn_res variant per (layer, site), SPEC 2.3 + 2.2.
  auto expected = [&](int32_t layer, Site site) -> int32_t {
    switch (site) {
      case Site::kPreAttn:  // no delta at layer 0; bank write at block-write layers
        return layer > 0 && !c.is_block_write_layer(layer) ? native : fallback;
      case Site::kPreMlp:  // no delta after a block-write layer's attention
        return c.is_block_write_layer(layer) ? fallback : native;
      default:  // output read (no out_w) and taps (no delta, no out_w)
        return fallback;
    }
  };

  std::vector<std::string> ops;
  int attn_res_events = 0, taps = 0;
  for (int64_t i = 0; i < table.dim(0); ++i) {
    const int32_t* row = table.data<int32_t>() + i * 4;
    const int32_t layer = row[0];
    const Site site = static_cast<Site>(row[1]);
    const int32_t kernel = row[2];
    ASSERT_GE(kernel, 0);
    ASSERT_LT(kernel, static_cast<int32_t>(registry.size()));
    ops.emplace_back(registry[kernel].op);
    if (site == Site::kTap) {
      ++taps;
      EXPECT_EQ(kernel, fallback) << "tap " << row[3];
      continue;
    }
    if (registry[kernel].op != "attn_res") continue;
    ++attn_res_events;
    EXPECT_EQ(kernel, expected(layer, site))
        << "layer " << layer << " " << site_name(site) << ": got " << registry[kernel].variant;
  }
  EXPECT_EQ(attn_res_events, 2 * c.num_hidden_layers + 1);
  EXPECT_EQ(taps, 3);  // tap 0 is the embedding itself, no kernel call

  // Event order: embed, then per layer pre_attn, attention, pre_mlp, mlp (with tap reads
  // after their layer), then output, final norm, lm_head, argmax.
  std::vector<std::string> want = {"embed"};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    want.insert(want.end(), {"attn_res", c.is_mla_layer(l) ? "mla" : "kda", "attn_res",
                             c.is_moe_layer(l) ? "moe" : "dense_mlp"});
    if (l + 1 == 3 || l + 1 == 4 || l + 1 == 8) want.push_back("attn_res");
  }
  want.insert(want.end(), {"attn_res", "rms_norm", "lm_head", "argmax"});
  EXPECT_EQ(ops, want);
}

TEST_F(ReferenceEngineTest, TapZeroIsTheEmbeddingAndTapLIsTheOutputRead) {
  const ModelConfig c = small_config();
  auto engine = make_engine({0, c.num_hidden_layers});
  RunRecord record;
  ForwardRequest req{*prompt_, ForwardKind::kPrefill, 0, 0};
  auto out = engine->forward(req, &record);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const Tensor& tap0 = find(record, "forward/0/taps/0");
  const Tensor& embed = weights_->get("embed_tokens.weight");
  const int64_t h = c.hidden_size;
  ASSERT_EQ(tap0.shape(), (Shape{static_cast<int64_t>(prompt_->size()), h}));
  for (size_t t = 0; t < prompt_->size(); ++t) {
    EXPECT_TRUE(tap0.rows(t, t + 1).bit_equal(
        embed.rows((*prompt_)[t], (*prompt_)[t] + 1).reshaped({1, h})))
        << "token " << t;
  }
  const Tensor& tap_l = find(record, "forward/0/taps/" + std::to_string(c.num_hidden_layers));
  EXPECT_TRUE(tap_l.bit_equal(find(record, "forward/0/output")));
  // The drafter's view: taps concatenated in ascending id.
  ASSERT_EQ(out->taps.shape(), (Shape{static_cast<int64_t>(prompt_->size()), 2 * h}));
  for (size_t t = 0; t < prompt_->size(); ++t) {
    const bf16* row = out->taps.data<bf16>() + t * 2 * h;
    ASSERT_TRUE(std::equal(row, row + h, tap0.data<bf16>() + t * h,
                           [](bf16 x, bf16 y) { return x.bits == y.bits; }));
    ASSERT_TRUE(std::equal(row + h, row + 2 * h, tap_l.data<bf16>() + t * h,
                           [](bf16 x, bf16 y) { return x.bits == y.bits; }));
  }
}

TEST_F(ReferenceEngineTest, RestoreStateReplaysADecodeForwardBitForBit) {
  const int64_t t = static_cast<int64_t>(prompt_->size());
  auto engine = make_engine();
  ForwardRequest prefill{*prompt_, ForwardKind::kPrefill, 0, 0};
  auto p = engine->forward(prefill, nullptr);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const int32_t next = p->next_tokens.data<int32_t>()[t - 1];
  engine->save_state();

  ForwardRequest decode{{next}, ForwardKind::kDecode, t, 1};
  auto first = engine->forward(decode, nullptr);
  ASSERT_TRUE(first.is_ok());
  const Tensor first_logits = first->logits.clone();

  // A rejected speculative block in between must leave no trace after restore.
  engine->restore_state();
  ForwardRequest rejected{
      {static_cast<int32_t>((next + 7) % 256), 65, 66}, ForwardKind::kVerify, t, 2};
  ASSERT_TRUE(engine->forward(rejected, nullptr).is_ok());
  engine->restore_state();
  auto again = engine->forward(decode, nullptr);
  ASSERT_TRUE(again.is_ok());
  EXPECT_TRUE(again->logits.bit_equal(first_logits));

  // Without a restore the caches have advanced, and the same request sees other context.
  auto advanced = engine->forward(decode, nullptr);
  ASSERT_TRUE(advanced.is_ok());
  EXPECT_FALSE(advanced->logits.bit_equal(first_logits));
}

}  // namespace
}  // namespace splitcheck
