// Products of a few rows (a decode, a verify block) by bf16 weights: each weight is read
// once, 16 bytes a lane, by enough blocks to keep the memory busy, and the chunk sums are
// added by the last block of each tile, so a product is one launch. One launch may
// multiply several weights (grid z): the same rows by each of G weights (KDA's and MLA's
// projections), or routed rows by the weights their picks name (the MoE's gate and up
// products together, or its down products on the SwiGLU hidden), with no host wait for
// the picks: a block a weight read once for its rows, or, for fewer rows than picks to
// choose from, a block a row.
//
// The order of every sum is fixed by (k, n) alone, never by the row count, the rows that
// share a launch, or the tile a launch uses: k is cut into chunks of kc rows (kc from k
// and n); in a chunk, warp w (of 8) accumulates rows chunk + w, chunk + w + 8, ...
// ascending by fused multiply-add (an explicit one: the compiler still contracts nothing);
// the 8 warp sums are added in warp order; the chunk sums are added in chunk order. So a
// row of C has the same bits in a product of 1 row as in one of 8, alone or routed.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/skinny.h"

namespace splitcheck::cuda {
namespace {

constexpr int kWarps = kSkinnyWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kNominalTile = 256;  // columns per block in the choice of kc (8 per lane)
constexpr int64_t kMaxChunk = 512;
constexpr int64_t kMaxChunks = 64;

// Rows of k per chunk: enough chunks for about eight blocks per multiprocessor of an H200
// at the nominal tile, at most kMaxChunks of them (their sum is sequential), a multiple of
// 32 rows, at most kMaxChunk. So that a block reads enough to pay for its start: at least
// 128 rows where a weight spans more than two tiles (an MoE down product), and 256 for two
// tiles over a deep k (k3-shape's expert gate and up products and MLA's latent projection:
// a decode 26.3 -> 25.5 ms, a 16-token MoE layer 209 -> 193 us). One-tile weights (the
// router, KDA's beta) keep the chunks computed, for as many blocks.
int64_t chunk_rows(int64_t n, int64_t k) {
  const int64_t tiles = (n + kNominalTile - 1) / kNominalTile;
  const int64_t chunks = std::clamp<int64_t>(1056 / tiles, 1, kMaxChunks);
  const int64_t kc = ((k + chunks - 1) / chunks + 31) / 32 * 32;
  const int64_t least = tiles > 2 ? 128 : (tiles == 2 && k >= 4096 ? 256 : 32);
  return std::clamp<int64_t>(kc, least, kMaxChunk);
}

// The weights of one launch, by grid z.
template <int G>
struct Weights {
  const uint16_t* w[G] = {};
};

// The most rows one weight takes in a launch (routed: the slots that picked an expert).
constexpr int kMaxListRows = static_cast<int>(kRoutedMaxRows);
// Routed weights of at most this many bytes take a block a row (routed_gemm).
constexpr int64_t kByRowMaxWeightBytes = int64_t{256} << 10;
constexpr int CPT = 8;  // columns a lane: one 16-byte load of bf16 weights

// Element i of the A operand: a bf16 value, or the SwiGLU hidden value of float gate and
// up (SPEC 2.5: bf16(silu(bf16(gate)) * bf16(up))) computed as it is read.
__device__ __forceinline__ float operand_at(const SkinnyOperand& a, int64_t i) {
  if (a.bf16 != nullptr) return bf_to_f(a.bf16[i]);
  return round_bf(dsilu(round_bf(a.swiglu_gate[i])) * round_bf(a.swiglu_up[i]));
}

// The CPT bf16 weights of one row from col0, widened.
__device__ __forceinline__ void widen_row(const uint4& v, float (&w)[CPT]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[2 * j] = __uint_as_float(words[j] << 16);
    w[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint4 load_row(const uint16_t* row, int64_t col0, int64_t n, bool vec) {
  if (vec) return __ldg(reinterpret_cast<const uint4*>(row));
  uint16_t e[CPT];
#pragma unroll
  for (int j = 0; j < CPT; ++j) e[j] = col0 + j < n ? row[j] : uint16_t{0};
  return make_uint4(e[0] | (uint32_t{e[1]} << 16), e[2] | (uint32_t{e[3]} << 16),
                    e[4] | (uint32_t{e[5]} << 16), e[6] | (uint32_t{e[7]} << 16));
}

// Where a block's pass writes: its chunk's partial sums.
struct Pass {
  int64_t k0, k1, kc, k, n, tile, chunk, out_rows;
  bool vec;
};

// Shared floats of a block's warp sums: every warp's accumulators side by side for up to
// kWideRows rows (one barrier, then each sum taken in warp order by one thread), or one
// running sum a row (a barrier a warp) for more rows.
constexpr int kWideRows = 2;
constexpr int kRowFloats = 32 * CPT;  // a row's columns in a tile
__host__ __device__ constexpr int sums_floats(int max_m) {
  const int wide = kWarps * (max_m < kWideRows ? max_m : kWideRows) * kRowFloats;
  return wide > max_m * kRowFloats ? wide : max_m * kRowFloats;
}

// One pass of a block over m <= M rows of A (a_row[r]) by its weight b: the chunk's
// sums into partial[chunk][out_row[r]][tile's columns]. A row's sum is the same fused
// multiply-add chain whatever M is (each (row, column) has its own accumulator), so a
// block picks M from m without changing a bit. Weights come U rows a lane at a time, the
// next U in flight while the last U are used, the first before the A chunk is staged;
// each chain stays ascending in k.
template <int M, bool kWhole>
__device__ __forceinline__ void chunk_pass(const SkinnyOperand& a, const uint16_t* __restrict__ b,
                                           const int* a_row, const int* out_row, int m,
                                           const Pass& p, float* a_chunk, float* sums,
                                           float* __restrict__ partial) {
  constexpr int U = 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col0 = (p.tile * 32 + lane) * CPT;
  const bool cols = col0 < p.n;
  uint4 next[U];
  auto fetch = [&](int64_t from) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t kk = from + u * kWarps;
      if (cols && kk < p.k1) next[u] = load_row(b + kk * p.n + col0, col0, p.n, p.vec);
    }
  };
  // A whole chunk of a vector-loadable weight (kc rows, whole groups of U rows a warp):
  // no row is out of range, so the loop walks a pointer and checks nothing per row. Not
  // in a kernel of 8 rows a pass (kWhole false), whose sums leave no registers for it.
  const bool whole = kWhole && p.vec && p.k1 - p.k0 == p.kc && p.kc % (U * kWarps) == 0;
  const int64_t step = int64_t{kWarps} * p.n;  // elements from one of a warp's rows to its next
  const uint16_t* row_ptr = b + (p.k0 + warp) * p.n + col0;
  auto fetch_whole = [&](const uint16_t* from) {
#pragma unroll
    for (int u = 0; u < U; ++u) next[u] = __ldg(reinterpret_cast<const uint4*>(from + u * step));
  };
  if (!whole) fetch(p.k0 + warp);
  else if (cols) fetch_whole(row_ptr);
  for (int64_t i = threadIdx.x; i < M * p.kc; i += kThreads) {
    const int r = static_cast<int>(i / p.kc);
    const int64_t kk = p.k0 + i % p.kc;
    a_chunk[i] = (r < m && kk < p.k1) ? operand_at(a, a_row[r] * p.k + kk) : 0.0f;
  }
  __syncthreads();

  float acc[M][CPT];
#pragma unroll
  for (int r = 0; r < M; ++r)
#pragma unroll
    for (int j = 0; j < CPT; ++j) acc[r][j] = 0.0f;
  // A few rows: the next U rows load while these are used. More rows keep the registers
  // for their sums and load the next U after. Either way each (row, column) sum takes the
  // weight rows in ascending order, whichever loop runs.
  constexpr bool kOverlap = M <= kWideRows;
  if (cols && whole) {
    for (int64_t i0 = warp; i0 < p.kc; i0 += U * kWarps) {
      uint4 raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u) raw[u] = next[u];
      const bool more = i0 + U * kWarps < p.kc;
      row_ptr += U * step;
      if (kOverlap && more) fetch_whole(row_ptr);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float w[CPT];
        widen_row(raw[u], w);
        const int64_t i = i0 + u * kWarps;
#pragma unroll
        for (int r = 0; r < M; ++r) {
          const float x = a_chunk[r * p.kc + i];
#pragma unroll
          for (int j = 0; j < CPT; ++j) acc[r][j] = __fmaf_rn(x, w[j], acc[r][j]);
        }
      }
      if (!kOverlap && more) fetch_whole(row_ptr);
    }
  } else if (cols) {
    for (int64_t kk = p.k0 + warp; kk < p.k1; kk += U * kWarps) {
      uint4 raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u) raw[u] = next[u];
      if constexpr (kOverlap) fetch(kk + U * kWarps);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t row = kk + u * kWarps;
        if (row >= p.k1) break;
        float w[CPT];
        widen_row(raw[u], w);
        const int64_t i = row - p.k0;
#pragma unroll
        for (int r = 0; r < M; ++r) {
          const float x = a_chunk[r * p.kc + i];
#pragma unroll
          for (int j = 0; j < CPT; ++j) acc[r][j] = __fmaf_rn(x, w[j], acc[r][j]);
        }
      }
      if constexpr (!kOverlap) fetch(kk + U * kWarps);
    }
  }
  // The warp sums in warp order (warp 0's, plus warp 1's, ...), into the partials.
  constexpr int kRow = kRowFloats;
  auto store = [&](int i, float v) {
    const int r = i / kRow;
    const int64_t col = p.tile * kRow + i % kRow;
    if (r < m && col < p.n) partial[(p.chunk * p.out_rows + out_row[r]) * p.n + col] = v;
  };
  if constexpr (M <= kWideRows) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
      auto* to = reinterpret_cast<float4*>(sums + (warp * M + r) * kRow + lane * CPT);
      to[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      to[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < M * kRow; i += kThreads) {
      float v = sums[i];
      for (int w = 1; w < kWarps; ++w) v = __fadd_rn(v, sums[w * M * kRow + i]);
      store(i, v);
    }
  } else {
    for (int w = 0; w < kWarps; ++w) {
      if (warp == w) {
#pragma unroll
        for (int r = 0; r < M; ++r)
#pragma unroll
          for (int j = 0; j < CPT; ++j) {
            float& sum = sums[r * kRow + lane * CPT + j];
            sum = w == 0 ? acc[r][j] : __fadd_rn(sum, acc[r][j]);
          }
      }
      __syncthreads();
    }
    for (int i = threadIdx.x; i < M * kRow; i += kThreads) store(i, sums[i]);
  }
  __syncthreads();
}

