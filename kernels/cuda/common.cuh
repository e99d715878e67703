// Device-side helpers of the CUDA kernels: the backend's stream, error checks, scratch and
// staging of host tensors, bf16 rounding and exp with the CPU's definitions (SPEC 1), and
// block reductions with fixed orders. Every CUDA source is compiled with --fmad=false.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/tc.h"
#include "kernels/tensor.h"

namespace splitcheck::cuda {

// Throws std::runtime_error naming `what` when `e` is an error.
void check(cudaError_t e, const char* what);
#define SPLITCHECK_CUDA_CHECK(expr) ::splitcheck::cuda::check((expr), #expr)

// The calling thread's stream: every kernel, copy and matrix product a thread queues runs
// on its own stream, so the stages and split points of a sweep, each on its thread, keep
// the GPU busy together. A thread hands a device tensor to another only once its stream has
// finished writing it (a host read, a copy that returns finished, or synchronize()), or
// once the other thread's stream is queued after the writes (mark_stream, queue_after).
cudaStream_t stream();

// Lets `kernel` use `smem` bytes of dynamic shared memory (beyond 48 KiB needs asking of
// the device; asked once per kernel, device and size reached).
void allow_smem(const void* kernel, size_t smem);
// Checks the last launch and waits for the stream (where the host must see a result).
void finish();
// Work on a second stream of the calling thread (its side stream): the constructor runs
// `work`, whose kernels, copies and products are queued there after what the thread has
// queued so far; join() queues the thread's later work after it, as does the destructor
// at the latest (so declare it after the Staging whose scratch `work` takes: that is
// freed on the thread's stream). Work that reads only what was ready at the start then
// overlaps the thread's own (MoE's shared experts beside its routed ones), with the same
// kernels and bits, and the host waits for neither. Where `beside` is false (work too
// small for the overlap to pay for the fork and join: kSideMinBytes), `work` runs in line
// on the thread's stream.
class SideWork {
 public:
  explicit SideWork(const std::function<void()>& work, bool beside = true);
  SideWork(const SideWork&) = delete;
  SideWork& operator=(const SideWork&) = delete;
  ~SideWork();
  void join();

 private:
  bool pending_ = false;  // queued on the side stream, not yet joined
};

// Calls whose products read fewer weight bytes than this run their side work in line:
// the products beside it take the device a few microseconds, less than a fork and a join
// cost the host (MoE's shared experts, MLA's q and g, KDA's beta on k3-tiny).
constexpr size_t kSideMinBytes = size_t{1} << 20;

// Device buffers of one kernel call: scratch space, and device views of host tensors
// (copied in; outputs copied back by done()). Device tensors are used in place. Scratch
// is freed in stream order, so a call may return with its kernels still queued.
class Staging {
 public:
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging();
  void* scratch_bytes(size_t bytes);
  template <typename T>
  T* scratch(int64_t n) {
    return static_cast<T*>(scratch_bytes(static_cast<size_t>(n) * sizeof(T)));
  }
  // A device pointer to the tensor's bytes (nullptr for nullptr).
  const void* in(const Tensor* t);
  // A device pointer whose bytes are copied back into `t` by done() when it is on the host.
  void* inout(Tensor* t);
  // Host bytes copied to a device buffer.
  const void* in_host(const void* host, size_t bytes);
  // Copies `bytes` from device `dev` to `host` in done().
  void copy_back(void* host, const void* dev, size_t bytes);
  // Checks the launches; when an output is on the host, copies it back and waits for the
  // stream (otherwise returns at once, the kernels queued).
  void done();

