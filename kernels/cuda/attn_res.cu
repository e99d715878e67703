// attn_res (SPEC 2.2) on the GPU: one block per token, each thread owning fixed channel
// groups of VEC consecutive channels (two a thread in the register kernel, for H up to
// 8192; one a thread, more past 1024 groups, in the general kernel). The kernel and the
// block shape depend on H only, and every sum's order with them, so no bit depends on how
// many tokens a call has (except through the fallback's BLOCK_L rule, which SPEC 2.2
// states).
//
// Data flow, for speed: a thread issues every load of its token first (prefix, delta, up
// to kRegRows bank rows as raw bf16 in registers, the score weights), computes the partial
// dot and sum of squares of every source from registers, and the block meets ONCE for all
// 2 * (nb + 1) sums: each warp reduces its lanes' partials and writes them; after one
// __syncthreads every warp, one source per lane, sums the warps' partials and computes the
// scores and the softmax's scalars itself, in the same order as every other warp, so all
// threads read the same weights without a second meeting. The mixture mixes the raw
// sources still in registers; the output's sum of squares is the second and last meeting.
// Bank rows past kRegRows, and every source in the general kernel, are read again from
// global memory (the same values, so the same bits).
//
// The two variants compute the same math in genuinely different float32 orders, like the
// fused native kernel and the tiled Triton fallback (both weight a source's channels by
// the precombined norm_w * proj_w):
//   native   — one accumulator per thread over its channels, sums by halving shuffles
//              (offsets 16, 8, 4, 2, 1) within a warp and the warps' partials in
//              ascending order (order A), one softmax over all sources, output scale
//              (m * r) * out_w;
//   fallback — four interleaved lanes per thread joined as (l0 + l1) + (l2 + l3), sums by
//              adjacent pairs (offsets 1, 2, 4, 8, 16) within a warp and the warps'
//              partials by adjacent pairs (order B), an online softmax over tiles of
//              BLOCK_L sources (attn_res_fallback_block_l: the BLOCK_L rule), output scale
//              (m * out_w) * r.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace splitcheck::cuda {
namespace {

// The block shape depends on H only (never on the token count), so neither does any
// sum's order. The register kernel: kRegGroups channel groups a thread, threads rounded up
// to a warp, at most kRegThreads (H up to 8192 at VEC 8). Past that, the general kernel:
// one thread per group, rounded up to a warp, within [128, 1024], more groups a thread
// past 1024 groups.
constexpr int kMaxThreads = 1024;
constexpr int kRegGroups = 2;
constexpr int kRegThreads = 512;
int threads_for(int64_t groups) {
  const int64_t t = (groups + 31) / 32 * 32;
  return static_cast<int>(t < 128 ? 128 : (t > kMaxThreads ? kMaxThreads : t));
}
int reg_threads_for(int64_t groups) {
  return static_cast<int>((groups + kRegGroups - 1) / kRegGroups + 31) / 32 * 32;
}
constexpr int kMaxSources = 64;
// Bank rows a thread of the register kernel keeps in registers (2 groups x 8 rows x 4
// registers at VEC 8). k3-shape reads at most 8; more rows are read twice (from L2,
// mostly). One block of 448 threads at 128 registers (H 7168) fills most of an SM's
// registers: fewer, fatter threads than one a group halve the warp shuffles and the
// per-warp softmax work per token.
constexpr int kRegRows = 8;
// AttnResSchedule as a template argument.
constexpr int kPerToken = static_cast<int>(AttnResSchedule::kPerToken);
constexpr int kPersistent = static_cast<int>(AttnResSchedule::kPersistent);
constexpr int kPrefetch = static_cast<int>(AttnResSchedule::kPrefetch);

struct Params {
  uint16_t* prefix;
  const uint16_t* delta;
  uint16_t* bank;
  const uint16_t* norm_w;
  const uint16_t* proj_w;
  const uint16_t* out_w;
  uint16_t* out;
  int64_t tokens;
  int64_t h;
  int64_t rows;
  int64_t groups;  // h / VEC
  int per_thread;  // channel groups per thread: ceil(groups / blockDim.x)
  int nb;
  int write_idx;
  float eps;
  float out_eps;
  int block_l;
};

// VEC consecutive bf16 values, raw: one 16-byte word at VEC 8, the bits in the high half
// of a 32-bit word at VEC 1. Values in it are exact float32 widenings.
template <int VEC>
struct Raw;

template <>
struct Raw<8> {
  uint4 w;
  __device__ __forceinline__ void load(const uint16_t* p) {
    w = *reinterpret_cast<const uint4*>(p);
  }
  __device__ __forceinline__ void store(uint16_t* p) const { *reinterpret_cast<uint4*>(p) = w; }
  __device__ __forceinline__ void get(float* v) const {
    const uint32_t x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __uint_as_float(x[j] << 16);
      v[2 * j + 1] = __uint_as_float(x[j] & 0xffff0000u);
    }
  }
  // v: values that are bf16 already (low 16 bits zero).
  __device__ __forceinline__ void set(const float* v) {
    uint32_t x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      x[j] = (__float_as_uint(v[2 * j]) >> 16) | (__float_as_uint(v[2 * j + 1]) & 0xffff0000u);
    w = make_uint4(x[0], x[1], x[2], x[3]);
  }
};

