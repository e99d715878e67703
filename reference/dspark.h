// DSpark-lite (SPEC 3.1), the parts built so far: its checkpoint tensors (`drafter.*`)
// and the low-rank Markov head. Layout choice: drafter linear weights are [out, in], so
// every projection runs through the registry's lm_head (matmul_nt) kernel at site draft.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"
#include "reference/config.h"
#include "reference/weights.h"

namespace splitcheck {

// The Markov head's rank r (W1, W2 are [V, r]).
inline constexpr int kDsparkMarkovRank = 32;
// The number of draft layers of the block pass.
inline constexpr int kDsparkLayers = 2;

// The drafter's own tensors for `method` ("dspark"; empty for any other method) consuming
// `n_taps` taps: drafter.ctx_proj.weight [H, n_taps*H], drafter.ctx_norm.weight [H],
// drafter.mask_embedding [H], per draft layer j drafter.layers.j.{input_norm [H],
// q_proj, k_proj, v_proj, o_proj [H, H]}, drafter.norm.weight [H],
// drafter.markov.w1 / w2 [V, r]. The embedding and lm_head are the target's (shared).
std::vector<TensorSpec> drafter_tensor_specs(const ModelConfig& config, const std::string& method,
                                             int n_taps);

// The Markov head: x_0 = anchor, x_k = argmax_v(U[k-1, v] + W1[x_{k-1}] · W2[v]) for
// k = 1..gamma, lowest index on ties. U float32 [gamma, V] (the block pass's logits of the
// mask positions), W1/W2 bf16 [V, r]. The bias row runs through the lm_head kernel
// (float32), the sum is float32, the pick is the argmax kernel.
std::vector<int32_t> markov_head(const KernelContext& ctx, const Tensor& u, const Tensor& w1,
                                 const Tensor& w2, int32_t anchor);

}  // namespace splitcheck
