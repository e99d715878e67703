// MLA-lite, KDA-lite (SPEC 2.4) and the drafters' dense attention on the GPU, with the
// CPU's rounding points (kernels/cpu/attention.cc). Projections through gemm() (skinny_gemm,
// tc_multi_gemm or cuBLASLt). Softmax attention: one block per (query, head), scores in
// shared memory, max and sum by one thread in ascending position. KDA: one block per head,
// two lanes per value channel (one in the generic instance), the state updated token by
// token, the norms computed across tokens in the CPU's order; the recurrence's sums over
// key channels in four quarters (kda_add_quarters), not the CPU's one chain. A segmented
// call (a batched forward's requests, MlaArgs::begin) runs each product once over every
// segment's rows and one attention or recurrence launch over all segments, each block
// reading its segment's offsets and cache or state from a table passed as a kernel
// parameter.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/kda.h"
#include "kernels/cuda/runtime.h"

namespace splitcheck::cuda {
namespace {

constexpr int kThreads = 128;

// Segments a launch attends over at once (a batched forward's requests; more run as
// further launches): kernel parameters, so no table is copied to the device.
constexpr int kMaxSegments = 16;

// Query rows [q_begin[i], q_begin[i+1]) attend over the tk[i] keys and values from row
// kv_begin[i]: all of them when first_pos[i] < 0, else positions <= first_pos[i] + t for
// the segment's query t. Row indices are the call's (the launch covers rows q_begin[0]
// to q_begin[count]).
struct AttentionSegments {
  int count = 0;
  int64_t q_begin[kMaxSegments + 1];
  const uint16_t* k[kMaxSegments];  // each segment's keys and values (rows from kv_begin)
  const uint16_t* v[kMaxSegments];
  int64_t kv_begin[kMaxSegments];
  int64_t tk[kMaxSegments];
  int64_t first_pos[kMaxSegments];
};

// out[t][head*hd + d] = softmax(q k^T * inv_sqrt_d) v over the visible positions of t's
// segment. With a gate g (float32): bf16(o * sigmoid(g)), else bf16(o).
__global__ void attention_kernel(const uint16_t* q, const float* gate, const AttentionSegments segs,
                                 int heads, int hd, float inv_sqrt_d, uint16_t* out) {
  extern __shared__ float scores[];
  __shared__ float stat[2];
  const int64_t t = segs.q_begin[0] + blockIdx.x;
  int sg = 0;
  while (sg + 1 < segs.count && t >= segs.q_begin[sg + 1]) ++sg;
  const int64_t tk = segs.tk[sg], first_pos = segs.first_pos[sg];
  const int head = blockIdx.y;
  const int64_t qd = static_cast<int64_t>(heads) * hd;
  const uint16_t* k = segs.k[sg] + segs.kv_begin[sg] * qd;
  const uint16_t* v = segs.v[sg] + segs.kv_begin[sg] * qd;
  // Causal: query t sees keys 0..first_pos + t, never more than the tk keys there are.
  const int64_t causal = first_pos + (t - segs.q_begin[sg]) + 1;
  const int64_t visible = first_pos < 0 || causal > tk ? tk : causal;
  const uint16_t* qv = q + t * qd + head * hd;
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
    const uint16_t* kv = k + j * qd + head * hd;
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d) dot += bf_to_f(qv[d]) * bf_to_f(kv[d]);
    scores[j] = dot * inv_sqrt_d;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float mx = scores[0];
    for (int64_t j = 1; j < visible; ++j) mx = scores[j] > mx ? scores[j] : mx;
    stat[0] = mx;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) scores[j] = dexp(scores[j] - stat[0]);
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int64_t j = 0; j < visible; ++j) sum += scores[j];
    stat[1] = sum;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) scores[j] = scores[j] / stat[1];
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int64_t j = 0; j < visible; ++j) o += scores[j] * bf_to_f(v[j * qd + head * hd + d]);
    const int64_t idx = t * qd + head * hd + d;
    out[idx] = f_to_bf(gate != nullptr ? o * dsigmoid(gate[idx]) : o);
  }
}

// One attention segment: query rows from q_begin, keys and values from kv_begin of the
// call's k and v, or of its own where it has them.
struct AttentionSegment {
  int64_t q_begin, tq, kv_begin, tk, first_pos;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
};