template <>
struct Raw<1> {
  uint32_t w;
  __device__ __forceinline__ void load(const uint16_t* p) { w = static_cast<uint32_t>(*p) << 16; }
  __device__ __forceinline__ void store(uint16_t* p) const { *p = static_cast<uint16_t>(w >> 16); }
  __device__ __forceinline__ void get(float* v) const { v[0] = __uint_as_float(w); }
  __device__ __forceinline__ void set(const float* v) { w = __float_as_uint(v[0]); }
};

template <int VEC>
__device__ __forceinline__ void load(const uint16_t* p, float* v) {
  Raw<VEC> r;
  r.load(p);
  r.get(v);
}

template <int VEC>
__device__ __forceinline__ void store(uint16_t* p, const float* v) {
  if constexpr (VEC == 8) {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = static_cast<uint32_t>(f_to_bf(v[2 * j])) |
             (static_cast<uint32_t>(f_to_bf(v[2 * j + 1])) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) p[j] = f_to_bf(v[j]);
  }
}

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80
// and later; a plain copy before), completed by cp_async_wait_all in the same thread.
__device__ __forceinline__ void cp_async16(uint16_t* smem, const uint16_t* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#else
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Sum over the warp, result in lane 0. Order A: halving (offsets 16, 8, 4, 2, 1).
__device__ __forceinline__ float warp_sum_halving(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// Sum over the warp, result in lane 0. Order B: adjacent pairs first (offsets 1, 2, 4, 8,
// 16).
__device__ __forceinline__ float warp_sum_pairwise(float v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float o = __shfl_down_sync(0xffffffffu, v, off);
    if ((lane & (2 * off - 1)) == 0) v = v + o;
  }
  return v;
}

template <bool kFallback>
__device__ __forceinline__ float warp_sum(float v) {
  if constexpr (kFallback) {
    return warp_sum_pairwise(v);
  } else {
    return warp_sum_halving(v);
  }
}

// NREG > 0 (the register kernel): every thread owns kRegGroups channel groups
// (g = threadIdx.x + k * blockDim.x) and keeps their prefix and first NREG bank rows in
// registers. NREG == 0 (the general kernel): any number of groups per thread, every source
// read from global memory when used, the mixture kept in shared memory (h floats).
//
// kSched (AttnResSchedule, register kernel only; the general kernel is always per token):
// which tokens a block computes and how their rows arrive. A block computes tokens
// blockIdx.x, blockIdx.x + gridDim.x, ... with the same threads, channel groups and sums
// as one block per token, so every schedule gives the same bits.
//   kPerToken   — one block per token (grid = tokens); the loads wait at the token's start.
//   kPersistent — grid sized to the SMs, each block looping over tokens; the score and
//                 output weights are loaded once per block.
//   kPrefetch   — kPersistent, and while a token is reduced and mixed, the next token's
//                 prefix, delta and first NREG bank rows travel into shared memory
//                 (cp.async, 16 bytes; VEC 8 only): each thread copies, and later reads,
//                 only its own channel groups.
template <bool kFallback, int VEC, int NREG, int kSched>
__global__ void __launch_bounds__(NREG > 0 ? kRegThreads : kMaxThreads, 1)
    attn_res_kernel(Params a) {
  static_assert(NREG > 0 || kSched == kPerToken, "the general kernel runs one token a block");
  static_assert(kSched != kPrefetch || VEC == 8, "cp.async moves 16-byte groups");
  constexpr int G = NREG > 0 ? kRegGroups : 1;                    // groups held in registers
  constexpr int W = (NREG > 0 ? kRegThreads : kMaxThreads) / 32;  // the most warps
  // NREG == 0: the mixture m, [h]. kPrefetch: the next token's staged rows, bf16
  // [1 + (delta given) + min(nb, NREG)][h] (prefix, delta, bank rows).
  extern __shared__ __align__(16) float mix[];
  // The warps' partial sums of every source (padded: a lane reads a row), the output's.
  __shared__ float red_dot[kMaxSources][W + 1];
  __shared__ float red_ss[kMaxSources][W + 1];
  __shared__ float red_out[W];
  // Each warp's copy of the scores and the softmax's weights.
  __shared__ float score_of[W][kMaxSources];
  __shared__ float weight_of[W][kMaxSources];
  __shared__ float rescale_of[W][kMaxSources];
  __shared__ bool starts_of[W][kMaxSources];  // fallback: source i starts a tile
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;
  const int per_thread = NREG > 0 ? G : a.per_thread;
  const int n_src = a.nb + 1;
  // The staged rows of kPrefetch: the prefix, the delta, then bank rows.
  uint16_t* const stage = reinterpret_cast<uint16_t*>(mix);
  const int staged_bank = a.nb < NREG ? a.nb : NREG;
  const int bank_slot = a.delta != nullptr ? 2 : 1;
  // kPrefetch: starts the copies of token u's rows (this thread's groups) into `stage`.
  auto prefetch = [&](int64_t u) {
#pragma unroll
    for (int k = 0; k < G; ++k) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (g >= a.groups) continue;
      const int64_t c = g * VEC;
      cp_async16(stage + c, a.prefix + u * a.h + c);
      if (a.delta != nullptr) cp_async16(stage + a.h + c, a.delta + u * a.h + c);
      for (int i = 0; i < staged_bank; ++i)
        cp_async16(stage + (bank_slot + i) * a.h + c, a.bank + (u * a.rows + i) * a.h + c);
    }
    cp_async_commit();
  };

  if constexpr (kSched == kPrefetch) {
    if (blockIdx.x < a.tokens) prefetch(blockIdx.x);
  }

  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    // The score and output weights, loaded with every token (from L1 or L2 after the first):
    // registers are the register kernel's limit.
    Raw<VEC> nw0[G]{}, pw0[G]{}, ow0[G]{};
    auto load_weights = [&](bool score, bool output) {
#pragma unroll
      for (int k = 0; k < G; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (g >= a.groups) continue;
        const int64_t c = g * VEC;
        if (score && a.nb > 0) {
          nw0[k].load(a.norm_w + c);
          pw0[k].load(a.proj_w + c);
        }
        if (output && a.out_w != nullptr) ow0[k].load(a.out_w + c);
      }
    };
    uint16_t* const prefix_row = a.prefix + t * a.h;
    const uint16_t* const bank_rows = a.bank + t * a.rows * a.h;

    // The register kernel's loads, all issued before anything waits on them.
    Raw<VEC> pre0[G]{}, bank0[NREG > 0 ? NREG : 1][G]{};
    if constexpr (NREG > 0) {
      Raw<VEC> del0[G]{};
      if constexpr (kSched == kPrefetch) {
        // This token's rows arrived in `stage` (this thread's own groups): into registers,
        // then every thread meets (no one still reads the stage or the previous token's
        // shared sums) before the next token's copies start.
        cp_async_wait_all();
#pragma unroll
        for (int k = 0; k < G; ++k) {
          const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
          if (g >= a.groups) continue;
          const int64_t c = g * VEC;
          pre0[k].load(stage + c);
          if (a.delta != nullptr) del0[k].load(stage + a.h + c);
#pragma unroll
          for (int i = 0; i < NREG; ++i)
            if (i < a.nb) bank0[i][k].load(stage + (bank_slot + i) * a.h + c);
        }
        load_weights(true, false);
        __syncthreads();
        if (t + gridDim.x < a.tokens) prefetch(t + gridDim.x);
      } else {
        // The previous token's shared sums are read by every warp before any warp writes
        // this token's.
        if (kSched != kPerToken && t != blockIdx.x) __syncthreads();
#pragma unroll
        for (int k = 0; k < G; ++k) {
          const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
          if (g >= a.groups) continue;
          const int64_t c = g * VEC;
          pre0[k].load(prefix_row + c);
          if (a.delta != nullptr) del0[k].load(a.delta + t * a.h + c);
#pragma unroll
          for (int i = 0; i < NREG; ++i)
            if (i < a.nb) bank0[i][k].load(bank_rows + i * a.h + c);
          if (a.nb > 0) {
            nw0[k].load(a.norm_w + c);
            pw0[k].load(a.proj_w + c);
          }
        }
      }
#pragma unroll
      for (int k = 0; k < G; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (g >= a.groups) continue;
        const int64_t c = g * VEC;
        // Steps 1 and 2: fold the delta into the prefix, write the bank row.
        if (a.delta != nullptr) {
          float p[VEC], d[VEC];
          pre0[k].get(p);
          del0[k].get(d);
#pragma unroll
          for (int j = 0; j < VEC; ++j) p[j] = round_bf(p[j] + d[j]);
          pre0[k].set(p);
          pre0[k].store(prefix_row + c);
        }
        if (a.write_idx >= 0) pre0[k].store(a.bank + (t * a.rows + a.write_idx) * a.h + c);
#pragma unroll
        for (int i = 0; i < NREG; ++i)
          if (i == a.write_idx) bank0[i][k] = pre0[k];  // a source the call itself writes
      }
    } else {
      for (int k = 0; k < per_thread; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (g >= a.groups) break;
        const int64_t c = g * VEC;
        float p[VEC];
        load<VEC>(prefix_row + c, p);
        if (a.delta != nullptr) {
          float d[VEC];
          load<VEC>(a.delta + t * a.h + c, d);
#pragma unroll
          for (int j = 0; j < VEC; ++j) p[j] = round_bf(p[j] + d[j]);
          store<VEC>(prefix_row + c, p);
        }
        if (a.write_idx >= 0) store<VEC>(a.bank + (t * a.rows + a.write_idx) * a.h + c, p);
      }
    }

    // Source i of group k at channels c: the registers cached[k] when `use_cached` (the
    // register kernel only), else global memory (bank row i, or the prefix as steps 1 and 2
    // left it for i == nb).
    auto source = [&](int i, int k, int64_t c, const Raw<VEC>(&cached)[G], bool use_cached,
                      float* v) {
      if constexpr (NREG > 0) {
        if (use_cached) {
          cached[k].get(v);
          return;
        }
      }
      (void)k;
      (void)cached;
      (void)use_cached;
      load<VEC>(i < a.nb ? bank_rows + i * a.h + c : prefix_row + c, v);
    };
    // body(i, cached, use_cached) for every source in order: bank rows 0..nb-1, the prefix.
    auto each_source = [&](auto&& body) {
#pragma unroll
      for (int i = 0; i < NREG; ++i)
        if (i < a.nb) body(i, bank0[i], true);
      for (int i = NREG; i < a.nb; ++i) body(i, pre0, false);
      body(a.nb, pre0, NREG > 0);
    };
    // m: the mixture of this thread's groups (registers) in the register kernel.
    float m0[G][VEC];
#pragma unroll
    for (int k = 0; k < G; ++k)
#pragma unroll
      for (int j = 0; j < VEC; ++j) m0[k][j] = 0.0f;

    if (a.nb == 0) {
      // m = p.
      if constexpr (NREG > 0) {
#pragma unroll
        for (int k = 0; k < G; ++k) pre0[k].get(m0[k]);
      } else {
        for (int k = 0; k < per_thread; ++k) {
          const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
          if (g >= a.groups) break;
          float p[VEC];
          load<VEC>(prefix_row + g * VEC, p);
#pragma unroll
          for (int j = 0; j < VEC; ++j) mix[g * VEC + j] = p[j];
        }
      }
    } else {
      // Scores: every source's partial sums, one meeting for all of them.
      float nwpw0[G][VEC];  // the precombined score weights norm_w * proj_w, register kernel
      if constexpr (NREG > 0) {
#pragma unroll
        for (int k = 0; k < G; ++k) {
          float nw[VEC], pw[VEC];
          nw0[k].get(nw);
          pw0[k].get(pw);
#pragma unroll
          for (int j = 0; j < VEC; ++j) nwpw0[k][j] = nw[j] * pw[j];
        }
      }
      each_source([&](int i, const Raw<VEC>(&cached)[G], bool use_cached) {
        float dot = 0.0f, ss = 0.0f;
        float dl[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < per_thread; ++k) {
          const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
          if (g >= a.groups) break;
          const int64_t c = g * VEC;
          float v[VEC], nwpw[VEC];
          source(i, k, c, cached, use_cached, v);
          if constexpr (NREG > 0) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) nwpw[j] = nwpw0[k][j];
          } else {
            float nw[VEC], pw[VEC];
            load<VEC>(a.norm_w + c, nw);
            load<VEC>(a.proj_w + c, pw);
#pragma unroll
            for (int j = 0; j < VEC; ++j) nwpw[j] = nw[j] * pw[j];
          }
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            if constexpr (kFallback) {
              dl[j % 4] += v[j] * nwpw[j];
              sl[j % 4] += v[j] * v[j];
            } else {
              dot += v[j] * nwpw[j];
              ss += v[j] * v[j];
            }
          }
        }
        if constexpr (kFallback) {
          dot = (dl[0] + dl[1]) + (dl[2] + dl[3]);
          ss = (sl[0] + sl[1]) + (sl[2] + sl[3]);
        }
        dot = warp_sum<kFallback>(dot);
        ss = warp_sum<kFallback>(ss);
        if (lane == 0) {
          red_dot[i][warp] = dot;
          red_ss[i][warp] = ss;
        }
      });
      __syncthreads();
      // The softmax's scalars, computed once per warp with one source per lane (two past 32
      // sources), into this warp's rows; every warp computes the same values in the same
      // order, so every thread reads the same weights without a second meeting.
      float* const score = score_of[warp];
      float* const weight = weight_of[warp];    // native: a_i; fallback: e_i of its tile
      float* const rescale = rescale_of[warp];  // fallback: the rescale at a tile's start
      bool* const starts = starts_of[warp];
      for (int i = lane; i < n_src; i += 32) {
        float dot = 0.0f, ss = 0.0f;
        if constexpr (kFallback) {  // the warps' partials by adjacent pairs, then in order
          for (int w = 0; w < n_warps; w += 2) {
            const bool pair = w + 1 < n_warps;
            dot += pair ? red_dot[i][w] + red_dot[i][w + 1] : red_dot[i][w];
            ss += pair ? red_ss[i][w] + red_ss[i][w + 1] : red_ss[i][w];
          }
        } else {  // the warps' partials in ascending order
          for (int w = 0; w < n_warps; ++w) {
            dot += red_dot[i][w];
            ss += red_ss[i][w];
          }
        }
        score[i] = dot * drsqrt(ss / static_cast<float>(a.h) + a.eps);
      }
      __syncwarp();
      const float kNegInf = -__int_as_float(0x7f800000);
      float run_sum = 0.0f;  // the fallback's softmax denominator
      if constexpr (!kFallback) {
        float mx = kNegInf;
        for (int i = lane; i < n_src; i += 32) mx = score[i] > mx ? score[i] : mx;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
          const float o = __shfl_xor_sync(0xffffffffu, mx, off);
          mx = o > mx ? o : mx;
        }
        mx = __shfl_sync(0xffffffffu, mx, 0);
        const float e_lo = lane < n_src ? dexp(score[lane] - mx) : 0.0f;
        const float e_hi = lane + 32 < n_src ? dexp(score[lane + 32] - mx) : 0.0f;
        const float sum = __shfl_sync(0xffffffffu, warp_sum_halving(e_lo + e_hi), 0);
        if (lane < n_src) weight[lane] = e_lo / sum;
        if (lane + 32 < n_src) weight[lane + 32] = e_hi / sum;
      } else {
        // Online softmax over tiles of BLOCK_L sources: source i's tile uses the running
        // maximum of every score up to its tile's end; a tile's start rescales by
        // exp(previous maximum - new maximum); the denominator runs in source order.
        const int bl = a.block_l;
        for (int i = lane; i < n_src; i += 32) {
          const int start = i / bl * bl, end = min(start + bl, n_src);
          float run_max = kNegInf, prev_max = kNegInf;
          for (int q = 0; q < end; ++q) {
            run_max = score[q] > run_max ? score[q] : run_max;
            if (q + 1 == start) prev_max = run_max;
          }
          weight[i] = dexp(score[i] - run_max);
          rescale[i] = dexp(prev_max - run_max);
          starts[i] = i == start;
        }
        __syncwarp();
        if (lane == 0) {
          for (int i = 0; i < n_src; ++i) {
            if (starts[i]) run_sum *= rescale[i];
            run_sum += weight[i];
          }
        }
        run_sum = __shfl_sync(0xffffffffu, run_sum, 0);
      }
      __syncwarp();

      // Mixture m over the sources, group by group.
