// Products of a few rows (a decode, a verify block, a short chunk) by a bf16 weight: the
// weight is read once, 16 bytes a lane, by enough blocks to keep the memory busy, so the
// product runs near the device's copy bandwidth where cuBLASLt's general kernels do not.
//
// The order of every sum is fixed by (k, n) alone, never by the row count m or the tile
// a launch uses: k is cut into chunks of kc rows (kc from k and n); in a chunk, warp w
// (of 8) sums rows chunk + w, chunk + w + 8, ... ascending; the 8 warp sums are added in
// warp order; the chunk sums are added in chunk order. So a row of C has the same bits in
// a product of 1 row as in one of 16, and the MoE may run each routed token alone
// (mlp.cu) with the bits a grouped product would give on this path.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/common.cuh"

namespace splitcheck::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kNominalTile = 256;  // columns per block in the choice of kc (8 per lane)
constexpr int64_t kMaxChunk = 512;

// Rows of k per chunk: enough chunks for about eight blocks per multiprocessor of an H200
// at the nominal tile, a multiple of the warp count, at most kMaxChunk.
int64_t chunk_rows(int64_t n, int64_t k) {
  const int64_t tiles = (n + kNominalTile - 1) / kNominalTile;
  const int64_t chunks = std::max<int64_t>(1, 1056 / tiles);
  const int64_t kc = ((k + chunks - 1) / chunks + 31) / 32 * 32;
  return std::clamp<int64_t>(kc, 32, kMaxChunk);
}

// One (column tile, chunk) of a product: out[r][c] = sum over the chunk's rows kk of
// a[r][kk] * b[kk][c], for r < m (padded to M) and c in the tile's CPT * 32 columns; `out`
// has rows of n.
template <int M, int CPT>
__device__ __forceinline__ void skinny_tile(const uint16_t* __restrict__ a,
                                            const uint16_t* __restrict__ b,
                                            float* __restrict__ out, int m, int64_t n, int64_t k,
                                            int64_t kc, bool vector_loads, int64_t chunk,
                                            int64_t tile) {
  __shared__ float a_chunk[M * kMaxChunk];
  __shared__ float sums[M * CPT * 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k0 = chunk * kc, k1 = k0 + kc < k ? k0 + kc : k;
  for (int64_t i = threadIdx.x; i < M * kc; i += kThreads) {
    const int r = static_cast<int>(i / kc);
    const int64_t kk = k0 + i % kc;
    a_chunk[i] = (r < m && kk < k1) ? bf_to_f(a[r * k + kk]) : 0.0f;
  }
  __syncthreads();

  const int64_t col0 = (tile * 32 + lane) * CPT;
  float acc[M][CPT];
#pragma unroll
  for (int r = 0; r < M; ++r)
#pragma unroll
    for (int c = 0; c < CPT; ++c) acc[r][c] = 0.0f;

  if (col0 < n) {
#pragma unroll 4
    for (int64_t kk = k0 + warp; kk < k1; kk += kWarps) {
      float w[CPT];
      const uint16_t* row = b + kk * n + col0;
      if (vector_loads) {
        if constexpr (CPT == 8) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(row));
          const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            w[2 * c] = __uint_as_float(words[c] << 16);
            w[2 * c + 1] = __uint_as_float(words[c] & 0xffff0000u);
          }
        } else {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(row));
          const uint32_t words[2] = {v.x, v.y};
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            w[2 * c] = __uint_as_float(words[c] << 16);
            w[2 * c + 1] = __uint_as_float(words[c] & 0xffff0000u);
          }
        }
      } else {
#pragma unroll
        for (int c = 0; c < CPT; ++c) w[c] = col0 + c < n ? bf_to_f(row[c]) : 0.0f;
      }
      const int64_t i = kk - k0;
#pragma unroll
      for (int r = 0; r < M; ++r) {
        const float x = a_chunk[r * kc + i];
#pragma unroll
        for (int c = 0; c < CPT; ++c) acc[r][c] = __fadd_rn(acc[r][c], __fmul_rn(x, w[c]));
      }
    }
  }

  // The warp sums in warp order: warp 0 stores, then each next warp adds its own.
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int r = 0; r < M; ++r)
#pragma unroll
        for (int c = 0; c < CPT; ++c) {
          float& s = sums[(r * 32 + lane) * CPT + c];
          s = w == 0 ? acc[r][c] : __fadd_rn(s, acc[r][c]);
        }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < M * 32 * CPT; i += kThreads) {
    const int r = i / (32 * CPT);
    const int64_t c = tile * 32 * CPT + i % (32 * CPT);
    if (r < m && c < n) out[r * n + c] = sums[i];
  }
}

// partial[chunk][r][c]: blockIdx.x the column tile, blockIdx.y the chunk.
template <int M, int CPT>
__global__ void __launch_bounds__(kThreads)
    skinny_kernel(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b,
                  float* __restrict__ partial, int m, int64_t n, int64_t k, int64_t kc,
                  bool vector_loads) {
  const int64_t chunk = blockIdx.y;
  skinny_tile<M, CPT>(a, b, partial + chunk * m * n, m, n, k, kc, vector_loads, chunk,
                      blockIdx.x);
}

