// attn_res (SPEC 2.2) on the GPU: one block per token, each thread owning fixed channel
// groups of VEC consecutive channels, so no bit depends on how many tokens a call has.
//
// The two variants compute the same math in genuinely different float32 orders, like the
// fused native kernel and the tiled Triton fallback:
//   native   — score weight applied as (v * norm_w) * proj_w, one accumulator per thread
//              over its channels, block sums by halving shuffles (order A), one softmax
//              over all sources, output scale (m * r) * out_w;
//   fallback — precombined norm_w * proj_w, four interleaved lanes per thread joined as
//              (l0 + l1) + (l2 + l3), block sums by adjacent pairs (order B), an online
//              softmax over tiles of BLOCK_L sources (attn_res_fallback_block_l: the
//              BLOCK_L rule), output scale (m * out_w) * r.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace splitcheck::cuda {
namespace {

// Threads per block: one per channel group, rounded up to a warp, within [128, 1024]. It
// depends on H only (never on the token count), so neither does any sum's order.
constexpr int kMaxThreads = 1024;
int threads_for(int64_t groups) {
  const int64_t t = (groups + 31) / 32 * 32;
  return static_cast<int>(t < 128 ? 128 : (t > kMaxThreads ? kMaxThreads : t));
}
constexpr int kMaxSources = 64;

struct Params {
  uint16_t* prefix;
  const uint16_t* delta;
  uint16_t* bank;
  const uint16_t* norm_w;
  const uint16_t* proj_w;
  const uint16_t* out_w;
  uint16_t* out;
  int64_t h;
  int64_t rows;
  int nb;
  int write_idx;
  float eps;
  float out_eps;
  int block_l;
};

// VEC consecutive bf16 values widened to float32 (one 16-byte load when VEC is 8).
template <int VEC>
__device__ __forceinline__ void load(const uint16_t* p, float* v) {
  if constexpr (VEC == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = bf_to_f(p[j]);
  }
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

// Source i of token t: bank row i (i < nb) or the folded prefix p (in shared memory).
template <int VEC>
__device__ __forceinline__ void load_source(const Params& a, int64_t t, int i, int64_t c,
                                            const float* p, float* v) {
  if (i < a.nb) {
    load<VEC>(a.bank + (t * a.rows + i) * a.h + c, v);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = p[c + j];
  }
}

template <bool kFallback, int VEC>
__global__ void __launch_bounds__(kMaxThreads) attn_res_kernel(Params a) {
  extern __shared__ float p[];  // [h]: the folded prefix, later the mixture m
  __shared__ float red[33];
  __shared__ float score[kMaxSources];
  const int64_t t = blockIdx.x;
  const int64_t groups = a.h / VEC;

  // Steps 1 and 2: fold the delta into the prefix, write the bank row.
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    const int64_t c = g * VEC;
    float v[VEC];
    load<VEC>(a.prefix + t * a.h + c, v);
    if (a.delta != nullptr) {
      float d[VEC];
      load<VEC>(a.delta + t * a.h + c, d);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = round_bf(v[j] + d[j]);
      store<VEC>(a.prefix + t * a.h + c, v);
    }
    if (a.write_idx >= 0) store<VEC>(a.bank + (t * a.rows + a.write_idx) * a.h + c, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) p[c + j] = v[j];
  }
  __syncthreads();

  if (a.nb > 0) {
    const int n_src = a.nb + 1;
    // Scores.
    for (int i = 0; i < n_src; ++i) {
      float dot = 0.0f, ss = 0.0f;
      float dl[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        const int64_t c = g * VEC;
        float v[VEC], nw[VEC], pw[VEC];
        load_source<VEC>(a, t, i, c, p, v);
        load<VEC>(a.norm_w + c, nw);
        load<VEC>(a.proj_w + c, pw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          if constexpr (kFallback) {
            dl[j % 4] += v[j] * (nw[j] * pw[j]);
            sl[j % 4] += v[j] * v[j];
          } else {
            dot += (v[j] * nw[j]) * pw[j];
            ss += v[j] * v[j];
          }
        }
      }
      float s;
      if constexpr (kFallback) {
        dot = block_sum_pairwise((dl[0] + dl[1]) + (dl[2] + dl[3]), red);
        ss = block_sum_pairwise((sl[0] + sl[1]) + (sl[2] + sl[3]), red);
      } else {
        dot = block_sum_halving(dot, red);
        ss = block_sum_halving(ss, red);
      }
      s = dot * drsqrt(ss / static_cast<float>(a.h) + a.eps);
      if (threadIdx.x == 0) score[i] = s;
    }
    __syncthreads();

    // Mixture m over the sources, written over p channel group by channel group (each
    // group is read and written by one thread only).
    if constexpr (!kFallback) {
      float mx = score[0];
      for (int i = 1; i < n_src; ++i) mx = score[i] > mx ? score[i] : mx;
      float sum = 0.0f;
      float e[kMaxSources];
      for (int i = 0; i < n_src; ++i) {
        e[i] = dexp(score[i] - mx);
        sum += e[i];
      }
      for (int i = 0; i < n_src; ++i) e[i] = e[i] / sum;
      for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        const int64_t c = g * VEC;
        float m[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) m[j] = 0.0f;
        for (int i = 0; i < n_src; ++i) {
          float v[VEC];
          load_source<VEC>(a, t, i, c, p, v);
#pragma unroll
          for (int j = 0; j < VEC; ++j) m[j] += e[i] * v[j];
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) p[c + j] = m[j];
      }
    } else {
      for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        const int64_t c = g * VEC;
        float m[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) m[j] = 0.0f;
        float run_max = -__int_as_float(0x7f800000);
        float run_sum = 0.0f;
        for (int i0 = 0; i0 < n_src; i0 += a.block_l) {
          const int i1 = min(i0 + a.block_l, n_src);
          float tile_max = score[i0];
          for (int i = i0 + 1; i < i1; ++i) tile_max = score[i] > tile_max ? score[i] : tile_max;
          const float new_max = tile_max > run_max ? tile_max : run_max;
          const float rescale = dexp(run_max - new_max);
          run_sum *= rescale;
#pragma unroll
          for (int j = 0; j < VEC; ++j) m[j] *= rescale;
          for (int i = i0; i < i1; ++i) {
            const float e = dexp(score[i] - new_max);
            run_sum += e;
            float v[VEC];
            load_source<VEC>(a, t, i, c, p, v);
#pragma unroll
            for (int j = 0; j < VEC; ++j) m[j] += e * v[j];
          }
          run_max = new_max;
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) p[c + j] = m[j] / run_sum;
      }
    }
  }

  // Output: rmsnorm with out_w, or m itself.
  float r = 1.0f;
  if (a.out_w != nullptr) {
    float ss = 0.0f, sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      const int64_t c = g * VEC;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float m = p[c + j];
        if constexpr (kFallback) {
          sl[j % 4] += m * m;
        } else {
          ss += m * m;
        }
      }
    }
    if constexpr (kFallback) {
      ss = block_sum_pairwise((sl[0] + sl[1]) + (sl[2] + sl[3]), red);
    } else {
      ss = block_sum_halving(ss, red);
    }
    r = drsqrt(ss / static_cast<float>(a.h) + a.out_eps);
  }
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    const int64_t c = g * VEC;
    float o[VEC];
    if (a.out_w != nullptr) {
      float w[VEC];
      load<VEC>(a.out_w + c, w);
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        o[j] = kFallback ? (p[c + j] * w[j]) * r : (p[c + j] * r) * w[j];
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = p[c + j];
    }
    store<VEC>(a.out + t * a.h + c, o);
  }
}