#pragma unroll
      for (int k = 0; k < per_thread; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (g >= a.groups) break;
        const int64_t c = g * VEC;
        float m[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) m[j] = 0.0f;
        each_source([&](int i, const Raw<VEC>(&cached)[G], bool use_cached) {
          if constexpr (kFallback) {
            if (starts[i]) {  // a new tile of BLOCK_L sources
              const float r = rescale[i];
#pragma unroll
              for (int j = 0; j < VEC; ++j) m[j] *= r;
            }
          }
          const float e = weight[i];
          float v[VEC];
          source(i, k, c, cached, use_cached, v);
#pragma unroll
          for (int j = 0; j < VEC; ++j) m[j] += e * v[j];
        });
        if constexpr (kFallback) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) m[j] = m[j] / run_sum;
        }
        if constexpr (NREG > 0) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) m0[k][j] = m[j];
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) mix[c + j] = m[j];
        }
      }
    }

    // This thread's mixture values of group k.
    auto mixture = [&](int k, int64_t c, float* m) {
      if constexpr (NREG > 0) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) m[j] = m0[k][j];
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) m[j] = mix[c + j];
      }
    };

    // Output: rmsnorm with out_w (the second meeting), or m itself. The register kernel
    // loads out_w before the meeting, so that the load waits alongside it.
    if constexpr (NREG > 0) load_weights(false, true);
    float r = 1.0f;
    if (a.out_w != nullptr) {
      float ss = 0.0f, sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int k = 0; k < per_thread; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (g >= a.groups) break;
        float m[VEC];
        mixture(k, g * VEC, m);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          if constexpr (kFallback) {
            sl[j % 4] += m[j] * m[j];
          } else {
            ss += m[j] * m[j];
          }
        }
      }
      if constexpr (kFallback) ss = (sl[0] + sl[1]) + (sl[2] + sl[3]);
      ss = warp_sum<kFallback>(ss);
      if (lane == 0) red_out[warp] = ss;
      __syncthreads();
      ss = warp_sum<kFallback>(lane < n_warps ? red_out[lane] : 0.0f);
      ss = __shfl_sync(0xffffffffu, ss, 0);
      r = drsqrt(ss / static_cast<float>(a.h) + a.out_eps);
    }
