// attn_res (SPEC 2.2) on the GPU: one block per token, each thread owning fixed channel
// groups of VEC consecutive channels (two a thread in the register kernel, for H up to
// 8192; one a thread, more past 1024 groups, in the general kernel). The kernel and the
// block shape depend on H only, and every sum's order with them, so no bit depends on how
// many tokens a call has (except through the fallback's BLOCK_L rule, which SPEC 2.2
// states).
//
// Data flow, for speed (the kernel is bound by instruction issue as much as by memory: one
// 448-thread block fills an SM's registers at H 7168): a thread issues every load of its
// token first (prefix, delta, up to kRegRows bank rows as raw bf16 in registers, the score
// weights), computes the partial dot and sum of squares of every source from registers with
// fused multiply-adds, and the block meets ONCE for all 2 * (nb + 1) sums: each warp
// reduces its lanes' partials of all register-held sources in one transposed butterfly
// (warp_sums: 18 values share the shuffles) and writes them; after one
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
// Both accumulate products with fused multiply-adds (__fmaf_rn: one rounding a product and
// sum, as the GPU's fused kernels do; the build's --fmad=false contracts nothing else).
//   native   — one accumulator per thread over its channels, sums by halving shuffles
//              (offsets 16, 8, 4, 2, 1) within a warp and the warps' partials in
//              ascending order (order A), one softmax over all sources, output scale
//              (m * r) * out_w;
//   fallback — four interleaved lanes per thread joined as (l0 + l1) + (l2 + l3), sums by
//              adjacent pairs (offsets 1, 2, 4, 8, 16) within a warp and the warps'
//              partials by adjacent pairs (order B), an online softmax over tiles of
//              BLOCK_L sources (attn_res_fallback_block_l: the BLOCK_L rule), the mixture
//              times the reciprocal of the softmax's denominator, output scale
//              (m * out_w) * r.
#include <bit>
#include <cstdint>
#include <string>

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
  int block_l_log2;  // the fallback's BLOCK_L, a power of two
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
  // v: any values, rounded to bf16 (f_to_bf).
  __device__ __forceinline__ void round(const float* v) {
    w = make_uint4(pack_bf2(v[0], v[1]), pack_bf2(v[2], v[3]), pack_bf2(v[4], v[5]),
                   pack_bf2(v[6], v[7]));
  }
};

template <>
struct Raw<1> {
  uint32_t w;
  __device__ __forceinline__ void load(const uint16_t* p) { w = static_cast<uint32_t>(*p) << 16; }
  __device__ __forceinline__ void store(uint16_t* p) const { *p = static_cast<uint16_t>(w >> 16); }
  __device__ __forceinline__ void get(float* v) const { v[0] = __uint_as_float(w); }
  __device__ __forceinline__ void round(const float* v) {
    w = static_cast<uint32_t>(f_to_bf(v[0])) << 16;
  }
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
    Raw<8> r;
    r.round(v);
    r.store(p);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) p[j] = f_to_bf(v[j]);
  }
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

// One step of warp_sums at lane offset kOff over the first kN values: a lane keeps the
// first half of its values (the offset's bit clear) or the second (set), sends the other
// half to its partner and adds the partner's copy of each value it keeps. base and len:
// the original indices of the values this lane now carries (phantom past len).
template <int kOff, int kN>
__device__ __forceinline__ void butterfly_step(float* x, int lane, int& base, int& len) {
  constexpr int h = (kN + 1) / 2;
  const bool upper = (lane & kOff) != 0;
#pragma unroll
  for (int q = 0; q < h; ++q) {
    const float hi = q + h < kN ? x[q + h] : 0.0f;
    const float keep = upper ? hi : x[q];
    const float send = upper ? x[q] : hi;
    x[q] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
  }
  if (upper) {
    base += h;
    len = len > h ? len - h : 0;
  } else {
    len = len < h ? len : h;
  }
}

