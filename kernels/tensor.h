// Tensor: dtype, shape and bytes, owned or borrowed. The one tensor type of the project.
//
// Storage is row-major and contiguous. An owned tensor shares its bytes on copy (like a
// handle); clone() makes a deep copy. A borrowed tensor views bytes owned elsewhere
// (a checkpoint buffer, a payload) and must not outlive them.
//
// A tensor lives on a device: host memory (kCpu) or CUDA device memory (kCuda), which the
// host never reads or writes in place: data(), span() and bytes() are the host's view and
// throw std::logic_error on a kCuda tensor; the host reads a device tensor through a copy
// (to(kCpu), on_host(), copy_tensor_runs), and kernels take its address(). Kernels run
// where their tensors are; clone() and zeros() keep the device; to(kCpu) copies to the
// host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/f16.h"

namespace splitcheck {

// kF16 (IEEE float16) is only read and compared: an outside engine's own dtype in a dump.
enum class DType : uint8_t { kBF16, kF32, kI32, kF16 };

// Where a tensor's bytes are. kCuda exists only in builds with SPLITCHECK_CUDA.
enum class Device : uint8_t { kCpu, kCuda };
const char* device_name(Device device);  // "cpu", "cuda"

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "bfloat16", "float32", "int32", "float16"
// The DType dtype_name() names `name`; false (and `out` untouched) for any other name.
bool parse_dtype(const std::string& name, DType& out);

using Shape = std::vector<int64_t>;
std::string shape_string(const Shape& shape);  // "[3, 256]"

class Tensor {
 public:
  Tensor() = default;

  // A zero-filled owned tensor on `device` (throws std::runtime_error when this build or
  // machine has no such device).
  static Tensor zeros(DType dtype, Shape shape, Device device = Device::kCpu);
  // An owned tensor for a maker that writes every byte before anything reads one (a copy's
  // destination, a kernel's full output): on kCuda its bytes are not cleared (no launch
  // for it; scripts/gpu-check.sh's uncleared-fill step finds a read of one nobody wrote),
  // on the host they are zeros as for zeros().
  static Tensor for_overwrite(DType dtype, Shape shape, Device device = Device::kCpu);
  // A view of bytes owned elsewhere.
  static Tensor borrow(DType dtype, Shape shape, void* data);

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return data_ == nullptr; }
  bool is_owned() const { return owner_ != nullptr; }

  // The bytes, for the host to read or write: throws std::logic_error on a kCuda tensor.
  template <typename T>
  T* data() {
    if (device_ != Device::kCpu) [[unlikely]]
      throw_not_on_host();
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    if (device_ != Device::kCpu) [[unlikely]]
      throw_not_on_host();
    return static_cast<const T*>(data_);
  }
  // Where the bytes are on their device (a device pointer on kCuda: for kernels, copies and
  // identity, never dereferenced by the host).
  void* address() { return data_; }
  const void* address() const { return data_; }
  template <typename T>
  std::span<T> span() {
    return {data<T>(), static_cast<size_t>(numel())};
  }
  template <typename T>
  std::span<const T> span() const {
    return {data<T>(), static_cast<size_t>(numel())};
  }
  const std::byte* bytes() const { return data<std::byte>(); }

  // Deep copy into a new owned tensor on the same device.
  Tensor clone() const;
  // Deep copy into a new owned tensor on `device` (a copy even when it is already there).
  Tensor to(Device device) const;
  // This tensor when it is on the host, otherwise a host copy of it (for the host to read).
  Tensor on_host() const;
  // Same bytes, another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // Rows [begin, end) along the first axis, as a view sharing ownership.
  Tensor rows(int64_t begin, int64_t end) const;

  // True when dtype, shape and every byte are equal (device tensors compared on the host).
  bool bit_equal(const Tensor& other) const;

 private:
  static Tensor owned(DType dtype, Shape shape, Device device, bool cleared);
  [[noreturn]] void throw_not_on_host() const;

  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  Shape shape_;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
};

// Waits until the device work the calling thread queued has finished: what it wrote may
// then go to another thread (each thread queues on its own stream). A no-op for a thread
// that queued none, and in a build without CUDA.
void finish_thread_device_work();

// Seconds the calling thread has waited for its device work so far: at every host read of
// a device result (a copy to the host, a kernel call with host outputs) and every wait
// above. Zero in a build without CUDA, where nothing waits. The difference over a stretch
// of work splits its wall time into the host's own work and its waits for the device.
double thread_device_wait_seconds();

// A point in the device work the calling thread has queued so far (on the CUDA backend, an
// event on its stream). Another thread hands over by queue_after_device_work(mark) rather
// than by finishing: its later device work runs after the mark's, and no host waits. Empty
// for a thread that queued none, and in a build without CUDA.
struct DeviceWorkMark {
  std::shared_ptr<void> event;
};
DeviceWorkMark mark_thread_device_work();
// Queues the calling thread's later device work after `mark`'s (a no-op for an empty mark).
void queue_after_device_work(const DeviceWorkMark& mark);

}  // namespace splitcheck