#pragma unroll
    for (int k = 0; k < per_thread; ++k) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (g >= a.groups) break;
      const int64_t c = g * VEC;
      float m[VEC], o[VEC];
      mixture(k, c, m);
      if (a.out_w != nullptr) {
        float w[VEC];
        if constexpr (NREG > 0) {
          ow0[k].get(w);
        } else {
          load<VEC>(a.out_w + c, w);
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = kFallback ? (m[j] * w[j]) * r : (m[j] * r) * w[j];
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = m[j];
      }
      store<VEC>(a.out + t * a.h + c, o);
    }
    if constexpr (kSched == kPerToken) break;  // one token a block: no loop to carry
  }                                            // tokens
}

// Blocks of `kernel` (at `threads` threads and `smem` dynamic bytes) resident on the
// current device at once: the persistent schedules' grid.
// Remembered per (kernel, threads, dynamic bytes, device), and the dynamic shared memory
// allowed so far per (kernel, device): both are host calls a 64-token call cannot afford each time.
struct LaunchCache {
  std::mutex mu;
  std::map<std::tuple<const void*, int, size_t, int>, int> resident;
  std::map<std::pair<const void*, int>, size_t> smem_allowed;
};
LaunchCache& launch_cache() {
  static LaunchCache c;
  return c;
}

