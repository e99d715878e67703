// The skinny kernel's fixed summing order (kernels/cuda/skinny_gemm.cu), for the test
// that recomputes its products on the host: k is cut into chunks of skinny_chunk_rows(n, k)
// rows (the last may be shorter); in a chunk, warp w of 8 sums rows chunk + w,
// chunk + w + 8, ... ascending by fused multiply-add from zero; the 8 warp sums are added
// in warp order and the chunk sums in chunk order.
#pragma once

#include <cstdint>

namespace splitcheck::cuda {

inline constexpr int kSkinnyWarps = 8;
int64_t skinny_chunk_rows(int64_t n, int64_t k);

}  // namespace splitcheck::cuda
