// Products of 9 to 64 rows (a batched serving step, a prompt's prefill) by bf16 weights
// [k, n], on the tensor cores: each weight read once per row tile, in one launch for up to
// kTcMaxWeights weights that share the rows (grid z), the chunk sums added by the last block
// of each tile, the bf16 rounding (where asked) in the same launch.
//
// A block takes a tile of 16 MT rows of A by 32 NT columns of one weight, and one chunk of
// k (kc rows, fixed by (k, n)): stages of 32 rows of the weight and of the tile's rows of A
// are copied into shared memory (cp.async: four stages, three in flight while one is
// used), and each warp multiplies its 8 NT columns by every row with mma.m16n8k16 (bf16
// in, float32 accumulate), 16 rows of k a step, ascending. Each (row, column) has its own
// accumulator, and an mma's output row depends on its own row of A alone, so a row's bits
// depend on its inputs and (k, n) only: the same in a product of 9 rows as of 64, beside
// any other rows, in any tile shape, alone or with other weights in the launch (tiles start
// at multiples of 16 rows and 8 columns, so an element keeps its place in its mma). The
// order inside one mma is the tensor core's; tc.h states the rest.
//
// The tile shape is picked for the launch's size (tile_shape): a small product in few
// large tiles leaves most multiprocessors idle while one block walks k, so small products
// take small tiles (more blocks, each with less to load a stage).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tc.h"

namespace splitcheck::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStep = kTcStep;  // two mma k-steps a stage
constexpr int kStages = 4;
// A tile's columns: NT mma n-tiles (8 columns) a warp.
template <int NT>
__host__ __device__ constexpr int tile_cols() {
  return kWarps * NT * 8;
}
// Shared rows of B and of A, padded so that ldmatrix's 8 rows hit 8 bank groups.
template <int NT>
__host__ __device__ constexpr int b_stride() {
  return tile_cols<NT>() + 8;
}
constexpr int kAStride = kStep + 8;
constexpr int64_t kMaxChunks = 32;
constexpr int64_t kMinChunk = kTcMaxDepth;  // gemm()'s products are one chunk each
constexpr int64_t kBlocksPerWeight = 528;   // four a multiprocessor of an H200
// A launch spreads over at least this many blocks where its tiles can shrink (tile_shape).
constexpr int64_t kSpreadBlocks = 32;

template <int MT, int NT>
__host__ __device__ constexpr int stage_elems() {
  return kStep * b_stride<NT>() + MT * 16 * kAStride;
}
template <int MT, int NT>
__host__ __device__ constexpr int smem_bytes() {
  return kStages * stage_elems<MT, NT>() * static_cast<int>(sizeof(uint16_t));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, queued; zeros where !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t (&r)[2], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
// d += A (16 x 16, row-major fragment) B (16 x 8, column fragment), float32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

struct TcArgs {
  const uint16_t* a = nullptr;
  const uint16_t* w[kTcMaxWeights] = {};
  float* c = nullptr;
  uint16_t* c_bf16 = nullptr;
  float* partial = nullptr;  // [chunks, G * m, n] where chunks > 1
  unsigned* counters = nullptr;
  int64_t m = 0, n = 0, k = 0, kc = 0, chunks = 0;
  int64_t col_tiles = 0;              // blockIdx.x = row tile * col_tiles + column tile
  bool vec_a = false, vec_b = false;  // 16-byte loads (rows whole 16-byte pieces, aligned)
};

// Stage s of a block's chunk [k0, k1): B rows k0 + 32 s ... by the tile's columns, and the
// same k of the tile's rows of A (MT * 16 rows from row0, zeros past m), zeros past k1 and n.
template <int MT, int NT>
__device__ __forceinline__ void load_stage(const TcArgs& p, const uint16_t* __restrict__ b,
                                           int64_t k0, int64_t k1, int64_t row0, int64_t col0,
                                           int s, uint16_t* stage) {
  constexpr int kBStride = b_stride<NT>();
  const int64_t r0 = k0 + int64_t{s} * kStep;
  uint16_t* bs = stage;
  uint16_t* as = stage + kStep * kBStride;
  constexpr int kBPieces = tile_cols<NT>() / 8;
  for (int i = threadIdx.x; i < kStep * kBPieces; i += kThreads) {
    const int row = i / kBPieces, piece = i % kBPieces;
    const int64_t kk = r0 + row, col = col0 + piece * 8;
    uint16_t* dst = bs + row * kBStride + piece * 8;
    if (p.vec_b) {
      const bool ok = kk < k1 && col < p.n;
      cp_async16(dst, ok ? b + kk * p.n + col : b, ok);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) dst[j] = kk < k1 && col + j < p.n ? b[kk * p.n + col + j] : 0;
    }
  }
  constexpr int kAPieces = kStep / 8;
  for (int i = threadIdx.x; i < MT * 16 * kAPieces; i += kThreads) {
    const int row = i / kAPieces, piece = i % kAPieces;
    const int64_t kk = r0 + piece * 8, at = row0 + row;
    uint16_t* dst = as + row * kAStride + piece * 8;
    if (p.vec_a) {
      const bool ok = at < p.m && kk < k1;
      cp_async16(dst, ok ? p.a + at * p.k + kk : p.a, ok);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) dst[j] = at < p.m && kk + j < k1 ? p.a[at * p.k + kk + j] : 0;
    }
  }
}

