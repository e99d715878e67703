// The backend's stream, device memory, staging of host tensors, device facts, and the
// elementwise conversions.
#include <cublasLt.h>
#include <cuda_profiler_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/gpu_driver.h"

namespace splitcheck::cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

namespace {

// Streams and events outlive their threads: a thread takes its stream (and its side
// stream, and its ordering event) from these pools at first use and gives them back,
// drained, when it ends, so a stream handle a device tensor recorded at its allocation
// stays valid for as long as the tensor. Never destroyed: threads end after main.
template <typename Handle>
class HandlePool {
 public:
  explicit HandlePool(cudaError_t (*create)(Handle*)) : create_(create) {}
  Handle take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        const Handle h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    Handle h = nullptr;
    SPLITCHECK_CUDA_CHECK(create_(&h));
    return h;
  }
  void give_back(Handle h) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(h);
  }

 private:
  cudaError_t (*create_)(Handle*);
  std::mutex mu_;
  std::vector<Handle> idle_;
};

HandlePool<cudaStream_t>& stream_pool() {
  static auto* pool = new HandlePool<cudaStream_t>(
      [](cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); });
  return *pool;
}

HandlePool<cudaEvent_t>& event_pool() {
  static auto* pool = new HandlePool<cudaEvent_t>(
      [](cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDisableTiming); });
  return *pool;
}

// The calling thread's stream. A plain handle (nothing to destroy), so a tensor freed
// while the process ends, after the thread's objects are gone, still finds it.
thread_local cudaStream_t t_stream = nullptr;
// Its second stream, for work that overlaps its own (SideWork), taken at first use.
thread_local cudaStream_t t_side = nullptr;
// Its event for ordering one stream after another (queue_after_stream), taken with its
// stream. One is enough: a wait binds to the record made just before it, and a later
// record of the same event leaves the waits queued so far as they were.
thread_local cudaEvent_t t_order = nullptr;

// Seconds this thread has waited for its stream (host_wait_seconds).
thread_local double t_waited = 0.0;

// Waits for the thread's stream, counting the time in t_waited.
void wait_for_stream() {
  const auto t0 = std::chrono::steady_clock::now();
  const cudaError_t e = cudaStreamSynchronize(stream());
  t_waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(e, "cudaStreamSynchronize(stream())");
}

// Drains the thread's streams and gives them back to the pool when the thread ends.
struct GiveBack {
  ~GiveBack() {
    for (cudaStream_t s : {t_stream, t_side}) {
      if (s == nullptr) continue;
      cudaStreamSynchronize(s);
      stream_pool().give_back(s);
    }
    if (t_order != nullptr) event_pool().give_back(t_order);
  }
};
thread_local GiveBack t_give_back;

}  // namespace

cudaStream_t stream() {
  if (t_stream == nullptr) {
    t_stream = stream_pool().take();
    t_order = event_pool().take();
    [[maybe_unused]] GiveBack* armed = &t_give_back;  // constructed now, destroyed at exit
  }
  return t_stream;
}

