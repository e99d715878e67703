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
                                 const Tensor& w2, std::span<const int32_t> anchors,
                                 const std::vector<bool>& departs) {
  // One call for every chain: on a device they stay there, with one read of their tokens.
  std::vector<int32_t> x;
  MarkovChainArgs a{&u, &w1, &w2, anchors, &departs, &x};
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
      Tensor grown = Tensor::zeros(
          DType::kBF16, {std::max({rows, 2 * capacity, int64_t{64}}), config_.hidden_size},
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

std::vector<DsparkDrafter*> DsparkDrafter::same_kind(std::span<Drafter* const> group) const {
  std::vector<DsparkDrafter*> out;
  for (Drafter* d : group) {
    auto* mine = dynamic_cast<DsparkDrafter*>(d);
    if (mine == nullptr || mine->n_taps_ != n_taps_ || mine->ctx_norm_ != ctx_norm_ ||
        mine->layers_.front().q != layers_.front().q || mine->embed_ != embed_ ||
        mine->lm_head_ != lm_head_)
      return {};
    out.push_back(mine);
  }
  return out;
}

Status DsparkDrafter::observe(const std::vector<int32_t>& ids, const Tensor& taps) {
  DsparkDrafter* self = this;
  const Observation o{&ids, &taps};
  return observe_together({&self, 1}, {&o, 1});
}

Result<std::vector<int32_t>> DsparkDrafter::propose(int32_t anchor, int gamma) {
  DsparkDrafter* self = this;
  std::vector<int32_t> out;
  RETURN_IF_ERROR(propose_together({&self, 1}, {&anchor, 1}, gamma, {&out, 1}));
  return out;
}

Status DsparkDrafter::observe_group(std::span<Drafter* const> group,
                                    std::span<const Observation> observations) {
  const std::vector<DsparkDrafter*> mine = same_kind(group);
  if (mine.empty()) return Drafter::observe_group(group, observations);
  return observe_together(mine, observations);
}

Status DsparkDrafter::propose_group(std::span<Drafter* const> group,
                                    std::span<const int32_t> anchors, int gamma,
                                    std::span<std::vector<int32_t>> proposals) {
  const std::vector<DsparkDrafter*> mine = same_kind(group);
  if (mine.empty()) return Drafter::propose_group(group, anchors, gamma, proposals);
  return propose_together(mine, anchors, gamma, proposals);
}

Status DsparkDrafter::observe_together(std::span<DsparkDrafter* const> group,
                                       std::span<const Observation> observations) {
  const DsparkDrafter& lead = *group.front();
  const int64_t h = lead.config_.hidden_size, width = lead.n_taps_ * h;
  // Where each request's rows start among the group's.
  std::vector<int64_t> first(group.size() + 1, 0);
  for (size_t i = 0; i < group.size(); ++i) {
    const Tensor& taps = *observations[i].taps;
    const size_t t = observations[i].ids->size();
    if (taps.dim(0) != static_cast<int64_t>(t) || taps.dim(1) != width)
      return internal_error("dspark drafter: taps of shape " + shape_string(taps.shape()) +
                            " for " + std::to_string(t) + " positions and " +
                            std::to_string(lead.n_taps_) + " taps");
    first[i + 1] = first[i] + static_cast<int64_t>(t);
  }
  const KernelContext ctx{nullptr, 0, -1, Site::kDraft, 0, -1};
  const Device dev = lead.ctx_proj_.device();
  // Every request's taps as one run of rows where the drafter's weights are (a single
  // request's as they are), then the context projection once over all of them.
  Tensor taps;
  if (group.size() == 1) {
    taps = on_device(*observations.front().taps, dev);
  } else {
    taps = Tensor::zeros(DType::kBF16, {first.back(), width}, dev);
    const size_t row = static_cast<size_t>(width) * sizeof(bf16);
    std::vector<CopyRun> runs;
    for (size_t i = 0; i < group.size(); ++i) {
      const Tensor& mine = *observations[i].taps;
      runs.push_back(CopyRun{&taps, static_cast<size_t>(first[i]) * row, &mine, 0, mine.nbytes()});
    }
    copy_runs(runs);
  }
  const Tensor projected = apply_linear(ctx, taps, lead.ctx_proj_);
  const Tensor c = apply_norm(ctx, projected, *lead.ctx_norm_, lead.config_.rms_norm_eps);
  // write_context_kv: each draft layer's K and V rows of a request's positions, written
  // after its observed ones (queued without a host wait on a device).
  std::vector<int64_t> at;
  for (size_t i = 0; i < group.size(); ++i) {
    DsparkDrafter& d = *group[i];
    d.reserve_rows(d.position_ + first[i + 1] - first[i]);
    at.push_back(d.position_);
  }
  for (size_t j = 0; j < lead.layers_.size(); ++j) write_kv(ctx, group, j, c, first, at);
  for (size_t i = 0; i < group.size(); ++i) group[i]->position_ += first[i + 1] - first[i];
  return Status::ok();
}

void DsparkDrafter::write_kv(const KernelContext& ctx, std::span<DsparkDrafter* const> group,
                             size_t layer, const Tensor& x, std::span<const int64_t> first,
                             std::span<const int64_t> at) {
  auto cache_rows = [&](size_t i, bool values) {
    Layer& l = group[i]->layers_[layer];
    return (values ? l.values : l.keys).rows(at[i], at[i] + first[i + 1] - first[i]);
  };
  const Layer& weights = group.front()->layers_[layer];
  if (group.size() == 1) {
    linear_into(ctx, x, *weights.k, cache_rows(0, false));
    linear_into(ctx, x, *weights.v, cache_rows(0, true));
    return;
  }
  const Tensor k = apply_linear(ctx, x, *weights.k), v = apply_linear(ctx, x, *weights.v);
  const size_t row = static_cast<size_t>(x.dim(1)) * sizeof(bf16);
  std::vector<Tensor> dst;
  dst.reserve(2 * group.size());
  std::vector<CopyRun> runs;
  for (size_t i = 0; i < group.size(); ++i) {
    const size_t from = static_cast<size_t>(first[i]) * row;
    const size_t bytes = static_cast<size_t>(first[i + 1] - first[i]) * row;
    dst.push_back(cache_rows(i, false));
    runs.push_back(CopyRun{&dst.back(), 0, &k, from, bytes});
    dst.push_back(cache_rows(i, true));
    runs.push_back(CopyRun{&dst.back(), 0, &v, from, bytes});
  }
  copy_runs(runs);
}

Tensor DsparkDrafter::block_template(int gamma, int64_t blocks) {
  const int64_t rows = gamma + 1, h = config_.hidden_size;
  if (block_gamma_ != gamma || block_template_.dim(0) < blocks * rows) {
    // Room for at least twice the blocks held before, so a growing group remakes it rarely;
    // every mask row copied in one copy_runs call.
    const int64_t held = block_gamma_ == gamma ? block_template_.dim(0) / rows : 0;
    const int64_t made = std::max(blocks, 2 * held);
    block_template_ = Tensor::zeros(DType::kBF16, {made * rows, h}, mask_->device());
    block_gamma_ = gamma;
    const size_t row = static_cast<size_t>(h) * sizeof(bf16);
    std::vector<CopyRun> runs;
    for (int64_t r = 0; r < made * rows; ++r)
      if (r % rows != 0)
        runs.push_back(CopyRun{&block_template_, static_cast<size_t>(r) * row, mask_, 0, row});
    copy_runs(runs);
  }
  return block_template_.rows(0, blocks * rows);
}

Status DsparkDrafter::propose_together(std::span<DsparkDrafter* const> group,
                                       std::span<const int32_t> anchors, int gamma,
                                       std::span<std::vector<int32_t>> proposals) {
  DsparkDrafter& lead = *group.front();
  const ModelConfig& config = lead.config_;
  const int64_t h = config.hidden_size, rows = gamma + 1;
  const int64_t blocks = static_cast<int64_t>(group.size());
  if (gamma <= 0) {
    for (std::vector<int32_t>& p : proposals) p.clear();
    return Status::ok();
  }
  Tensor ids = Tensor::zeros(DType::kI32, {blocks});
  for (int64_t b = 0; b < blocks; ++b) {
    const int32_t anchor = anchors[static_cast<size_t>(b)];
    if (anchor < 0 || anchor >= lead.embed_->dim(0))
      return internal_error("dspark drafter: anchor outside the vocabulary");
    ids.data<int32_t>()[b] = anchor;
  }
  const KernelContext ctx{nullptr, 0, -1, Site::kDraft, 0, -1};
  // The blocks live where the drafter's weights are: on a device, their kernels queue
  // without a host wait until the Markov head reads its tokens. Block b is rows
  // [b * rows, (b + 1) * rows): the anchor's embedding, then gamma mask rows.
  const Device dev = lead.mask_->device();
  const size_t row = static_cast<size_t>(h) * sizeof(bf16);
  Tensor x = clone_queued(lead.block_template(gamma, blocks));
  Tensor anchor_rows = Tensor::zeros(DType::kBF16, {blocks, h}, dev);
  EmbedArgs e{&ids, lead.embed_, &anchor_rows};
  embed(ctx, e);
  copy_tensor_runs(x, 0, static_cast<size_t>(rows) * row, anchor_rows, 0, row, row,
                   static_cast<size_t>(blocks));
  const int heads = config.num_attention_heads;
  const int head_dim = static_cast<int>(h / heads);
  // A block's keys and values go after its request's observed rows of each draft cache
  // (the next observation overwrites them), so the block attends to one run of rows.
  std::vector<int64_t> first, at;
  for (int64_t b = 0; b <= blocks; ++b) first.push_back(b * rows);
  for (DsparkDrafter* d : group) {
    d->reserve_rows(d->position_ + rows);
    at.push_back(d->position_);
  }
  for (size_t j = 0; j < lead.layers_.size(); ++j) {
    const Layer& weights = lead.layers_[j];
    const Tensor n = apply_norm(ctx, x, *weights.input_norm, config.rms_norm_eps);
    const Tensor q = apply_linear(ctx, n, *weights.q);
    write_kv(ctx, group, j, n, first, at);
    // Each block over its own request's draft cache, the group in one call.
    std::vector<Tensor> keys, values;
    for (DsparkDrafter* d : group) {
      keys.push_back(d->layers_[j].keys.rows(0, d->position_ + rows));
      values.push_back(d->layers_[j].values.rows(0, d->position_ + rows));
    }
    Tensor o = Tensor::zeros(DType::kBF16, {blocks * rows, h}, dev);
    DenseAttentionArgs a{&q, nullptr, nullptr, heads, head_dim, &o, first, {}, {}};
    for (int64_t b = 0; b < blocks; ++b) {
      a.keys.push_back(&keys[static_cast<size_t>(b)]);
      a.values.push_back(&values[static_cast<size_t>(b)]);
    }
    dense_attention(ctx, a);
    x = add_bf16(x, apply_linear(ctx, o, *weights.o));
  }
  // The gamma mask rows of every block, one after another, then U of each.
  Tensor masks = Tensor::zeros(DType::kBF16, {blocks * gamma, h}, dev);
  copy_tensor_runs(masks, 0, static_cast<size_t>(gamma) * row, x, row,
                   static_cast<size_t>(rows) * row, static_cast<size_t>(gamma) * row,
                   static_cast<size_t>(blocks));
  const Tensor hf = apply_norm(ctx, masks, *lead.norm_, config.rms_norm_eps);
  Tensor u = Tensor::zeros(DType::kF32, {blocks * gamma, config.vocab_size}, dev);
  LmHeadArgs la{&hf, lead.lm_head_, &u};
  lm_head(ctx, la);
  std::vector<bool> departs(static_cast<size_t>(blocks * gamma));
  for (int64_t b = 0; b < blocks; ++b) {
    const DsparkDrafter& d = *group[static_cast<size_t>(b)];
    for (int k = 1; k <= gamma; ++k)
      departs[static_cast<size_t>(b * gamma + k - 1)] =
          d.departure_.departs(d.request_, d.position_, k);
  }
  const std::vector<int32_t> x_k = markov_head(ctx, u, *lead.w1_, *lead.w2_, anchors, departs);
  for (int64_t b = 0; b < blocks; ++b)
    proposals[static_cast<size_t>(b)].assign(x_k.begin() + b * gamma,
                                             x_k.begin() + (b + 1) * gamma);
  return Status::ok();
}

}  // namespace splitcheck
