#include "reference/eagle3.h"

#include <cmath>
#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/tensor_copy.h"
#include "reference/draft_ops.h"

namespace splitcheck {
namespace {

using draft::append_rows;
using draft::apply_linear;
using draft::apply_norm;
using draft::on_device;
using draft::rows_tensor;

constexpr float kFcGain = 0.05f;
constexpr float kWriteGain = 0.05f;

float lin_scale(int64_t fan_in, float gain) {
  return gain * std::sqrt(3.0f / static_cast<float>(fan_in));
}

}  // namespace

std::vector<TensorSpec> eagle3_tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size, v = c.vocab_size;
  const std::string p = "drafter.eagle3.";
  std::vector<TensorSpec> s;
  s.push_back(TensorSpec{p + "fc.weight",
                         {kEagle3Taps * h, h},
                         WeightInit::kUniform,
                         lin_scale(kEagle3Taps * h, kFcGain)});
  s.push_back(TensorSpec{p + "input_norm.weight", {h}, WeightInit::kOnePlus, 0.1f});
  for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight"})
    s.push_back(TensorSpec{p + n, {h, h}, WeightInit::kUniform, lin_scale(h, 1.0f)});
  s.push_back(
      TensorSpec{p + "o_proj.weight", {h, h}, WeightInit::kUniform, lin_scale(h, kWriteGain)});
  s.push_back(TensorSpec{p + "post_norm.weight", {h}, WeightInit::kOnePlus, 0.1f});
  s.push_back(
      TensorSpec{p + "mlp.gate_proj.weight", {h, inter}, WeightInit::kUniform, lin_scale(h, 1.0f)});
  s.push_back(
      TensorSpec{p + "mlp.up_proj.weight", {h, inter}, WeightInit::kUniform, lin_scale(h, 1.0f)});
  s.push_back(TensorSpec{
      p + "mlp.down_proj.weight", {inter, h}, WeightInit::kUniform, lin_scale(inter, kWriteGain)});
  // Derived (generate_markov_factor): the target's norm.weight and lm_head values.
  s.push_back(TensorSpec{p + "norm.weight", {h}, WeightInit::kMarkovW1, 1.0f});
  s.push_back(TensorSpec{p + "lm_head.weight", {v, h}, WeightInit::kMarkovW2, 1.0f});
  return s;
}

Result<std::unique_ptr<Eagle3Drafter>> Eagle3Drafter::create(const ModelConfig& c,
                                                             const WeightStore& own,
                                                             const DrafterBinding& binding) {
  std::unique_ptr<Eagle3Drafter> d(new Eagle3Drafter());
  d->config_ = c;
  d->embed_ = binding.embed;
  if (d->embed_ == nullptr) return config_rejected("eagle3 drafter: embedding not bound");
  const std::string p = "drafter.eagle3.";
  const Tensor** slots[] = {&d->fc_, &d->input_norm_, &d->q_,         &d->k_,
                            &d->v_,  &d->o_,          &d->post_norm_, &d->gate_,
                            &d->up_, &d->down_,       &d->norm_,      &d->lm_head_};
  const char* names[] = {
      "fc.weight",          "input_norm.weight",    "q_proj.weight",    "k_proj.weight",
      "v_proj.weight",      "o_proj.weight",        "post_norm.weight", "mlp.gate_proj.weight",
      "mlp.up_proj.weight", "mlp.down_proj.weight", "norm.weight",      "lm_head.weight"};
  for (size_t i = 0; i < std::size(slots); ++i) {
    *slots[i] = own.find(p + names[i]);
    if (*slots[i] == nullptr) return invalid_input("eagle3 drafter: missing " + p + names[i]);
  }
  return d;
}

void Eagle3Drafter::reset(int64_t request) {
  request_ = request;
  position_ = 0;
  cache_k_.clear();
  cache_v_.clear();
  last_feature_.clear();
}