// Every segment's queries over its own keys, kMaxSegments segments a launch.
void attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* gate,
               const std::vector<AttentionSegment>& segments, int heads, int hd, uint16_t* out) {
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(hd));
  for (size_t i = 0; i < segments.size();) {
    AttentionSegments segs;
    int64_t rows = 0, most_keys = 0;
    for (; i < segments.size() && segs.count < kMaxSegments; ++i) {
      const AttentionSegment& a = segments[i];
      if (a.tq == 0 || a.tk == 0) continue;  // nothing to attend over: out stays as it is
      segs.q_begin[segs.count] = a.q_begin;
      segs.k[segs.count] = a.k != nullptr ? a.k : k;
      segs.v[segs.count] = a.v != nullptr ? a.v : v;
      segs.kv_begin[segs.count] = a.kv_begin;
      segs.tk[segs.count] = a.tk;
      segs.first_pos[segs.count] = a.first_pos;
      segs.q_begin[++segs.count] = a.q_begin + a.tq;
      rows += a.tq;
      most_keys = a.tk > most_keys ? a.tk : most_keys;
    }
    if (segs.count == 0) continue;
    // The scores of tk keys, padded to whole 16-byte words: compute-sanitizer's memcheck
    // flagged a 12-byte shared read just past tk floats (T 5, the last query row), so the
    // array ends on a word boundary with room for the widest load the compiler may issue.
    const size_t smem = static_cast<size_t>((most_keys + 7) / 4 * 4) * sizeof(float);
    if (smem > 48 * 1024)
      throw std::runtime_error("attention on CUDA sees at most 12288 positions");
    attention_kernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads)), kThreads,
                       smem, stream()>>>(q, gate, segs, heads, hd, inv_sqrt_d, out);
  }
}

// Tokens a KDA block sums at once, each by one of its hd threads: at most 16, and at most
// 2048 / hd rows of q and k in shared memory.
__host__ __device__ constexpr int kda_batch(int hd) {
  const int fit = 2048 / hd < 1 ? 1 : 2048 / hd;
  const int most = hd < 16 ? hd : 16;
  return fit < most ? fit : most;
}

// Floats from one staged row to the next in the norm phases, where thread i reads row i
// (or 2i) at the same time as 15 others: hd + 1, so that their rows start in different
// banks (at hd, a multiple of 32, the 16 reads of one step fall in one bank).
__host__ __device__ constexpr int kda_row_stride(int hd) { return hd + 1; }

// A token's rows in shared memory: qv, kv, beta * kv and alpha, each kda_token_stride(hd)
// floats apart (the generic instance keeps two tokens' rows, filling token t + 1's while
// others may still read token t's; the pair instance a chunk's). Key channel i of a row sits at i + 4 * (i / part), part the rows one lane
// owns (kda_pair_kernel): the two lanes of a value channel read their halves in
// different banks.
constexpr int kKdaTokenRows = 4;
__host__ __device__ constexpr int kda_token_stride(int hd) { return hd + 16; }
__host__ __device__ constexpr int kda_token_pos(int i, int part) { return i + 4 * (i / part); }

// Dynamic shared floats of a KDA block: the token rows, then the staged rows.
constexpr size_t kda_shared_floats(int hd) {
  return static_cast<size_t>(2 * kKdaTokenRows) * kda_token_stride(hd) +
         static_cast<size_t>(2 * kda_batch(hd)) * kda_row_stride(hd);
}