// The warp sums of all N values x[0..N-1] at once (N <= 32): the values share the
// shuffles, each step halving how many a lane carries, and value q's sum lands in x[0] of
// one lane, which gets q back (the others -1). Each value's sum is the tree warp_sum gives
// it alone (order A: offsets 16, 8, 4, 2, 1; order B: 1, 2, 4, 8, 16), two lanes' partials
// added in either order, which IEEE addition does not see.
template <bool kFallback, int N>
__device__ __forceinline__ int warp_sums(float (&x)[N]) {
  static_assert(N >= 2 && N <= 32, "five halvings leave one value a lane");
  constexpr int n1 = N, n2 = (n1 + 1) / 2, n3 = (n2 + 1) / 2, n4 = (n3 + 1) / 2, n5 = (n4 + 1) / 2;
  const int lane = threadIdx.x % 32;
  int base = 0, len = N;
  if constexpr (kFallback) {
    butterfly_step<1, n1>(x, lane, base, len);
    butterfly_step<2, n2>(x, lane, base, len);
    butterfly_step<4, n3>(x, lane, base, len);
    butterfly_step<8, n4>(x, lane, base, len);
    butterfly_step<16, n5>(x, lane, base, len);
  } else {
    butterfly_step<16, n1>(x, lane, base, len);
    butterfly_step<8, n2>(x, lane, base, len);
    butterfly_step<4, n3>(x, lane, base, len);
    butterfly_step<2, n4>(x, lane, base, len);
    butterfly_step<1, n5>(x, lane, base, len);
  }
  return len > 0 ? base : -1;
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

// kFull (register kernel only): the block's threads own exactly its groups (groups ==
// kRegGroups * blockDim.x, as at H 7168 or 8192), so no thread checks which it owns.
template <bool kFallback, int VEC, int NREG, bool kFull>
__global__ void __launch_bounds__(NREG > 0 ? kRegThreads : kMaxThreads, 1)
    attn_res_kernel(Params a) {
  static_assert(!kFull || NREG > 0, "only the register kernel's threads own fixed groups");
  // Whether this thread owns channel group g.
  const auto owns = [&](int64_t g) { return kFull || g < a.groups; };
  constexpr int G = NREG > 0 ? kRegGroups : 1;                    // groups held in registers
  constexpr int W = (NREG > 0 ? kRegThreads : kMaxThreads) / 32;  // the most warps
  // NREG == 0: the mixture m, [h].
  extern __shared__ __align__(16) float mix[];
  // The warps' partial sums of every source (padded: a lane reads a row), the output's.
  __shared__ float red_dot[kMaxSources][W + 1];
  __shared__ float red_ss[kMaxSources][W + 1];
  __shared__ float red_out[W];
  // Each warp's copy of the scores and the softmax's weights.
  __shared__ float score_of[W][kMaxSources];
  __shared__ float weight_of[W][kMaxSources];
  __shared__ float rescale_of[W][kMaxSources];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;
  const int per_thread = NREG > 0 ? G : a.per_thread;
  const int n_src = a.nb + 1;

  const int64_t t = blockIdx.x;  // one token a block
  // The score and output weights, loaded with every token (from L1 or L2 after the first).
  Raw<VEC> nw0[G], pw0[G], ow0[G];  // read only where loaded
  uint16_t* const prefix_row = a.prefix + t * a.h;
  const uint16_t* const bank_rows = a.bank + t * a.rows * a.h;

  // The register kernel's loads, all issued before anything waits on them.
  Raw<VEC> pre0[G], bank0[NREG > 0 ? NREG : 1][G];  // likewise
  if constexpr (NREG > 0) {
    Raw<VEC> del0[G];
#pragma unroll
    for (int k = 0; k < G; ++k) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (!owns(g)) continue;
      const int64_t c = g * VEC;
      pre0[k].load(prefix_row + c);
      if (a.delta != nullptr) del0[k].load(a.delta + t * a.h + c);
      if (a.nb > 0) {
        // Every register row, those past nb - 1 as copies of row nb - 1 (served by the
        // cache, never used): one condition, not one a row.
#pragma unroll
        for (int i = 0; i < NREG; ++i) bank0[i][k].load(bank_rows + min(i, a.nb - 1) * a.h + c);
        nw0[k].load(a.norm_w + c);
        pw0[k].load(a.proj_w + c);
      }
    }
#pragma unroll
    for (int k = 0; k < G; ++k) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (!owns(g)) continue;
      const int64_t c = g * VEC;
      // Steps 1 and 2: fold the delta into the prefix, write the bank row.
      if (a.delta != nullptr) {
        float p[VEC], d[VEC];
        pre0[k].get(p);
        del0[k].get(d);
#pragma unroll
        for (int j = 0; j < VEC; ++j) p[j] = p[j] + d[j];
        pre0[k].round(p);
        pre0[k].store(prefix_row + c);
      }
      if (a.write_idx >= 0) pre0[k].store(a.bank + (t * a.rows + a.write_idx) * a.h + c);
      // A source the call itself writes. (Selects, not a conditional store: the compiler
      // turns the latter into one store at index write_idx, which moves every row to
      // local memory.)
      if (a.write_idx >= 0 && a.write_idx < NREG) {
#pragma unroll
        for (int i = 0; i < NREG; ++i) bank0[i][k].w = i == a.write_idx ? pre0[k].w : bank0[i][k].w;
      }
    }
  } else {
    for (int k = 0; k < per_thread; ++k) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (!owns(g)) break;
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
  // m: the mixture of this thread's groups (registers) in the register kernel, set below
  // for every group the thread owns.
  float m0[G][VEC];

  if (a.nb == 0) {
    // m = p.
    if constexpr (NREG > 0) {
#pragma unroll
      for (int k = 0; k < G; ++k) pre0[k].get(m0[k]);
    } else {
      for (int k = 0; k < per_thread; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (!owns(g)) break;
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
    // This thread's share of source i's two sums: its dot with the score weights and its
    // sum of squares.
    auto partials = [&](int i, const Raw<VEC>(&cached)[G], bool use_cached, float& dot_out,
                        float& ss_out) {
      float dot = 0.0f, ss = 0.0f;
      float dl[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int k = 0; k < per_thread; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (!owns(g)) break;
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
            dl[j % 4] = __fmaf_rn(v[j], nwpw[j], dl[j % 4]);
            sl[j % 4] = __fmaf_rn(v[j], v[j], sl[j % 4]);
          } else {
            dot = __fmaf_rn(v[j], nwpw[j], dot);
            ss = __fmaf_rn(v[j], v[j], ss);
          }
        }
      }
      if constexpr (kFallback) {
        dot = (dl[0] + dl[1]) + (dl[2] + dl[3]);
        ss = (sl[0] + sl[1]) + (sl[2] + sl[3]);
      }
      dot_out = dot;
      ss_out = ss;
    };
    // Source i's warp sums, one source at a time (rows past those held in registers, and
    // every source in the general kernel).
    auto reduce_one = [&](int i, const Raw<VEC>(&cached)[G], bool use_cached) {
      float dot, ss;
      partials(i, cached, use_cached, dot, ss);
      dot = warp_sum<kFallback>(dot);
      ss = warp_sum<kFallback>(ss);
      if (lane == 0) {
        red_dot[i][warp] = dot;
        red_ss[i][warp] = ss;
      }
    };
    if constexpr (NREG > 0) {
      // The sources held in registers (bank rows below NREG, then the prefix in slot
      // NREG), all reduced at once: slot s's sums are values 2s and 2s + 1.
      float x[2 * (NREG + 1)];
#pragma unroll
      for (int slot = 0; slot < NREG; ++slot) {
        x[2 * slot] = 0.0f;
        x[2 * slot + 1] = 0.0f;
        if (slot < a.nb) partials(slot, bank0[slot], true, x[2 * slot], x[2 * slot + 1]);
      }
      partials(a.nb, pre0, true, x[2 * NREG], x[2 * NREG + 1]);
      for (int i = NREG; i < a.nb; ++i) reduce_one(i, pre0, false);
      const int q = warp_sums<kFallback>(x);
      const int slot = q / 2;
      if (q >= 0 && (slot == NREG || slot < a.nb))
        (q % 2 == 0 ? red_dot : red_ss)[slot < NREG ? slot : a.nb][warp] = x[0];
    } else {
      each_source(reduce_one);
    }
    __syncthreads();
    // The softmax's scalars, computed once per warp with one source per lane (two past 32
    // sources), into this warp's rows; every warp computes the same values in the same
    // order, so every thread reads the same weights without a second meeting.
    float* const score = score_of[warp];
    float* const weight = weight_of[warp];    // native: a_i; fallback: e_i of its tile
    float* const rescale = rescale_of[warp];  // fallback: source i's rescale, 1 inside a tile
    for (int i = lane; i < n_src; i += 32) {
      float dot = 0.0f, ss = 0.0f;
      // (Unrolled to the most warps a block has, stopping at the block's own count: no
      // loop counter, and the loads issue together.)
      if constexpr (kFallback) {  // the warps' partials by adjacent pairs, then in order
#pragma unroll
        for (int w = 0; w < W; w += 2) {
          if (w >= n_warps) break;
          const bool pair = w + 1 < n_warps;
          dot += pair ? red_dot[i][w] + red_dot[i][w + 1] : red_dot[i][w];
          ss += pair ? red_ss[i][w] + red_ss[i][w + 1] : red_ss[i][w];
        }
      } else {  // the warps' partials in ascending order
#pragma unroll
        for (int w = 0; w < W; ++w) {
          if (w >= n_warps) break;
          dot += red_dot[i][w];
          ss += red_ss[i][w];
        }
      }
      score[i] = dot * drsqrt(ss / static_cast<float>(a.h) + a.eps);
    }
    __syncwarp();
    const float kNegInf = -__int_as_float(0x7f800000);
    float run_sum = 0.0f;  // the fallback's softmax denominator
    float inv_sum = 1.0f;  // and its reciprocal
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
      // In registers, lane l holding sources l and l + 32 (the second only past 32
      // sources): the running maximum of scores 0..i is an inclusive scan over the lanes (a
      // NaN score never becomes the maximum, and of equal scores the first stays, as a loop
      // over the sources keeps them), read at each tile's end and before its start.
      const bool two = n_src > 32;  // the same in every lane
      const auto not_nan = [&](int i) {
        return i < n_src && score[i] > kNegInf ? score[i] : kNegInf;
      };
      const auto scan_max = [&](float m) {
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const float o = __shfl_up_sync(0xffffffffu, m, off);
          if (lane >= off) m = m > o ? m : o;  // of equal values, the earlier
        }
        return m;
      };
      const float max_lo = scan_max(not_nan(lane));
      float max_hi = kNegInf;
      if (two) {
        const float below = __shfl_sync(0xffffffffu, max_lo, 31);
        max_hi = scan_max(not_nan(lane + 32));
        max_hi = max_hi > below ? max_hi : below;
      }
      // The running maximum of scores 0..q (q < n_src; every lane takes part).
      const auto running_max = [&](int q) {
        const float lo = __shfl_sync(0xffffffffu, max_lo, q & 31);
        if (!two) return lo;
        const float hi = __shfl_sync(0xffffffffu, max_hi, q & 31);
        return q < 32 ? lo : hi;
      };
      // Source i's weight e_i and rescale (1 inside a tile, which changes no value), into
      // this warp's rows; BLOCK_L is a power of two (block_l_log2).
      const auto weigh = [&](int i, float& e, float& r) {
        const int start = i >> a.block_l_log2 << a.block_l_log2;
        const int end = min(start + (1 << a.block_l_log2), n_src);
        const float run_max = running_max(max(end - 1, 0));
        const float before = running_max(max(start - 1, 0));  // every lane shuffles
        const float prev_max = start > 0 ? before : kNegInf;
        if (i < n_src) {
          e = dexp(score[i] - run_max);
          r = i == start ? dexp(prev_max - run_max) : 1.0f;
          weight[i] = e;
          rescale[i] = r;
        }
      };
      // The denominator, in source order, by every lane from the lanes' registers (n
      // sources, from lane 0 on); a rescale of 1 leaves the sum as it is.
      const auto accumulate = [&](float e, float r, int n) {
#pragma unroll 4
        for (int l = 0; l < n; ++l) {
          const float rl = __shfl_sync(0xffffffffu, r, l);
          const float el = __shfl_sync(0xffffffffu, e, l);
          run_sum = __fadd_rn(__fmul_rn(run_sum, rl), el);
        }
      };
      float e_lo = 0.0f, r_lo = 1.0f, e_hi = 0.0f, r_hi = 1.0f;
      weigh(lane, e_lo, r_lo);
      if (two) weigh(lane + 32, e_hi, r_hi);
      accumulate(e_lo, r_lo, min(n_src, 32));
      if (two) accumulate(e_hi, r_hi, n_src - 32);
      inv_sum = 1.0f / run_sum;  // the mixture is scaled by it: one division a thread
    }
    __syncwarp();

    // Mixture m over the sources. The fallback's tile start rescales m by exp(previous
    // maximum - new maximum); a rescale by exactly 1 (the running maximum unchanged) leaves
    // every value as it is and is skipped (every lane reads the same factor).
    if constexpr (NREG > 0) {
      // Sources outer, this thread's groups inner: a source's weight (and rescale) is read
      // once; every element still sums its sources in source order.
#pragma unroll
      for (int k = 0; k < G; ++k)
#pragma unroll
        for (int j = 0; j < VEC; ++j) m0[k][j] = 0.0f;
      each_source([&](int i, const Raw<VEC>(&cached)[G], bool use_cached) {
        if constexpr (kFallback) {
          if (rescale[i] != 1.0f) {
            const float r = rescale[i];
#pragma unroll
            for (int k = 0; k < G; ++k)
#pragma unroll
              for (int j = 0; j < VEC; ++j) m0[k][j] *= r;
          }
        }
        const float e = weight[i];
#pragma unroll
        for (int k = 0; k < G; ++k) {
          const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
          if (!owns(g)) break;
          float v[VEC];
          source(i, k, g * VEC, cached, use_cached, v);
#pragma unroll
          for (int j = 0; j < VEC; ++j) m0[k][j] = __fmaf_rn(e, v[j], m0[k][j]);
        }
      });
      if constexpr (kFallback) {
#pragma unroll
        for (int k = 0; k < G; ++k)
#pragma unroll
          for (int j = 0; j < VEC; ++j) m0[k][j] = m0[k][j] * inv_sum;
      }
    } else {
#pragma unroll
      for (int k = 0; k < per_thread; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (!owns(g)) break;
        const int64_t c = g * VEC;
        float m[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) m[j] = 0.0f;
        each_source([&](int i, const Raw<VEC>(&cached)[G], bool use_cached) {
          if constexpr (kFallback) {
            if (rescale[i] != 1.0f) {  // a new tile of BLOCK_L sources
              const float r = rescale[i];
#pragma unroll
              for (int j = 0; j < VEC; ++j) m[j] *= r;
            }
          }
          const float e = weight[i];
          float v[VEC];
          source(i, k, c, cached, use_cached, v);
#pragma unroll
          for (int j = 0; j < VEC; ++j) m[j] = __fmaf_rn(e, v[j], m[j]);
        });
        if constexpr (kFallback) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) m[j] = m[j] * inv_sum;
        }
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
  if constexpr (NREG > 0) {
    if (a.out_w != nullptr) {
#pragma unroll
      for (int k = 0; k < G; ++k) {
        const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (owns(g)) ow0[k].load(a.out_w + g * VEC);
      }
    }
  }
  float r = 1.0f;
  if (a.out_w != nullptr) {
    float ss = 0.0f, sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < per_thread; ++k) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (!owns(g)) break;
      float m[VEC];
      mixture(k, g * VEC, m);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if constexpr (kFallback) {
          sl[j % 4] = __fmaf_rn(m[j], m[j], sl[j % 4]);
        } else {
          ss = __fmaf_rn(m[j], m[j], ss);
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
    if (!owns(g)) break;
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
}