// One row per slot (blockIdx.z): partial[chunk][slot][c] = a[slot / a_div] times the
// weight table.w[pick[slot]].
__global__ void __launch_bounds__(kThreads)
    routed_kernel(const uint16_t* __restrict__ a, int a_div, const int32_t* __restrict__ pick,
                  WeightTable table, float* __restrict__ partial, int64_t n, int64_t k,
                  int64_t kc, bool vector_loads) {
  const int64_t slot = blockIdx.z, slots = gridDim.z, chunk = blockIdx.y;
  skinny_tile<1, 8>(a + (slot / a_div) * k, table.w[pick[slot]],
                    partial + (chunk * slots + slot) * n, 1, n, k, kc, vector_loads, chunk,
                    blockIdx.x);
}

// c[r][col] = the chunk sums in chunk order; rounded to bf16 into c_bf16 when given.
__global__ void sum_chunks_kernel(const float* __restrict__ partial, int64_t chunks, int64_t mn,
                                  float* __restrict__ c, uint16_t* __restrict__ c_bf16) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= mn) return;
  float s = partial[i];
  for (int64_t j = 1; j < chunks; ++j) s = __fadd_rn(s, partial[j * mn + i]);
  if (c != nullptr) c[i] = s;
  if (c_bf16 != nullptr) c_bf16[i] = f_to_bf(s);
}

template <int M, int CPT>
void launch(const uint16_t* a, const uint16_t* b, float* partial, int m, int64_t n, int64_t k,
            int64_t kc, int64_t chunks, bool vector_loads) {
  const dim3 grid(static_cast<unsigned>((n + 32 * CPT - 1) / (32 * CPT)),
                  static_cast<unsigned>(chunks));
  skinny_kernel<M, CPT><<<grid, kThreads, 0, stream()>>>(a, b, partial, m, n, k, kc,
                                                          vector_loads);
}

float* partial_buffer(int64_t chunks, int64_t rows, int64_t n) {
  float* partial = nullptr;
  SPLITCHECK_CUDA_CHECK(cudaMallocAsync(
      &partial, static_cast<size_t>(chunks * rows * n) * sizeof(float), stream()));
  return partial;
}

void sum_chunks(float* partial, int64_t chunks, int64_t mn, float* c, uint16_t* c_bf16) {
  sum_chunks_kernel<<<blocks_for(mn, 256), 256, 0, stream()>>>(partial, chunks, mn, c, c_bf16);
  SPLITCHECK_CUDA_CHECK(cudaFreeAsync(partial, stream()));
}

}  // namespace

void skinny_gemm(const uint16_t* a, const uint16_t* b, float* c, uint16_t* c_bf16, int64_t m,
                 int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  const int64_t kc = chunk_rows(n, k);
  const int64_t chunks = std::max<int64_t>(1, (k + kc - 1) / kc);
  float* partial = partial_buffer(chunks, m, n);
  const int mi = static_cast<int>(m);
  if (k == 0) {
    SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(
        partial, 0, static_cast<size_t>(chunks * m * n) * sizeof(float), stream()));
  } else if (m <= 8) {
    const bool vec = n % 8 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
    if (m == 1) launch<1, 8>(a, b, partial, mi, n, k, kc, chunks, vec);
    else if (m == 2) launch<2, 8>(a, b, partial, mi, n, k, kc, chunks, vec);
    else if (m <= 4) launch<4, 8>(a, b, partial, mi, n, k, kc, chunks, vec);
    else launch<8, 8>(a, b, partial, mi, n, k, kc, chunks, vec);
  } else {
    const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(b) % 8 == 0;
    launch<kSkinnyMaxRows, 4>(a, b, partial, mi, n, k, kc, chunks, vec);
  }
  sum_chunks(partial, chunks, m * n, c, c_bf16);
}

void routed_gemm(const uint16_t* a, int a_div, const int32_t* pick, const WeightTable& table,
                 float* c, uint16_t* c_bf16, int64_t slots, int64_t n, int64_t k) {
  if (slots == 0 || n == 0) return;
  if (k == 0) throw std::logic_error("routed_gemm: an empty inner dimension");
  const int64_t kc = chunk_rows(n, k);
  const int64_t chunks = (k + kc - 1) / kc;
  float* partial = partial_buffer(chunks, slots, n);
  bool vec = n % 8 == 0;
  for (const uint16_t* w : table.w) vec = vec && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const dim3 grid(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(chunks),
                  static_cast<unsigned>(slots));
  routed_kernel<<<grid, kThreads, 0, stream()>>>(a, a_div, pick, table, partial, n, k, kc, vec);
  sum_chunks(partial, chunks, slots * n, c, c_bf16);
}

}  // namespace splitcheck::cuda