// The sums over key channels (u = k^T St and o = St^T q): four quarters, channels
// [q * hd / 4, (q + 1) * hd / 4), each summed in ascending order from zero, then
// (s0 + s1) + (s2 + s3). The order is fixed by the head size alone, so every instance
// below, whatever its lanes, gives the same bits.
__host__ __device__ constexpr int kda_quarter_begin(int hd, int q) { return q * hd / 4; }
__device__ __forceinline__ float kda_add_quarters(const float (&s)[4]) {
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// KDA-lite's recurrence, one block per (head, segment). What does not depend on the
// state runs across tokens: the norms of q and k before the recurrence, the output's
// norm and gate after it, kda_batch(hd) tokens at a time, each sum by one thread in
// ascending channels. Only the state update goes token by token. Segments of a KDA
// launch: rows [begin[i], begin[i+1]) update state[i] (the call's row indices).
struct KdaSegments {
  int count = 0;
  int64_t begin[kMaxSegments + 1];
  float* state[kMaxSegments];
};

// One block's view of a KDA launch: its head, its segment's rows of every per-token array
// and its segment's state.
struct KdaBlock {
  const float *q, *k, *v, *b, *al, *g;
  const uint16_t* o_norm;
  float* state;  // the head's [d_k][d_v]
  float *qk_norm, *o_raw;
  uint16_t* og;
  int64_t t_count, qd;
  int heads, hd, head;
  float eps;
};

__device__ KdaBlock kda_block(const float* q, const float* k, const float* v, const float* b,
                              const float* al, const float* g, const uint16_t* o_norm,
                              const KdaSegments& segs, int heads, int hd, float eps,
                              float* qk_norm, float* o_raw, uint16_t* og) {
  const int64_t qd = static_cast<int64_t>(heads) * hd;
  const int64_t first = segs.begin[blockIdx.y];
  const int head = blockIdx.x;
  return {q + first * qd,
          k + first * qd,
          v + first * qd,
          b + first * heads,
          al + first * qd,
          g + first * qd,
          o_norm,
          segs.state[blockIdx.y] + static_cast<int64_t>(head) * hd * hd,
          qk_norm + first * heads * 2,
          o_raw + first * qd,
          og + first * qd,
          segs.begin[blockIdx.y + 1] - first,
          qd,
          heads,
          hd,
          head,
          eps};
}

// The q and k norms of tokens [t0, t0 + nb), nb <= kda_batch(hd): their rows into shared
// memory, then thread i < nb sums token t0 + i; a barrier after. Threads j >= hd only
// meet the barriers.
__device__ void kda_qk_norms_chunk(const KdaBlock& kb, float* rows, int j, int64_t t0, int nb) {
  const int rs = kda_row_stride(kb.hd);
  if (j < kb.hd) {
    for (int i = 0; i < nb; ++i) {
      const int64_t base = (t0 + i) * kb.qd + kb.head * kb.hd;
      rows[(2 * i) * rs + j] = kb.q[base + j];
      rows[(2 * i + 1) * rs + j] = kb.k[base + j];
    }
  }
  __syncthreads();
  if (j < nb) {
    const float* qr = rows + (2 * j) * rs;
    const float* kr = qr + rs;
    float ssq = 0.0f, ssk = 0.0f;
    for (int i = 0; i < kb.hd; ++i) ssq += qr[i] * qr[i];
    for (int i = 0; i < kb.hd; ++i) ssk += kr[i] * kr[i];
    kb.qk_norm[((t0 + j) * kb.heads + kb.head) * 2] = drsqrt(ssq + kb.eps);
    kb.qk_norm[((t0 + j) * kb.heads + kb.head) * 2 + 1] = drsqrt(ssk + kb.eps);
  }
  __syncthreads();
}

// Tokens [t0, t0 + nb) of a chunk of kda_batch(hd) tokens.
__device__ __forceinline__ int kda_chunk_tokens(const KdaBlock& kb, int64_t t0) {
  const int batch = kda_batch(kb.hd);
  return kb.t_count - t0 < batch ? static_cast<int>(kb.t_count - t0) : batch;
}

// bf16(rmsnorm(o) * sigmoid(g)), `batch` tokens at a time, once the recurrence has written
// o_raw (the caller's barrier first). Threads j >= hd only meet the barriers.
__device__ void kda_output(const KdaBlock& kb, float* rows, float* o_scale, int j) {
  const int rs = kda_row_stride(kb.hd);
  for (int64_t t0 = 0; t0 < kb.t_count; t0 += kda_batch(kb.hd)) {
    const int nb = kda_chunk_tokens(kb, t0);
    if (j < kb.hd)
      for (int i = 0; i < nb; ++i)
        rows[i * rs + j] = kb.o_raw[(t0 + i) * kb.qd + kb.head * kb.hd + j];
    __syncthreads();
    if (j < nb) {
      const float* orow = rows + j * rs;
      float ss = 0.0f;
      for (int i = 0; i < kb.hd; ++i) ss += orow[i] * orow[i];
      o_scale[j] = drsqrt(ss / static_cast<float>(kb.hd) + kb.eps);
    }
    __syncthreads();
    if (j < kb.hd) {
      for (int i = 0; i < nb; ++i) {
        const int64_t at = (t0 + i) * kb.qd + kb.head * kb.hd + j;
        kb.og[at] = f_to_bf(rows[i * rs + j] * o_scale[i] * bf_to_f(kb.o_norm[j]) *
                            dsigmoid(kb.g[at]));
      }
    }
    __syncthreads();
  }
}

// Token t's inputs for value channel j (the next token's load while one updates).
struct KdaInputs {
  float q, k, al, v, b, q_norm, k_norm;
};
__device__ __forceinline__ KdaInputs kda_inputs(const KdaBlock& kb, int64_t t, int j) {
  const int64_t base = t * kb.qd + kb.head * kb.hd;
  return {kb.q[base + j],
          kb.k[base + j],
          kb.al[base + j],
          kb.v[base + j],
          kb.b[t * kb.heads + kb.head],
          kb.qk_norm[(t * kb.heads + kb.head) * 2],
          kb.qk_norm[(t * kb.heads + kb.head) * 2 + 1]};
}

// Token t's rows (see kda_token_stride); value channel j's thread writes channel j of
// each, so beta * kv[j] is formed once.
__device__ __forceinline__ float* kda_token_rows(float* sh, int64_t t, int hd) {
  return sh + (t & 1) * kKdaTokenRows * kda_token_stride(hd);
}
__device__ __forceinline__ void kda_stage_token(float* rows, const KdaInputs& in, int hd, int part,
                                                int j) {
  const int ts = kda_token_stride(hd), at = kda_token_pos(j, part);
  const float beta = dsigmoid(in.b);
  const float kj = in.k * in.k_norm;
  rows[at] = in.q * in.q_norm;
  rows[ts + at] = kj;
  rows[2 * ts + at] = beta * kj;
  rows[3 * ts + at] = 1.0f / (1.0f + dexp(in.al));
}

// The generic instance, at any head size: thread j owns value channel j, its state column
// in place in global memory. Two passes over the column a token: decay each row and add
// its term to u, then update each row and add its term to o.
__global__ void kda_kernel(const float* q, const float* k, const float* v, const float* b,
                           const float* al, const float* g, const uint16_t* o_norm,
                           const KdaSegments segs, int heads, int hd, float eps, float* qk_norm,
                           float* o_raw, uint16_t* og) {
  extern __shared__ float sh[];  // kda_shared_floats(hd)
  float* rows = sh + 2 * kKdaTokenRows * kda_token_stride(hd);
  __shared__ float o_scale[16];
  const KdaBlock kb =
      kda_block(q, k, v, b, al, g, o_norm, segs, heads, hd, eps, qk_norm, o_raw, og);
  const int j = threadIdx.x, ts = kda_token_stride(hd);
  for (int64_t t0 = 0; t0 < kb.t_count; t0 += kda_batch(hd))
    kda_qk_norms_chunk(kb, rows, j, t0, kda_chunk_tokens(kb, t0));
  float* s = kb.state;
  KdaInputs next{};
  if (kb.t_count > 0) next = kda_inputs(kb, 0, j);
  for (int64_t t = 0; t < kb.t_count; ++t) {
    const KdaInputs in = next;
    if (t + 1 < kb.t_count) next = kda_inputs(kb, t + 1, j);
    float* tr = kda_token_rows(sh, t, hd);
    kda_stage_token(tr, in, hd, hd, j);
    __syncthreads();
    const float *qv = tr, *kv = tr + ts, *bkv = tr + 2 * ts, *alpha = tr + 3 * ts;
    float us[4], os[4];
    for (int quarter = 0; quarter < 4; ++quarter) {
      us[quarter] = 0.0f;
      for (int i = kda_quarter_begin(hd, quarter); i < kda_quarter_begin(hd, quarter + 1); ++i) {
        float& e = s[i * hd + j];
        e = e * alpha[i];
        us[quarter] += kv[i] * e;
      }
    }
    const float u = kda_add_quarters(us);
    for (int quarter = 0; quarter < 4; ++quarter) {
      os[quarter] = 0.0f;
      for (int i = kda_quarter_begin(hd, quarter); i < kda_quarter_begin(hd, quarter + 1); ++i) {
        float& e = s[i * hd + j];
        const float bk = bkv[i];
        e = (e - bk * u) + bk * in.v;
        os[quarter] += e * qv[i];
      }
    }
    kb.o_raw[t * kb.qd + kb.head * hd + j] = kda_add_quarters(os);
  }
  __syncthreads();
  kda_output(kb, rows, o_scale, j);
}

// Dynamic shared floats of a kda_pair_kernel block: a chunk's token rows, which the norm
// phases' staged rows reuse before and after the recurrence.
constexpr size_t kda_pair_shared_floats(int hd) {
  const size_t tokens = static_cast<size_t>(kda_batch(hd)) * kKdaTokenRows * kda_token_stride(hd);
  const size_t norms = static_cast<size_t>(2 * kda_batch(hd)) * kda_row_stride(hd);
  return tokens > norms ? tokens : norms;
}

// The instances at a head size known at compile time: two adjacent lanes own value
// channel j, lane l the state rows [l * HD/2, (l + 1) * HD/2) in registers: quarters 2l
// and 2l + 1. Each lane sums its two quarters (two independent chains) and adds them;
// one shuffle gives each lane the other's, and (s0 + s1) + (s2 + s3) is the same sum in
// both lanes (addition commutes). So the bits are the generic instance's, with the state
// in registers and two warps a scheduler to hide the chains' latency (measured against
// one lane and four a channel in docs/performance.md). Tokens go in chunks of
// kda_batch(HD): a chunk's norms, then every token's rows of the chunk staged at once
// (what does not depend on the state: the lanes take alternate tokens), then the chunk's
// recurrence with no barrier between its tokens.
template <int HD>
__global__ void __launch_bounds__(2 * HD)
    kda_pair_kernel(const float* q, const float* k, const float* v, const float* b,
                    const float* al, const float* g, const uint16_t* o_norm,
                    const KdaSegments segs, int heads, int, float eps, float* qk_norm,
                    float* o_raw, uint16_t* og) {
  static_assert(HD % 16 == 0 && HD <= 512);
  constexpr int kPart = HD / 2, kQuarter = HD / 4, kTs = kda_token_stride(HD);
  constexpr int kBatch = kda_batch(HD), kMine = (kBatch + 1) / 2;
  extern __shared__ float sh[];  // kda_pair_shared_floats(HD): token rows or norm rows
  __shared__ float o_scale[16];
  const KdaBlock kb =
      kda_block(q, k, v, b, al, g, o_norm, segs, heads, HD, eps, qk_norm, o_raw, og);
  const int j = threadIdx.x / 2, lane = threadIdx.x % 2, i0 = lane * kPart;
  float e[kPart];
#pragma unroll
  for (int r = 0; r < kPart; ++r) e[r] = kb.state[(i0 + r) * HD + j];
  auto total = [](const float (&mine)[2]) {
    const float half = mine[0] + mine[1];  // s0 + s1 in lane 0, s2 + s3 in lane 1
    return half + __shfl_xor_sync(0xffffffffu, half, 1);
  };
  const int64_t col = kb.head * HD + j;
  for (int64_t t0 = 0; t0 < kb.t_count; t0 += kBatch) {
    const int nb = kda_chunk_tokens(kb, t0);
    kda_qk_norms_chunk(kb, sh, threadIdx.x, t0, nb);
    float vn = kb.v[t0 * kb.qd + col];
    // Stage the chunk: every input load of this lane's tokens first, then their rows.
    KdaInputs in[kMine];
#pragma unroll
    for (int m = 0; m < kMine; ++m)
      if (lane + 2 * m < nb) in[m] = kda_inputs(kb, t0 + lane + 2 * m, j);
#pragma unroll
    for (int m = 0; m < kMine; ++m)
      if (lane + 2 * m < nb)
        kda_stage_token(sh + (lane + 2 * m) * kKdaTokenRows * kTs, in[m], HD, kPart, j);
    __syncthreads();
    // This lane's rows of a token, contiguous and 16-byte aligned: read four at a time.
    const int at = kda_token_pos(i0, kPart);
    for (int i = 0; i < nb; ++i) {
      const float vj = vn;
      if (i + 1 < nb) vn = kb.v[(t0 + i + 1) * kb.qd + col];
      const float* tr = sh + i * kKdaTokenRows * kTs + at;
      const auto* qv = reinterpret_cast<const float4*>(tr);
      const auto* kv = reinterpret_cast<const float4*>(tr + kTs);
      const auto* bkv = reinterpret_cast<const float4*>(tr + 2 * kTs);
      const auto* alpha = reinterpret_cast<const float4*>(tr + 3 * kTs);
      float us[2] = {}, os[2] = {};
#pragma unroll
      for (int c = 0; c < kPart / 4; ++c) {
        const float4 a4 = alpha[c], k4 = kv[c];
        const float av[4] = {a4.x, a4.y, a4.z, a4.w}, kvv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int r = 4 * c + m;
          e[r] = e[r] * av[m];
          us[r / kQuarter] += kvv[m] * e[r];
        }
      }
      const float u = total(us);
#pragma unroll
      for (int c = 0; c < kPart / 4; ++c) {
        const float4 b4 = bkv[c], q4 = qv[c];
        const float bkk[4] = {b4.x, b4.y, b4.z, b4.w}, qvv[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int r = 4 * c + m;
          e[r] = (e[r] - bkk[m] * u) + bkk[m] * vj;
          os[r / kQuarter] += e[r] * qvv[m];
        }
      }
      const float oj = total(os);
      if (lane == 0) kb.o_raw[(t0 + i) * kb.qd + col] = oj;
    }
    __syncthreads();  // the next chunk's norms overwrite these rows
  }
#pragma unroll
  for (int r = 0; r < kPart; ++r) kb.state[(i0 + r) * HD + j] = e[r];
  kda_output(kb, sh, o_scale, threadIdx.x);
}

