// The CUDA implementations named by the kernel registry (kernels/dispatch.cc): one per
// CPU function of kernels/cpu/cpu_kernels.h, same arguments. Each accepts tensors on
// either device (host tensors are staged through device buffers). A call whose outputs
// are in device memory returns with its kernels queued on the backend's stream; one with
// an output on the host (or MoE, which routes on the host) has finished when it returns. Float32 orders are the GPU's own (block reductions, cuBLASLt), fixed per shape:
// run to run and split to split the bits are the same; against the CPU they are close,
// not equal (the approximate lane).
#pragma once

#include "kernels/ops.h"

namespace splitcheck::cuda {

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

}  // namespace splitcheck::cuda