// The pick a routed block of rank `rank` takes: picks ordered by how many rows chose
// them, most first (ties to the lower pick). Blocks start in about the order of their
// index, so an expert of several passes starts early rather than alone in the last wave;
// which block computes a (row, weight) never changes its bits. Every thread of the block
// calls it (it counts in shared memory).
constexpr int kMaxPicks = 256;
__device__ int heaviest_first(const SkinnyRows& map, int picks, int rank) {
  __shared__ int rows_of[kMaxPicks], order[kMaxPicks];
  for (int e = threadIdx.x; e < picks; e += kThreads) rows_of[e] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < map.rows; s += kThreads) {
    const int e = map.pick[s];
    if (e >= 0 && e < picks) atomicAdd(&rows_of[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < picks; e += kThreads) {
    const int mine = rows_of[e];
    int before = 0;
    for (int f = 0; f < picks; ++f) before += rows_of[f] > mine || (rows_of[f] == mine && f < e);
    order[before] = e;
  }
  __syncthreads();
  return order[rank];
}

// One (column tile, chunk, group g) per block. The block's rows: without map.pick, every
// row s < map.rows of A by weight g (output row g * rows + s); with it, every s whose pick
// is p, the pick of rank g / per_pick in heaviest_first's order (A row map.a_rows[s], or
// s; output row s + (g % per_pick) * rows) by weight per_pick * p + g % per_pick, up to
// MAXM at a time; with map.by_row, the one row g / per_pick by weight
// per_pick * pick + g % per_pick. The block that finishes its (tile, g) last adds the
// chunk sums in chunk order into c and/or c_bf16 and re-arms the tile's counter (zero
// again for the next product on this stream). Blocks a multiprocessor: 4 for one row a
// pass (a decode), 3 for two, 2 for more.
template <int MAXM, int G>
__global__ void __launch_bounds__(kThreads, MAXM == 1 ? 4 : (MAXM == 2 ? 3 : 2))
    grouped_kernel(SkinnyOperand a, Weights<G> weights, SkinnyRows map, int64_t out_rows,
                   float* __restrict__ partial, unsigned* __restrict__ counters,
                   float* __restrict__ c, uint16_t* __restrict__ c_bf16, int64_t n, int64_t k,
                   int64_t kc, int64_t chunks, bool vector_loads) {
  __shared__ float a_chunk[MAXM * kMaxChunk];
  __shared__ __align__(16) float sums[sums_floats(MAXM)];
  __shared__ int a_row[kMaxListRows], out_row[kMaxListRows];
  __shared__ int count;
  __shared__ bool last;
  const int g = blockIdx.z;
  const int64_t chunk = blockIdx.y, tile = blockIdx.x;
  __shared__ int weight;
  if (map.by_row) {  // one routed row a block (z = row * per_pick + i), its pick's weight i
    if (threadIdx.x == 0) {
      const int row = g / map.per_pick, i = g % map.per_pick;
      weight = map.per_pick * map.pick[row] + i;
      a_row[0] = map.a_rows != nullptr ? map.a_rows[row] : row;
      out_row[0] = row + i * map.rows;
      count = 1;
    }
  } else if (map.pick == nullptr) {  // every row, by every weight
    for (int s = threadIdx.x; s < map.rows && s < kMaxListRows; s += kThreads) {
      a_row[s] = s;
      out_row[s] = g * map.rows + s;
    }
    if (threadIdx.x == 0) {
      weight = g;
      count = map.rows < kMaxListRows ? map.rows : kMaxListRows;
    }
  } else {  // the rows that picked the block's pick, in order
    const int pick =
        heaviest_first(map, static_cast<int>(gridDim.z) / map.per_pick, g / map.per_pick);
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      int n_rows = 0;
      for (int s0 = 0; s0 < map.rows; s0 += 32) {
        const int s = s0 + lane;
        const bool mine = s < map.rows && map.pick[s] == pick;
        const unsigned ballot = __ballot_sync(0xffffffffu, mine);
        const int at = n_rows + __popc(ballot & ((1u << lane) - 1u));
        if (mine && at < kMaxListRows) {
          a_row[at] = map.a_rows != nullptr ? map.a_rows[s] : s;
          out_row[at] = s + (g % map.per_pick) * map.rows;
        }
        n_rows += __popc(ballot);
      }
      if (lane == 0) {
        weight = pick * map.per_pick + g % map.per_pick;
        count = n_rows < kMaxListRows ? n_rows : kMaxListRows;
      }
    }
  }
  __syncthreads();
  const int total = count;
  if (total == 0) return;  // no token picked this expert: the whole block leaves
  const uint16_t* b = weights.w[weight];
  const int64_t k0 = chunk * kc;
  const Pass p{k0, k0 + kc < k ? k0 + kc : k, kc, k, n, tile, chunk, out_rows, vector_loads};
  for (int base = 0; base < total; base += MAXM) {
    const int m = total - base < MAXM ? total - base : MAXM;
    const int *ar = a_row + base, *orow = out_row + base;
    constexpr bool kWhole = MAXM <= 4;
    if (m <= 1) chunk_pass<1, kWhole>(a, b, ar, orow, m, p, a_chunk, sums, partial);
    else if (m <= 2)
      chunk_pass<(MAXM < 2 ? MAXM : 2), kWhole>(a, b, ar, orow, m, p, a_chunk, sums, partial);
    else if (m <= 4)
      chunk_pass<(MAXM < 4 ? MAXM : 4), kWhole>(a, b, ar, orow, m, p, a_chunk, sums, partial);
    else chunk_pass<MAXM, kWhole>(a, b, ar, orow, m, p, a_chunk, sums, partial);
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
  constexpr int kBatch = 8;  // chunk partials in flight a thread
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

// One grouped launch: C [out_rows, n] (float and/or bf16). `max_rows`: the most rows any
// weight takes; `pass_rows`: the rows a block takes at a time (the template's MAXM: 1, 2,
// 4 or 8), more passing MAXM at a time.
template <int G>
void grouped(const SkinnyOperand& a, const Weights<G>& weights, int groups, const SkinnyRows& map,
             int64_t out_rows, int64_t max_rows, int64_t pass_rows, float* c, uint16_t* c_bf16,
             int64_t n, int64_t k) {
  if (out_rows == 0 || n == 0) return;
  if (max_rows > kMaxListRows)
    throw std::logic_error("a skinny product of more than kRoutedMaxRows rows for one weight");
  if (!map.by_row && groups > G)
    throw std::logic_error("a skinny launch of more weights than its table holds");
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
  if (tiles * groups > kTileCounters) throw std::logic_error("a skinny product of too many tiles");
  float* partial = nullptr;
  SPLITCHECK_CUDA_CHECK(cudaMallocAsync(
      &partial, static_cast<size_t>(chunks * out_rows * n) * sizeof(float), stream()));
  bool vec = n % 8 == 0;
  for (const uint16_t* w : weights.w) vec = vec && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks),
                  static_cast<unsigned>(groups));
  unsigned* counters = tile_counters(stream());
  auto go = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream()>>>(a, weights, map, out_rows, partial, counters, c, c_bf16,
                                            n, k, kc, chunks, vec);
  };
  if (pass_rows <= 1) go(grouped_kernel<1, G>);
  else if (pass_rows <= 2) go(grouped_kernel<2, G>);
  else if (pass_rows <= 4) go(grouped_kernel<4, G>);
  else go(grouped_kernel<8, G>);
  SPLITCHECK_CUDA_CHECK(cudaFreeAsync(partial, stream()));
}

}  // namespace