// One block per token.
template <bool kFallback, int VEC, int NREG, bool kFull = false>
void launch_kernel(const Params& a, unsigned threads, size_t smem) {
  auto* kernel = attn_res_kernel<kFallback, VEC, NREG, kFull>;
  // The general kernel's mixture in shared memory, beyond the static arrays.
  if (smem > 0) allow_smem(reinterpret_cast<const void*>(kernel), smem);
  kernel<<<static_cast<unsigned>(a.tokens), threads, smem, stream()>>>(a);
}

template <bool kFallback>
void launch(AttnResArgs& args) {
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
  const int block_l = attn_res_fallback_block_l(t_count, args.nb);
  if (!std::has_single_bit(static_cast<unsigned>(block_l)))
    throw std::runtime_error("attn_res on CUDA: BLOCK_L " + std::to_string(block_l) +
                             " is not a power of two");
  a.block_l_log2 = std::countr_zero(static_cast<unsigned>(block_l));
  if (t_count > 0) {
    // The block shape, the vector width and the kernel depend on H only.
    const int vec = h % 8 == 0 ? 8 : 1;
    a.groups = h / vec;
    const int reg_threads = reg_threads_for(a.groups);
    if (reg_threads <= kRegThreads) {
      a.per_thread = kRegGroups;
      const auto n = static_cast<unsigned>(reg_threads);
      if (vec == 8 && a.groups == static_cast<int64_t>(kRegGroups) * reg_threads) {
        launch_kernel<kFallback, 8, kRegRows, true>(a, n, 0);
      } else if (vec == 8) {
        launch_kernel<kFallback, 8, kRegRows>(a, n, 0);
      } else {
        launch_kernel<kFallback, 1, kRegRows>(a, n, 0);
      }
    } else {
      const int threads = threads_for(a.groups);
      a.per_thread = static_cast<int>((a.groups + threads - 1) / threads);
      const auto n = static_cast<unsigned>(threads);
      const size_t smem = static_cast<size_t>(h) * sizeof(float);
      if (vec == 8) {
        launch_kernel<kFallback, 8, 0>(a, n, smem);
      } else {
        launch_kernel<kFallback, 1, 0>(a, n, smem);
      }
    }
  }
  s.done();
}

}  // namespace

void attn_res_native(AttnResArgs& args) { launch<false>(args); }
void attn_res_fallback(AttnResArgs& args) { launch<true>(args); }

}  // namespace splitcheck::cuda
