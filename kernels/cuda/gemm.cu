// Matrix products: skinny_gemm up to kSkinnyMaxRows rows, tc_multi_gemm up to kTcMaxRows
// rows of a weight at most kTcMaxDepth deep, else cuBLASLt: bf16 inputs, float32 output,
// CUBLAS_COMPUTE_32F (no TF32, no reduced-precision accumulation), one workspace a stream.
// The algorithm of each shape is chosen once by cuBLASLt's heuristic, then pinned with the
// shape's descriptors (made once, so a product's host work is the call alone): every
// later product of that shape runs the same algorithm, and provenance_json() lists them.
// gemm_bf16 runs the shape's float32 algorithm with a bf16 output where that algorithm
// sums in float32 and rounds once (no split-K, or split-K summed in the compute type):
// the bits of gemm() rounded, without a float32 buffer and a rounding pass.
#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/runtime.h"

namespace splitcheck::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void lt_check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string("cuBLASLt error in ") + what + ": status " +
                           std::to_string(static_cast<int>(s)));
}
#define SPLITCHECK_LT_CHECK(expr) lt_check((expr), #expr)

using ShapeKey = std::tuple<int64_t, int64_t, int64_t, bool>;  // m, n, k, b_nk

// A shape's descriptors and its pinned algorithm, made at the shape's first product and
// kept for the process (a product's host work is then the call alone).
struct Pinned {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo;
  std::string description;
  // The bf16 output layout, where the algorithm writes gemm()'s float32 sums rounded once
  // (made at the shape's first gemm_bf16; nullptr where it does not).
  cublasLtMatrixLayout_t lc_bf16 = nullptr;
  bool bf16_checked = false;
};

Pinned pin_shape(cublasLtHandle_t handle, int64_t m, int64_t n, int64_t k, bool b_nk);

struct Lt {
  cublasLtHandle_t handle = nullptr;
  std::mutex mu;
  std::map<ShapeKey, Pinned> algos;
  // One workspace per stream (threads' streams are pooled, so these are as many as the
  // threads that ran products at once): products on two streams may overlap.
  std::map<cudaStream_t, void*> workspaces;

  // The shape's pinned descriptors and algorithm, made at its first product (mu held).
  Pinned& pinned(int64_t m, int64_t n, int64_t k, bool b_nk) {
    const ShapeKey key{m, n, k, b_nk};
    auto it = algos.find(key);
    if (it == algos.end()) it = algos.emplace(key, pin_shape(handle, m, n, k, b_nk)).first;
    return it->second;
  }

  void* workspace(cudaStream_t s) {
    void*& w = workspaces[s];
    if (w == nullptr) SPLITCHECK_CUDA_CHECK(cudaMalloc(&w, kWorkspaceBytes));
    return w;
  }
};

Lt& lt() {
  static Lt* state = [] {
    auto* s = new Lt;
    SPLITCHECK_LT_CHECK(cublasLtCreate(&s->handle));
    return s;
  }();
  return *state;
}

int algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int value = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return -1;
  return value;
}

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "id=%d tile=%d stages=%d splitk=%d reduction=%d swizzle=%d",
                algo_attr(algo, CUBLASLT_ALGO_CONFIG_ID),
                algo_attr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                algo_attr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                algo_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                algo_attr(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                algo_attr(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
  return buf;
}

// SPLITCHECK_CUDA_LT_REDUCTION (to measure; another algorithm is other bits): "inplace"
// lets the heuristic pick only algorithms that split k with their partial sums added in
// place, in sequence (counters in the workspace), or do not split it; "none" only those
// that do not split it; unset, any (split-K partials may then be summed by a separate
// kernel).
uint32_t reduction_mask() {
  static const uint32_t mask = [] {
    const char* v = std::getenv("SPLITCHECK_CUDA_LT_REDUCTION");
    const std::string s = v != nullptr ? v : "";
    if (s == "inplace") return static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE);
    if (s == "none") return static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE);
    return static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK);
  }();
  return mask;
}