namespace {

// Queues `later`'s next work after what `earlier` has queued so far, through the calling
// thread's ordering event (no host wait); false where the runtime refuses (once it has
// shut down).
bool queue_after_stream(cudaStream_t earlier, cudaStream_t later) {
  stream();  // takes the thread's event with its stream
  return cudaEventRecord(t_order, earlier) == cudaSuccess &&
         cudaStreamWaitEvent(later, t_order, 0) == cudaSuccess;
}

// SPLITCHECK_CUDA_SIDE_STREAM=0: side work runs on the thread's own stream, in the order
// it is queued (the same bits; measures what the overlap gains, or rules it out).
bool side_streams() {
  static const bool on = [] {
    const char* v = std::getenv("SPLITCHECK_CUDA_SIDE_STREAM");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

}  // namespace

SideWork::SideWork(const std::function<void()>& work, bool beside) {
  if (!beside || !side_streams()) {
    work();
    return;
  }
  const cudaStream_t own = stream();
  if (t_side == nullptr) t_side = stream_pool().take();
  if (!queue_after_stream(own, t_side))
    throw std::runtime_error("CUDA error: a side stream cannot wait for its thread's stream");
  t_stream = t_side;  // what `work` queues goes to the side stream
  try {
    work();
  } catch (...) {
    t_stream = own;
    if (!queue_after_stream(t_side, own)) cudaStreamSynchronize(t_side);
    throw;
  }
  t_stream = own;
  pending_ = true;
}

void SideWork::join() {
  if (!pending_) return;
  pending_ = false;
  if (!queue_after_stream(t_side, stream()))
    throw std::runtime_error("CUDA error: a thread's stream cannot wait for its side stream");
}

SideWork::~SideWork() {
  if (pending_ && !queue_after_stream(t_side, stream())) cudaStreamSynchronize(t_side);
}

void synchronize_thread() {
  if (t_stream != nullptr) finish();
}

std::shared_ptr<void> mark_stream() {
  if (t_stream == nullptr) return nullptr;
  cudaEvent_t e = nullptr;
  SPLITCHECK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(e, t_stream);
  if (recorded != cudaSuccess) {
    cudaEventDestroy(e);
    check(recorded, "cudaEventRecord (a stream's mark)");
  }
  return std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

void queue_after(const std::shared_ptr<void>& mark) {
  if (mark == nullptr) return;
  SPLITCHECK_CUDA_CHECK(cudaStreamWaitEvent(stream(), static_cast<cudaEvent_t>(mark.get()), 0));
}

void finish() {
  SPLITCHECK_CUDA_CHECK(cudaGetLastError());
  wait_for_stream();
}

double host_wait_seconds() { return t_waited; }

namespace {

// The pool of the backend's device: it keeps freed memory for the next allocation rather
// than returning it to the driver at each synchronisation.
cudaMemPool_t device_pool() {
  static cudaMemPool_t pool = [] {
    int dev = 0;
    cudaMemPool_t p = nullptr;
    SPLITCHECK_CUDA_CHECK(cudaGetDevice(&dev));
    SPLITCHECK_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&p, dev));
    uint64_t keep = UINT64_MAX;
    SPLITCHECK_CUDA_CHECK(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &keep));
    return p;
  }();
  return pool;
}

}  // namespace

namespace {

// SPLITCHECK_CUDA_UNCLEARED_FILL, or set_uncleared_fill's byte; -1 none.
std::atomic<int>& uncleared_fill() {
  static std::atomic<int> fill = [] {
    const char* v = std::getenv("SPLITCHECK_CUDA_UNCLEARED_FILL");
    if (v == nullptr || *v == '\0') return -1;
    char* end = nullptr;
    const long byte = std::strtol(v, &end, 0);
    if (*end != '\0' || byte < 0 || byte > 255)
      throw std::invalid_argument(std::string("SPLITCHECK_CUDA_UNCLEARED_FILL=") + v +
                                  ": expected a byte, 0 to 255 (0xff)");
    return static_cast<int>(byte);
  }();
  return fill;
}

// `bytes` bytes (at least one) from the pool, each set to `fill` on the stream (none
// where fill is -1).
std::shared_ptr<void> device_bytes(size_t bytes, int fill) {
  void* p = nullptr;
  const size_t n = bytes > 0 ? bytes : 1;
  device_pool();
  SPLITCHECK_CUDA_CHECK(cudaMallocAsync(&p, n, stream()));
  if (fill >= 0) {
    const cudaError_t e = cudaMemsetAsync(p, fill, n, stream());
    if (e != cudaSuccess) {
      cudaFreeAsync(p, stream());
      check(e, "cudaMemsetAsync (new device tensor)");
    }
  }
  // Stream-ordered: the free waits for the work queued before it on the freeing thread's
  // stream (a tensor dropped while its kernels are in flight stays valid for them). A last
  // owner on another stream than the allocating one (a handoff body, weights every stage
  // of a sweep viewed, a batch segment's rows written by a helper thread) first queues a
  // wait for what the allocating stream has queued so far: an event, so the host does not
  // wait (the allocating thread queued its uses before it let the tensor go, so they are
  // before the event; where no event can be made, the host waits). A tensor reaches another
  // thread only once written or ordered after its writes (see stream()), and the threads
  // that read it without owning it last have ended, their streams drained, or are ordered
  // before the last owner's stream, before it is dropped (a transport joins its stage
  // threads before it destroys their stages; run_layer_batch queues the caller after its
  // helpers). After the runtime has shut down (static destruction) the free fails
  // harmlessly.
  return std::shared_ptr<void>(p, [owner = stream()](void* q) {
    cudaStream_t mine = stream();
    if (mine != owner && !queue_after_stream(owner, mine)) cudaStreamSynchronize(owner);
    cudaFreeAsync(q, mine);
  });
}

}  // namespace

