// The CPU implementations named by the kernel registry (kernels/dispatch.cc).
#pragma once

#include "kernels/ops.h"

namespace splitcheck::cpu {

void attn_res_native(AttnResArgs& args);
void attn_res_fallback(AttnResArgs& args);
void embed(EmbedArgs& args);
void rms_norm(RmsNormArgs& args);
void lm_head(LmHeadArgs& args);
void argmax(ArgmaxArgs& args);
void mla_attention(MlaArgs& args);
void kda_attention(KdaArgs& args);
void dense_mlp(DenseMlpArgs& args);
void moe(MoeArgs& args);
void linear(LinearArgs& args);
void dense_attention(DenseAttentionArgs& args);
void markov_chain(MarkovChainArgs& args);

// One SwiGLU expert on rows of x (float32 [T,H]) -> out float32 [T,H], values bf16-exact.
void swiglu_rows(const float* x, int64_t rows, int64_t h, const SwiGluWeights& w, float* out);

}  // namespace splitcheck::cpu
