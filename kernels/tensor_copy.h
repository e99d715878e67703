// Byte copies between tensors wherever they live: the backend-neutral way to move payload
// bytes (harness/engine/handoff.h) without the host touching device memory.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/tensor.h"

namespace splitcheck {

// Copies `runs` runs of `width` bytes from `src` into `dst`'s bytes (shared with its
// copies): run i from byte src_offset + i * src_pitch of `src` to byte
// dst_offset + i * dst_pitch of `dst`. Between host tensors a host memcpy per run; between
// a host and a device tensor, one device copy (cudaMemcpy2D) that has finished on return;
// between device tensors, one queued on the thread's stream like a kernel (no host wait:
// the thread's later kernels see the bytes, another thread after the hand-over's
// synchronisation, harness/transport).
// Throws std::out_of_range when a run falls outside either tensor (or pitches overlap runs).
void copy_tensor_runs(Tensor& dst, size_t dst_offset, size_t dst_pitch, const Tensor& src,
                      size_t src_offset, size_t src_pitch, size_t width, size_t runs);

// One run of bytes between two tensors (copy_runs).
struct CopyRun {
  Tensor* dst = nullptr;
  size_t dst_offset = 0;
  const Tensor* src = nullptr;
  size_t src_offset = 0;
  size_t bytes = 0;
};

// Copies every run as copy_tensor_runs copies one, in order (runs must not overlap one
// another's destinations or read what another writes). When every run is between device
// tensors, they are queued together: one launch for up to 32 runs, a serving step's rows
// scattered to each request's own tensors without a launch each.
// Throws std::out_of_range when a run falls outside either tensor.
void copy_runs(std::span<const CopyRun> runs);

// `dst`'s bytes become `src`'s (equal sizes, else std::invalid_argument), copied as above:
// between device tensors queued like a kernel, the host not waiting (Tensor::clone waits).
void copy_tensor(Tensor& dst, const Tensor& src);
// A copy of `t` where it is, made as copy_tensor makes it: on a device, ready for the
// calling thread's later kernels as a kernel's output is, without a host wait.
Tensor clone_queued(const Tensor& t);

}  // namespace splitcheck
