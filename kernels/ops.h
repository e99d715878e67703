// The ops the engines call, their argument structs, and the entry points that dispatch
// through the registry (kernels/dispatch.h). All activations are bf16 [T, H] row-major;
// every kernel computes in float32 and rounds once when it writes (SPEC 1).
#pragma once

#include <span>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/tensor.h"

namespace splitcheck {

// SPEC 2.2. P [T,H] (updated in place when delta is given), delta [T,H] or null,
// bank [T, rows, H], norm_w/proj_w/out_w [H] (out_w nullable), out [T,H].
struct AttnResArgs {
  Tensor* prefix = nullptr;
  const Tensor* delta = nullptr;
  Tensor* bank = nullptr;
  const Tensor* norm_w = nullptr;
  const Tensor* proj_w = nullptr;
  const Tensor* out_w = nullptr;
  int nb = 0;
  int write_idx = -1;
  float eps = 1e-6f;
  float out_eps = 1e-6f;
  std::span<const int> native_hidden_sizes;  // where attn_res.native is eligible
  Tensor* out = nullptr;
};

// embed_tokens[ids] -> out [T,H].
struct EmbedArgs {
  const Tensor* ids = nullptr;    // i32 [T]
  const Tensor* table = nullptr;  // bf16 [V,H]
  Tensor* out = nullptr;          // bf16 [T,H]
};

// out = bf16(x * rsqrt(mean(x^2) + eps) * w), row by row.
struct RmsNormArgs {
  const Tensor* x = nullptr;
  const Tensor* weight = nullptr;
  float eps = 1e-6f;
  Tensor* out = nullptr;
};

// logits = x · lm_headᵀ in float32. x bf16 [T,H], lm_head bf16 [V,H], logits f32 [T,V].
struct LmHeadArgs {
  const Tensor* x = nullptr;
  const Tensor* lm_head = nullptr;
  Tensor* logits = nullptr;
};

// Next token per row: argmax, lowest index on ties. logits f32 [T,V], tokens i32 [T].
struct ArgmaxArgs {
  const Tensor* logits = nullptr;
  Tensor* tokens = nullptr;
};

// MLA's latent cache (SPEC 2.4): rows [0, positions) of `rows` (bf16 [capacity, r], where
// the layer's weights are: device memory for a CUDA layer) hold the latent c of every
// earlier position. An MLA call writes this forward's T latents after them (growing
// `rows` when it is full) and advances `positions`.
struct LatentCache {
  Tensor rows;
  int64_t positions = 0;
};
// Makes room for `need` positions of `r` latents on `device`, keeping the first
// `positions` rows (a new tensor of at least twice the capacity when it is full).
void reserve_latents(LatentCache& cache, int64_t need, int64_t r, Device device);
// The cache's latents, positions * r values, as a new host tensor (for the host to read).
Tensor latents_on_host(const LatentCache& cache, int64_t r);

// MLA-lite (SPEC 2.4). Weights are [in, out]. The cache holds the latent c (bf16 [n, r])
// of every earlier position; the call appends this forward's T latents.
struct MlaArgs {
  const Tensor* x = nullptr;        // [T,H]
  const Tensor* w_q = nullptr;      // [H, heads*hd]
  const Tensor* w_dkv = nullptr;    // [H, r]
  const Tensor* kv_norm = nullptr;  // [r]
  const Tensor* w_uk = nullptr;     // [r, heads*hd]
  const Tensor* w_uv = nullptr;     // [r, heads*hd]
  const Tensor* w_g = nullptr;      // [H, heads*hd]
  const Tensor* w_o = nullptr;      // [heads*hd, H]
  int heads = 0;
  int head_dim = 0;
  float eps = 1e-6f;
  LatentCache* cache = nullptr;  // appended to
  Tensor* out = nullptr;         // [T,H]
  // A call over several segments (a batched forward's requests): when `begin` is not
  // empty, rows [begin[i], begin[i+1]) of x and out are segment i's, which appends to and
  // attends over caches[i] alone, as a call of its own would; `cache` is then unused.
  // The caches are distinct.
  std::span<const int64_t> begin = {};
  std::span<LatentCache* const> caches = {};
};

// KDA-lite (SPEC 2.4). state: float32 [heads, hd, hd] where the layer's weights are,
// updated in place token by token.
struct KdaArgs {
  const Tensor* x = nullptr;
  const Tensor* w_q = nullptr;     // [H, heads*hd]
  const Tensor* w_k = nullptr;     // [H, heads*hd]
  const Tensor* w_v = nullptr;     // [H, heads*hd]
  const Tensor* w_b = nullptr;     // [H, heads]
  const Tensor* w_a = nullptr;     // [H, heads*hd]
  const Tensor* w_g = nullptr;     // [H, heads*hd]
  const Tensor* o_norm = nullptr;  // [hd]
  const Tensor* w_o = nullptr;     // [heads*hd, H]
  int heads = 0;
  int head_dim = 0;
  float eps = 1e-6f;
  Tensor* state = nullptr;  // f32 [heads*hd*hd]
  Tensor* out = nullptr;
  // Segments, as MlaArgs's: segment i's rows update states[i] alone; the states are
  // distinct tensors.
  std::span<const int64_t> begin = {};
  std::span<Tensor* const> states = {};
};

// Throws std::invalid_argument unless x and out have the same rows, `begin` rises from 0
// to that row count in owners.size() segments, and the owners (the segments' caches or
// states) are distinct and not null.
void check_segments(std::span<const int64_t> begin, std::span<const void* const> owners,
                    const Tensor& x, const Tensor& out);

// Runs `call` once per segment of a segmented MLA or KDA call, on views of the segment's
// rows and its own cache or state (the CPU's way, and any backend's for a call it does
// not run at once); throws when the segment tables disagree.
void for_each_segment(const MlaArgs& args, void (*call)(MlaArgs&));
void for_each_segment(const KdaArgs& args, void (*call)(KdaArgs&));

// One SwiGLU expert's weights, [in, out].
struct SwiGluWeights {
  const Tensor* gate = nullptr;  // [H, I]
  const Tensor* up = nullptr;    // [H, I]
  const Tensor* down = nullptr;  // [I, H]
};

// Dense SwiGLU MLP.
struct DenseMlpArgs {
  const Tensor* x = nullptr;
  SwiGluWeights w;
  Tensor* out = nullptr;
};

// MoE with sigmoid routing, top-k (ties: lower expert index), shared experts (SPEC 2.5).
struct MoeArgs {
  const Tensor* x = nullptr;
  const Tensor* router = nullptr;  // [H, E]
  std::span<const SwiGluWeights> experts;
  std::span<const SwiGluWeights> shared;
  int top_k = 0;
  Tensor* out = nullptr;
};

// out = bf16(x W), x bf16 [T, in], W bf16 [in, out] (the drafters' projections).
struct LinearArgs {
  const Tensor* x = nullptr;
  const Tensor* weight = nullptr;
  Tensor* out = nullptr;
};

// Softmax attention where every key is visible to every query (a draft block attends to
// the whole draft cache and to itself). q [Tq, heads*hd], k/v [Tk, heads*hd], out
// [Tq, heads*hd], all bf16; scores, softmax and the weighted sum in float32.
// Segmented (a group of drafters in one call): when `begin` is set, query rows
// [begin[i], begin[i + 1]) of q and out attend over keys[i] and values[i] alone, each
// segment's rows as a call of its own gives them; k and v are unused.
struct DenseAttentionArgs {
  const Tensor* q = nullptr;
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  int heads = 0;
  int head_dim = 0;
  Tensor* out = nullptr;
  std::vector<int64_t> begin;
  std::vector<const Tensor*> keys, values;
};

// The DSpark Markov head's chains (SPEC 3.1), any number at once (a step's requests):
// chain c starts at x_0 = anchors[c], then for k = 1..gamma the scores s = U[c * gamma +
// k - 1] + W1[x_{k-1}] · W2ᵀ (float32: the product, then the sum) and x_k = argmax(s),
// lowest index on ties, NaN never picked; where departs[c * gamma + k - 1] is true, x_k is
// the lowest-index maximum of s other than that argmax (its second choice). U f32
// [chains * gamma, V], W1/W2 bf16 [V, r]; `departs` empty or chains * gamma long. tokens:
// the x_k of chain 0, then chain 1's, ..., on the host (one read at the end: the chains
// themselves stay where W2 is). Each chain's tokens are those it has computed alone.
struct MarkovChainArgs {
  const Tensor* u = nullptr;
  const Tensor* w1 = nullptr;
  const Tensor* w2 = nullptr;
  std::span<const int32_t> anchors;
  const std::vector<bool>* departs = nullptr;
  std::vector<int32_t>* tokens = nullptr;
  int64_t chains() const { return static_cast<int64_t>(anchors.size()); }
  // Steps a chain: U's rows shared out (the entry point refuses a remainder).
  int64_t gamma() const { return chains() == 0 ? 0 : u->dim(0) / chains(); }
  // Whether step i (chain i / gamma, 0-based step i % gamma) departs.
  bool departs_at(int64_t i) const {
    return departs != nullptr && static_cast<size_t>(i) < departs->size() &&
           (*departs)[static_cast<size_t>(i)];
  }
};

// Entry points: dispatch through the registry and record the call in ctx.trace.
void attn_res(const KernelContext& ctx, AttnResArgs& args);
void embed(const KernelContext& ctx, EmbedArgs& args);
void rms_norm(const KernelContext& ctx, RmsNormArgs& args);
void lm_head(const KernelContext& ctx, LmHeadArgs& args);
void argmax(const KernelContext& ctx, ArgmaxArgs& args);
void mla_attention(const KernelContext& ctx, MlaArgs& args);
void kda_attention(const KernelContext& ctx, KdaArgs& args);
void dense_mlp(const KernelContext& ctx, DenseMlpArgs& args);
void moe(const KernelContext& ctx, MoeArgs& args);
void linear(const KernelContext& ctx, LinearArgs& args);
void dense_attention(const KernelContext& ctx, DenseAttentionArgs& args);
void markov_chain(const KernelContext& ctx, MarkovChainArgs& args);

// SPEC 2.2's eligibility of attn_res.native, and the fallback's source tile width.
bool attn_res_native_eligible(const AttnResArgs& args);
int attn_res_fallback_block_l(int64_t tokens, int nb);

}  // namespace splitcheck
