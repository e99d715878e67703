#include "kernels/tensor_copy.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {
namespace {

// Whether runs of `width` bytes at offset + i * pitch, i < runs, lie inside `total` bytes.
bool fits(size_t offset, size_t pitch, size_t width, size_t runs, size_t total) {
  if (offset > total || width > total - offset) return false;
  if (runs == 1) return true;
  if (pitch < width) return false;
  return (runs - 1) <= (total - offset - width) / pitch;
}

}  // namespace

void copy_tensor_runs(Tensor& dst, size_t dst_offset, size_t dst_pitch, const Tensor& src,
                      size_t src_offset, size_t src_pitch, size_t width, size_t runs) {
  if (width == 0 || runs == 0) return;
  if (!fits(src_offset, src_pitch, width, runs, src.nbytes()) ||
      !fits(dst_offset, dst_pitch, width, runs, dst.nbytes()))
    throw std::out_of_range("copy_tensor_runs: a run falls outside a tensor");
  std::byte* to = static_cast<std::byte*>(dst.address()) + dst_offset;
  const std::byte* from = static_cast<const std::byte*>(src.address()) + src_offset;
  if (runs == 1) dst_pitch = src_pitch = width;
#ifdef SPLITCHECK_HAVE_CUDA
  if (dst.device() == Device::kCuda && src.device() == Device::kCuda) {
    cuda::copy_2d_queued(to, dst_pitch, from, src_pitch, width, runs);
    return;
  }
  if (dst.device() == Device::kCuda || src.device() == Device::kCuda) {
    cuda::copy_2d(to, dst_pitch, from, src_pitch, width, runs);
    return;
  }
#endif
  for (size_t i = 0; i < runs; ++i) std::memcpy(to + i * dst_pitch, from + i * src_pitch, width);
}

void copy_runs(std::span<const CopyRun> runs) {
  bool queued = true;
  for (const CopyRun& r : runs) {
    if (!fits(r.src_offset, 0, r.bytes, 1, r.src->nbytes()) ||
        !fits(r.dst_offset, 0, r.bytes, 1, r.dst->nbytes()))
      throw std::out_of_range("copy_runs: a run falls outside a tensor");
    queued = queued && r.dst->device() == Device::kCuda && r.src->device() == Device::kCuda;
  }
#ifdef SPLITCHECK_HAVE_CUDA
  if (queued) {
    std::vector<cuda::DeviceCopy> copies;
    for (const CopyRun& r : runs)
      if (r.bytes > 0)
        copies.push_back(cuda::DeviceCopy{
            static_cast<std::byte*>(r.dst->address()) + r.dst_offset,
            static_cast<const std::byte*>(r.src->address()) + r.src_offset, r.bytes});
    cuda::copy_runs_queued(copies);
    return;
  }
#endif
  for (const CopyRun& r : runs)
    copy_tensor_runs(*r.dst, r.dst_offset, r.bytes, *r.src, r.src_offset, r.bytes, r.bytes, 1);
}

void copy_tensor(Tensor& dst, const Tensor& src) {
  if (dst.nbytes() != src.nbytes())
    throw std::invalid_argument("copy_tensor: " + std::to_string(src.nbytes()) +
                                " bytes into a tensor of " + std::to_string(dst.nbytes()));
  copy_tensor_runs(dst, 0, dst.nbytes(), src, 0, src.nbytes(), src.nbytes(), 1);
}

Tensor clone_queued(const Tensor& t) {
  Tensor out = Tensor::for_overwrite(t.dtype(), t.shape(), t.device());
  copy_tensor(out, t);
  return out;
}

}  // namespace splitcheck
