#include "reference/layer.h"

#include <algorithm>
#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/tensor_copy.h"

namespace splitcheck {
namespace {

class Binder {
 public:
  Binder(const WeightStore& store, std::string prefix)
      : store_(store), prefix_(std::move(prefix)) {}
  const Tensor* operator()(const std::string& suffix) {
    const Tensor* t = store_.find(prefix_ + suffix);
    if (t == nullptr && missing_.empty()) missing_ = prefix_ + suffix;
    return t;
  }
  SwiGluWeights swiglu(const std::string& p) {
    return SwiGluWeights{(*this)(p + ".gate_proj.weight"), (*this)(p + ".up_proj.weight"),
                         (*this)(p + ".down_proj.weight")};
  }
  const std::string& missing() const { return missing_; }

 private:
  const WeightStore& store_;
  std::string prefix_;
  std::string missing_;
};

// A tensor of t's dtype, shape and device for a kernel that writes all of it.
Tensor like(const Tensor& t) { return Tensor::for_overwrite(t.dtype(), t.shape(), t.device()); }

}  // namespace

void record_layer(const LayerRecording& rec, int l, const char* name, const Tensor& t) {
  if (!rec.wants_layers()) return;
  rec.record->add(rec.forward_path + "layers/" + std::to_string(l) + "/" + name, t.clone());
}

std::vector<int> native_sizes(const ModelConfig& c) {
  return c.native_attn_res_hidden_sizes.empty() ? std::vector<int>{c.hidden_size}
                                                : c.native_attn_res_hidden_sizes;
}

Result<LayerWeights> bind_layer(const ModelConfig& c, const WeightStore& store, int l) {
  Binder bind(store, "layers." + std::to_string(l) + ".");
  LayerWeights w;
  w.sa_res_norm = bind("self_attention_res_norm.weight");
  w.sa_res_proj = bind("self_attention_res_proj.weight");
  w.input_layernorm = bind("input_layernorm.weight");
  w.mlp_res_norm = bind("mlp_res_norm.weight");
  w.mlp_res_proj = bind("mlp_res_proj.weight");
  w.post_attention_layernorm = bind("post_attention_layernorm.weight");
  w.mla = c.is_mla_layer(l);
  w.q = bind("self_attn.q_proj.weight");
  w.g = bind("self_attn.g_proj.weight");
  w.o = bind("self_attn.o_proj.weight");
  if (w.mla) {
    w.kv_a = bind("self_attn.kv_a_proj.weight");
    w.kv_norm = bind("self_attn.kv_a_layernorm.weight");
    w.k_b = bind("self_attn.k_b_proj.weight");
    w.v_b = bind("self_attn.v_b_proj.weight");
  } else {
    w.k = bind("self_attn.k_proj.weight");
    w.v = bind("self_attn.v_proj.weight");
    w.b = bind("self_attn.b_proj.weight");
    w.a = bind("self_attn.a_proj.weight");
    w.o_norm = bind("self_attn.o_norm.weight");
  }
  w.moe = c.is_moe_layer(l);
  if (!w.moe) {
    w.dense = bind.swiglu("mlp");
  } else {
    w.router = bind("mlp.gate.weight");
    for (int e = 0; e < c.n_routed_experts; ++e)
      w.experts.push_back(bind.swiglu("mlp.experts." + std::to_string(e)));
    for (int e = 0; e < c.n_shared_experts; ++e)
      w.shared.push_back(bind.swiglu("mlp.shared_experts." + std::to_string(e)));
  }
  if (!bind.missing().empty())
    return invalid_input("layer " + std::to_string(l) + " needs tensor '" + bind.missing() +
                         "', which this stage does not hold");
  return w;
}

namespace {

Tensor deep_copy(const Tensor& t) { return t.shape().empty() ? Tensor() : t.clone(); }

}  // namespace

LayerCache::LayerCache(const LayerCache& other)
    : mla_latent{deep_copy(other.mla_latent.rows), other.mla_latent.positions},
      kda_state(deep_copy(other.kda_state)) {}

LayerCache& LayerCache::operator=(const LayerCache& other) {
  if (this != &other) *this = LayerCache(other);
  return *this;
}

LayerCache empty_layer_cache(const ModelConfig&, int) { return LayerCache{}; }

Tensor zero_kda_state(const ModelConfig& c, Device device) {
  return Tensor::zeros(DType::kF32, {int64_t{c.num_attention_heads} * c.head_dim * c.head_dim},
                       device);
}

void truncate_layer_cache(const ModelConfig& c, int l, LayerCache& cache, int64_t positions) {
  if (c.is_mla_layer(l))
    cache.mla_latent.positions = std::min(cache.mla_latent.positions, positions);
}

namespace {

// attn_res over `st` with a site's weights.
AttnResArgs site_args(const ModelConfig& c, ResidualState& st, const Tensor* norm_w,
                      const Tensor* proj_w, const Tensor* out_w, int nb, int write_idx,
                      const std::vector<int>& native, Tensor* out) {
  return AttnResArgs{&st.prefix,
                     st.has_delta ? &st.delta : nullptr,
                     &st.bank,
                     norm_w,
                     proj_w,
                     out_w,
                     nb,
                     write_idx,
                     c.rms_norm_eps,
                     c.rms_norm_eps,
                     native,
                     out};
}

int blocks_before(const ModelConfig& c, int l) {
  return (l + c.attn_res_block_size - 1) / c.attn_res_block_size;
}

}  // namespace

AttnResArgs pre_attn_args(const ModelConfig& c, int l, const LayerWeights& w, ResidualState& st,
                          const std::vector<int>& native, Tensor* x) {
  const int write_idx = c.is_block_write_layer(l) ? l / c.attn_res_block_size : -1;
  return site_args(c, st, w.sa_res_norm, w.sa_res_proj, w.input_layernorm, blocks_before(c, l),
                   write_idx, native, x);
}

AttnResArgs pre_mlp_args(const ModelConfig& c, int l, const LayerWeights& w, ResidualState& st,
                         const std::vector<int>& native, Tensor* y) {
  const int nb = blocks_before(c, l) + (c.is_block_write_layer(l) ? 1 : 0);
  return site_args(c, st, w.mlp_res_norm, w.mlp_res_proj, w.post_attention_layernorm, nb, -1,
                   native, y);
}

namespace {

MlaArgs mla_args(const ModelConfig& c, const LayerWeights& w, const Tensor& x, LatentCache* cache,
                 Tensor& a) {
  return MlaArgs{&x,  w.q, w.kv_a, w.kv_norm, w.k_b, w.v_b, w.g, w.o, c.num_attention_heads,
                 c.head_dim, c.rms_norm_eps, cache, &a};
}

KdaArgs kda_args(const ModelConfig& c, const LayerWeights& w, const Tensor& x, Tensor* state,
                 Tensor& a) {
  return KdaArgs{&x,     w.q, w.k,    w.v, w.b, w.a, w.g, w.o_norm, w.o, c.num_attention_heads,
                 c.head_dim, c.rms_norm_eps, state, &a};
}

// A KDA layer's state, zeros before the layer's first call.
Tensor* kda_state(const ModelConfig& c, const LayerWeights& w, LayerCache& cache) {
  if (cache.kda_state.shape().empty()) cache.kda_state = zero_kda_state(c, w.q->device());
  return &cache.kda_state;
}

}  // namespace

void run_attention(const KernelContext& ctx0, const ModelConfig& c, int l, const LayerWeights& w,
                   const Tensor& x, LayerCache& cache, Tensor& a) {
  const KernelContext ctx = ctx0.at(l, Site::kAttn);
  if (w.mla) {
    MlaArgs m = mla_args(c, w, x, &cache.mla_latent, a);
    mla_attention(ctx, m);
    return;
  }
  KdaArgs k = kda_args(c, w, x, kda_state(c, w, cache), a);
  kda_attention(ctx, k);
}

void run_attention_segments(const KernelContext& ctx0, const ModelConfig& c, int l,
                            const LayerWeights& w, const Tensor& x,
                            const std::vector<int64_t>& begin,
                            const std::vector<LayerCache*>& caches, Tensor& a) {
  const KernelContext ctx = ctx0.at(l, Site::kAttn);
  if (w.mla) {
    std::vector<LatentCache*> latents;
    for (LayerCache* cache : caches) latents.push_back(&cache->mla_latent);
    MlaArgs m = mla_args(c, w, x, nullptr, a);
    m.begin = begin;
    m.caches = latents;
    mla_attention(ctx, m);
    return;
  }
  std::vector<Tensor*> states;
  for (LayerCache* cache : caches) states.push_back(kda_state(c, w, *cache));
  KdaArgs k = kda_args(c, w, x, nullptr, a);
  k.begin = begin;
  k.states = states;
  kda_attention(ctx, k);
}

void take_attention(const ModelConfig& c, int l, ResidualState& st, const Tensor& a) {
  if (c.is_block_write_layer(l)) {
    st.prefix = clone_queued(a);
    st.has_delta = false;
  } else {
    st.delta = a;
    st.has_delta = true;
  }
}

Tensor run_layer_mlp(const KernelContext& ctx0, const ModelConfig& c, int l, const LayerWeights& w,
                     const Tensor& y) {
  Tensor m = like(y);
  const KernelContext mlp_ctx = ctx0.at(l, Site::kMlp);
  if (w.moe) {
    MoeArgs args{&y, w.router, w.experts, w.shared, c.num_experts_per_tok, &m};
    moe(mlp_ctx, args);
  } else {
    DenseMlpArgs args{&y, w.dense, &m};
    dense_mlp(mlp_ctx, args);
  }
  return m;
}

void finish_layer(int l, ResidualState& st, Tensor m, const LayerRecording& rec) {
  record_layer(rec, l, "mlp_out", m);
  record_layer(rec, l, "prefix", st.prefix);
  st.delta = std::move(m);
  st.has_delta = true;
}

void run_layer(const KernelContext& ctx0, const ModelConfig& c, int l, const LayerWeights& w,
               ResidualState& st, LayerCache& cache, const LayerRecording& rec) {
  const std::vector<int> native = native_sizes(c);
  // 1. x = attn_res(P, D, bank, ...) at site pre_attn.
  Tensor x = like(st.prefix);
  AttnResArgs pre = pre_attn_args(c, l, w, st, native, &x);
  attn_res(ctx0.at(l, Site::kPreAttn), pre);
  record_layer(rec, l, "pre_attn", x);
  // 2. a = attention_l(x).
  Tensor a = like(st.prefix);
  run_attention(ctx0, c, l, w, x, cache, a);
  record_layer(rec, l, "attn_out", a);
  // 3. A block-write layer starts a new block: P = a, no delta. Otherwise D = a.
  take_attention(c, l, st, a);
  // 4. y = attn_res(P, D, bank, ...) at site pre_mlp.
  Tensor y = like(st.prefix);
  AttnResArgs mid = pre_mlp_args(c, l, w, st, native, &y);
  attn_res(ctx0.at(l, Site::kPreMlp), mid);
  record_layer(rec, l, "pre_mlp", y);
  // 5. D = mlp_l(y).
  finish_layer(l, st, run_layer_mlp(ctx0, c, l, w, y), rec);
}

Tensor folded_hidden(const ResidualState& st) {
  if (!st.has_delta) return st.prefix.clone();
  // Where the state is (on a device, no host wait).
  const Tensor& p = st.prefix;
  return add_bf16(p, st.delta.device() == p.device() ? st.delta : st.delta.to(p.device()));
}

int tap_blocks(const ModelConfig& c, int k) {
  return (k + c.attn_res_block_size - 1) / c.attn_res_block_size;
}

Tensor read_tap(const KernelContext& ctx, const ModelConfig& c, int k, const ResidualState& st,
                const Tensor& norm_w, const Tensor& proj_w) {
  Tensor prefix = folded_hidden(st);
  Tensor bank = st.bank;  // shares bytes; write_idx = -1, so nothing is written
  Tensor out = like(prefix);
  const std::vector<int> native = native_sizes(c);
  const int nb = tap_blocks(c, k);
  AttnResArgs args{&prefix, nullptr, &bank,          &norm_w,        &proj_w, nullptr,
                   nb,      -1,      c.rms_norm_eps, c.rms_norm_eps, native,  &out};
  KernelContext tap_ctx = ctx.at(-1, Site::kTap);
  tap_ctx.aux = k;
  attn_res(tap_ctx, args);
  return out;
}

ResidualState embed_state(const KernelContext& ctx, const ModelConfig& c, const Tensor& table,
                          const Tensor& ids) {
  const int64_t t = ids.dim(0);
  ResidualState st;
  st.prefix = Tensor::for_overwrite(DType::kBF16, {t, c.hidden_size}, table.device());
  EmbedArgs args{&ids, &table, &st.prefix};
  embed(ctx.at(-1, Site::kEmbed), args);
  st.bank = Tensor::zeros(DType::kBF16, {t, c.num_blocks(), c.hidden_size}, table.device());
  return st;
}

void place_state(ResidualState& st, Device device) {
  if (!st.prefix.empty() && st.prefix.device() != device) st.prefix = st.prefix.to(device);
  if (!st.delta.empty() && st.delta.device() != device) st.delta = st.delta.to(device);
  if (!st.bank.empty() && st.bank.device() != device) st.bank = st.bank.to(device);
}

HeadOutput run_head(const KernelContext& ctx, const ModelConfig& c, ResidualState& st,
                    const WeightStore& store) {
  const int64_t t = st.prefix.dim(0);
  HeadOutput out;
  out.output = like(st.prefix);
  const std::vector<int> native = native_sizes(c);
  AttnResArgs read{&st.prefix,
                   st.has_delta ? &st.delta : nullptr,
                   &st.bank,
                   &store.get("output_attn_res_norm.weight"),
                   &store.get("output_attn_res_proj.weight"),
                   nullptr,
                   c.num_blocks(),
                   -1,
                   c.rms_norm_eps,
                   c.rms_norm_eps,
                   native,
                   &out.output};
  attn_res(ctx.at(-1, Site::kOutput), read);
  Tensor h = like(st.prefix);
  RmsNormArgs norm{&out.output, &store.get("norm.weight"), c.rms_norm_eps, &h};
  rms_norm(ctx.at(-1, Site::kFinalNorm), norm);
  const Tensor& lm_head_w = store.get("lm_head.weight");
  out.logits = Tensor::for_overwrite(DType::kF32, {t, c.vocab_size}, lm_head_w.device());
  LmHeadArgs head{&h, &lm_head_w, &out.logits};
  lm_head(ctx.at(-1, Site::kLmHead), head);
  // The next tokens go to the host, which reads them: the one wait of a forward.
  out.next_tokens = Tensor::zeros(DType::kI32, {t});
  ArgmaxArgs am{&out.logits, &out.next_tokens};
  argmax(ctx.at(-1, Site::kSample), am);
  return out;
}

}  // namespace splitcheck
