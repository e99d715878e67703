// The CUDA backend against a device-to-device copy measured in the same run.
// - attn_res: both variants, H 7168, 8 bank rows read (9 sources), delta and out_w given,
//   at 64, 1024 and 8192 tokens. Achieved bandwidth counts every byte read and written
//   once: per token 10 rows read (prefix, delta, 8 bank rows) and 2 written (prefix, out),
//   12 x H x 2 bytes.
// - One k3-shape MoE layer (H 7168, 16 experts of width 512, top 2, one shared expert) at
//   1, 16 and 64 tokens: the weight bytes it must read (the router, every expert some
//   token picked, the shared expert) per call, against the copy of as many bytes.
// - One k3-shape KDA layer (H 7168, 56 heads of 128) at 1 and 16 tokens: its weight bytes
//   (six square projections and beta's) and its state read and written, per call, against
//   the copy of as many bytes; at 16 tokens the recurrence runs token by token, so the gap
//   to 1 token is its cost (a prefill's KDA against a decode's).
// - The tensor-core product (tc_multi_gemm) at the shapes of k3-tiny's batched serving
//   step (48 rows; H 256, expert width 64, vocabulary 512) and of a 16-token prefill: the
//   device's time per launch, queued back to back (SPLITCHECK_CUDA_TC_TILE picks a tile
//   shape to measure against the rule's).
// The copy moves the same bytes (half read, half written). An op's calls queue on the
// stream without waiting, so each timed loop starts and ends with a wait for the device:
// its time is the device's for every call it queued. Without a CUDA build or device it
// says so and runs nothing.
//
//   ./cuda_benchmark                       # all
//   ./cuda_benchmark --benchmark_filter=AttnRes
//   ./cuda_benchmark --benchmark_filter=Kda/16
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/ops.h"
#include "reference/weights.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/tc.h"
#endif

