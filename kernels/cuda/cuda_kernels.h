// The CUDA implementations named by the kernel registry (kernels/dispatch.cc): one per
// CPU function of kernels/cpu/cpu_kernels.h, same arguments. Each accepts tensors on
// either device (host tensors are staged through device buffers) and has finished when it
// returns. Float32 orders are the GPU's own (block reductions, cuBLASLt), fixed per shape:
// run to run and split to split the bits are the same; against the CPU they are close,
// not equal (the approximate lane).
#pragma once

#include "kernels/ops.h"

namespace splitcheck::cuda {

void attn_res_native(AttnResArgs& args);
// How the native attn_res kernel spreads tokens over blocks when H fits its register kernel
// (H up to 8192 at VEC 8, 1024 otherwise; kernels/cuda/attn_res.cu says more). Every
// schedule computes each token with the same threads, channel groups and float32 order,
// so the bits are the same; only the speed differs. tests/bench/cuda_benchmark.cc measures
// each, and CudaAttnResScheduleTest proves each equal to the production one.
enum class AttnResSchedule : int {
  kPerToken = 0,    // one block per token
  kPersistent = 1,  // one block per SM looping over tokens
  kPrefetch = 2,    // kPersistent, the next token's rows copied to shared memory meanwhile
};
// Every schedule, in order (for the benchmark and the test).
inline constexpr AttnResSchedule kAttnResSchedules[] = {
    AttnResSchedule::kPerToken, AttnResSchedule::kPersistent, AttnResSchedule::kPrefetch};
// The schedule attn_res_native (the registry's CUDA native variant) runs: THE switch.
inline constexpr AttnResSchedule kNativeAttnResSchedule = AttnResSchedule::kPerToken;
// "per_token", "persistent", "prefetch".
const char* attn_res_schedule_name(AttnResSchedule schedule);
// attn_res_native under a given schedule (the benchmark's and the test's candidates).
void attn_res_native_scheduled(AttnResArgs& args, AttnResSchedule schedule);
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

}  // namespace splitcheck::cuda
