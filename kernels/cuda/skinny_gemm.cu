// Products of a few rows (a decode, a verify block) by bf16 weights: each weight is read
// once, 16 bytes a lane, by enough blocks to keep the memory busy, and the chunk sums are
// added by the last block of each tile, so a product is one launch. One launch may
// multiply several weights (grid z): the same rows by each of G weights (KDA's and MLA's
// projections), or each routed token by the experts it picked, every expert's weight read
// once for all its tokens (the MoE), with no host wait for the picks.
//
// The order of every sum is fixed by (k, n) alone, never by the row count, the rows that
// share a launch, or the tile a launch uses: k is cut into chunks of kc rows (kc from k
// and n); in a chunk, warp w (of 8) accumulates rows chunk + w, chunk + w + 8, ...
// ascending by fused multiply-add (an explicit one: the compiler still contracts nothing);
// the 8 warp sums are added in warp order; the chunk sums are added in chunk order. So a
// row of C has the same bits in a product of 1 row as in one of 8, alone or routed.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
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

// The most rows one weight takes in a launch (routed: the slots that picked an expert).
constexpr int kMaxListRows = 16;

// One (column tile, chunk, weight g) per block, CPT = 8 columns a lane. The block's rows:
// without `pick`, every row r < rows of A (output row g * rows + r); with it, every slot
// s < rows that picked g (A row s / a_div, output row s), M at a time. For each,
// partial[chunk][out row][c] = the chunk's sum over kk of a[a row][kk] * w_g[kk][c] (a
// fused multiply-add per kk, ascending within a warp; warps added in order). The block
// that finishes its (tile, g) last adds the chunk sums in chunk order into c and/or c_bf16
// and re-arms the tile's counter (zero again for the next product on this stream).
template <int M, int G>
__global__ void __launch_bounds__(kThreads, M <= 2 ? 4 : 2)  // 4 blocks a multiprocessor for a decode
    grouped_kernel(const uint16_t* __restrict__ a, Weights<G> weights,
                   const int32_t* __restrict__ pick, int a_div, int rows, int64_t out_rows,
                   float* __restrict__ partial, unsigned* __restrict__ counters,
                   float* __restrict__ c, uint16_t* __restrict__ c_bf16, int64_t n, int64_t k,
                   int64_t kc, int64_t chunks, bool vector_loads) {
  constexpr int CPT = 8;
  __shared__ float a_chunk[M * kMaxChunk];
  __shared__ float sums[M * CPT * 32];
  __shared__ int a_row[kMaxListRows], out_row[kMaxListRows];
  __shared__ int count;
  __shared__ bool last;
  const int g = blockIdx.z;
  const int64_t chunk = blockIdx.y, tile = blockIdx.x;
  if (threadIdx.x == 0) {
    int n_rows = 0;
    for (int s = 0; s < rows && n_rows < kMaxListRows; ++s) {
      if (pick == nullptr) {
        a_row[n_rows] = s;
        out_row[n_rows++] = g * rows + s;
      } else if (pick[s] == g) {
        a_row[n_rows] = s / a_div;
        out_row[n_rows++] = s;
      }
    }
    count = n_rows;
  }
  __syncthreads();
  const int total = count;
  if (total == 0) return;  // no token picked this expert: the whole block leaves
  const uint16_t* b = weights.w[g];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k0 = chunk * kc, k1 = k0 + kc < k ? k0 + kc : k;
  const int64_t col0 = (tile * 32 + lane) * CPT;

  for (int base = 0; base < total; base += M) {
    const int m = total - base < M ? total - base : M;
    for (int64_t i = threadIdx.x; i < M * kc; i += kThreads) {
      const int r = static_cast<int>(i / kc);
      const int64_t kk = k0 + i % kc;
      a_chunk[i] = (r < m && kk < k1) ? bf_to_f(a[a_row[base + r] * k + kk]) : 0.0f;
    }
    __syncthreads();

    float acc[M][CPT];
#pragma unroll
    for (int r = 0; r < M; ++r)
#pragma unroll
      for (int j = 0; j < CPT; ++j) acc[r][j] = 0.0f;
    if (col0 < n) {
#pragma unroll 4
      for (int64_t kk = k0 + warp; kk < k1; kk += kWarps) {
        float w[CPT];
        const uint16_t* row = b + kk * n + col0;
        if (vector_loads) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(row));
          const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            w[2 * j] = __uint_as_float(words[j] << 16);
            w[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
          }
        } else {
#pragma unroll
          for (int j = 0; j < CPT; ++j) w[j] = col0 + j < n ? bf_to_f(row[j]) : 0.0f;
        }
        const int64_t i = kk - k0;
#pragma unroll
        for (int r = 0; r < M; ++r) {
          const float x = a_chunk[r * kc + i];
#pragma unroll
          for (int j = 0; j < CPT; ++j) acc[r][j] = __fmaf_rn(x, w[j], acc[r][j]);
        }
      }
    }
    // The warp sums in warp order: warp 0 stores, then each next warp adds its own.
    for (int w = 0; w < kWarps; ++w) {
      if (warp == w) {
#pragma unroll
        for (int r = 0; r < M; ++r)
#pragma unroll
          for (int j = 0; j < CPT; ++j) {
            float& sum = sums[(r * 32 + lane) * CPT + j];
            sum = w == 0 ? acc[r][j] : __fadd_rn(sum, acc[r][j]);
          }
      }
      __syncthreads();
    }
    for (int i = threadIdx.x; i < M * 32 * CPT; i += kThreads) {
      const int r = i / (32 * CPT);
      const int64_t col = tile * 32 * CPT + i % (32 * CPT);
      if (r < m && col < n) partial[(chunk * out_rows + out_row[base + r]) * n + col] = sums[i];
    }
    __syncthreads();
  }

  // The last block of this (tile, g) to finish adds the chunks: every thread's partials
  // are visible device-wide before the block takes its ticket.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = counters + static_cast<int64_t>(g) * gridDim.x + tile;
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(chunks - 1);
    if (last) *counter = 0u;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  constexpr int kBatch = 8;
  for (int i = threadIdx.x; i < total * 32 * CPT; i += kThreads) {
    const int r = i / (32 * CPT);
    const int64_t col = tile * 32 * CPT + i % (32 * CPT);
    if (col >= n) continue;
    const int64_t at = static_cast<int64_t>(out_row[r]) * n + col, stride = out_rows * n;
    float s = __ldcg(partial + at);
    for (int64_t ch = 1; ch < chunks; ch += kBatch) {
      float v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = ch + j < chunks ? __ldcg(partial + (ch + j) * stride + at) : 0.0f;
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (ch + j < chunks) s = __fadd_rn(s, v[j]);
    }
    if (c != nullptr) c[at] = s;
    if (c_bf16 != nullptr) c_bf16[at] = f_to_bf(s);
  }
}

