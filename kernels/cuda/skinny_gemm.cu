// Products of a few rows (a decode, a verify block, a short chunk) by bf16 weights: each
// weight is read once, 16 bytes a lane, by enough blocks to keep the memory busy, so the
// product runs near the device's copy bandwidth where cuBLASLt's general kernels do not.
// One launch may multiply several weights (grid z): the same rows by each of G weights
// (KDA's projections), or each routed token by the experts it picked, every expert's
// weight read once for all its tokens (the MoE), with no host wait for the picks.
//
// The order of every sum is fixed by (k, n) alone, never by the row count, the rows that
// share a launch, or the tile a launch uses: k is cut into chunks of kc rows (kc from k
// and n); in a chunk, warp w (of 8) sums rows chunk + w, chunk + w + 8, ... ascending; the
// 8 warp sums are added in warp order; the chunk sums are added in chunk order. So a row
// of C has the same bits in a product of 1 row as in one of 16, alone or routed.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>
#include <stdexcept>

#include "kernels/cuda/common.cuh"

namespace splitcheck::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kNominalTile = 256;  // columns per block in the choice of kc (8 per lane)
constexpr int64_t kMaxChunk = 512;
constexpr int64_t kMaxChunks = 64;

// Rows of k per chunk: enough chunks for about eight blocks per multiprocessor of an H200
// at the nominal tile, at most kMaxChunks of them (their sum is sequential), a multiple of
// 32 rows, at most kMaxChunk.
int64_t chunk_rows(int64_t n, int64_t k) {
  const int64_t tiles = (n + kNominalTile - 1) / kNominalTile;
  const int64_t chunks = std::clamp<int64_t>(1056 / tiles, 1, kMaxChunks);
  const int64_t kc = ((k + chunks - 1) / chunks + 31) / 32 * 32;
  return std::clamp<int64_t>(kc, 32, kMaxChunk);
}

// The weights of one launch, by grid z.
template <int G>
struct Weights {
  const uint16_t* w[G] = {};
};

// One (column tile, chunk, weight g) per block. The block's rows: without `pick`, every
// row r < rows of A (output row g * rows + r); with it, every slot s < rows that picked g
// (A row s / a_div, output row s), at most M of them. partial[chunk][out row][c] = the
// chunk's sum over kk of a[a row][kk] * w_g[kk][c], for c in the tile's CPT * 32 columns.
template <int M, int CPT, int G>
__global__ void __launch_bounds__(kThreads)
    grouped_kernel(const uint16_t* __restrict__ a, Weights<G> weights,
                   const int32_t* __restrict__ pick, int a_div, int rows, int64_t out_rows,
                   float* __restrict__ partial, int64_t n, int64_t k, int64_t kc,
                   bool vector_loads) {
  __shared__ float a_chunk[M * kMaxChunk];
  __shared__ float sums[M * CPT * 32];
  __shared__ int a_row[M], out_row[M];
  __shared__ int count;
  const int g = blockIdx.z;
  const int64_t chunk = blockIdx.y, tile = blockIdx.x;
  if (threadIdx.x == 0) {
    int c = 0;
    for (int s = 0; s < rows && c < M; ++s) {
      if (pick == nullptr) {
        a_row[c] = s;
        out_row[c++] = g * rows + s;
      } else if (pick[s] == g) {
        a_row[c] = s / a_div;
        out_row[c++] = s;
      }
    }
    count = c;
  }
  __syncthreads();
  const int m = count;
  if (m == 0) return;  // no token picked this expert: the whole block leaves
  const uint16_t* b = weights.w[g];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k0 = chunk * kc, k1 = k0 + kc < k ? k0 + kc : k;
  for (int64_t i = threadIdx.x; i < M * kc; i += kThreads) {
    const int r = static_cast<int>(i / kc);
    const int64_t kk = k0 + i % kc;
    a_chunk[i] = (r < m && kk < k1) ? bf_to_f(a[a_row[r] * k + kk]) : 0.0f;
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
    if (r < m && c < n) partial[(chunk * out_rows + out_row[r]) * n + c] = sums[i];
  }
}

// c[i] = the chunk sums of element i in chunk order (loads unrolled, adds in order);
// rounded to bf16 into c_bf16 when given.
__global__ void sum_chunks_kernel(const float* __restrict__ partial, int64_t chunks, int64_t mn,
                                  float* __restrict__ c, uint16_t* __restrict__ c_bf16) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= mn) return;
  float s = partial[i];
