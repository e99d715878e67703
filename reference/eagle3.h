// EAGLE-3-lite (SPEC 3.2): the feature consumer. It fuses three taps with W_fc and runs
// one decoder layer autoregressively from the anchor, with its own small head.
//
//   fused feature  f = bf16(concat(taps) W_fc) per verified position, W_fc [3H, H]
//   draft cache    per verified position K = bf16(n W_k), V = bf16(n W_v),
//                  n = rmsnorm(f, input_norm)
//   one step       x = bf16(embed(prev) + feature)
//                  n = rmsnorm(x, input_norm); q/k/v = n W_{q,k,v}
//                  a = dense_attention(q, cache ∪ this proposal's earlier steps ∪ k/v)
//                  h1 = bf16(x + a W_o); h2 = bf16(h1 + dense_mlp(rmsnorm(h1, post_norm)))
//                  logits = lm_head(rmsnorm(h2, norm), drafter.eagle3.lm_head), x_k = argmax
//   feature        the fused feature of the last verified position for the first step,
//                  afterwards the layer's own output as it writes it to the residual
//                  stream, bf16(h2 - x) (its attention and MLP writes). Choice: feeding h2
//                  whole would add the previous token's embedding to the next input; the
//                  written part keeps the step input embedding-dominated.
//
// Choices (SPEC leaves them open): the embedding is the target's (DrafterBinding, shared
// as the real EAGLE-3 does); the head is the drafter's own tensor. Without training its
// weights are derived, as DSpark's Markov factors are: lm_head holds the target's
// lm_head values (WeightInit::kMarkovW2) and the final norm the target's norm.weight
// (kMarkovW1 of shape [H]), W_fc has gain 0.05 and the layer's residual writes (o_proj,
// down_proj) gain 0.05, so the drafter approximates the target's successor choice
// (lm_head is successor-tied, reference/weights.h) and acceptance is meaningful
// (SPEC 3.3). It departs at the scenario's seeded rate like DSpark-lite (Departure). Layouts follow
// the target: linear weights [in, out], the head [V, H]. The MLP is a dense SwiGLU of the target's
// intermediate size.
#pragma once

#include <memory>
#include <vector>

#include "reference/dspark.h"

namespace splitcheck {

// The number of taps EAGLE-3 fuses.
inline constexpr int kEagle3Taps = 3;

// The EAGLE-3-lite tensors, all named drafter.eagle3.*: fc.weight [3H, H],
// input_norm.weight, {q,k,v,o}_proj.weight [H, H], post_norm.weight,
// mlp.{gate,up}_proj.weight [H, I], mlp.down_proj.weight [I, H], norm.weight [H],
// lm_head.weight [V, H].
std::vector<TensorSpec> eagle3_tensor_specs(const ModelConfig& config);

// EAGLE-3-lite as the verify loop sees it.
class Eagle3Drafter : public Drafter {
 public:
  // `own` holds the drafter.eagle3.* tensors; `binding` the shared embedding.
  static Result<std::unique_ptr<Eagle3Drafter>> create(const ModelConfig& config,
                                                       const WeightStore& own,
                                                       const DrafterBinding& binding);
  void reset(int64_t request) override;
  Status observe(const std::vector<int32_t>& ids, const Tensor& taps) override;
  Result<std::vector<int32_t>> propose(int32_t anchor, int gamma) override;
  // The controlled departures (SPEC 3.3); none until set.
  void set_departure(const Departure& departure) { departure_ = departure; }

 private:
  Eagle3Drafter() = default;
  ModelConfig config_;
  Departure departure_;
  int64_t request_ = 0;
  int64_t position_ = 0;  // verified positions observed: the next anchor's position
  const Tensor* embed_ = nullptr;
  const Tensor *fc_ = nullptr, *input_norm_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr,
               *o_ = nullptr, *post_norm_ = nullptr, *gate_ = nullptr, *up_ = nullptr,
               *down_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<bf16> cache_k_, cache_v_;  // [n, H] each
  std::vector<bf16> last_feature_;       // [H]: the fused feature of the last position
};

}  // namespace splitcheck