void set_uncleared_fill(int byte) { uncleared_fill().store(byte); }

std::shared_ptr<void> device_zeros(size_t bytes) { return device_bytes(bytes, 0); }

std::shared_ptr<void> device_uncleared(size_t bytes) {
  return device_bytes(bytes, uncleared_fill().load());
}

DeviceMemory device_memory() {
  DeviceMemory m;
  SPLITCHECK_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  uint64_t reserved = 0, used = 0;
  SPLITCHECK_CUDA_CHECK(
      cudaMemPoolGetAttribute(device_pool(), cudaMemPoolAttrReservedMemCurrent, &reserved));
  SPLITCHECK_CUDA_CHECK(
      cudaMemPoolGetAttribute(device_pool(), cudaMemPoolAttrUsedMemCurrent, &used));
  if (reserved > used) m.free += static_cast<size_t>(reserved - used);
  return m;
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  SPLITCHECK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
  wait_for_stream();
}

void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
             size_t runs) {
  if (width == 0 || runs == 0) return;
  SPLITCHECK_CUDA_CHECK(
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, runs, cudaMemcpyDefault, stream()));
  wait_for_stream();
}

void copy_2d_queued(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t runs) {
  if (width == 0 || runs == 0) return;
  SPLITCHECK_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, runs,
                                          cudaMemcpyDeviceToDevice, stream()));
}

namespace {

constexpr int kMaxCopies = 32;

// Kernel parameters: no table is copied to the device.
struct CopyTable {
  void* dst[kMaxCopies];
  const void* src[kMaxCopies];
  size_t bytes[kMaxCopies];
};

// Copy blockIdx.y of the table, its bytes shared out over the grid's x blocks: 16 bytes a
// thread where the run's ends and size allow, else one.
__global__ void copy_runs_kernel(const CopyTable t) {
  const int i = blockIdx.y;
  auto* dst = static_cast<unsigned char*>(t.dst[i]);
  const auto* src = static_cast<const unsigned char*>(t.src[i]);
  const size_t n = t.bytes[i];
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | n) % 16 == 0) {
    for (size_t w = first; w < n / 16; w += step)
      reinterpret_cast<uint4*>(dst)[w] = reinterpret_cast<const uint4*>(src)[w];
  } else {
    for (size_t b = first; b < n; b += step) dst[b] = src[b];
  }
}

}  // namespace

void copy_runs_queued(const std::vector<DeviceCopy>& copies) {
  constexpr unsigned kThreads = 256;
  for (size_t i = 0; i < copies.size();) {
    CopyTable t{};
    int count = 0;
    size_t most = 0;
    for (; i < copies.size() && count < kMaxCopies; ++i, ++count) {
      t.dst[count] = copies[i].dst;
      t.src[count] = copies[i].src;
      t.bytes[count] = copies[i].bytes;
      most = std::max(most, copies[i].bytes);
    }
    const size_t blocks = std::min<size_t>((most + 16 * kThreads - 1) / (16 * kThreads), 1024);
    copy_runs_kernel<<<dim3(static_cast<unsigned>(std::max<size_t>(blocks, 1)),
                            static_cast<unsigned>(count)),
                       kThreads, 0, stream()>>>(t);
    SPLITCHECK_CUDA_CHECK(cudaGetLastError());
  }
}

void synchronize() { finish(); }

void profile_region(bool on) {
  finish();
  SPLITCHECK_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
}

std::string unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return std::string("no CUDA device is usable here (cudaGetDeviceCount: ") +
           cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device is visible on this machine";
  return "";
}

DeviceInfo device_info() {
  DeviceInfo info;
  int dev = 0;
  cudaDeviceProp prop{};
  SPLITCHECK_CUDA_CHECK(cudaGetDevice(&dev));
  SPLITCHECK_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  info.index = dev;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.driver_version = nvidia_driver_version();
  SPLITCHECK_CUDA_CHECK(cudaDriverGetVersion(&info.driver_api_version));
  SPLITCHECK_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  info.cublaslt_version = cublasLtGetVersion();
  return info;
}