namespace splitcheck {
namespace {

#ifdef SPLITCHECK_HAVE_CUDA
constexpr int64_t kH = 7168;
constexpr int kBankRows = 8;
constexpr int64_t kRowsMoved = 12;  // rows of H bf16 read or written per token

Tensor pattern(Shape shape, uint64_t seed, float scale, float offset = 0.0f) {
  TensorSpec spec{"bench." + std::to_string(seed), std::move(shape),
                  offset != 0.0f ? WeightInit::kOnePlus : WeightInit::kUniform, scale};
  ModelConfig c;
  c.seed = seed;
  return generate_model_tensor(c, spec, Device::kCuda);
}

// Seconds per device-to-device copy of `bytes` (median-free: mean of `reps` after a warm-up).
double copy_seconds(size_t bytes, int reps) {
  Tensor src = Tensor::zeros(DType::kBF16, {static_cast<int64_t>(bytes / 2)}, Device::kCuda);
  Tensor dst = Tensor::zeros(DType::kBF16, {static_cast<int64_t>(bytes / 2)}, Device::kCuda);
  cuda::copy(dst.address(), src.address(), bytes);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) cuda::copy(dst.address(), src.address(), bytes);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// Seconds per call of `call` over the benchmark's iterations, after one warm-up call: the
// calls queue on the stream without waiting, so the timed loop starts and ends with a wait
// for the device (Google Benchmark's own Time leaves out the last one).
template <typename Call>
double seconds_per_call(benchmark::State& state, const Call& call) {
  call();
  cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) call();
  cuda::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(state.iterations());
}

// The counters every op's row shares: its achieved bandwidth as a fraction of a copy of
// `bytes` (copy time / call time, same bytes) and the call's time; returns the copy's.
double report_against_copy(benchmark::State& state, double bytes, double call_s) {
  const double copy_s = copy_seconds(static_cast<size_t>(bytes / 2), 20);
  state.counters["fraction_of_copy"] = copy_s / call_s;
  state.counters["us_per_call"] = call_s * 1e6;
  return copy_s;
}

void BM_CudaCopy(benchmark::State& state) {
  const int64_t t = state.range(0);
  const size_t bytes = static_cast<size_t>(t * kH * 2 * kRowsMoved / 2);  // read = written
  Tensor src = Tensor::zeros(DType::kBF16, {static_cast<int64_t>(bytes / 2)}, Device::kCuda);
  Tensor dst = Tensor::zeros(DType::kBF16, {static_cast<int64_t>(bytes / 2)}, Device::kCuda);
  for (auto _ : state) cuda::copy(dst.address(), src.address(), bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
                          static_cast<int64_t>(bytes));
}

// One registry attn_res call (`variant`) per iteration.
void BM_CudaAttnRes(benchmark::State& state, const char* variant) {
  const int64_t t = state.range(0);
  Tensor prefix = pattern({t, kH}, 1, 1.0f);
  Tensor delta = Tensor::zeros(DType::kBF16, {t, kH}, Device::kCuda);  // keeps P unchanged
  Tensor bank = pattern({t, kBankRows, kH}, 2, 1.0f);
  Tensor norm_w = pattern({kH}, 3, 0.1f, 1.0f);
  Tensor proj_w = pattern({kH}, 4, 0.025f);
  Tensor out_w = pattern({kH}, 5, 0.1f, 1.0f);
  Tensor out = Tensor::zeros(DType::kBF16, {t, kH}, Device::kCuda);
  const std::vector<int> sizes = {static_cast<int>(kH)};
  AttnResArgs a{&prefix,   &delta, &bank, &norm_w, &proj_w, &out_w,
                kBankRows, -1,     1e-6f, 1e-6f,   sizes,   &out};
  const double call_s = seconds_per_call(state, [&] { run_variant("attn_res", variant, &a); });
  const double bytes = static_cast<double>(t * kH * 2 * kRowsMoved);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  const double copy_s = report_against_copy(state, bytes, call_s);
  state.counters["copy_TBps"] = bytes / copy_s / 1e12;
}

// One MoE layer of k3-shape's shapes on `t` tokens, the registry's kernel per iteration.
void BM_CudaMoe(benchmark::State& state) {
  constexpr int64_t kExperts = 16, kInter = 512;
  constexpr int kTopK = 2;
  const int64_t t = state.range(0);
  Tensor x = pattern({t, kH}, 11, 1.0f);
  Tensor router = pattern({kH, kExperts}, 12, 0.02f);
  std::vector<Tensor> owned;
  for (int64_t e = 0; e <= kExperts; ++e) {  // the routed experts, then the shared one
    owned.push_back(pattern({kH, kInter}, 100 + 3 * e, 0.02f));
    owned.push_back(pattern({kH, kInter}, 101 + 3 * e, 0.02f));
    owned.push_back(pattern({kInter, kH}, 102 + 3 * e, 0.04f));
  }
  std::vector<SwiGluWeights> experts, shared;
  for (int64_t e = 0; e <= kExperts; ++e) {
    const SwiGluWeights w{&owned[3 * e], &owned[3 * e + 1], &owned[3 * e + 2]};
    (e < kExperts ? experts : shared).push_back(w);
  }
  Tensor out = Tensor::zeros(DType::kBF16, {t, kH}, Device::kCuda);
  MoeArgs a{&x, &router, experts, shared, kTopK, &out};
  const double call_s = seconds_per_call(state, [&] { moe(KernelContext{}, a); });
  // The experts the tokens pick (their router logits' top kTopK; sigmoid keeps the order).
  const Tensor hx = x.to(Device::kCpu), hr = router.to(Device::kCpu);
  std::set<int64_t> picked;
  for (int64_t i = 0; i < t; ++i) {
    std::vector<std::pair<float, int64_t>> logits;
    for (int64_t e = 0; e < kExperts; ++e) {
      float sum = 0.0f;
      for (int64_t d = 0; d < kH; ++d)
        sum += to_f32(hx.data<bf16>()[i * kH + d]) * to_f32(hr.data<bf16>()[d * kExperts + e]);
      logits.emplace_back(-sum, e);
    }
    std::sort(logits.begin(), logits.end());
    for (int k = 0; k < kTopK; ++k) picked.insert(logits[k].second);
  }
  const double bytes = static_cast<double>(
      (static_cast<int64_t>(picked.size()) + 1) * 3 * kH * kInter * 2 + kH * kExperts * 2);
  report_against_copy(state, bytes, call_s);
  state.counters["experts_read"] = static_cast<double>(picked.size()) + 1;
  state.counters["weight_TBps"] = bytes / call_s / 1e12;
}

// One KDA layer of k3-shape's shapes on `t` tokens, the registry's kernel per iteration
// (the state carried from call to call, as a request's is).
void BM_CudaKda(benchmark::State& state) {
  constexpr int kHeads = 56, kHeadDim = 128;
  const int64_t t = state.range(0);
  Tensor x = pattern({t, kH}, 21, 1.0f);
  std::vector<Tensor> square;  // q, k, v, a, g, o
  for (int i = 0; i < 6; ++i) square.push_back(pattern({kH, kH}, 22 + i, 0.01f));
  Tensor w_b = pattern({kH, kHeads}, 28, 0.01f);
  Tensor o_norm = pattern({kHeadDim}, 29, 0.1f, 1.0f);
  Tensor kda_state =
      Tensor::zeros(DType::kF32, {int64_t{kHeads} * kHeadDim * kHeadDim}, Device::kCuda);
  Tensor out = Tensor::zeros(DType::kBF16, {t, kH}, Device::kCuda);
  KdaArgs a{&x,      &square[0], &square[1], &square[2], &w_b,  &square[3], &square[4],
            &o_norm, &square[5], kHeads,     kHeadDim,   1e-6f, &kda_state, &out};
  const double call_s = seconds_per_call(state, [&] { kda_attention(KernelContext{}, a); });
  const double bytes =
      static_cast<double>(6 * kH * kH * 2 + kH * kHeads * 2 + 2 * kda_state.nbytes());
  report_against_copy(state, bytes, call_s);
  state.counters["weight_TBps"] = bytes / call_s / 1e12;
}

// One tc_multi_gemm of range(0) rows by range(3) weights [range(2), range(1)] per iteration.
void BM_CudaTcGemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int64_t g = state.range(3);
  Tensor x = pattern({m, k}, 31, 1.0f);
  std::vector<Tensor> ws;
  std::vector<const uint16_t*> bs;
  for (int64_t i = 0; i < g; ++i) {
    ws.push_back(pattern({k, n}, 32 + static_cast<uint64_t>(i), 0.05f));
    bs.push_back(static_cast<const uint16_t*>(ws.back().address()));
  }
  Tensor out = Tensor::zeros(DType::kBF16, {g * m, n}, Device::kCuda);
  const auto* a = static_cast<const uint16_t*>(x.address());
  auto* c = static_cast<uint16_t*>(out.address());
  const double call_s =
      seconds_per_call(state, [&] { cuda::tc_multi_gemm(a, bs, nullptr, c, m, n, k); });
  state.counters["us_per_call"] = call_s * 1e6;
}

BENCHMARK(BM_CudaTcGemm)
    ->ArgNames({"m", "n", "k", "weights"})
    ->Args({48, 256, 256, 1})
    ->Args({48, 64, 256, 2})
    ->Args({48, 256, 64, 1})
    ->Args({48, 512, 256, 1})
    ->Args({16, 256, 256, 3})
    ->Args({64, 256, 256, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaCopy)->Arg(64)->Arg(1024)->Arg(8192)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CudaAttnRes, native, "native")
    ->Arg(64)
    ->Arg(1024)
    ->Arg(8192)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CudaAttnRes, fallback, "fallback")
    ->Arg(64)
    ->Arg(1024)
    ->Arg(8192)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaMoe)->Arg(1)->Arg(16)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaKda)->Arg(1)->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace splitcheck

int main(int argc, char** argv) {
#ifdef SPLITCHECK_HAVE_CUDA
  const std::string why = splitcheck::cuda::unavailable_reason();
  if (!why.empty()) {
    std::printf("cuda_benchmark: nothing to measure: %s\n", why.c_str());
    return 0;
  }
#else
  std::printf("cuda_benchmark: nothing to measure: this build has no CUDA backend\n");
  return 0;
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
