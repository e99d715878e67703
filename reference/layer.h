// One K3-mini decoder layer (SPEC 2.3), the residual state it transforms, the taps
// (SPEC 2.6) and the model's ends (embedding and output head). Both engines run exactly
// this code; only the partitioned engine's handoff, tap relay and placement differ.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"
#include "reference/config.h"
#include "reference/record.h"
#include "reference/weights.h"

namespace splitcheck {

// Everything layer l reads, bound by name from a WeightStore.
struct LayerWeights {
  const Tensor* sa_res_norm = nullptr;
  const Tensor* sa_res_proj = nullptr;
  const Tensor* input_layernorm = nullptr;
  const Tensor* mlp_res_norm = nullptr;
  const Tensor* mlp_res_proj = nullptr;
  const Tensor* post_attention_layernorm = nullptr;
  bool mla = false;
  // Attention (MLA uses q, kv_a, kv_norm, k_b, v_b, g, o; KDA uses q, k, v, b, a, g, o_norm, o).
  const Tensor *q = nullptr, *kv_a = nullptr, *kv_norm = nullptr, *k_b = nullptr, *v_b = nullptr;
  const Tensor *k = nullptr, *v = nullptr, *b = nullptr, *a = nullptr, *o_norm = nullptr;
  const Tensor *g = nullptr, *o = nullptr;
  bool moe = false;
  SwiGluWeights dense;
  const Tensor* router = nullptr;
  std::vector<SwiGluWeights> experts;
  std::vector<SwiGluWeights> shared;
};

// Binds layer l's tensors; an error names the first tensor the store lacks.
Result<LayerWeights> bind_layer(const ModelConfig& config, const WeightStore& store, int l);

// Per-layer cache, where the layer's weights are (device memory for a CUDA layer): MLA
// latents (bf16, positions x r) or the KDA state (float32 [heads*hd*hd], allocated by the
// layer's first call). A copy is deep; a move is not. (A rollback point is a
// CacheSnapshot, reference/cache_snapshot.h, which copies less.)
struct LayerCache {
  LatentCache mla_latent;
  Tensor kda_state;

  LayerCache() = default;
  LayerCache(const LayerCache& other);
  LayerCache& operator=(const LayerCache& other);
  LayerCache(LayerCache&&) = default;
  LayerCache& operator=(LayerCache&&) = default;
};
LayerCache empty_layer_cache(const ModelConfig& config, int l);
// A KDA layer's state before its first call: zeros, float32 [heads*hd*hd] on `device`.
Tensor zero_kda_state(const ModelConfig& config, Device device);
// Keeps the first `positions` positions of an MLA cache (no-op for KDA).
void truncate_layer_cache(const ModelConfig& config, int l, LayerCache& cache, int64_t positions);

// The residual stream of one forward: prefix P [T,H], pending delta D [T,H] (when
// has_delta), bank [T, num_blocks, H].
struct ResidualState {
  Tensor prefix;
  Tensor delta;
  bool has_delta = false;
  Tensor bank;
};

// Where the per-layer tensors go: nullptr record or level summary records nothing.
struct LayerRecording {
  RunRecord* record = nullptr;
  std::string forward_path;  // "forward/3/"
  DumpLevel level = DumpLevel::kSummary;
  bool wants_layers() const { return record != nullptr && level != DumpLevel::kSummary; }
};

// SPEC 2.3 steps 1-5 for layer l.
void run_layer(const KernelContext& ctx, const ModelConfig& config, int l, const LayerWeights& w,
               ResidualState& state, LayerCache& cache, const LayerRecording& rec);

// The same layer in parts, for batched forwards (reference/batch.h), which run steps 1, 4
// and 5 once over every segment's rows and step 2 per segment. run_layer is the parts in
// order on one state.
//
// Steps 1 and 4's arguments: attn_res at site pre_attn (x) or pre_mlp (y) over `state`.
AttnResArgs pre_attn_args(const ModelConfig& config, int l, const LayerWeights& w,
                          ResidualState& state, const std::vector<int>& native, Tensor* x);
AttnResArgs pre_mlp_args(const ModelConfig& config, int l, const LayerWeights& w,
                         ResidualState& state, const std::vector<int>& native, Tensor* y);
// Step 2: a = attention_l(x) on one request's cache (MLA or KDA). `a` holds x's shape.
void run_attention(const KernelContext& ctx, const ModelConfig& config, int l,
                   const LayerWeights& w, const Tensor& x, LayerCache& cache, Tensor& a);
// Step 2 for several requests in one call: rows [begin[i], begin[i+1]) of x and a are
// request i's, on caches[i] (distinct), each computed as its own call would.
void run_attention_segments(const KernelContext& ctx, const ModelConfig& config, int l,
                            const LayerWeights& w, const Tensor& x,
                            const std::vector<int64_t>& begin,
                            const std::vector<LayerCache*>& caches, Tensor& a);
// Step 3: a block-write layer starts a new block (P = a, no delta); otherwise D = a.
void take_attention(const ModelConfig& config, int l, ResidualState& state, const Tensor& a);
// Step 5 on any rows (row-wise): m = mlp_l(y).
Tensor run_layer_mlp(const KernelContext& ctx, const ModelConfig& config, int l,
                     const LayerWeights& w, const Tensor& y);
// Records mlp_out and prefix, and sets D = m.
void finish_layer(int l, ResidualState& state, Tensor m, const LayerRecording& rec);
// Records layer l's tensor `name` (a clone) when `rec` wants per-layer tensors.
void record_layer(const LayerRecording& rec, int l, const char* name, const Tensor& t);

// bf16(P + D), or P when there is no pending delta: the handoff's `hidden`.
Tensor folded_hidden(const ResidualState& state);

// Tap k > 0 (SPEC 2.6): attn_res(bf16(P + D), none, bank, norm_w, proj_w, none,
// cdiv(k, S), -1), a pure read of the state after layer k-1.
Tensor read_tap(const KernelContext& ctx, const ModelConfig& config, int k,
                const ResidualState& state, const Tensor& norm_w, const Tensor& proj_w);
// The blocks tap k reads: cdiv(k, S).
int tap_blocks(const ModelConfig& config, int k);

// Start of the model: P = embed_tokens[ids], no delta, an empty bank.
ResidualState embed_state(const KernelContext& ctx, const ModelConfig& config,
                          const Tensor& embed_table, const Tensor& ids);

// Moves the state's tensors to `device` (a stage receiving a handoff on the host places
// it where its weights are; the kernels would otherwise stage it on every call).
void place_state(ResidualState& state, Device device);

// The output head of SPEC 2.3: o = attn_res(output weights), h = rmsnorm(o), logits.
struct HeadOutput {
  Tensor output;       // o, bf16 [T,H]
  Tensor logits;       // float32 [T,V]
  Tensor next_tokens;  // int32 [T], argmax with lowest index on ties
};
HeadOutput run_head(const KernelContext& ctx, const ModelConfig& config, ResidualState& state,
                    const WeightStore& store);

// Native attn_res sizes of the config (its own H when the list is empty).
std::vector<int> native_sizes(const ModelConfig& config);

}  // namespace splitcheck