 private:
  std::vector<void*> buffers_;
  struct Back {
    void* host;
    const void* dev;
    size_t bytes;
  };
  std::vector<Back> backs_;
};

// The data of a tensor whose device pointer is `p`, typed.
template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

__device__ __forceinline__ float bf_to_f(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// kernels/bf16.h's to_bf16: round to nearest, ties to even; NaN stays a quiet NaN.
__device__ __forceinline__ uint16_t f_to_bf(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float round_bf(float x) { return bf_to_f(f_to_bf(x)); }

// f_to_bf of two values, packed (lo in the low half): the hardware's round-to-nearest-even
// conversion, one instruction for both, which f_to_bf equals on every non-NaN input; a NaN
// takes f_to_bf itself, which keeps its payload quieted.
__device__ __forceinline__ uint32_t pack_bf2(float lo, float hi) {
  if (isnan(lo) || isnan(hi)) [[unlikely]]
    return static_cast<uint32_t>(f_to_bf(lo)) | (static_cast<uint32_t>(f_to_bf(hi)) << 16);
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// kernels/math.h's fmath::exp, operation for operation.
__device__ __forceinline__ float dexp(float x) {
  if (isnan(x)) return x;
  if (x > 88.72283f) return __int_as_float(0x7f800000);
  if (x < -103.97208f) return 0.0f;
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693145751953125f;
  const float kLn2Lo = 1.42860682030941723212e-6f;
  const float kf = rintf(__fmul_rn(x, kLog2e));
  const float r = __fsub_rn(__fsub_rn(x, __fmul_rn(kf, kLn2Hi)), __fmul_rn(kf, kLn2Lo));
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int k = static_cast<int>(kf);
  const int k1 = k / 2;
  const int k2 = k - k1;
  const float s1 = __uint_as_float(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = __uint_as_float(static_cast<uint32_t>(k2 + 127) << 23);
  return p * s1 * s2;
}

__device__ __forceinline__ float drsqrt(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ float dsigmoid(float x) { return 1.0f / (1.0f + dexp(-x)); }
__device__ __forceinline__ float dsilu(float x) { return x * dsigmoid(x); }

// Sum of v over the block, tree order A: shuffle-down halving within each warp (offsets
// 16, 8, 4, 2, 1), then warp partials in ascending warp order. Every thread gets the sum.
// `shared` holds at least 33 floats; blockDim.x is a multiple of 32.
__device__ __forceinline__ float block_sum_halving(float v, float* shared) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) s += shared[w];
    shared[32] = s;
  }
  __syncthreads();
  const float out = shared[32];
  __syncthreads();
  return out;
}

// Sum of v over the block, tree order B: adjacent pairs first within each warp (offsets
// 1, 2, 4, 8, 16), then the warp partials by a pairwise tree. Every thread gets the sum.
__device__ __forceinline__ float block_sum_pairwise(float v, float* shared) {
  for (int off = 1; off < 32; off <<= 1) {
    const float o = __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x % 32;
    if ((lane & (2 * off - 1)) == 0) v = v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = static_cast<int>(blockDim.x / 32);
    while (n > 1) {
      const int half = (n + 1) / 2;
      for (int i = 0; i + half < n; ++i) shared[i] = shared[i] + shared[i + half];
      n = half;
    }
    shared[32] = shared[0];
  }
  __syncthreads();
  const float out = shared[32];
  __syncthreads();
  return out;
}

inline int blocks_for(int64_t n, int threads) {
  return static_cast<int>((n + threads - 1) / threads);
}

// Elementwise conversions on the stream.
void round_to_bf16(const float* in, uint16_t* out, int64_t n);
void widen_bf16(const uint16_t* in, float* out, int64_t n);

// out[t] = bf16(x[t] * rsqrt(mean(x[t]^2) + eps) * w), rows of length h (basic.cu).
void rms_rows(const uint16_t* x, const uint16_t* w, int64_t rows, int64_t h, float eps,
              uint16_t* out);

// Products of at most this many rows read the weight at the memory's speed (skinny_gemm.cu;
// beyond, the multiply-adds on the CUDA cores bound the product and cuBLASLt's tensor-core
// kernels are faster).
constexpr int64_t kSkinnyMaxRows = 8;
// C = A B for A bf16 [m, k] (m <= kSkinnyMaxRows), B bf16 [k, n] row-major: float32 into
// `c` and/or rounded to bf16 into `c_bf16` (either may be null). Each row's bits depend
// on (k, n) and its own inputs alone, never on m.
void skinny_gemm(const uint16_t* a, const uint16_t* b, float* c, uint16_t* c_bf16, int64_t m,
                 int64_t n, int64_t k);
// C [G, m, n] = A times each of the G weights bs (each bf16 [k, n]), in one launch, each
// row with skinny_gemm's bits; at most kMultiMax weights.
constexpr int kMultiMax = 8;
void skinny_multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c,
                       uint16_t* c_bf16, int64_t m, int64_t n, int64_t k);
// C [G, m, n] (float32) = A times each of the G weights bs, as G gemm() calls would give
// it: one skinny_multi_gemm launch where gemm() takes skinny_gemm, else one product each.
void multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c, int64_t m,
                int64_t n, int64_t k);
// The weights a routed product picks from (by value in the launch: no copy to the device).
struct WeightTable {
  const uint16_t* w[256] = {};
};
// The A operand of a routed product: bf16 rows, or the SwiGLU hidden rows of float gate
// and up products, bf16(silu(bf16(gate)) * bf16(up)) (SPEC 2.5), computed as they are read.
struct SkinnyOperand {
  const uint16_t* bf16 = nullptr;
  const float* swiglu_gate = nullptr;
  const float* swiglu_up = nullptr;
};
// The rows of a routed product, in device memory: row s < rows picks pick[s] and
// multiplies row a_rows[s] of A (row s when a_rows is null) by each of the per_pick
// weights per_pick * pick[s] + i, into row s + i * rows of C.
struct SkinnyRows {
  const int32_t* pick = nullptr;
  const int32_t* a_rows = nullptr;
  int per_pick = 1;
  int rows = 0;
  bool by_row = false;  // set by routed_gemm: a block a row rather than a weight
};
// C [per_pick * rows, n] of the routed rows, every weight read once for all the rows that
// picked it (at most max_rows <= kRoutedMaxRows of them, kSkinnyMaxRows at a time), with
// skinny_gemm's bits for each row: a gate and an up product of every expert in one launch,
// or the down product on the SwiGLU hidden. No host wait.
constexpr int64_t kRoutedMaxRows = 64;
void routed_gemm(const SkinnyOperand& a, const SkinnyRows& rows, int64_t max_rows,
                 const WeightTable& table, int n_weights, float* c, uint16_t* c_bf16, int64_t n,
                 int64_t k);
// Whether gemm() takes skinny_gemm for m rows of a B stored [k, n] (false when
// SPLITCHECK_CUDA_SKINNY=0, for measuring cuBLASLt in its place).
bool skinny_applies(int64_t m, bool b_nk);

// Products of kSkinnyMaxRows + 1 to kTcMaxRows rows with B [k, n] of at most kTcMaxDepth
// rows take the tensor-core kernel, tc_multi_gemm (tc.h). Whether gemm() takes it (false
// when SPLITCHECK_CUDA_TC=0 or SPLITCHECK_CUDA_SKINNY=0: cuBLASLt in its place).
bool tc_applies(int64_t m, int64_t k, bool b_nk);

// A stream's column-tile counters of the skinny and tensor-core products: zero between
// products (the last block of each tile re-arms its counter).
constexpr int64_t kTileCounters = int64_t{1} << 16;
unsigned* tile_counters(cudaStream_t s);

}  // namespace splitcheck::cuda