Staging::~Staging() {
  for (void* p : buffers_) cudaFreeAsync(p, stream());
}

void* Staging::scratch_bytes(size_t bytes) {
  void* p = nullptr;
  SPLITCHECK_CUDA_CHECK(cudaMallocAsync(&p, bytes > 0 ? bytes : 1, stream()));
  buffers_.push_back(p);
  return p;
}

const void* Staging::in(const Tensor* t) {
  if (t == nullptr) return nullptr;
  if (t->device() == Device::kCuda) return t->address();
  return in_host(t->data<void>(), t->nbytes());
}

void* Staging::inout(Tensor* t) {
  if (t == nullptr) return nullptr;
  if (t->device() == Device::kCuda) return t->address();
  void* d = const_cast<void*>(in_host(t->data<void>(), t->nbytes()));
  copy_back(t->data<void>(), d, t->nbytes());
  return d;
}

const void* Staging::in_host(const void* host, size_t bytes) {
  void* d = scratch_bytes(bytes);
  if (bytes > 0)
    SPLITCHECK_CUDA_CHECK(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, stream()));
  return d;
}

void Staging::copy_back(void* host, const void* dev, size_t bytes) {
  backs_.push_back(Back{host, dev, bytes});
}

namespace {

// SPLITCHECK_CUDA_WAIT_EACH_KERNEL=1: every kernel call waits for the stream before it
// returns, as before kernels were queued (an asynchronous error then names its kernel;
// the benchmarks measure what the waits cost).
bool wait_each_kernel() {
  static const bool wait = [] {
    const char* v = std::getenv("SPLITCHECK_CUDA_WAIT_EACH_KERNEL");
    return v != nullptr && std::string(v) == "1";
  }();
  return wait;
}

}  // namespace

namespace {

// This thread's pinned host buffer, grown as needed, where done() lands host outputs: a
// copy into it is queued like a kernel, so the host's one wait for the stream is finish()'s
// (counted by host_wait_seconds). A copy straight into pageable memory would wait for
// every kernel queued before it inside the copy call, where no wait is counted and a
// profile shows the device's time as the host's.
struct PinnedBounce {
  void* p = nullptr;
  size_t bytes = 0;
  void* reserve(size_t n) {
    if (n <= bytes) return p;
    if (p != nullptr) SPLITCHECK_CUDA_CHECK(cudaFreeHost(p));
    p = nullptr;
    bytes = 0;
    SPLITCHECK_CUDA_CHECK(cudaMallocHost(&p, n));
    bytes = n;
    return p;
  }
  ~PinnedBounce() {
    if (p != nullptr) cudaFreeHost(p);  // at thread exit: nothing left to report to
  }
};
thread_local PinnedBounce t_bounce;

}  // namespace

void Staging::done() {
  SPLITCHECK_CUDA_CHECK(cudaGetLastError());
  // Outputs in device memory stay queued on the stream: nothing on the host reads them
  // (the host reads device tensors through copies on the same stream). Only host outputs
  // are waited for.
  if (backs_.empty() && !wait_each_kernel()) return;
  // Each output at its own 256-byte aligned offset of the bounce buffer.
  constexpr size_t kAlign = 256;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const Back& b : backs_) {
    offsets.push_back(total);
    total += (b.bytes + kAlign - 1) / kAlign * kAlign;
  }
  auto* bounce = static_cast<std::byte*>(t_bounce.reserve(total));
  for (size_t i = 0; i < backs_.size(); ++i)
    if (backs_[i].bytes > 0)
      SPLITCHECK_CUDA_CHECK(cudaMemcpyAsync(bounce + offsets[i], backs_[i].dev, backs_[i].bytes,
                                            cudaMemcpyDeviceToHost, stream()));
  finish();
  for (size_t i = 0; i < backs_.size(); ++i)
    if (backs_[i].bytes > 0) std::memcpy(backs_[i].host, bounce + offsets[i], backs_[i].bytes);
  backs_.clear();
}

