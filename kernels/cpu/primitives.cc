#include "kernels/cpu/primitives.h"

#include <cmath>
#include <vector>

#include "kernels/math.h"

namespace splitcheck::cpu {

namespace {

// The bodies are inlined into one function per instruction set (below): the baseline
// (SSE2 on x86-64) and, on x86-64, AVX2. Every output is the same ascending chain of
// rounded products and adds in each, since the vectors only take independent outputs
// side by side and -ffp-contract=off keeps every multiply and add apart: the bits do not
// depend on the machine (MatmulTest runs every variant the machine has against the plain
// loop).
#if defined(__x86_64__) && defined(__GNUC__)
#define SPLITCHECK_INLINE [[gnu::always_inline]] inline
#define SPLITCHECK_AVX2 1
#else
#define SPLITCHECK_INLINE inline
#define SPLITCHECK_AVX2 0
#endif

// One tile of out[t0 .. t0+R) x [n0 .. n0+C): the accumulators stay in registers while k
// runs 0..k_dim-1, so every output sums its k terms in ascending order, each product
// rounded before its add (no contraction), exactly as a plain k loop would.
template <int64_t R, int64_t C>
SPLITCHECK_INLINE void matmul_tile(const float* x, int64_t t0, int64_t k_dim, const bf16* w,
                                   int64_t n_dim, int64_t n0, float* out) {
  float acc[R][C] = {};
  for (int64_t k = 0; k < k_dim; ++k) {
    float wv[C];
    const bf16* wr = w + k * n_dim + n0;
    for (int64_t j = 0; j < C; ++j) wv[j] = to_f32(wr[j]);
    for (int64_t r = 0; r < R; ++r) {
      const float xv = x[(t0 + r) * k_dim + k];
      for (int64_t j = 0; j < C; ++j) acc[r][j] += xv * wv[j];
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < C; ++j) out[(t0 + r) * n_dim + n0 + j] = acc[r][j];
}

// The same sum for the columns past the last whole tile, one output at a time.
SPLITCHECK_INLINE void matmul_column(const float* x, int64_t t, int64_t k_dim, const bf16* w,
                                     int64_t n_dim, int64_t n, float* out) {
  float acc = 0.0f;
  for (int64_t k = 0; k < k_dim; ++k) acc += x[t * k_dim + k] * to_f32(w[k * n_dim + n]);
  out[t * n_dim + n] = acc;
}

// One row: the weight read once, row by row in memory order, each output's running sum in
// `out` (k ascending, as in a tile), so the loads stream rather than stride by n_dim. A
// decode's products on k3-tiny: 2-4x faster than the tiles for weights out of cache.
SPLITCHECK_INLINE void matmul_row(const float* x, int64_t k_dim, const bf16* w, int64_t n_dim,
                                  float* out) {
  for (int64_t n = 0; n < n_dim; ++n) out[n] = 0.0f;
  for (int64_t k = 0; k < k_dim; ++k) {
    const float xv = x[k];
    const bf16* wr = w + k * n_dim;
    for (int64_t n = 0; n < n_dim; ++n) out[n] += xv * to_f32(wr[n]);
  }
}

SPLITCHECK_INLINE void matmul_body(const float* x, int64_t rows, int64_t k_dim, const bf16* w,
                                   int64_t n_dim, float* out) {
  if (rows == 1) return matmul_row(x, k_dim, w, n_dim, out);
  constexpr int64_t kRows = 4, kCols = 16;
  const int64_t whole_cols = n_dim - n_dim % kCols;
  for (int64_t n0 = 0; n0 < whole_cols; n0 += kCols) {
    int64_t t = 0;
    for (; t + kRows <= rows; t += kRows) matmul_tile<kRows, kCols>(x, t, k_dim, w, n_dim, n0, out);
    for (; t < rows; ++t) matmul_tile<1, kCols>(x, t, k_dim, w, n_dim, n0, out);
  }
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t n = whole_cols; n < n_dim; ++n) matmul_column(x, t, k_dim, w, n_dim, n, out);
}

SPLITCHECK_INLINE void matmul_nt_body(const float* x, int64_t rows, int64_t k_dim, const bf16* w,
                                      int64_t n_dim, float* out) {
  constexpr int64_t kBlock = 8;
  for (int64_t t = 0; t < rows; ++t) {
    const float* xt = x + t * k_dim;
    float* ot = out + t * n_dim;
    int64_t n0 = 0;
    for (; n0 + kBlock <= n_dim; n0 += kBlock) {
      float acc[kBlock] = {};
      for (int64_t k = 0; k < k_dim; ++k) {
        const float xv = xt[k];
        for (int64_t j = 0; j < kBlock; ++j) acc[j] += xv * to_f32(w[(n0 + j) * k_dim + k]);
      }
      for (int64_t j = 0; j < kBlock; ++j) ot[n0 + j] = acc[j];
    }
    for (; n0 < n_dim; ++n0) {
      float acc = 0.0f;
      for (int64_t k = 0; k < k_dim; ++k) acc += xt[k] * to_f32(w[n0 * k_dim + k]);
      ot[n0] = acc;
    }
  }
}

void matmul_baseline(const float* x, int64_t rows, int64_t k_dim, const bf16* w, int64_t n_dim,
                     float* out) {
  matmul_body(x, rows, k_dim, w, n_dim, out);
}
void matmul_nt_baseline(const float* x, int64_t rows, int64_t k_dim, const bf16* w,
                        int64_t n_dim, float* out) {
  matmul_nt_body(x, rows, k_dim, w, n_dim, out);
}

#if SPLITCHECK_AVX2
[[gnu::target("avx2")]] void matmul_avx2(const float* x, int64_t rows, int64_t k_dim,
                                         const bf16* w, int64_t n_dim, float* out) {
  matmul_body(x, rows, k_dim, w, n_dim, out);
}
[[gnu::target("avx2")]] void matmul_nt_avx2(const float* x, int64_t rows, int64_t k_dim,
                                            const bf16* w, int64_t n_dim, float* out) {
  matmul_nt_body(x, rows, k_dim, w, n_dim, out);
}
bool has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#endif

}  // namespace

void matmul(const float* x, int64_t rows, int64_t k_dim, const bf16* w, int64_t n_dim, float* out) {
#if SPLITCHECK_AVX2
  if (has_avx2()) return matmul_avx2(x, rows, k_dim, w, n_dim, out);
#endif
  matmul_baseline(x, rows, k_dim, w, n_dim, out);
}

void matmul_nt(const float* x, int64_t rows, int64_t k_dim, const bf16* w, int64_t n_dim,
               float* out) {
#if SPLITCHECK_AVX2
  if (has_avx2()) return matmul_nt_avx2(x, rows, k_dim, w, n_dim, out);
#endif
  matmul_nt_baseline(x, rows, k_dim, w, n_dim, out);
}

std::vector<MatmulVariant> matmul_variants() {
  std::vector<MatmulVariant> v = {{"baseline", true, matmul_baseline, matmul_nt_baseline}};
#if SPLITCHECK_AVX2
  v.push_back({"avx2", has_avx2(), matmul_avx2, matmul_nt_avx2});
#endif
  return v;
}

float rms_scale(const float* v, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
  return fmath::rsqrt(ss / static_cast<float>(n) + eps);
}

void softmax(float* s, int64_t n) {
  float mx = s[0];
  for (int64_t i = 1; i < n; ++i) mx = s[i] > mx ? s[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = fmath::exp(s[i] - mx);
    sum += s[i];
  }
  for (int64_t i = 0; i < n; ++i) s[i] = s[i] / sum;
}

int64_t argmax(const float* v, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(v[i])) continue;
    if (best < 0 || v[i] > v[best]) best = i;
  }
  return best < 0 ? 0 : best;
}

int64_t second_argmax(const float* v, int64_t n, int64_t best) {
  int64_t pick = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (i == best || std::isnan(v[i])) continue;
    if (pick < 0 || v[i] > v[pick]) pick = i;
  }
  return pick < 0 ? best : pick;
}

void widen(const bf16* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

}  // namespace splitcheck::cpu