unsigned* tile_counters(cudaStream_t s) {
  static std::mutex mu;
  static std::map<cudaStream_t, unsigned*> all;
  std::lock_guard<std::mutex> lock(mu);
  unsigned*& c = all[s];
  if (c == nullptr) {
    SPLITCHECK_CUDA_CHECK(cudaMalloc(&c, kTileCounters * sizeof(unsigned)));
    SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(c, 0, kTileCounters * sizeof(unsigned), s));
  }
  return c;
}

int64_t skinny_chunk_rows(int64_t n, int64_t k) { return chunk_rows(n, k); }

void skinny_gemm(const uint16_t* a, const uint16_t* b, float* c, uint16_t* c_bf16, int64_t m,
                 int64_t n, int64_t k) {
  Weights<1> w;
  w.w[0] = b;
  grouped(SkinnyOperand{a}, w, 1, SkinnyRows{.rows = static_cast<int>(m)}, m, m, m, c, c_bf16, n,
          k);
}

void skinny_multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                       uint16_t* c_bf16, int64_t m, int64_t n, int64_t k) {
  Weights<kMultiMax> w;
  if (bs.size() > static_cast<size_t>(kMultiMax))
    throw std::logic_error("skinny_multi_gemm: more than kMultiMax weights");
  std::copy(bs.begin(), bs.end(), w.w);
  const auto g = static_cast<int64_t>(bs.size());
  grouped(SkinnyOperand{a}, w, static_cast<int>(g), SkinnyRows{.rows = static_cast<int>(m)}, g * m,
          m, m, c, c_bf16, n, k);
}