namespace {

__global__ void round_kernel(const float* in, uint16_t* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = f_to_bf(in[i]);
}

__global__ void add_bf16_kernel(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = f_to_bf(__fadd_rn(bf_to_f(a[i]), bf_to_f(b[i])));
}

__global__ void add_f32_kernel(const float* a, const float* b, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __fadd_rn(a[i], b[i]);
}

__global__ void widen_kernel(const uint16_t* in, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = bf_to_f(in[i]);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// reference/weights.cc's uniform draw u in [-1, 1) of element `index` under `key`.
__device__ __forceinline__ float uniform(uint64_t key, int64_t index) {
  const uint64_t r = splitmix64(key + static_cast<uint64_t>(index) * 0xd1b54a32d192ed03ull);
  return static_cast<float>(static_cast<int32_t>(r >> 40) - (1 << 23)) / 8388608.0f;
}

__global__ void fill_uniform_kernel(uint64_t key, float scale, bool one_plus, int64_t n,
                                    uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = __fmul_rn(scale, uniform(key, i));
  out[i] = f_to_bf(one_plus ? __fadd_rn(1.0f, v) : v);
}

__global__ void fill_tied_kernel(uint64_t key_r, float scale, uint64_t key_e, float embed_scale,
                                 const int32_t* succ, int64_t v, int64_t h, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= v * h) return;
  const int64_t t = i / h, c = i % h;
  const int64_t row = succ[t];
  const float e = round_bf(__fmul_rn(embed_scale, uniform(key_e, t * h + c)));
  const float r = __fmul_rn(scale, uniform(key_r, row * h + c));
  out[row * h + c] = f_to_bf(__fadd_rn(r, __fmul_rn(scale, e)));
}

}  // namespace

void round_to_bf16(const float* in, uint16_t* out, int64_t n) {
  if (n == 0) return;
  round_kernel<<<blocks_for(n, 256), 256, 0, stream()>>>(in, out, n);
}

void add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n) {
  if (n == 0) return;
  add_bf16_kernel<<<blocks_for(n, 256), 256, 0, stream()>>>(a, b, out, n);
}

void add_f32(const float* a, const float* b, float* out, int64_t n) {
  if (n == 0) return;
  add_f32_kernel<<<blocks_for(n, 256), 256, 0, stream()>>>(a, b, out, n);
}

void widen_bf16(const uint16_t* in, float* out, int64_t n) {
  if (n == 0) return;
  widen_kernel<<<blocks_for(n, 256), 256, 0, stream()>>>(in, out, n);
}

void fill_uniform_bf16(uint64_t key, float scale, bool one_plus, int64_t n, void* out) {
  if (n > 0) {
    fill_uniform_kernel<<<blocks_for(n, 256), 256, 0, stream()>>>(key, scale, one_plus, n,
                                                                  static_cast<uint16_t*>(out));
  }
  finish();
}

void fill_successor_tied_bf16(uint64_t key_r, float scale, uint64_t key_e, float embed_scale,
                              const int32_t* succ, int64_t v, int64_t h, void* out) {
  Staging s;
  const auto* d_succ = as<int32_t>(s.in_host(succ, static_cast<size_t>(v) * sizeof(int32_t)));
  if (v * h > 0) {
    fill_tied_kernel<<<blocks_for(v * h, 256), 256, 0, stream()>>>(
        key_r, scale, key_e, embed_scale, d_succ, v, h, static_cast<uint16_t*>(out));
  }
  s.done();
}

// The dynamic shared memory allowed so far per (kernel, device): asking is a host call a
// 64-token call cannot afford each time.
namespace {
struct SmemAllowed {
  std::mutex mu;
  std::map<std::pair<const void*, int>, size_t> bytes;
};
SmemAllowed& smem_allowed() {
  static SmemAllowed a;
  return a;
}
}  // namespace

void allow_smem(const void* kernel, size_t smem) {
  int device = 0;
  SPLITCHECK_CUDA_CHECK(cudaGetDevice(&device));
  SmemAllowed& a = smem_allowed();
  std::lock_guard<std::mutex> lock(a.mu);
  size_t& allowed = a.bytes[{kernel, device}];
  if (smem <= allowed) return;
  SPLITCHECK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)));
  allowed = smem;
}

}  // namespace splitcheck::cuda
