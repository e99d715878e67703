// Row-major blocks of a dataset for streaming reads: each block is one hyperslab and one
// contiguous range of elements, at most a given number of bytes (but at least one
// element). Shared by the comparator and the integrity check, which both stream a
// dataset once in order (so its digest can be checked in the same pass).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/status.h"
#include "kernels/tensor.h"

namespace splitcheck {

// One block of a dataset: a hyperslab that is also a contiguous range of elements.
struct SlabBlock {
  std::vector<int64_t> start, count;
  int64_t offset = 0;  // flat index of the first element
  int64_t elements = 0;
};

// Set once the process is ending (the runner's interrupt watch sets it on SIGINT, SIGTERM or
// SIGHUP): every streamed read stops at its next block with an error, so a sweep told to
// stop writes its report without first reading a large dump to its end.
inline std::atomic<bool>& dump_reading_stopped() {
  static std::atomic<bool> stopped{false};
  return stopped;
}

// Splits `shape` into row-major blocks of at most `max_bytes` (but at least one
// element), each a single hyperslab: indices fixed on the outer axes, a run along axis
// k, whole extents on the axes after k. Calls fn(block) in order until it fails, or until
// dump_reading_stopped() (an internal error saying so).
template <typename Fn>
Status for_each_block(const Shape& shape, size_t element_size, size_t max_bytes, Fn&& fn) {
  SlabBlock block;
  if (shape.empty()) {
    block.elements = 1;
    return fn(block);
  }
  for (int64_t d : shape)
    if (d == 0) return Status::ok();
  const size_t rank = shape.size();
  // inner[k]: elements below axis k (the product of the extents after k).
  std::vector<int64_t> inner(rank, 1);
  for (size_t k = rank - 1; k > 0; --k) inner[k - 1] = inner[k] * shape[k];
  size_t k = 0;
  while (k + 1 < rank && static_cast<size_t>(inner[k]) * element_size > max_bytes) ++k;
  int64_t run = std::clamp<int64_t>(
      static_cast<int64_t>(max_bytes / (static_cast<size_t>(inner[k]) * element_size)), 1,
      shape[k]);
  block.start.assign(rank, 0);
  block.count = shape;
  for (size_t i = 0; i < k; ++i) block.count[i] = 1;
  int64_t outer = 1;
  for (size_t i = 0; i < k; ++i) outer *= shape[i];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o;
    for (size_t i = k; i-- > 0;) {
      block.start[i] = rest % shape[i];
      rest /= shape[i];
    }
    for (int64_t j = 0; j < shape[k]; j += run) {
      block.start[k] = j;
      block.count[k] = std::min(run, shape[k] - j);
      block.offset = (o * shape[k] + j) * inner[k];
      block.elements = block.count[k] * inner[k];
      if (dump_reading_stopped().load(std::memory_order_relaxed))
        return internal_error("reading stopped: splitcheck was interrupted");
      RETURN_IF_ERROR(fn(block));
    }
  }
  return Status::ok();
}

}  // namespace splitcheck