// The descriptors of an m x n x k product and cuBLASLt's heuristic's algorithm for it.
// Row-major C[m,n] = A[m,k] B is column-major C^T[n,m] = B^T[n,k] A^T[k,m]: cuBLASLt's
// first operand is B (as stored: [n,k] col-major with ld n, or [k,n] col-major when b_nk,
// then transposed), its second is A ([k,m] col-major, ld k).
Pinned pin_shape(cublasLtHandle_t handle, int64_t m, int64_t n, int64_t k, bool b_nk) {
  Pinned p;
  SPLITCHECK_LT_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = b_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = CUBLAS_OP_N;
  SPLITCHECK_LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                     &op_first, sizeof(op_first)));
  SPLITCHECK_LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                     &op_second, sizeof(op_second)));
  if (b_nk) {
    SPLITCHECK_LT_CHECK(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, k, n, k));
  } else {
    SPLITCHECK_LT_CHECK(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, n, k, n));
  }
  SPLITCHECK_LT_CHECK(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, k, m, k));
  SPLITCHECK_LT_CHECK(cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, n, m, n));
  cublasLtMatmulPreference_t pref = nullptr;
  SPLITCHECK_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  SPLITCHECK_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t mask = reduction_mask();
  SPLITCHECK_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  SPLITCHECK_LT_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" +
                             std::to_string(n) + "x" + std::to_string(k) + " product");
  p.algo = result.algo;
  p.description = describe(result.algo);
  return p;
}

// Pins the bf16 output of p's algorithm where it is gemm()'s sums rounded once: one pass
// over k, or split-K partials summed in float32 (the compute type) before the rounding,
// and cuBLASLt takes the algorithm with that output.
void pin_bf16_output(cublasLtHandle_t handle, Pinned& p, int64_t m, int64_t n) {
  p.bf16_checked = true;
  const int splits = algo_attr(p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  const int scheme = algo_attr(p.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  if (splits > 1 && scheme != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) return;
  cublasLtMatrixLayout_t lc = nullptr;
  if (cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n) != CUBLAS_STATUS_SUCCESS) return;
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle, p.desc, p.la, p.lb, lc, lc, &p.algo, &check) !=
          CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > kWorkspaceBytes) {
    cublasLtMatrixLayoutDestroy(lc);
    return;
  }
  p.lc_bf16 = lc;
}

// A knob that is on unless its variable is "0".
bool knob_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != "0";
}

// out = bf16(A B) by the shape's float32 algorithm with a bf16 output, where it has one
// (pin_bf16_output); false (nothing queued) where it has not.
bool lt_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t m, int64_t n,
             int64_t k) {
  Lt& s = lt();
  std::lock_guard<std::mutex> lock(s.mu);
  Pinned& p = s.pinned(m, n, k, false);
  if (!p.bf16_checked) pin_bf16_output(s.handle, p, m, n);
  if (p.lc_bf16 == nullptr) return false;
  const float alpha = 1.0f, beta = 0.0f;
  SPLITCHECK_LT_CHECK(cublasLtMatmul(s.handle, p.desc, &alpha, b, p.la, a, p.lb, &beta, out,
                                     p.lc_bf16, out, p.lc_bf16, &p.algo, s.workspace(stream()),
                                     kWorkspaceBytes, stream()));
  return true;
}

}  // namespace

bool skinny_applies(int64_t m, bool b_nk) {
  static const bool enabled = knob_on("SPLITCHECK_CUDA_SKINNY");
  return enabled && !b_nk && m <= kSkinnyMaxRows;
}

static_assert(kTcMaxWeights >= kMultiMax, "multi_gemm hands tc_multi_gemm up to kMultiMax weights");

bool tc_applies(int64_t m, int64_t k, bool b_nk) {
  // SPLITCHECK_CUDA_TC: "0" none, "all" weights of any depth (to measure the kernel where
  // cuBLASLt is faster), else up to kTcMaxDepth.
  static const int64_t max_depth = [] {
    if (!knob_on("SPLITCHECK_CUDA_SKINNY") || !knob_on("SPLITCHECK_CUDA_TC")) return int64_t{-1};
    const char* v = std::getenv("SPLITCHECK_CUDA_TC");
    return v != nullptr && std::string(v) == "all" ? std::numeric_limits<int64_t>::max()
                                                   : kTcMaxDepth;
  }();
  return !b_nk && m > kSkinnyMaxRows && m <= kTcMaxRows && k <= max_depth;
}