int resident_blocks(const void* kernel, int threads, size_t smem) {
  int device = 0;
  SPLITCHECK_CUDA_CHECK(cudaGetDevice(&device));
  LaunchCache& c = launch_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const auto key = std::make_tuple(kernel, threads, smem, device);
  if (auto it = c.resident.find(key); it != c.resident.end()) return it->second;
  int sms = 0, per_sm = 0;
  SPLITCHECK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  SPLITCHECK_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return c.resident[key] = sms * per_sm;
}

// Lets `kernel` use `smem` bytes of dynamic shared memory (beyond 48 KiB needs asking).
void allow_smem(const void* kernel, size_t smem) {
  int device = 0;
  SPLITCHECK_CUDA_CHECK(cudaGetDevice(&device));
  LaunchCache& c = launch_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  size_t& allowed = c.smem_allowed[{kernel, device}];
  if (smem <= allowed) return;
  SPLITCHECK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)));
  allowed = smem;
}

template <bool kFallback, int VEC, int NREG, int kSched>
void launch_kernel(const Params& a, unsigned threads, size_t smem) {
  auto* kernel = attn_res_kernel<kFallback, VEC, NREG, kSched>;
  // The mixture or the staged rows in shared memory, beyond the static arrays.
  if (smem > 0) allow_smem(reinterpret_cast<const void*>(kernel), smem);
  auto blocks = static_cast<int64_t>(a.tokens);
  if constexpr (kSched != kPerToken) {
    const int resident =
        resident_blocks(reinterpret_cast<const void*>(kernel), static_cast<int>(threads), smem);
    if (resident < 1) throw std::runtime_error("attn_res on CUDA: the schedule fits no SM");
    blocks = blocks < resident ? blocks : resident;
  }
  kernel<<<static_cast<unsigned>(blocks), threads, smem, stream()>>>(a);
}

