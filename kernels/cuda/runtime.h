// The host side of the CUDA backend that the rest of the project may call: device
// memory for kCuda tensors, whether a device is usable, what it is, and weight
// generation on the device. A plain C++ header (no CUDA types), so kernels/tensor.cc and
// reference/ include it in builds with SPLITCHECK_CUDA (SPLITCHECK_HAVE_CUDA defined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace splitcheck::cuda {

// `bytes` bytes of device memory (at least one byte) from the stream-ordered pool of the
// backend's stream, zeroed on that stream (the host does not wait); freed on the stream
// with the last owner. Throws std::runtime_error when the device has no room.
std::shared_ptr<void> device_zeros(size_t bytes);
// The same memory left as the pool gives it (whatever bytes it held last), for a maker
// that writes every byte before anything reads one: no clearing launch.
std::shared_ptr<void> device_uncleared(size_t bytes);
// The check of that promise: with a fill byte set (SPLITCHECK_CUDA_UNCLEARED_FILL=0..255 in
// the environment, e.g. 0xff, or this call; -1 none, the default), device_uncleared fills
// its memory with it. Two runs with different fills give the same bits only if no kernel
// reads a byte its maker did not write (scripts/gpu-check.sh's uncleared-fill step).
void set_uncleared_fill(int byte);
// The device's memory as a new allocation sees it: `free` counts the driver's free bytes
// plus what the backend's pool holds unused; `total` the card's.
struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};
DeviceMemory device_memory();
// Copies `bytes` between host memory and device memory in any direction; returns when
// the copy has finished. Throws std::runtime_error on a CUDA error.
void copy(void* dst, const void* src, size_t bytes);
// Copies `runs` runs of `width` bytes, run i from src + i * src_pitch to dst + i * dst_pitch
// (cudaMemcpy2D, any direction; pitches at least `width`); returns when it has finished.
// Throws std::runtime_error on a CUDA error.
void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
             size_t runs);
// copy_2d between two device buffers, queued on the calling thread's stream like a kernel:
// returns at once (the thread's later device work sees the bytes; another thread or the
// host, after a synchronisation, as for a kernel's output).
void copy_2d_queued(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t runs);
// One device-to-device run of copy_runs_queued.
struct DeviceCopy {
  void* dst;
  const void* src;
  size_t bytes;
};
// Queues every copy on the calling thread's stream as copy_2d_queued does, up to 32 in one
// launch (copy_runs, kernels/tensor_copy.h).
void copy_runs_queued(const std::vector<DeviceCopy>& copies);

// Waits until the work queued on the calling thread's stream has finished (before another
// stream, NCCL's or another thread's, reads what it wrote). Throws std::runtime_error on a
// CUDA error.
void synchronize();
// Seconds the calling thread has spent waiting for its stream so far (every wait of this
// backend: finish(), synchronize(), copy(), copy_2d(), a kernel call's host outputs).
double host_wait_seconds();
// synchronize() for a thread that has queued device work; a no-op for one that has not
// (it creates no stream and needs no device).
void synchronize_thread();

// A point in the work queued so far on the calling thread's stream (an event recorded
// there), for another thread's stream to wait on; null for a thread that has queued none.
std::shared_ptr<void> mark_stream();
// Queues the calling thread's later work after `mark`'s (a wait on the device; the host
// goes on at once). A null mark waits for nothing.
void queue_after(const std::shared_ptr<void>& mark);

// Marks the region a profiler started with --profile-from-start off (ncu) records:
// cudaProfilerStart when `on`, cudaProfilerStop otherwise.
void profile_region(bool on);

// Empty when a CUDA device can run kernels here; otherwise why not, in one phrase.
std::string unavailable_reason();

// What results depend on (cuBLAS promises run-to-run bits only within one toolkit
// version, one architecture and one SM count): recorded in dumps and golden fingerprints.
struct DeviceInfo {
  int index = 0;     // the current device (cudaGetDevice)
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;  // compute capability
  int cc_minor = 0;
  int sm_count = 0;
  std::string driver_version;  // the NVIDIA driver, e.g. "580.159.04" (kernels/gpu_driver.h)
  int driver_api_version = 0;  // cudaDriverGetVersion: the CUDA API it serves, e.g. 13000
  int runtime_version = 0;     // cudaRuntimeGetVersion
  size_t cublaslt_version = 0;
};
DeviceInfo device_info();

// The device, toolkit and every matrix-product algorithm chosen so far (one per shape,
// pinned for the life of the process), as a JSON object text.
std::string provenance_json();

// out[i] = bf16(a[i] + b[i]) for n device bf16 values, queued on the thread's stream.
void add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n);
// out[i] = a[i] + b[i] for n device float32 values (round to nearest), queued likewise.
void add_f32(const float* a, const float* b, float* out, int64_t n);

// out[i] = bf16(scale * u_i (+ 1 when one_plus)) for i in [0, n), u_i the uniform draw of
// reference/weights.cc keyed by `key` (splitmix64(seed ^ fnv1a(name))). `out` is device memory.
void fill_uniform_bf16(uint64_t key, float scale, bool one_plus, int64_t n, void* out);

// lm_head's successor tie on the device: out[succ[t]][i] = bf16(scale * u_r(succ[t]*h + i) +
// scale * bf16(embed_scale * u_e(t*h + i))) for every token t < v (reference/weights.cc).
void fill_successor_tied_bf16(uint64_t key_r, float scale, uint64_t key_e, float embed_scale,
                              const int32_t* succ, int64_t v, int64_t h, void* out);

}  // namespace splitcheck::cuda