std::atomic<bool> g_kda_generic{false};

using KdaKernel = decltype(&kda_kernel);

// The instance for head size hd: the state in registers at 64 and 128 (k3-tiny's and
// k3-shape's head sizes), two lanes a value channel; else in global memory, one thread a
// channel.
struct KdaLaunch {
  KdaKernel kernel;
  int threads;
  size_t shared_floats;
};
KdaLaunch kda_instance(int hd) {
  if (!g_kda_generic.load(std::memory_order_relaxed)) {
    if (hd == 64) return {kda_pair_kernel<64>, 128, kda_pair_shared_floats(64)};
    if (hd == 128) return {kda_pair_kernel<128>, 256, kda_pair_shared_floats(128)};
  }
  return {kda_kernel, hd, kda_shared_floats(hd)};
}

// x [rows, in] bf16 times W [in, out] -> bf16 [rows, out], rounded once.
void project_bf16(Staging& s, const uint16_t* x, int64_t rows, int64_t in, const Tensor* w,
                  uint16_t* out) {
  gemm_bf16(x, as<uint16_t>(s.in(w)), out, rows, w->dim(1), in);
}

// Segments of a latent gather: segment i's cache holds prev[i] latents; its fresh rows
// start at row q_begin[i] of the call's projection; its context goes to rows
// [kv_begin[i], kv_begin[i + 1]) of the gathered array.
struct LatentSegments {
  int count = 0;
  uint16_t* cache[kMaxSegments];
  int64_t prev[kMaxSegments];
  int64_t q_begin[kMaxSegments];
  int64_t kv_begin[kMaxSegments + 1];
};