template <bool kFallback>
void launch(AttnResArgs& args) {
  const int64_t t_count = args.prefix->dim(0);
  const int64_t h = args.prefix->dim(1);
  if (args.nb + 1 > kMaxSources)
    throw std::runtime_error("attn_res on CUDA reads at most 63 bank rows");
  if (static_cast<size_t>(h) * sizeof(float) > 48 * 1024)
    throw std::runtime_error("attn_res on CUDA supports a hidden size of at most 12288");
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
  a.h = h;
  a.rows = args.bank->dim(1);
  a.nb = args.nb;
  a.write_idx = args.write_idx;
  a.eps = args.eps;
  a.out_eps = args.out_eps;
  a.block_l = attn_res_fallback_block_l(t_count, args.nb);
  if (t_count > 0) {
    const size_t smem = static_cast<size_t>(h) * sizeof(float);
    const int vec = h % 8 == 0 ? 8 : 1;
    const unsigned threads = static_cast<unsigned>(threads_for(h / vec));
    if (vec == 8) {
      attn_res_kernel<kFallback, 8><<<static_cast<unsigned>(t_count), threads, smem, stream()>>>(a);
    } else {
      attn_res_kernel<kFallback, 1><<<static_cast<unsigned>(t_count), threads, smem, stream()>>>(a);
    }
  }
  s.done();
}

}  // namespace

void attn_res_native(AttnResArgs& args) { launch<false>(args); }
void attn_res_fallback(AttnResArgs& args) { launch<true>(args); }

}  // namespace splitcheck::cuda