Status Eagle3Drafter::observe(const std::vector<int32_t>& ids, const Tensor& taps) {
  const int64_t h = config_.hidden_size;
  if (taps.dim(0) != static_cast<int64_t>(ids.size()) || taps.dim(1) != kEagle3Taps * h)
    return internal_error("eagle3 drafter: taps of shape " + shape_string(taps.shape()) + " for " +
                          std::to_string(ids.size()) + " positions and " +
                          std::to_string(kEagle3Taps) + " taps");
  if (ids.empty()) return Status::ok();
  const KernelContext ctx{nullptr, 0, -1, Site::kDraft, 0, -1};
  // This drafter's caches are host rows: its features are made on the host's copy.
  const Tensor f = apply_linear(ctx, on_device(taps, Device::kCpu), *fc_);
  const Tensor n = apply_norm(ctx, f, *input_norm_, config_.rms_norm_eps);
  append_rows(cache_k_, apply_linear(ctx, n, *k_));
  append_rows(cache_v_, apply_linear(ctx, n, *v_));
  const bf16* last = f.data<bf16>() + (f.dim(0) - 1) * h;
  last_feature_.assign(last, last + h);
  position_ += static_cast<int64_t>(ids.size());
  return Status::ok();
}

Result<std::vector<int32_t>> Eagle3Drafter::propose(int32_t anchor, int gamma) {
  const int64_t h = config_.hidden_size;
  const KernelContext ctx{nullptr, 0, -1, Site::kDraft, 0, -1};
  if (anchor < 0 || anchor >= embed_->dim(0))
    return internal_error("eagle3 drafter: anchor outside the vocabulary");
  if (static_cast<int64_t>(last_feature_.size()) != h)
    return internal_error("eagle3 drafter: propose before any verified position");
  const int heads = config_.num_attention_heads;
  const int head_dim = static_cast<int>(h / heads);
  std::vector<bf16> keys = cache_k_, values = cache_v_;
  Tensor feature = rows_tensor(last_feature_, h);
  Tensor e = Tensor::zeros(DType::kBF16, {1, h});
  Tensor logits = Tensor::zeros(DType::kF32, {1, config_.vocab_size});
  Tensor tok = Tensor::zeros(DType::kI32, {1});
  std::vector<int32_t> out;
  int32_t prev = anchor;
  for (int step = 0; step < gamma; ++step) {
    const size_t row = static_cast<size_t>(h) * sizeof(bf16);
    copy_tensor_runs(e, 0, row, *embed_, static_cast<size_t>(prev) * row, row, row, 1);
    const Tensor x = add_bf16(e, feature);
    const Tensor n = apply_norm(ctx, x, *input_norm_, config_.rms_norm_eps);
    const Tensor q = apply_linear(ctx, n, *q_);
    append_rows(keys, apply_linear(ctx, n, *k_));
    append_rows(values, apply_linear(ctx, n, *v_));
    const Tensor kt = rows_tensor(keys, h), vt = rows_tensor(values, h);
    Tensor a = Tensor::zeros(DType::kBF16, {1, h});
    DenseAttentionArgs aa{&q, &kt, &vt, heads, head_dim, &a, {}, {}, {}};
    dense_attention(ctx, aa);
    const Tensor h1 = add_bf16(x, apply_linear(ctx, a, *o_));
    const Tensor n2 = apply_norm(ctx, h1, *post_norm_, config_.rms_norm_eps);
    Tensor m = Tensor::zeros(DType::kBF16, {1, h});
    DenseMlpArgs ma{&n2, SwiGluWeights{gate_, up_, down_}, &m};
    dense_mlp(ctx, ma);
    const Tensor h2 = add_bf16(h1, m);
    const Tensor hn = apply_norm(ctx, h2, *norm_, config_.rms_norm_eps);
    LmHeadArgs la{&hn, lm_head_, &logits};
    lm_head(ctx, la);
    ArgmaxArgs ga{&logits, &tok};
    argmax(ctx, ga);
    prev = tok.data<int32_t>()[0];
    if (departure_.departs(request_, position_, step + 1))
      prev = second_choice(logits.data<float>(), config_.vocab_size, prev);
    out.push_back(prev);
    // The layer's residual writes feed the next step.
    for (int64_t i = 0; i < h; ++i)
      feature.data<bf16>()[i] = to_bf16(to_f32(h2.data<bf16>()[i]) - to_f32(x.data<bf16>()[i]));
  }
  return out;
}

}  // namespace splitcheck