// Block (x, i) copies its share of segment i's context into `all`: earlier latents from
// its cache, fresh ones from the projection, which it also appends to the cache.
__global__ void gather_latents_kernel(const uint16_t* fresh, const LatentSegments segs, int64_t r,
                                      uint16_t* all) {
  const int i = blockIdx.y;
  const int64_t prev = segs.prev[i];
  const int64_t n = (segs.kv_begin[i + 1] - segs.kv_begin[i]) * r;
  uint16_t* cache = segs.cache[i];
  uint16_t* out = all + segs.kv_begin[i] * r;
  const int64_t own = (segs.q_begin[i] - prev) * r;  // element e >= prev * r is fresh[own + e]
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint16_t v;
    if (e < prev * r) {
      v = cache[e];
    } else {
      v = fresh[own + e];
      cache[e] = v;
    }
    out[e] = v;
  }
}

// Appends each segment's fresh latents to its cache and gathers every segment's context
// (earlier latents, then fresh) into `all`, one launch per kMaxSegments segments.
void gather_latents(const uint16_t* fresh, const std::vector<LatentCache*>& caches,
                    const std::vector<AttentionSegment>& segments, int64_t r, uint16_t* all) {
  constexpr int kGatherThreads = 256;
  for (size_t i = 0; i < segments.size();) {
    LatentSegments table;
    table.kv_begin[0] = segments[i].kv_begin;
    int64_t most = 0;
    for (; i < segments.size() && table.count < kMaxSegments; ++i) {
      const AttentionSegment& a = segments[i];
      table.cache[table.count] = static_cast<uint16_t*>(caches[i]->rows.address());
      table.prev[table.count] = a.first_pos;
      table.q_begin[table.count] = a.q_begin;
      table.kv_begin[++table.count] = a.kv_begin + a.tk;
      most = a.tk * r > most ? a.tk * r : most;
    }
    const int64_t blocks =
        std::clamp<int64_t>((most + kGatherThreads - 1) / kGatherThreads, 1, 1024);
    gather_latents_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(table.count)),
                            kGatherThreads, 0, stream()>>>(fresh, table, r, all);
  }
}

