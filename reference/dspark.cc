#include "reference/dspark.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/tensor_copy.h"
#include "reference/draft_ops.h"
#include "reference/speculative.h"

namespace splitcheck {
namespace {

using draft::apply_linear;
using draft::apply_norm;
using draft::linear_into;
using draft::on_device;

}  // namespace

std::vector<TensorSpec> drafter_tensor_specs(const ModelConfig& c, const std::string& method,
                                             int n_taps) {
  std::vector<TensorSpec> s;
  if (method != "dspark") return s;
  const int64_t h = c.hidden_size;
  const float lin = std::sqrt(3.0f / static_cast<float>(h));
  for (int i = 0; i < n_taps; ++i)
    s.push_back(TensorSpec{"drafter.ctx_proj." + std::to_string(i) + ".weight",
                           {h, h},
                           WeightInit::kUniform,
                           lin / std::sqrt(static_cast<float>(n_taps))});
  s.push_back(TensorSpec{"drafter.ctx_norm.weight", {h}, WeightInit::kOnePlus, 0.1f});
  s.push_back(TensorSpec{"drafter.mask_embedding", {h}, WeightInit::kUniform, 1.0f});
  for (int j = 0; j < kDsparkLayers; ++j) {
    const std::string p = "drafter.layers." + std::to_string(j) + ".";
    s.push_back(TensorSpec{p + "input_norm.weight", {h}, WeightInit::kOnePlus, 0.1f});
    for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight"})
      s.push_back(TensorSpec{p + n, {h, h}, WeightInit::kUniform, lin});
    s.push_back(TensorSpec{p + "o_proj.weight", {h, h}, WeightInit::kUniform, 0.5f * lin});
  }
  // The block pass's logits U are a correction on top of the Markov head: a small final
  // norm weight keeps them below the Markov scores' spread, so they move some picks only.
  s.push_back(TensorSpec{"drafter.norm.weight", {h}, WeightInit::kUniform, 0.5f});
  s.push_back(TensorSpec{
      "drafter.markov.w1", {c.vocab_size, dspark_markov_rank(c)}, WeightInit::kMarkovW1, 1.0f});
  s.push_back(TensorSpec{
      "drafter.markov.w2", {c.vocab_size, dspark_markov_rank(c)}, WeightInit::kMarkovW2, 1.0f});
  return s;
}

Tensor generate_markov_factor(const ModelConfig& c, const TensorSpec& spec) {
  const int64_t h = c.hidden_size, v = c.vocab_size;
  const bool w1 = spec.init == WeightInit::kMarkovW1;
  const TensorSpec norm = *find_tensor_spec(c, "norm.weight");
  if (w1 && spec.shape.size() == 1) {
    // W1's norm factor alone: the target's norm.weight (EAGLE-3-lite's final norm).
    return generate_tensor(c.seed, norm);
  }
  // W2: the target's lm_head values (successor-tied, reference/weights.h).
  if (!w1) return generate_model_tensor(c, *find_tensor_spec(c, "lm_head.weight"));
  const TensorSpec src = *find_tensor_spec(c, "embed_tokens.weight");
  Tensor out = Tensor::zeros(DType::kBF16, {v, h});
  for (int64_t x = 0; x < v; ++x) {
    for (int64_t d = 0; d < h; ++d) {
      const float e = round_bf16(generated_value(c.seed, src, x * h + d));
      const float n = round_bf16(generated_value(c.seed, norm, d));
      out.data<bf16>()[x * h + d] = to_bf16(e * n);
    }
  }
  return out;
}

std::vector<int32_t> markov_head(const KernelContext& ctx, const Tensor& u, const Tensor& w1,
                                 const Tensor& w2, int32_t anchor,
                                 const std::vector<bool>& departs) {
  // One call for the whole chain: on a device it stays there, with one read of its tokens.
  std::vector<int32_t> x;
  MarkovChainArgs a{&u, &w1, &w2, anchor, &departs, &x};
  markov_chain(ctx.at(-1, Site::kDraft), a);
  return x;
}

DrafterBinding share_with_target(const WeightStore& stage_weights) {
  DrafterBinding b;
  b.embed = stage_weights.find("embed_tokens.weight");
  b.lm_head = stage_weights.find("lm_head.weight");
  b.source = b.embed != nullptr ? "target" : "missing";
  return b;
}

bool binds_target_embedding(const DrafterBinding& b, const WeightStore& stage_weights) {
  const Tensor* target = stage_weights.find("embed_tokens.weight");
  return b.embed != nullptr && target != nullptr && same_storage(*b.embed, *target);
}

Status check_shared_embedding(const DrafterBinding& b, const ModelConfig& c, int stage,
                              std::string_view method, bool vocab_from_embedding) {
  int64_t vocab = c.vocab_size;
  if (vocab_from_embedding) {
    // The historical order: the vocabulary is read from the embedding module first.
    if (b.embed == nullptr || b.embed->empty())
      return internal_error("reading the vocabulary size from a missing embedding module");
    vocab = b.embed->dim(0);
  }
  if (b.embed == nullptr || b.embed->empty() || b.embed->dim(0) != vocab ||
      b.embed->dim(1) != c.hidden_size) {
    return config_rejected("stage " + std::to_string(stage) + ": the " + std::string(method) +
                           " drafter shares the target's embedding, but its placeholder [" +
                           std::to_string(vocab) + ", " + std::to_string(c.hidden_size) +
                           "] is missing on this stage");
  }
  return Status::ok();
}

Result<std::unique_ptr<DsparkDrafter>> DsparkDrafter::create(const ModelConfig& c,
                                                             const WeightStore& own,
                                                             const DrafterBinding& binding,
                                                             int n_taps) {
  std::unique_ptr<DsparkDrafter> d(new DsparkDrafter());
  d->config_ = c;
  d->embed_ = binding.embed;
  d->lm_head_ = binding.lm_head;
  d->n_taps_ = n_taps;
  if (d->embed_ == nullptr || d->lm_head_ == nullptr)
    return config_rejected("dspark drafter: embedding or lm_head not bound");
  auto need = [&](const std::string& name) -> const Tensor* { return own.find(name); };
  const int64_t h = c.hidden_size;
  d->ctx_norm_ = need("drafter.ctx_norm.weight");
  if (d->ctx_norm_ == nullptr)
    return invalid_input("dspark drafter: its checkpoint tensors are incomplete");
  // W_ctx stacked where the drafter's weights are (device memory for a CUDA drafter).
  d->ctx_proj_ = Tensor::zeros(DType::kBF16, {n_taps * h, h}, d->ctx_norm_->device());
  for (int i = 0; i < n_taps; ++i) {
    const Tensor* t = need("drafter.ctx_proj." + std::to_string(i) + ".weight");
    if (t == nullptr)
      return invalid_input("dspark drafter: missing drafter.ctx_proj." + std::to_string(i) +
                           ".weight");
    copy_tensor_runs(d->ctx_proj_, static_cast<size_t>(i) * t->nbytes(), t->nbytes(), *t, 0,
                     t->nbytes(), t->nbytes(), 1);
  }
  d->mask_ = need("drafter.mask_embedding");
  d->norm_ = need("drafter.norm.weight");
  d->w1_ = need("drafter.markov.w1");
  d->w2_ = need("drafter.markov.w2");
  if (!d->ctx_norm_ || !d->mask_ || !d->norm_ || !d->w1_ || !d->w2_)
    return invalid_input("dspark drafter: its checkpoint tensors are incomplete");
  for (int j = 0; j < kDsparkLayers; ++j) {
    const std::string p = "drafter.layers." + std::to_string(j) + ".";
    Layer l{need(p + "input_norm.weight"),
            need(p + "q_proj.weight"),
            need(p + "k_proj.weight"),
            need(p + "v_proj.weight"),
            need(p + "o_proj.weight"),
            {},
            {}};
    if (!l.input_norm || !l.q || !l.k || !l.v || !l.o)
      return invalid_input("dspark drafter: missing tensors of draft layer " + std::to_string(j));
    d->layers_.push_back(std::move(l));
  }
  return d;
}

void DsparkDrafter::reset(int64_t request) {
  request_ = request;
  position_ = 0;
  for (Layer& l : layers_) {
    l.keys = Tensor();
    l.values = Tensor();
  }
}

void DsparkDrafter::reserve_rows(int64_t rows) {
  for (Layer& l : layers_) {
    for (Tensor* cache : {&l.keys, &l.values}) {
      const int64_t capacity = cache->empty() ? 0 : cache->dim(0);
      if (capacity >= rows) continue;
      Tensor grown = Tensor::zeros(DType::kBF16,
                                   {std::max({rows, 2 * capacity, int64_t{64}}),
                                    config_.hidden_size},
                                   l.k->device());
      const size_t kept = static_cast<size_t>(position_ * config_.hidden_size) * sizeof(bf16);
      if (kept > 0) copy_tensor_runs(grown, 0, kept, *cache, 0, kept, kept, 1);
      *cache = std::move(grown);
    }
  }
}

Tensor DsparkDrafter::observed_rows(int layer, bool values) const {
  const Layer& l = layers_.at(static_cast<size_t>(layer));
  const Tensor& cache = values ? l.values : l.keys;
  return cache.empty() ? Tensor() : cache.rows(0, position_);
}

Status DsparkDrafter::observe(const std::vector<int32_t>& ids, const Tensor& taps) {
  const int64_t h = config_.hidden_size, t = static_cast<int64_t>(ids.size());
  if (taps.dim(0) != t || taps.dim(1) != n_taps_ * h)
    return internal_error("dspark drafter: taps of shape " + shape_string(taps.shape()) + " for " +
                          std::to_string(ids.size()) + " positions and " + std::to_string(n_taps_) +
                          " taps");
  const KernelContext ctx{nullptr, 0, -1, Site::kDraft, 0, -1};
  // Context projection, then write_context_kv: each draft layer's K and V rows of these
  // positions, written after the observed ones; all where the drafter's weights are (on a
  // device, queued without a host wait).
  const Tensor projected = apply_linear(ctx, on_device(taps, ctx_proj_.device()), ctx_proj_);
  const Tensor c = apply_norm(ctx, projected, *ctx_norm_, config_.rms_norm_eps);
  reserve_rows(position_ + t);
  for (Layer& l : layers_) {
    linear_into(ctx, c, *l.k, l.keys.rows(position_, position_ + t));
    linear_into(ctx, c, *l.v, l.values.rows(position_, position_ + t));
  }
  position_ += t;
  return Status::ok();
}

Result<std::vector<int32_t>> DsparkDrafter::propose(int32_t anchor, int gamma) {
  if (anchor < 0 || anchor >= embed_->dim(0))
    return internal_error("dspark drafter: anchor outside the vocabulary");
  const int64_t h = config_.hidden_size;
  const int64_t rows = gamma + 1;
  const KernelContext ctx{nullptr, 0, -1, Site::kDraft, 0, -1};
  // The block lives where the drafter's weights are: on a device, its kernels queue
  // without a host wait until the Markov head reads its tokens.
  const Device dev = mask_->device();
  const size_t row = static_cast<size_t>(h) * sizeof(bf16);
  if (block_template_.empty() || block_template_.dim(0) != rows) {
    block_template_ = Tensor::zeros(DType::kBF16, {rows, h}, dev);
    for (int64_t r = 1; r < rows; ++r)
      copy_tensor_runs(block_template_, static_cast<size_t>(r) * row, row, *mask_, 0, row, row, 1);
  }
  Tensor x = Tensor::zeros(DType::kBF16, {rows, h}, dev);
  copy_tensor_runs(x, 0, x.nbytes(), block_template_, 0, x.nbytes(), x.nbytes(), 1);
  copy_tensor_runs(x, 0, row, *embed_, static_cast<size_t>(anchor) * row, row, row, 1);
  const int heads = config_.num_attention_heads;
  const int head_dim = static_cast<int>(h / heads);
  // The block's keys and values go after the observed rows of each draft cache (the next
  // observation overwrites them), so the block attends to one run of rows.
  reserve_rows(position_ + rows);
  for (Layer& l : layers_) {
    const Tensor n = apply_norm(ctx, x, *l.input_norm, config_.rms_norm_eps);
    const Tensor q = apply_linear(ctx, n, *l.q);
    linear_into(ctx, n, *l.k, l.keys.rows(position_, position_ + rows));
    linear_into(ctx, n, *l.v, l.values.rows(position_, position_ + rows));
    const Tensor kt = l.keys.rows(0, position_ + rows);
    const Tensor vt = l.values.rows(0, position_ + rows);
    Tensor o = Tensor::zeros(DType::kBF16, {rows, h}, dev);
    DenseAttentionArgs a{&q, &kt, &vt, heads, head_dim, &o};
    dense_attention(ctx, a);
    x = add_bf16(x, apply_linear(ctx, o, *l.o));
  }
  const Tensor hf = apply_norm(ctx, x.rows(1, rows), *norm_, config_.rms_norm_eps);
  Tensor u = Tensor::zeros(DType::kF32, {gamma, config_.vocab_size}, dev);
  LmHeadArgs la{&hf, lm_head_, &u};
  lm_head(ctx, la);
  std::vector<bool> departs(static_cast<size_t>(gamma));
  for (int k = 1; k <= gamma; ++k)
    departs[static_cast<size_t>(k - 1)] = departure_.departs(request_, position_, k);
  return markov_head(ctx, u, *w1_, *w2_, anchor, departs);
}

}  // namespace splitcheck
