#include "kernels/tensor.h"

#include <cstring>
#include <stdexcept>

#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF32:
      return "float32";
    case DType::kI32:
      return "int32";
    case DType::kF16:
      return "float16";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType& out) {
  for (DType d : {DType::kBF16, DType::kF32, DType::kI32, DType::kF16}) {
    if (name == dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

const char* device_name(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

namespace {

// Owned storage of `bytes` bytes on `device`: zeros, except on kCuda when not `cleared`.
std::shared_ptr<void> allocate(size_t bytes, Device device, bool cleared) {
  if (device == Device::kCuda) {
#ifdef SPLITCHECK_HAVE_CUDA
    return cleared ? cuda::device_zeros(bytes) : cuda::device_uncleared(bytes);
#else
    (void)cleared;
    throw std::runtime_error("this build has no CUDA backend (configure with SPLITCHECK_CUDA=ON)");
#endif
  }
  return std::shared_ptr<void>(new std::byte[bytes > 0 ? bytes : 1](),
                               [](void* p) { delete[] static_cast<std::byte*>(p); });
}

// Copies `bytes` between any two tensors' storages (a device copy when either is kCuda).
void copy_bytes(void* dst, const void* src, size_t bytes, Device dst_device, Device src_device) {
  if (bytes == 0) return;
#ifdef SPLITCHECK_HAVE_CUDA
  if (dst_device == Device::kCuda || src_device == Device::kCuda) {
    cuda::copy(dst, src, bytes);
    return;
  }
#else
  (void)dst_device;
  (void)src_device;
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::owned(DType dtype, Shape shape, Device device, bool cleared) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.owner_ = allocate(t.nbytes(), device, cleared);
  t.data_ = t.nbytes() ? t.owner_.get() : nullptr;  // an empty tensor has no bytes to view
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape, Device device) {
  return owned(dtype, std::move(shape), device, true);
}

Tensor Tensor::for_overwrite(DType dtype, Shape shape, Device device) {
  return owned(dtype, std::move(shape), device, false);
}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device) const {
  Tensor t = for_overwrite(dtype_, shape_, device);
  copy_bytes(t.data_, data_, nbytes(), device, device_);
  return t;
}

Tensor Tensor::on_host() const { return device_ == Device::kCpu ? *this : to(Device::kCpu); }

void Tensor::throw_not_on_host() const {
  throw std::logic_error("the host read or wrote the bytes of a " + shape_string(shape_) +
                         " tensor in CUDA device memory (copy it with to(kCpu) first)");
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  if (t.numel() != numel()) throw std::invalid_argument("reshape changes element count");
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  if (shape_.empty() || begin < 0 || end > shape_[0] || begin > end)
    throw std::out_of_range("Tensor::rows out of range");
  Tensor t = *this;
  t.shape_[0] = end - begin;
  const size_t row_bytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
  t.data_ = static_cast<std::byte*>(data_) + static_cast<size_t>(begin) * row_bytes;
  return t;
}

bool Tensor::bit_equal(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (nbytes() == 0) return true;
  const Tensor a = on_host(), b = other.on_host();
  return std::memcmp(a.data_, b.data_, nbytes()) == 0;
}

void finish_thread_device_work() {
#ifdef SPLITCHECK_HAVE_CUDA
  cuda::synchronize_thread();
#endif
}

double thread_device_wait_seconds() {
#ifdef SPLITCHECK_HAVE_CUDA
  return cuda::host_wait_seconds();
#else
  return 0.0;
#endif
}

DeviceWorkMark mark_thread_device_work() {
#ifdef SPLITCHECK_HAVE_CUDA
  return {cuda::mark_stream()};
#else
  return {};
#endif
}

void queue_after_device_work([[maybe_unused]] const DeviceWorkMark& mark) {
#ifdef SPLITCHECK_HAVE_CUDA
  cuda::queue_after(mark.event);
#endif
}

}  // namespace splitcheck