#pragma unroll 16
  for (int64_t j = 1; j < chunks; ++j) s = __fadd_rn(s, partial[j * mn + i]);
  if (c != nullptr) c[i] = s;
  if (c_bf16 != nullptr) c_bf16[i] = f_to_bf(s);
}

// One grouped launch and its chunk sums: C [out_rows, n] (float and/or bf16). `max_rows`:
// the most rows any weight takes (the template's M).
template <int G>
void grouped(const uint16_t* a, const Weights<G>& weights, int groups, const int32_t* pick,
             int a_div, int64_t rows, int64_t out_rows, int64_t max_rows, float* c,
             uint16_t* c_bf16, int64_t n, int64_t k) {
  if (out_rows == 0 || n == 0) return;
  if (max_rows > kSkinnyMaxRows)
    throw std::logic_error("a skinny product of more than kSkinnyMaxRows rows per weight");
  const int64_t kc = chunk_rows(n, k);
  const int64_t chunks = std::max<int64_t>(1, (k + kc - 1) / kc);
  float* partial = nullptr;
  const size_t bytes = static_cast<size_t>(chunks * out_rows * n) * sizeof(float);
  SPLITCHECK_CUDA_CHECK(cudaMallocAsync(&partial, bytes, stream()));
  // Every partial is written by a block (routed: a slot's row by its expert's blocks, each
  // pick one of the experts), except when k == 0 and every sum is empty.
  if (k == 0) SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(partial, 0, bytes, stream()));
  if (k > 0) {
    const int cpt = max_rows <= 8 ? 8 : 4;
    bool vec = n % cpt == 0;
    for (int g = 0; g < groups; ++g)
      vec = vec && reinterpret_cast<uintptr_t>(weights.w[g]) % (2 * cpt) == 0;
    const dim3 grid(static_cast<unsigned>((n + 32 * cpt - 1) / (32 * cpt)),
                    static_cast<unsigned>(chunks), static_cast<unsigned>(groups));
    const int r = static_cast<int>(rows);
    auto go = [&](auto kernel) {
      kernel<<<grid, kThreads, 0, stream()>>>(a, weights, pick, a_div, r, out_rows, partial, n, k,
                                              kc, vec);
    };
    if (max_rows <= 1) go(grouped_kernel<1, 8, G>);
    else if (max_rows <= 2) go(grouped_kernel<2, 8, G>);
    else if (max_rows <= 4) go(grouped_kernel<4, 8, G>);
    else if (max_rows <= 8) go(grouped_kernel<8, 8, G>);
    else go(grouped_kernel<kSkinnyMaxRows, 4, G>);
  }
  const int64_t mn = out_rows * n;
  sum_chunks_kernel<<<blocks_for(mn, 256), 256, 0, stream()>>>(partial, chunks, mn, c, c_bf16);
  SPLITCHECK_CUDA_CHECK(cudaFreeAsync(partial, stream()));
}

}  // namespace

void skinny_gemm(const uint16_t* a, const uint16_t* b, float* c, uint16_t* c_bf16, int64_t m,
                 int64_t n, int64_t k) {
  Weights<1> w;
  w.w[0] = b;
  grouped(a, w, 1, nullptr, 1, m, m, m, c, c_bf16, n, k);
}

void multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                uint16_t* c_bf16, int64_t m, int64_t n, int64_t k) {
  Weights<kMultiMax> w;
  if (bs.size() > static_cast<size_t>(kMultiMax))
    throw std::logic_error("multi_gemm: more than kMultiMax weights");
  std::copy(bs.begin(), bs.end(), w.w);
  const auto g = static_cast<int64_t>(bs.size());
  grouped(a, w, static_cast<int>(g), nullptr, 1, m, g * m, m, c, c_bf16, n, k);
}

void routed_gemm(const uint16_t* a, int a_div, const int32_t* pick, const WeightTable& table,
                 int n_weights, int64_t max_rows, float* c, uint16_t* c_bf16, int64_t slots,
                 int64_t n, int64_t k) {
  Weights<256> w;
  std::copy(std::begin(table.w), std::end(table.w), w.w);
  grouped(a, w, n_weights, pick, a_div, slots, slots, max_rows, c, c_bf16, n, k);
}

}  // namespace splitcheck::cuda