void routed_gemm(const SkinnyOperand& a, const SkinnyRows& rows, int64_t max_rows,
                 const WeightTable& table, int n_weights, float* c, uint16_t* c_bf16, int64_t n,
                 int64_t k) {
  if (rows.pick == nullptr || rows.per_pick < 1 || n_weights > 256)
    throw std::logic_error("routed_gemm: picks, at least one weight a pick, at most 256 weights");
  Weights<256> w;
  std::copy(std::begin(table.w), std::end(table.w), w.w);
  // Fewer rows than picks to choose from (a decode): a block a row and weight, so no
  // block waits to find it has nothing to do; else a block a weight, read once for its
  // rows, taken as many at a time as a weight has on average (1, 2, 4 or 8: two at three
  // blocks a multiprocessor beat eight at two for a 16-token prefill of k3-shape, eight
  // beat passes of two for 64 rows over 8 experts).
  //
  // Small weights (at most kByRowMaxWeightBytes each) take a block a row and weight
  // whatever the rows: re-reading one from L2 for each row costs less than a block's
  // passes over its rows, one after another (at k3-tiny's shapes a routed launch of 48
  // tokens took 40 us a block a weight). The bits are the same either way: which block
  // computes a row, and how many rows it takes at a time, never change them.
  // SPLITCHECK_CUDA_ROUTED_BY_ROW=0 (to measure): a block a weight past the picks' count.
  static const bool small_by_row = [] {
    const char* v = std::getenv("SPLITCHECK_CUDA_ROUTED_BY_ROW");
    return v == nullptr || std::string(v) != "0";
  }();
  SkinnyRows map = rows;
  const int picks = n_weights / rows.per_pick;
  const bool small = n * k * static_cast<int64_t>(sizeof(uint16_t)) <= kByRowMaxWeightBytes;
  map.by_row = rows.rows < picks || (small_by_row && small);
  const int groups = map.by_row ? rows.per_pick * rows.rows : n_weights;
  const int64_t mean = (rows.rows + picks - 1) / std::max(picks, 1);
  const int64_t pass = map.by_row ? 1 : std::min<int64_t>(max_rows, mean <= 2 ? 2 : (mean <= 4 ? 4 : 8));
  grouped(a, w, groups, map, int64_t{rows.per_pick} * rows.rows, map.by_row ? 1 : max_rows, pass,
          c, c_bf16, n, k);
}

}  // namespace splitcheck::cuda