// The register kernel under `schedule`: kPrefetch stages its rows in shared memory, 16
// bytes at a time, so at VEC 1 it runs as kPersistent (the same bits either way).
template <bool kFallback, int VEC>
void launch_register(const Params& a, unsigned threads, AttnResSchedule schedule) {
  const int staged_bank = a.nb < kRegRows ? a.nb : kRegRows;
  const size_t stage = static_cast<size_t>(1 + (a.delta != nullptr ? 1 : 0) + staged_bank) *
                       static_cast<size_t>(a.h) * sizeof(uint16_t);
  if constexpr (kFallback) {  // the fallback runs one token a block
    (void)stage;
    launch_kernel<kFallback, VEC, kRegRows, kPerToken>(a, threads, 0);
  } else {
    switch (schedule) {
      case AttnResSchedule::kPerToken:
        launch_kernel<kFallback, VEC, kRegRows, kPerToken>(a, threads, 0);
        return;
      case AttnResSchedule::kPersistent:
        launch_kernel<kFallback, VEC, kRegRows, kPersistent>(a, threads, 0);
        return;
      case AttnResSchedule::kPrefetch:
        if constexpr (VEC == 8) {
          launch_kernel<kFallback, VEC, kRegRows, kPrefetch>(a, threads, stage);
        } else {
          launch_kernel<kFallback, VEC, kRegRows, kPersistent>(a, threads, 0);
        }
        return;
    }
    throw std::runtime_error("attn_res on CUDA: unknown schedule");
  }
}

