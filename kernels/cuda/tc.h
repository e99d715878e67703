// The tensor-core kernel (kernels/cuda/tc_gemm.cu): its entry point, and its fixed summing order:
// k is cut into chunks of tc_chunk_rows(n, k) rows (the last may be shorter); in a chunk a
// float accumulator takes one mma.m16n8k16 (bf16 in, float32 accumulate) per 16 rows of
// k, ascending from zero; the chunk sums are added in chunk order. Each row's bits depend
// on its own inputs and (k, n) alone: never on the row count, the rows beside it, or how
// many weights share the launch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace splitcheck::cuda {

// Products of 9 to kTcMaxRows rows with B [k, n] of at most kTcMaxDepth rows (one chunk,
// whose sums go straight to C) take this kernel in gemm(), gemm_bf16() and multi_gemm():
// each weight read once, the bf16 rounding in the same launch, one launch for every weight
// of a multi_gemm. Deeper weights take cuBLASLt, measured faster there (docs/cuda.md).
inline constexpr int64_t kTcMaxRows = 64;
inline constexpr int64_t kTcMaxDepth = 256;
inline constexpr int kTcMaxWeights = 8;
// C [G, m, n] = A [m, k] times each of the G <= kTcMaxWeights weights bs (bf16 [k, n], device
// memory), float32 into `c` and/or rounded to bf16 into `c_bf16` (either may be null), in
// one launch queued on the thread's stream; 1 <= m <= kTcMaxRows.
// The kernel's tile shape is its own choice (tc_gemm.cu), and never changes a bit.
void tc_multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                   uint16_t* c_bf16, int64_t m, int64_t n, int64_t k);

// A block's tile: `rows` rows of A (16, 32, 48 or 64; 0 every row of the product) by
// `cols` columns of a weight (32, 64 or 128).
struct TcTile {
  int rows = 0;
  int cols = 128;
};
bool valid_tc_tile(const TcTile& tile);
// tc_multi_gemm with the given tile (nullopt: the kernel's choice), for the tests that
// show every shape gives the same bits; throws std::logic_error on a tile not valid_tc_tile().
void tc_multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                   uint16_t* c_bf16, int64_t m, int64_t n, int64_t k, std::optional<TcTile> tile);

// SwiGLU's hidden in one launch: hidden [m, n] = bf16(silu(bf16(A gate)) * bf16(A up)) for
// gate and up bf16 [k, n] of at most kTcMaxDepth rows (device memory), 1 <= m <= kTcMaxRows:
// each product's sums are the bits tc_multi_gemm gives it, and no float32 product is
// stored. Throws std::logic_error on other shapes or a tile not valid_tc_tile().
void tc_swiglu(const uint16_t* a, const uint16_t* gate, const uint16_t* up, uint16_t* hidden,
               int64_t m, int64_t n, int64_t k, std::optional<TcTile> tile = std::nullopt);

inline constexpr int kTcTile = 128;  // columns of a weight that the chunking counts a block
inline constexpr int kTcStep = 32;   // rows of k a pipeline stage
int64_t tc_chunk_rows(int64_t n, int64_t k);

}  // namespace splitcheck::cuda