void gemm_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t m, int64_t n,
               int64_t k) {
  if (m == 0 || n == 0) return;
  if (skinny_applies(m, false)) {
    skinny_gemm(a, b, nullptr, out, m, n, k);
    return;
  }
  if (tc_applies(m, k, false)) {
    tc_multi_gemm(a, std::span(&b, 1), nullptr, out, m, n, k);
    return;
  }
  // SPLITCHECK_CUDA_LT_BF16=0: every such product through a float32 buffer (for measuring).
  static const bool epilogue = knob_on("SPLITCHECK_CUDA_LT_BF16");
  if (epilogue && lt_bf16(a, b, out, m, n, k)) return;
  float* acc = nullptr;
  SPLITCHECK_CUDA_CHECK(
      cudaMallocAsync(&acc, static_cast<size_t>(m * n) * sizeof(float), stream()));
  gemm(a, b, acc, m, n, k, false);
  round_to_bf16(acc, out, m * n);
  SPLITCHECK_CUDA_CHECK(cudaFreeAsync(acc, stream()));
}

void multi_gemm(const uint16_t* a, std::span<const uint16_t* const> bs, float* c, int64_t m,
                int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  if (skinny_applies(m, false)) {
    skinny_multi_gemm(a, bs, c, nullptr, m, n, k);
    return;
  }
  if (tc_applies(m, k, false)) {
    tc_multi_gemm(a, bs, c, nullptr, m, n, k);
    return;
  }
  for (size_t i = 0; i < bs.size(); ++i) gemm(a, bs[i], c + i * m * n, m, n, k, false);
}

void gemm(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k,
          bool b_nk) {
  if (m == 0 || n == 0) return;
  if (skinny_applies(m, b_nk)) {
    skinny_gemm(a, b, c, nullptr, m, n, k);
    return;
  }
  if (tc_applies(m, k, b_nk)) {
    tc_multi_gemm(a, std::span(&b, 1), c, nullptr, m, n, k);
    return;
  }
  Lt& s = lt();
  // One product queued at a time (threads share the handle and the pinned shapes).
  std::lock_guard<std::mutex> lock(s.mu);
  const Pinned& p = s.pinned(m, n, k, b_nk);
  const float alpha = 1.0f, beta = 0.0f;
  SPLITCHECK_LT_CHECK(cublasLtMatmul(s.handle, p.desc, &alpha, b, p.la, a, p.lb, &beta, c, p.lc, c,
                                     p.lc, &p.algo, s.workspace(stream()), kWorkspaceBytes,
                                     stream()));
}

std::string provenance_json() {
  const DeviceInfo d = device_info();
  std::string out =
      "{\"device\":\"" + d.name + "\",\"compute_capability\":\"" + std::to_string(d.cc_major) +
      "." + std::to_string(d.cc_minor) + "\",\"sm_count\":" + std::to_string(d.sm_count) +
      ",\"driver_version\":\"" + d.driver_version +
      "\",\"cuda_driver_api_version\":" + std::to_string(d.driver_api_version) +
      ",\"cuda_runtime_version\":" + std::to_string(d.runtime_version) +
      ",\"cublaslt_version\":" + std::to_string(d.cublaslt_version) + ",\"gemm_algorithms\":[";
  Lt& s = lt();
  std::lock_guard<std::mutex> lock(s.mu);
  bool first = true;
  for (const auto& [key, pinned] : s.algos) {
    const auto& [m, n, k, b_nk] = key;
    out += std::string(first ? "" : ",") + "{\"m\":" + std::to_string(m) +
           ",\"n\":" + std::to_string(n) + ",\"k\":" + std::to_string(k) + ",\"b\":\"" +
           (b_nk ? "nk" : "kn") + "\",\"algo\":\"" + pinned.description + "\"}";
    first = false;
  }
  return out + "]}";
}

}  // namespace splitcheck::cuda
