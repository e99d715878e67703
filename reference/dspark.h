// DSpark-lite (SPEC 3.1): the block drafter, its checkpoint tensors (`drafter.*`), the
// low-rank Markov head, and how a drafter binds the target's embedding and lm_head.
//
//   context  c = rmsnorm(bf16(concat(taps) W_ctx), ctx_norm) per verified position
//   write_context_kv  each draft layer j appends K_j = bf16(c W_k^j), V_j = bf16(c W_v^j)
//   block pass  [embed(anchor), mask, ..., mask] (gamma + 1 rows), kDsparkLayers pre-norm
//               residual layers attending to the draft cache and to the whole block,
//               U = lm_head(rmsnorm(h, drafter.norm)) of the gamma mask rows
//   Markov head x_k = argmax(U_k + W1[x_{k-1}] · W2ᵀ), x_0 the anchor
//
// Layouts follow the target: linear weights [in, out]. The Markov factors are not free
// random tensors: they are the target's bigram logits in factored form, W1 =
// bf16(embed_tokens ⊙ norm) and W2 = lm_head, rank r = H < V. The target's lm_head is
// successor-tied (reference/weights.h: row succ[t] holds embed_tokens row t on top of
// its random draw) and its residual writes are small, so where the output mixture is
// dominated by the current token's embedding the target continues t with succ[t], and
// W1[t] · W2ᵀ peaks there too: the head follows the target's own prediction, the fit a
// trained drafter approximates; the block pass adds its logits U on top. On the default
// workload the target departs from that chain where its context dominates, about one
// token in four, which gives the rejections at every position (SPEC 3.3).
// Departures (reference/speculative.h, Departure): at a seeded rate the head proposes
// its second choice instead, a pure function of (seed, request, position, k).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops.h"
#include "reference/config.h"
#include "reference/speculative.h"
#include "reference/weights.h"

namespace splitcheck {

// The Markov head's rank r (W1, W2 are [V, r]): the hidden size.
inline int dspark_markov_rank(const ModelConfig& config) { return config.hidden_size; }
// The number of draft layers of the block pass.
inline constexpr int kDsparkLayers = 2;
// How many tap slots the drafter's context projection can have (drafter.ctx_proj.<i>).
inline constexpr int kMaxDrafterTaps = 16;

// The drafter's own tensors for `method` ("dspark"; empty for other methods) consuming
// `n_taps` taps: drafter.ctx_proj.<i>.weight [H, H] per tap slot (stacked, they are
// W_ctx [n*H, H]), drafter.ctx_norm.weight, drafter.mask_embedding, per draft layer j
// drafter.layers.j.{input_norm.weight, q_proj, k_proj, v_proj, o_proj}, drafter.norm.weight,
// drafter.markov.w1 / w2 [V, r]. The embedding and lm_head are the target's (shared).
std::vector<TensorSpec> drafter_tensor_specs(const ModelConfig& config, const std::string& method,
                                             int n_taps);

// Generates a derived Markov factor (spec.init kMarkovW1 or kMarkovW2) from the target's
// generated embedding, norm and lm_head. A kMarkovW1 spec of shape [H] is W1's norm
// factor alone: the target's norm.weight (reference/eagle3.h uses it).
Tensor generate_markov_factor(const ModelConfig& config, const TensorSpec& spec);

// The Markov head of each anchor's chain: x_0 = anchor, x_k = argmax_v(U[k-1, v] +
// W1[x_{k-1}] · W2[v]) for k = 1..gamma, lowest index on ties. U float32 [chains * gamma,
// V], chain after chain; W1/W2 bf16 [V, r]. Where `departs[c * gamma + k - 1]` is true,
// chain c's x_k is the second choice of those scores instead (second_choice,
// reference/speculative.h); an empty `departs` never departs. The chains' tokens, chain
// after chain.
std::vector<int32_t> markov_head(const KernelContext& ctx, const Tensor& u, const Tensor& w1,
                                 const Tensor& w2, std::span<const int32_t> anchors,
                                 const std::vector<bool>& departs = {});

// What a drafter's embedding and lm_head are bound to (SPEC 5.4). Whether the embedding
// is the target's object is a question for binds_target_embedding, asked of storage.
struct DrafterBinding {
  const Tensor* embed = nullptr;  // nullptr: the placeholder is missing
  const Tensor* lm_head = nullptr;
  std::string source = "missing";  // target | own | missing
  Tensor own_embedding;            // storage when the drafter built its own
};

// share_with_target: binds the drafter to the embedding and lm_head objects that the
// stage where it runs holds (the target's, or its copy for the drafter there).
DrafterBinding share_with_target(const WeightStore& stage_weights);

// Whether the binding's embedding is the very object the stage holds as the target's
// embed_tokens: the same storage (same_storage), never merely equal values. False when
// either is missing.
bool binds_target_embedding(const DrafterBinding& binding, const WeightStore& stage_weights);

// check_shared_embedding: refuses a missing placeholder with a load error naming the
// stage and the method (StatusCode::kConfigRejected). The vocabulary size comes from the
// configuration, never from the embedding module, so the refusal is reachable. With
// `vocab_from_embedding` (fault draft.vocab_from_embedding) the historical order is
// restored: the vocabulary is read from the missing module first, which fails before
// the refusal can be made (StatusCode::kInternal).
Status check_shared_embedding(const DrafterBinding& binding, const ModelConfig& config, int stage,
                              std::string_view method, bool vocab_from_embedding);

// DSpark-lite as the verify loop sees it. A group of its drafters (one weight store, one
// tap count) runs together: each op once over every request's rows, the attention per
// request over its own draft cache, the Markov chains in one call. A single call is a
// group of one.
class DsparkDrafter : public Drafter {
 public:
  // `own` holds the drafter.* tensors; `binding` the shared embedding and lm_head.
  static Result<std::unique_ptr<DsparkDrafter>> create(const ModelConfig& config,
                                                       const WeightStore& own,
                                                       const DrafterBinding& binding, int n_taps);
  void reset(int64_t request) override;
  Status observe(const std::vector<int32_t>& ids, const Tensor& taps) override;
  Result<std::vector<int32_t>> propose(int32_t anchor, int gamma) override;
  bool groups() const override { return true; }
  Status observe_group(std::span<Drafter* const> group,
                       std::span<const Observation> observations) override;
  Status propose_group(std::span<Drafter* const> group, std::span<const int32_t> anchors, int gamma,
                       std::span<std::vector<int32_t>> proposals) override;
  // Draft layer `layer`'s keys (or values) of the observed positions, [positions, H].
  Tensor observed_rows(int layer, bool values) const;
  // The controlled departures (SPEC 3.3); none until set.
  void set_departure(const Departure& departure) { departure_ = departure; }

