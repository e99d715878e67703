// Embedding gather, RMSNorm, the output head and argmax on the GPU.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace splitcheck::cuda {
namespace {

__global__ void embed_kernel(const int32_t* ids, const uint16_t* table, int64_t v, int64_t h,
                             uint16_t* out) {
  const int64_t t = blockIdx.x;
  int32_t id = ids[t];
  if (id < 0 || id >= v) id = 0;  // callers validate ids; never read out of bounds
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) out[t * h + c] = table[id * h + c];
}

// One block per row: the sum of squares by halving shuffles, then x * r * w.
__global__ void rms_norm_kernel(const uint16_t* x, const uint16_t* w, int64_t h, float eps,
                                uint16_t* out) {
  __shared__ float red[33];
  const int64_t t = blockIdx.x;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
    const float v = bf_to_f(x[t * h + c]);
    ss += v * v;
  }
  ss = block_sum_halving(ss, red);
  const float r = drsqrt(ss / static_cast<float>(h) + eps);
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
    out[t * h + c] = f_to_bf(bf_to_f(x[t * h + c]) * r * bf_to_f(w[c]));
}

// One block per row: each thread keeps its best (value, lowest index), NaN never wins;
// then the block's best by a fixed tree with ties to the lower index.
__global__ void argmax_kernel(const float* logits, int64_t v, int32_t* tokens) {
  __shared__ float best_v[256];
  __shared__ int64_t best_i[256];
  const int64_t t = blockIdx.x;
  float bv = 0.0f;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float x = logits[t * v + i];
    if (isnan(x)) continue;
    if (bi < 0 || x > bv) {
      bv = x;
      bi = i;
    }
  }
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      const float ov = best_v[threadIdx.x + half];
      const int64_t oi = best_i[threadIdx.x + half];
      const int64_t mi = best_i[threadIdx.x];
      const float mv = best_v[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > mv || (ov == mv && oi < mi))) {
        best_v[threadIdx.x] = ov;
        best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) tokens[t] = static_cast<int32_t>(best_i[0] < 0 ? 0 : best_i[0]);
}

}  // namespace

void rms_rows(const uint16_t* x, const uint16_t* w, int64_t rows, int64_t h, float eps,
              uint16_t* out) {
  if (rows > 0)
    rms_norm_kernel<<<static_cast<unsigned>(rows), 256, 0, stream()>>>(x, w, h, eps, out);
}

void embed(EmbedArgs& a) {
  Staging s;
  const int64_t t_count = a.ids->dim(0), h = a.table->dim(1), v = a.table->dim(0);
  const auto* ids = as<int32_t>(s.in(a.ids));
  const auto* table = as<uint16_t>(s.in(a.table));
  auto* out = static_cast<uint16_t*>(s.inout(a.out));
  if (t_count > 0)
    embed_kernel<<<static_cast<unsigned>(t_count), 256, 0, stream()>>>(ids, table, v, h, out);
  s.done();
}

void rms_norm(RmsNormArgs& a) {
  Staging s;
  const int64_t t_count = a.x->dim(0), h = a.x->dim(1);
  const auto* x = as<uint16_t>(s.in(a.x));
  const auto* w = as<uint16_t>(s.in(a.weight));
  auto* out = static_cast<uint16_t*>(s.inout(a.out));
  rms_rows(x, w, t_count, h, a.eps, out);
  s.done();
}

void lm_head(LmHeadArgs& a) {
  Staging s;
  const int64_t t_count = a.x->dim(0), h = a.x->dim(1), v = a.lm_head->dim(0);
  gemm(as<uint16_t>(s.in(a.x)), as<uint16_t>(s.in(a.lm_head)),
       static_cast<float*>(s.inout(a.logits)), t_count, v, h, /*b_nk=*/true);
  s.done();
}

void argmax(ArgmaxArgs& a) {
  Staging s;
  const int64_t t_count = a.logits->dim(0), v = a.logits->dim(1);
  const auto* logits = as<float>(s.in(a.logits));
  auto* tokens = static_cast<int32_t*>(s.inout(a.tokens));
  if (t_count > 0)
    argmax_kernel<<<static_cast<unsigned>(t_count), 256, 0, stream()>>>(logits, v, tokens);
  s.done();
}

}  // namespace splitcheck::cuda