// A block's sums of its tile over [k0, k1) of weight b, into acc (one per (row, column)
// of the tile, from zero): the stages in flight, then 16 rows of k an mma step, ascending.
template <int MT, int NT>
__device__ __forceinline__ void tile_sums(const TcArgs& p, const uint16_t* __restrict__ b,
                                          int64_t k0, int64_t k1, int64_t row0, int64_t col0,
                                          uint16_t* smem, float (&acc)[MT][NT][4]) {
  constexpr int kBStride = b_stride<NT>();
  const int steps = static_cast<int>((k1 - k0 + kStep - 1) / kStep);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  auto stage = [&](int s) { return smem + (s % kStages) * stage_elems<MT, NT>(); };
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_stage<MT, NT>(p, b, k0, k1, row0, col0, s, stage(s));
    cp_commit();
  }
  for (int s = 0; s < steps; ++s) {
    cp_wait<kStages - 2>();
    __syncthreads();  // stage s is in; every warp is done with stage s - 1, reloaded next
    if (s + kStages - 1 < steps)
      load_stage<MT, NT>(p, b, k0, k1, row0, col0, s + kStages - 1, stage(s + kStages - 1));
    cp_commit();
    const uint16_t* bs = stage(s);
    const uint16_t* as = bs + kStep * kBStride;
#pragma unroll
    for (int kk = 0; kk < kStep; kk += 16) {
      uint32_t af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldsm_x4(af[mt], as + (mt * 16 + lane % 16) * kAStride + kk + (lane / 16) * 8);
      uint32_t bf[NT][2];
      const uint16_t* brow = bs + (kk + lane % 16) * kBStride + warp * (NT * 8);
      if constexpr (NT == 1) {
        ldsm_x2_trans(bf[0], brow);
      } else {
#pragma unroll
        for (int pr = 0; pr < NT / 2; ++pr) {
          uint32_t r[4];
          ldsm_x4_trans(r, brow + pr * 16 + (lane / 16) * 8);
          bf[2 * pr][0] = r[0];
          bf[2 * pr][1] = r[1];
          bf[2 * pr + 1][0] = r[2];
          bf[2 * pr + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma_bf16(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
    }
  }
  cp_wait<0>();
}

// Calls f(mt, nt, e, r, col) for each accumulator of the tile inside the product: c0, c1
// at row lane / 4, columns 2 (lane % 4) and + 1; c2, c3 eight rows down.
template <int MT, int NT, typename F>
__device__ __forceinline__ void each_output(const TcArgs& p, int64_t row0, int64_t col0, F f) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = row0 + mt * 16 + lane / 4 + (e / 2) * 8;
        const int64_t col = col0 + warp * (NT * 8) + nt * 8 + 2 * (lane % 4) + e % 2;
        if (r < p.m && col < p.n) f(mt, nt, e, r, col);
      }
}

// One (row tile, column tile, chunk, weight g) a block; rows g * m + r of C. MT: 16-row
// tiles of A a block, NT: 8-column mma tiles a warp. kPair (tc_swiglu): one chunk and two
// weights, gate (w[0]) and up (w[1]); the block sums its tile of each in turn, as their
// blocks of a two-weight launch do, and writes SwiGLU's hidden into c_bf16 [m, n].
template <int MT, int NT, bool kPair>
__global__ void __launch_bounds__(kThreads) tc_kernel(TcArgs p) {
  constexpr int kCols = tile_cols<NT>();
  extern __shared__ __align__(16) uint16_t smem[];
  __shared__ bool last;
  const int g = static_cast<int>(blockIdx.z);
  const int64_t tile = blockIdx.x, chunk = blockIdx.y;
  const int64_t k0 = chunk * p.kc, k1 = k0 + p.kc < p.k ? k0 + p.kc : p.k;
  const int64_t row0 = tile / p.col_tiles * (MT * 16), col0 = tile % p.col_tiles * kCols;
  const int64_t row1 = row0 + MT * 16 < p.m ? row0 + MT * 16 : p.m;

  float acc[MT][NT][4];
  tile_sums<MT, NT>(p, p.w[kPair ? 0 : g], k0, k1, row0, col0, smem, acc);
  if constexpr (kPair) {
    float up[MT][NT][4];
    __syncthreads();  // every warp is done with the gate's last stages, reloaded now
    tile_sums<MT, NT>(p, p.w[1], k0, k1, row0, col0, smem, up);
    each_output<MT, NT>(p, row0, col0, [&](int mt, int nt, int e, int64_t r, int64_t col) {
      p.c_bf16[r * p.n + col] = f_to_bf(dsilu(round_bf(acc[mt][nt][e])) * round_bf(up[mt][nt][e]));
    });
    return;
  }

  // One chunk: straight into C; else into the chunk's partial sums.
  const bool direct = p.chunks == 1;
  const int64_t stride = int64_t{gridDim.z} * p.m * p.n;  // one chunk's partial sums
  each_output<MT, NT>(p, row0, col0, [&](int mt, int nt, int e, int64_t r, int64_t col) {
    const int64_t at = (g * p.m + r) * p.n + col;
    const float v = acc[mt][nt][e];
    if (!direct) {
      p.partial[chunk * stride + at] = v;
      return;
    }
    if (p.c != nullptr) p.c[at] = v;
    if (p.c_bf16 != nullptr) p.c_bf16[at] = f_to_bf(v);
  });
  if (direct) return;

  // The last block of this (tile, g) to finish adds the chunk sums in chunk order and
  // re-arms the counter (zero again for the next product on this stream).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = p.counters + static_cast<int64_t>(g) * gridDim.x + tile;
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(p.chunks - 1);
    if (last) *counter = 0u;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Four columns a thread where rows are whole 16-byte groups (the partials are then
  // aligned), kBatch chunks' loads in flight; each output's sum still in chunk order.
  constexpr int kBatch = 8;
  const int64_t rows = row1 - row0;
  if (p.n % 4 == 0) {
    constexpr int kQuads = kCols / 4;
    for (int i = static_cast<int>(threadIdx.x); i < rows * kQuads; i += kThreads) {
      const int64_t r = row0 + i / kQuads, col = col0 + (i % kQuads) * 4;
      if (col >= p.n) continue;
      const int64_t at = (g * p.m + r) * p.n + col;
      float4 sum = __ldcg(reinterpret_cast<const float4*>(p.partial + at));
      for (int64_t ch = 1; ch < p.chunks; ch += kBatch) {
        float4 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          v[j] = ch + j < p.chunks
                     ? __ldcg(reinterpret_cast<const float4*>(p.partial + (ch + j) * stride + at))
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          if (ch + j < p.chunks) {
            sum.x = __fadd_rn(sum.x, v[j].x);
            sum.y = __fadd_rn(sum.y, v[j].y);
            sum.z = __fadd_rn(sum.z, v[j].z);
            sum.w = __fadd_rn(sum.w, v[j].w);
          }
      }
      const float out[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (p.c != nullptr) p.c[at + e] = out[e];
        if (p.c_bf16 != nullptr) p.c_bf16[at + e] = f_to_bf(out[e]);
      }
    }
    return;
  }
  for (int i = static_cast<int>(threadIdx.x); i < rows * kCols; i += kThreads) {
    const int64_t r = row0 + i / kCols, col = col0 + i % kCols;
    if (col >= p.n) continue;
    const int64_t at = (g * p.m + r) * p.n + col;
    float sum = __ldcg(p.partial + at);
    for (int64_t ch = 1; ch < p.chunks; ch += kBatch) {
      float v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        v[j] = ch + j < p.chunks ? __ldcg(p.partial + (ch + j) * stride + at) : 0.0f;
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (ch + j < p.chunks) sum = __fadd_rn(sum, v[j]);
    }
    if (p.c != nullptr) p.c[at] = sum;
    if (p.c_bf16 != nullptr) p.c_bf16[at] = f_to_bf(sum);
  }
}

template <int MT, int NT, bool kPair>
void launch(TcArgs args, int64_t row_tiles, int64_t chunks, int64_t groups) {
  // More than the default 48 KiB of shared memory at the large tiles, and as much of each
  // multiprocessor's L1 as shared memory as it gives, so that as many blocks (and their
  // stages in flight) fit as the registers allow.
  static const bool sized = [] {
    SPLITCHECK_CUDA_CHECK(cudaFuncSetAttribute(tc_kernel<MT, NT, kPair>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               smem_bytes<MT, NT>()));
    SPLITCHECK_CUDA_CHECK(cudaFuncSetAttribute(tc_kernel<MT, NT, kPair>,
                                               cudaFuncAttributePreferredSharedMemoryCarveout,
                                               cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)sized;
  args.col_tiles = (args.n + tile_cols<NT>() - 1) / tile_cols<NT>();
  const int64_t tiles = row_tiles * args.col_tiles;
  if (tiles * groups > kTileCounters)
    throw std::logic_error("a tensor-core product of too many tiles");
  if (chunks > 1) args.counters = tile_counters(stream());
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks),
                  static_cast<unsigned>(groups));
  tc_kernel<MT, NT, kPair><<<grid, kThreads, smem_bytes<MT, NT>(), stream()>>>(args);
}

// SPLITCHECK_CUDA_TC_TILE=RxC (R rows in 16..64 by 16, C columns 32, 64 or 128) takes that
// tile for every product, "whole" every row by 128 columns, to measure the shapes against
// each other (the same bits); unset, tile_shape's rule.
std::optional<TcTile> forced_tile() {
  static const std::optional<TcTile> forced = []() -> std::optional<TcTile> {
    const char* v = std::getenv("SPLITCHECK_CUDA_TC_TILE");
    if (v == nullptr || *v == '\0') return std::nullopt;
    if (std::string(v) == "whole") return TcTile{};
    int rows = 0, cols = 0;
    if (std::sscanf(v, "%dx%d", &rows, &cols) != 2 || !valid_tc_tile(TcTile{rows, cols}) ||
        rows == 0)
      throw std::invalid_argument(std::string("SPLITCHECK_CUDA_TC_TILE=") + v +
                                  ": expected RxC, R 16, 32, 48 or 64 and C 32, 64 or 128");
    return TcTile{rows, cols};
  }();
  return forced;
}

// The launch's tile: every row in one tile and 128 columns a block (the weight read once)
// where that already gives kSpreadBlocks blocks or more; else smaller tiles until it does
// (narrower first, then fewer rows), each weight then read once per row tile from L2.
TcTile tile_shape(int64_t m, int64_t n, int64_t blocks_per_tile) {
  if (const std::optional<TcTile> f = forced_tile()) return *f;
  int mt = static_cast<int>((m + 15) / 16), nt = 4;
  const auto blocks = [&] {
    return (m + 16 * mt - 1) / (16 * mt) * ((n + 32 * nt - 1) / (32 * nt)) * blocks_per_tile;
  };
  while (blocks() < kSpreadBlocks && nt > 1) nt /= 2;
  while (blocks() < kSpreadBlocks && mt > 1) mt = (mt + 1) / 2;
  return TcTile{16 * mt, 32 * nt};
}

template <int MT, bool kPair>
void launch_cols(const TcArgs& args, int nt, int64_t row_tiles, int64_t chunks, int64_t groups) {
  if (nt == 1)
    launch<MT, 1, kPair>(args, row_tiles, chunks, groups);
  else if (nt == 2)
    launch<MT, 2, kPair>(args, row_tiles, chunks, groups);
  else
    launch<MT, 4, kPair>(args, row_tiles, chunks, groups);
}

// The launch of `args` in tile t (rows 0: every row), grid z `groups`.
template <bool kPair>
void launch_tile(const TcArgs& args, TcTile t, int64_t groups) {
  const int mt = t.rows == 0 ? static_cast<int>((args.m + 15) / 16) : t.rows / 16;
  const int nt = t.cols / 32;
  const int64_t row_tiles = (args.m + 16 * mt - 1) / (16 * mt);
  if (mt == 1)
    launch_cols<1, kPair>(args, nt, row_tiles, args.chunks, groups);
  else if (mt == 2)
    launch_cols<2, kPair>(args, nt, row_tiles, args.chunks, groups);
  else if (mt == 3)
    launch_cols<3, kPair>(args, nt, row_tiles, args.chunks, groups);
  else
    launch_cols<4, kPair>(args, nt, row_tiles, args.chunks, groups);
  SPLITCHECK_CUDA_CHECK(cudaGetLastError());
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// Chunks for about kBlocksPerWeight blocks of a weight (at most kMaxChunks, whose sums are
// added in sequence), each a whole number of stages and at least kMinChunk rows (a weight
// of at most kMinChunk rows is one chunk: its sums go straight to C).
int64_t tc_chunk_rows(int64_t n, int64_t k) {
  const int64_t tiles = (n + kTcTile - 1) / kTcTile;
  const int64_t chunks = std::clamp<int64_t>((kBlocksPerWeight + tiles - 1) / tiles, 1, kMaxChunks);
  const int64_t kc = ((k + chunks - 1) / chunks + kStep - 1) / kStep * kStep;
  return std::max<int64_t>(kc, kMinChunk);
}

bool valid_tc_tile(const TcTile& t) {
  return t.rows >= 0 && t.rows <= kTcMaxRows && t.rows % 16 == 0 &&
         (t.cols == 32 || t.cols == 64 || t.cols == 128);
}

void tc_multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                   uint16_t* c_bf16, int64_t m, int64_t n, int64_t k) {
  tc_multi_gemm(a, bs, c, c_bf16, m, n, k, std::nullopt);
}

void tc_multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                   uint16_t* c_bf16, int64_t m, int64_t n, int64_t k, std::optional<TcTile> tile) {
  if (tile && !valid_tc_tile(*tile))
    throw std::logic_error("tc_multi_gemm: a tile of " + std::to_string(tile->rows) + " rows by " +
                           std::to_string(tile->cols) + " columns");
  if (m < 1 || m > kTcMaxRows || bs.empty() || bs.size() > static_cast<size_t>(kTcMaxWeights))
    throw std::logic_error("tc_multi_gemm: 1 to " + std::to_string(kTcMaxRows) + " rows and 1 to " +
                           std::to_string(kTcMaxWeights) + " weights, got " + std::to_string(m) +
                           " rows and " + std::to_string(bs.size()) + " weights");
  const auto groups = static_cast<int64_t>(bs.size());
  if (n == 0) return;
  if (k == 0) {  // every sum is empty
    if (c != nullptr)
      SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(c, 0, groups * m * n * sizeof(float), stream()));
    if (c_bf16 != nullptr)
      SPLITCHECK_CUDA_CHECK(
          cudaMemsetAsync(c_bf16, 0, groups * m * n * sizeof(uint16_t), stream()));
    return;
  }
  const int64_t kc = tc_chunk_rows(n, k);
  TcArgs args{.a = a,
              .c = c,
              .c_bf16 = c_bf16,
              .m = m,
              .n = n,
              .k = k,
              .kc = kc,
              .chunks = (k + kc - 1) / kc,
              .vec_a = k % 8 == 0 && aligned16(a),
              .vec_b = n % 8 == 0};
  for (size_t i = 0; i < bs.size(); ++i) {
    args.w[i] = bs[i];
    args.vec_b = args.vec_b && aligned16(bs[i]);
  }
  if (args.chunks > 1) {
    SPLITCHECK_CUDA_CHECK(cudaMallocAsync(
        &args.partial, static_cast<size_t>(args.chunks * groups * m * n) * sizeof(float),
        stream()));
  }
  launch_tile<false>(args, tile ? *tile : tile_shape(m, n, args.chunks * groups), groups);
  if (args.partial != nullptr) SPLITCHECK_CUDA_CHECK(cudaFreeAsync(args.partial, stream()));
}