// A segmented call's bounds and owners (caches or states), or the call's one segment.
template <typename Own>
struct SegmentTable {
  std::vector<int64_t> begin;
  std::vector<Own*> owners;
};
template <typename Args, typename Own>
SegmentTable<Own> segment_table(const Args& a, std::span<Own* const> table, Own* one) {
  if (a.begin.empty()) return {{0, a.x->dim(0)}, {one}};
  const std::vector<const void*> owners(table.begin(), table.end());
  check_segments(a.begin, owners, *a.x, *a.out);
  return {{a.begin.begin(), a.begin.end()}, {table.begin(), table.end()}};
}

}  // namespace

bool kda_head_size_compiled(int hd) { return hd == 64 || hd == 128; }
void kda_force_generic_for_test(bool on) { g_kda_generic.store(on, std::memory_order_relaxed); }

void mla_attention(MlaArgs& a) {
  Staging s;
  const int64_t t_count = a.x->dim(0), h = a.x->dim(1), r = a.w_dkv->dim(1);
  const int64_t qd = static_cast<int64_t>(a.heads) * a.head_dim;
  const SegmentTable<LatentCache> segs = segment_table(a, a.caches, a.cache);
  const size_t n = segs.owners.size();
  const auto* x = as<uint16_t>(s.in(a.x));
  // q and g together (one launch for a few tokens), q rounded to bf16 after.
  // On the side stream, beside the latents' path below (they meet at attention()), where
  // the call's weights are large enough for the overlap to pay.
  float* qg = s.scratch<float>(2 * t_count * qd);
  uint16_t* q = s.scratch<uint16_t>(t_count * qd);
  const uint16_t* qg_w[2] = {as<uint16_t>(s.in(a.w_q)), as<uint16_t>(s.in(a.w_g))};
  const size_t weight_bytes = a.w_q->nbytes() + a.w_g->nbytes() + a.w_dkv->nbytes() +
                              a.w_uk->nbytes() + a.w_uv->nbytes() + a.w_o->nbytes();
  SideWork q_and_g(
      [&] {
        multi_gemm(x, qg_w, qg, t_count, qd, h);
        round_to_bf16(qg, q, t_count * qd);
      },
      weight_bytes >= kSideMinBytes);
  const float* g = qg + t_count * qd;

  // Each cache, in device memory: earlier latents, then its segment's latents appended.
  // One segment projects straight into its cache and attends over it; several project
  // once over every row, append their rows to their caches, and attend over every
  // segment's latents gathered in one array (so the key and value products run once).
  std::vector<AttentionSegment> attend(n);
  int64_t n_all = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t prev = segs.owners[i]->positions, rows = segs.begin[i + 1] - segs.begin[i];
    attend[i] = {segs.begin[i], rows, n_all, prev + rows, prev};
    n_all += prev + rows;
    reserve_latents(*segs.owners[i], prev + rows, r, Device::kCuda);
  }
  const uint16_t* latents = nullptr;
  if (n == 1) {
    auto* cache = static_cast<uint16_t*>(segs.owners[0]->rows.address());
    project_bf16(s, x, t_count, h, a.w_dkv, cache + attend[0].first_pos * r);
    latents = cache;
  } else {
    uint16_t* fresh = s.scratch<uint16_t>(t_count * r);
    project_bf16(s, x, t_count, h, a.w_dkv, fresh);
    uint16_t* all = s.scratch<uint16_t>(n_all * r);
    gather_latents(fresh, segs.owners, attend, r, all);
    latents = all;
  }
  for (size_t i = 0; i < n; ++i) segs.owners[i]->positions = attend[i].tk;

  uint16_t* cn = s.scratch<uint16_t>(n_all * r);
  rms_rows(latents, as<uint16_t>(s.in(a.kv_norm)), n_all, r, a.eps, cn);
  uint16_t* k = s.scratch<uint16_t>(n_all * qd);
  uint16_t* v = s.scratch<uint16_t>(n_all * qd);
  project_bf16(s, cn, n_all, r, a.w_uk, k);
  project_bf16(s, cn, n_all, r, a.w_uv, v);

  uint16_t* og = s.scratch<uint16_t>(t_count * qd);
  q_and_g.join();
  attention(q, k, v, g, attend, a.heads, a.head_dim, og);
  project_bf16(s, og, t_count, qd, a.w_o, static_cast<uint16_t*>(s.inout(a.out)));
  s.done();
}