// Zeroed tile counters of a stream's products (each product leaves them zero again).
constexpr int64_t kCounters = int64_t{1} << 16;
unsigned* counters_for(cudaStream_t s) {
  static std::mutex mu;
  static std::map<cudaStream_t, unsigned*> all;
  std::lock_guard<std::mutex> lock(mu);
  unsigned*& c = all[s];
  if (c == nullptr) {
    SPLITCHECK_CUDA_CHECK(cudaMalloc(&c, kCounters * sizeof(unsigned)));
    SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(c, 0, kCounters * sizeof(unsigned), s));
  }
  return c;
}

// One grouped launch: C [out_rows, n] (float and/or bf16). `max_rows`: the most rows any
// weight takes (the template's M, up to kSkinnyMaxRows; more pass M at a time).
template <int G>
void grouped(const uint16_t* a, const Weights<G>& weights, int groups, const int32_t* pick,
             int a_div, int64_t rows, int64_t out_rows, int64_t max_rows, float* c,
             uint16_t* c_bf16, int64_t n, int64_t k) {
  if (out_rows == 0 || n == 0) return;
  if (max_rows > kMaxListRows)
    throw std::logic_error("a skinny product of more than 16 rows for one weight");
  if (k == 0) {  // every sum is empty
    if (c != nullptr)
      SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(c, 0, out_rows * n * sizeof(float), stream()));
    if (c_bf16 != nullptr)
      SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(c_bf16, 0, out_rows * n * sizeof(uint16_t), stream()));
    return;
  }
  const int64_t kc = chunk_rows(n, k);
  const int64_t chunks = (k + kc - 1) / kc;
  const int64_t tiles = (n + 255) / 256;
  if (tiles * groups > kCounters) throw std::logic_error("a skinny product of too many tiles");
  float* partial = nullptr;
  SPLITCHECK_CUDA_CHECK(cudaMallocAsync(
      &partial, static_cast<size_t>(chunks * out_rows * n) * sizeof(float), stream()));
  bool vec = n % 8 == 0;
  for (int gi = 0; gi < groups; ++gi)
    vec = vec && reinterpret_cast<uintptr_t>(weights.w[gi]) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks),
                  static_cast<unsigned>(groups));
  unsigned* counters = counters_for(stream());
  const int r = static_cast<int>(rows);
  auto go = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream()>>>(a, weights, pick, a_div, r, out_rows, partial,
                                            counters, c, c_bf16, n, k, kc, chunks, vec);
  };
  if (max_rows <= 1) go(grouped_kernel<1, G>);
  else if (max_rows <= 2) go(grouped_kernel<2, G>);
  else if (max_rows <= 4) go(grouped_kernel<4, G>);
  else go(grouped_kernel<8, G>);
  SPLITCHECK_CUDA_CHECK(cudaFreeAsync(partial, stream()));
}

}  // namespace

void skinny_gemm(const uint16_t* a, const uint16_t* b, float* c, uint16_t* c_bf16, int64_t m,
                 int64_t n, int64_t k) {
  Weights<1> w;
  w.w[0] = b;
  grouped(a, w, 1, nullptr, 1, m, m, m, c, c_bf16, n, k);
}

void skinny_multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                       uint16_t* c_bf16, int64_t m, int64_t n, int64_t k) {
  Weights<kMultiMax> w;
  if (bs.size() > static_cast<size_t>(kMultiMax))
    throw std::logic_error("skinny_multi_gemm: more than kMultiMax weights");
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
