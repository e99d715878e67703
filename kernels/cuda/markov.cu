// The DSpark Markov head's chains on the GPU (MarkovChainArgs, kernels/ops.h): one launch
// a step for every chain (a grid row each), each reading the token its step before wrote,
// so the chains run without a host wait and their tokens are read once at the end.
#include <cstdint>
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace splitcheck::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // one score a warp

// The two best (score, index) of a set: higher score first, then the lower index; an
// index below 0 is no entry (a NaN score never enters). Over distinct indices the order is
// total, so merging sets in any grouping gives the same pair.
struct Top2 {
  float v1, v2;
  int32_t i1, i2;
};

__device__ __forceinline__ bool ahead(float av, int32_t ai, float bv, int32_t bi) {
  return ai >= 0 && (bi < 0 || av > bv || (av == bv && ai < bi));
}

__device__ __forceinline__ void offer(Top2& t, float v, int32_t i) {
  if (ahead(v, i, t.v1, t.i1)) {
    t.v2 = t.v1;
    t.i2 = t.i1;
    t.v1 = v;
    t.i1 = i;
  } else if (ahead(v, i, t.v2, t.i2)) {
    t.v2 = v;
    t.i2 = i;
  }
}

// Step k of chain c = blockIdx.y: warp w of block b scores row j = b * kRowsPerBlock + w,
// s_j = u[j] + W1[prev] · W2[j] (each lane sums its columns in ascending order, then the
// lanes by halving shuffles); each block keeps its two best in the chain's partial[b], and
// the chain's last block to finish merges them all and writes the step's token (the second
// best where the step departs). A chain's row of `chain` holds its anchor, then its tokens:
// prev is chain[k], the token written chain[k + 1]; departs[k] of the chain's row.
__global__ void markov_step_kernel(const float* u, const uint16_t* w1, const uint16_t* w2,
                                   int64_t v, int64_t r, int64_t gamma, int64_t k,
                                   int32_t* chains, const int32_t* departs, Top2* partials,
                                   unsigned* counters) {
  const int64_t c = blockIdx.y;
  u += (c * gamma + k) * v;
  int32_t* chain = chains + c * (gamma + 1);
  Top2* partial = partials + c * gridDim.x;
  unsigned* counter = counters + c;
  __shared__ Top2 merged[kThreads];
  __shared__ bool last;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t prev = chain[k];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  float dot = 0.0f;
  if (j < v) {
    for (int64_t d = lane; d < r; d += 32)
      dot += bf_to_f(w1[prev * r + d]) * bf_to_f(w2[j * r + d]);
  }
  for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  Top2 mine{0.0f, 0.0f, -1, -1};
  if (lane == 0 && j < v) {
    const float s = u[j] + dot;
    if (!isnan(s)) offer(mine, s, static_cast<int32_t>(j));
  }
  merged[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    Top2 t{0.0f, 0.0f, -1, -1};
    for (int w = 0; w < kRowsPerBlock; ++w) offer(t, merged[w * 32].v1, merged[w * 32].i1);
    partial[blockIdx.x] = t;
    __threadfence();
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  // The last block: every block's pair, a thread's share in order, then a halving tree.
  Top2 t{0.0f, 0.0f, -1, -1};
  for (unsigned b = threadIdx.x; b < gridDim.x; b += kThreads) {
    const volatile Top2& p = partial[b];  // other blocks' writes: not through L1
    offer(t, p.v1, p.i1);
    offer(t, p.v2, p.i2);
  }
  merged[threadIdx.x] = t;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      Top2 a = merged[threadIdx.x];
      const Top2 b = merged[threadIdx.x + half];
      offer(a, b.v1, b.i1);
      offer(a, b.v2, b.i2);
      merged[threadIdx.x] = a;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const Top2 best = merged[0];
    const int32_t first = best.i1 < 0 ? 0 : best.i1;
    chain[k + 1] = departs[c * gamma + k] != 0 && best.i2 >= 0 ? best.i2 : first;
    *counter = 0;  // re-armed for the next launch on this stream
  }
}

}  // namespace

void markov_chain(MarkovChainArgs& a) {
  Staging s;
  const int64_t chains = a.chains(), gamma = a.gamma(), v = a.u->dim(1), r = a.w1->dim(1);
  a.tokens->assign(static_cast<size_t>(chains * gamma), 0);
  if (chains == 0 || gamma == 0) return;
  if (chains > kTileCounters || chains > 65535)
    throw std::invalid_argument("markov_chain: too many chains for one launch");
  // Uploaded at once: each chain's row (its anchor, then room for its tokens), then the
  // departures, a flag a step.
  const int64_t row = gamma + 1;
  std::vector<int32_t> host(static_cast<size_t>(chains * (row + gamma)), 0);
  for (int64_t c = 0; c < chains; ++c) {
    host[static_cast<size_t>(c * row)] = a.anchors[static_cast<size_t>(c)];
    for (int64_t k = 0; k < gamma; ++k)
      host[static_cast<size_t>(chains * row + c * gamma + k)] = a.departs_at(c * gamma + k);
  }
  auto* chain = s.scratch<int32_t>(chains * (row + gamma));
  SPLITCHECK_CUDA_CHECK(cudaMemcpyAsync(chain, host.data(), host.size() * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, stream()));
  const auto* u = as<float>(s.in(a.u));
  const auto* w1 = as<uint16_t>(s.in(a.w1));
  const auto* w2 = as<uint16_t>(s.in(a.w2));
  const int64_t blocks = (v + kRowsPerBlock - 1) / kRowsPerBlock;
  auto* partial = s.scratch<Top2>(blocks * chains);
  unsigned* counters = tile_counters(stream());
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(chains));
  for (int64_t k = 0; k < gamma; ++k) {
    markov_step_kernel<<<grid, kThreads, 0, stream()>>>(u, w1, w2, v, r, gamma, k, chain,
                                                       chain + chains * row, partial, counters);
  }
  std::vector<int32_t> rows(static_cast<size_t>(chains * row));
  s.copy_back(rows.data(), chain, rows.size() * sizeof(int32_t));
  s.done();
  for (int64_t c = 0; c < chains; ++c)
    std::copy_n(rows.begin() + c * row + 1, gamma, a.tokens->begin() + c * gamma);
}

}  // namespace splitcheck::cuda