void tc_swiglu(const uint16_t* a, const uint16_t* gate, const uint16_t* up, uint16_t* hidden,
               int64_t m, int64_t n, int64_t k, std::optional<TcTile> tile) {
  if (tile && !valid_tc_tile(*tile))
    throw std::logic_error("tc_swiglu: a tile of " + std::to_string(tile->rows) + " rows by " +
                           std::to_string(tile->cols) + " columns");
  if (m < 1 || m > kTcMaxRows || k > kTcMaxDepth)
    throw std::logic_error("tc_swiglu: 1 to " + std::to_string(kTcMaxRows) +
                           " rows and weights of at most " + std::to_string(kTcMaxDepth) +
                           " rows, got " + std::to_string(m) + " rows and " + std::to_string(k));
  if (n == 0) return;
  if (k == 0) {  // every sum is empty: silu(0) * 0
    SPLITCHECK_CUDA_CHECK(cudaMemsetAsync(hidden, 0, m * n * sizeof(uint16_t), stream()));
    return;
  }
  TcArgs args{.a = a,
              .c_bf16 = hidden,
              .m = m,
              .n = n,
              .k = k,
              .kc = tc_chunk_rows(n, k),
              .chunks = 1,
              .vec_a = k % 8 == 0 && aligned16(a),
              .vec_b = n % 8 == 0 && aligned16(gate) && aligned16(up)};
  args.w[0] = gate;
  args.w[1] = up;
  launch_tile<true>(args, tile ? *tile : tile_shape(m, n, 2), 1);
}

}  // namespace splitcheck::cuda
