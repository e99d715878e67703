#include "kernels/cpu/primitives.h"

#include <cmath>
#include <vector>

#include "kernels/math.h"

namespace splitcheck::cpu {

void matmul(const float* x, int64_t rows, int64_t k_dim, const bf16* w, int64_t n_dim, float* out) {
  // k outer: each weight row is widened once and applied to every row of x; every
  // output still sums its k terms in ascending order.
  std::vector<float> wk(static_cast<size_t>(n_dim));
  for (int64_t i = 0; i < rows * n_dim; ++i) out[i] = 0.0f;
  for (int64_t k = 0; k < k_dim; ++k) {
    widen(w + k * n_dim, n_dim, wk.data());
    const float* wr = wk.data();
    for (int64_t t = 0; t < rows; ++t) {
      const float xv = x[t * k_dim + k];
      float* acc = out + t * n_dim;
      for (int64_t n = 0; n < n_dim; ++n) acc[n] += xv * wr[n];
    }
  }
}

void matmul_nt(const float* x, int64_t rows, int64_t k_dim, const bf16* w, int64_t n_dim,
               float* out) {
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

void widen(const bf16* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

}  // namespace splitcheck::cpu