template <bool kFallback>
void launch(AttnResArgs& args, AttnResSchedule schedule) {
  const int64_t t_count = args.prefix->dim(0);
  const int64_t h = args.prefix->dim(1);
  if (args.nb + 1 > kMaxSources)
    throw std::runtime_error("attn_res on CUDA reads at most 63 bank rows");
  // The general kernel keeps the mixture (h floats) in shared memory beside its static
  // arrays (at most 44 KiB): H up to about 46000 on an H100 or H200.
  int device = 0, smem_optin = 0;
  SPLITCHECK_CUDA_CHECK(cudaGetDevice(&device));
  SPLITCHECK_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (static_cast<size_t>(h) * sizeof(float) + 44 * 1024 > static_cast<size_t>(smem_optin))
    throw std::runtime_error("attn_res on CUDA: hidden size " + std::to_string(h) +
                             " needs more shared memory than a block of this GPU has");
  Staging s;
  Params a{};
  a.prefix = static_cast<uint16_t*>(s.inout(args.prefix));
  a.delta = as<uint16_t>(s.in(args.delta));
  a.bank = static_cast<uint16_t*>(args.write_idx >= 0 ? s.inout(args.bank)
                                                      : const_cast<void*>(s.in(args.bank)));
  a.norm_w = as<uint16_t>(s.in(args.norm_w));
  a.proj_w = as<uint16_t>(s.in(args.proj_w));
  a.out_w = as<uint16_t>(s.in(args.out_w));
  a.out = static_cast<uint16_t*>(s.inout(args.out));
  a.tokens = t_count;
  a.h = h;
  a.rows = args.bank->dim(1);
  a.nb = args.nb;
  a.write_idx = args.write_idx;
  a.eps = args.eps;
  a.out_eps = args.out_eps;
  a.block_l = attn_res_fallback_block_l(t_count, args.nb);
  if (t_count > 0) {
    // The block shape, the vector width and the kernel depend on H only.
    const int vec = h % 8 == 0 ? 8 : 1;
    a.groups = h / vec;
    const int reg_threads = reg_threads_for(a.groups);
    if (reg_threads <= kRegThreads) {
      a.per_thread = kRegGroups;
      const auto n = static_cast<unsigned>(reg_threads);
      if (vec == 8) {
        launch_register<kFallback, 8>(a, n, schedule);
      } else {
        launch_register<kFallback, 1>(a, n, schedule);
      }
    } else {
      const int threads = threads_for(a.groups);
      a.per_thread = static_cast<int>((a.groups + threads - 1) / threads);
      const auto n = static_cast<unsigned>(threads);
      const size_t smem = static_cast<size_t>(h) * sizeof(float);
      if (vec == 8) {
        launch_kernel<kFallback, 8, 0, kPerToken>(a, n, smem);
      } else {
        launch_kernel<kFallback, 1, 0, kPerToken>(a, n, smem);
      }
    }
  }
  s.done();
}

}  // namespace

const char* attn_res_schedule_name(AttnResSchedule schedule) {
  switch (schedule) {
    case AttnResSchedule::kPerToken:
      return "per_token";
    case AttnResSchedule::kPersistent:
      return "persistent";
    case AttnResSchedule::kPrefetch:
      return "prefetch";
  }
  return "unknown";
}

void attn_res_native_scheduled(AttnResArgs& args, AttnResSchedule schedule) {
  launch<false>(args, schedule);
}
void attn_res_native(AttnResArgs& args) { launch<false>(args, kNativeAttnResSchedule); }
void attn_res_fallback(AttnResArgs& args) { launch<true>(args, AttnResSchedule::kPerToken); }

}  // namespace splitcheck::cuda