 private:
  DsparkDrafter() = default;
  // The group's drafters as DsparkDrafters, when each is one sharing this one's weights
  // and tap count (empty otherwise: the group runs one by one).
  std::vector<DsparkDrafter*> same_kind(std::span<Drafter* const> group) const;
  static Status observe_together(std::span<DsparkDrafter* const> group,
                                 std::span<const Observation> observations);
  static Status propose_together(std::span<DsparkDrafter* const> group,
                                 std::span<const int32_t> anchors, int gamma,
                                 std::span<std::vector<int32_t>> proposals);
  // Draft layer `layer`'s keys and values of each member's rows [first[i], first[i + 1])
  // of x, into its cache from row at[i] (reserved): for one member straight there; for
  // several, each product once over every row, then copied to the caches in one call.
  static void write_kv(const KernelContext& ctx, std::span<DsparkDrafter* const> group,
                       size_t layer, const Tensor& x, std::span<const int64_t> first,
                       std::span<const int64_t> at);
  // `blocks` block pass inputs but their anchors, one after another: [blocks * (gamma + 1),
  // H], each block's rows 1..gamma the mask embedding, where the weights are.
  Tensor block_template(int gamma, int64_t blocks);
  // Grows every draft layer's key and value rows to hold at least `rows`, keeping the
  // observed ones (capacity doubles, so appends copy nothing most of the time).
  void reserve_rows(int64_t rows);
  ModelConfig config_;
  Departure departure_;
  int64_t request_ = 0;
  int64_t position_ = 0;  // verified positions observed: the next anchor's position
  const Tensor* embed_ = nullptr;
  const Tensor* lm_head_ = nullptr;
  Tensor ctx_proj_;  // [n*H, H]
  const Tensor *ctx_norm_ = nullptr, *mask_ = nullptr, *norm_ = nullptr, *w1_ = nullptr,
               *w2_ = nullptr;
  // block_template's rows (remade for another gamma or more blocks).
  Tensor block_template_;
  int block_gamma_ = -1;
  struct Layer {
    const Tensor *input_norm, *q, *k, *v, *o;
    // The draft cache: [capacity, H] each, where the weights are; rows [0, position_) the
    // observed positions', rows after them a proposal's block while it runs.
    Tensor keys, values;
  };
  std::vector<Layer> layers_;
  int n_taps_ = 0;
};

}  // namespace splitcheck
