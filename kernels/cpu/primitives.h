// Float32 building blocks of the CPU kernels, each with one fixed operation order.
//
// Matrix products sum over the inner dimension strictly in ascending index for every
// output element; the inner loop runs across independent outputs, so the compiler may
// vectorise it without changing a single rounding.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/bf16.h"

namespace splitcheck::cpu {

// out[t][n] = sum_k x[t][k] * W[k][n], W bf16 [K, N] row-major, k ascending.
void matmul(const float* x, int64_t rows, int64_t k_dim, const bf16* w, int64_t n_dim, float* out);

// out[t][n] = sum_k x[t][k] * W[n][k], W bf16 [N, K] row-major, k ascending.
void matmul_nt(const float* x, int64_t rows, int64_t k_dim, const bf16* w, int64_t n_dim,
               float* out);

// The products compiled for each instruction set this build targets ("baseline", and
// "avx2" on x86-64), with whether this machine runs it: matmul() and matmul_nt() take the
// widest that runs, and every variant gives the same bits (tests compare them).
using MatmulFn = void (*)(const float* x, int64_t rows, int64_t k_dim, const bf16* w,
                          int64_t n_dim, float* out);
struct MatmulVariant {
  const char* name;
  bool runs_here;
  MatmulFn matmul;
  MatmulFn matmul_nt;
};
std::vector<MatmulVariant> matmul_variants();

// rsqrt(mean(v^2) + eps), the sum of squares taken in ascending index.
float rms_scale(const float* v, int64_t n, float eps);

// In-place softmax: max, then exp(s - max), then the sum in ascending index, then divide.
void softmax(float* s, int64_t n);

// Index of the largest value, lowest index on ties; NaN never wins over a number.
int64_t argmax(const float* v, int64_t n);

// Index of the largest value other than v[best], lowest index on ties; NaN never wins;
// `best` itself when no other value is a number.
int64_t second_argmax(const float* v, int64_t n, int64_t best);

// Widen n bf16 values to float32.
void widen(const bf16* src, int64_t n, float* dst);

}  // namespace splitcheck::cpu