void kda_attention(KdaArgs& a) {
  Staging s;
  const int64_t t_count = a.x->dim(0), h = a.x->dim(1);
  const int hd = a.head_dim;
  const int64_t qd = static_cast<int64_t>(a.heads) * hd;
  if (hd > 1024) throw std::runtime_error("KDA on CUDA supports a head size of at most 1024");
  const SegmentTable<Tensor> segs = segment_table(a, a.states, a.state);
  const auto* x = as<uint16_t>(s.in(a.x));
  // q, k, v, alpha's logits and g: [5, T, qd], one launch for a few tokens.
  float* proj = s.scratch<float>(5 * t_count * qd);
  float *q = proj, *k = proj + t_count * qd, *v = proj + 2 * t_count * qd,
        *al = proj + 3 * t_count * qd, *g = proj + 4 * t_count * qd;
  float* b = s.scratch<float>(t_count * a.heads);
  const uint16_t* square[5] = {as<uint16_t>(s.in(a.w_q)), as<uint16_t>(s.in(a.w_k)),
                               as<uint16_t>(s.in(a.w_v)), as<uint16_t>(s.in(a.w_a)),
                               as<uint16_t>(s.in(a.w_g))};
  const auto* w_b = as<uint16_t>(s.in(a.w_b));
  size_t weight_bytes = a.w_b->nbytes() + a.w_o->nbytes();
  for (const Tensor* w : {a.w_q, a.w_k, a.w_v, a.w_a, a.w_g}) weight_bytes += w->nbytes();
  SideWork beta_logits([&] { gemm(x, w_b, b, t_count, a.heads, h, false); },  // beside
                       weight_bytes >= kSideMinBytes);
  multi_gemm(x, square, proj, t_count, qd, h);
  beta_logits.join();
  uint16_t* og = s.scratch<uint16_t>(t_count * qd);
  if (t_count > 0) {
    float* qk_norm = s.scratch<float>(2 * t_count * a.heads);
    float* o_raw = s.scratch<float>(t_count * qd);
    const auto launch = kda_instance(hd);
    const size_t smem = launch.shared_floats * sizeof(float);
    // Large head sizes stage more than the default 48 KiB (the generic instance at about
    // 1000 channels and more).
    if (smem > 48 * 1024) allow_smem(reinterpret_cast<const void*>(launch.kernel), smem);
    // One block per (head, segment), kMaxSegments segments a launch.
    for (size_t i = 0; i < segs.owners.size();) {
      KdaSegments table;
      table.begin[0] = segs.begin[i];
      for (; i < segs.owners.size() && table.count < kMaxSegments; ++i) {
        table.state[table.count] = static_cast<float*>(s.inout(segs.owners[i]));
        table.begin[++table.count] = segs.begin[i + 1];
      }
      launch.kernel<<<dim3(static_cast<unsigned>(a.heads), static_cast<unsigned>(table.count)),
                      static_cast<unsigned>(launch.threads), smem, stream()>>>(q, k, v, b, al, g,
                                                            as<uint16_t>(s.in(a.o_norm)), table,
                                                            a.heads, hd, a.eps, qk_norm, o_raw, og);
    }
  }
  project_bf16(s, og, t_count, qd, a.w_o, static_cast<uint16_t*>(s.inout(a.out)));
  s.done();
}

void dense_attention(DenseAttentionArgs& a) {
  Staging s;
  std::vector<AttentionSegment> segments;
  if (a.begin.empty()) {
    segments.push_back(
        {0, a.q->dim(0), 0, a.k->dim(0), -1, as<uint16_t>(s.in(a.k)), as<uint16_t>(s.in(a.v))});
  }
  for (size_t i = 0; i + 1 < a.begin.size(); ++i)
    segments.push_back({a.begin[i], a.begin[i + 1] - a.begin[i], 0, a.keys[i]->dim(0), -1,
                        as<uint16_t>(s.in(a.keys[i])), as<uint16_t>(s.in(a.values[i]))});
  attention(as<uint16_t>(s.in(a.q)), nullptr, nullptr, nullptr, segments, a.heads, a.head_dim,
            static_cast<uint16_t*>(s.inout(a.out)));
  s.done();
}

}  // namespace splitcheck::cuda
