// The matrix products every CUDA op takes (kernels/cuda/gemm.cu), declared for host code
// too (the tests compare their paths).
#pragma once

#include <cstdint>

namespace splitcheck::cuda {

// C[m, n] (float32, row-major) = A[m, k] (bf16, row-major) times B, where B is bf16
// [k, n] row-major, or [n, k] row-major when b_nk. Through cuBLASLt: float32 compute, no
// TF32, the algorithm chosen once per shape and pinned (gemm.cu).
// A product of at most kSkinnyMaxRows rows with B [k, n] takes skinny_gemm instead, one of
// at most kTcMaxRows tc_multi_gemm.
void gemm(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k,
          bool b_nk);
// gemm(), rounded once to bf16 into `out` [m, n]: the same bits on every path (the
// skinny and tensor-core kernels round in their launch, cuBLASLt in its epilogue where the
// shape's algorithm allows, else by a rounding pass).
void gemm_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t m, int64_t n,
               int64_t k);

}  // namespace splitcheck::cuda
