// The drafters' linear layer, dense SwiGLU and MoE (SPEC 2.5) on the GPU. Matrix products
// through gemm() (skinny_gemm for a few rows, else cuBLASLt); routing by one thread per
// token. A few tokens' experts run with the picks read on the device (no host wait); more
// are grouped by expert as on the CPU after one wait for the picks.
#include <algorithm>
#include <span>
#include <stdexcept>
#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace splitcheck::cuda {
namespace {

__global__ void swiglu_hidden_kernel(const float* gate, const float* up, int64_t n,
                                     uint16_t* hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) hidden[i] = f_to_bf(dsilu(round_bf(gate[i])) * round_bf(up[i]));
}

__global__ void round_f32_kernel(float* v, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] = round_bf(v[i]);
}

// Sigmoid scores, top-k with ties to the lower expert index, the chosen experts in
// ascending index, weights = score / sum of the chosen scores (summed in that order).
__global__ void route_kernel(const float* logits, int64_t t_count, int n_exp, int top_k,
                             int32_t* pick_expert, float* pick_weight) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= t_count) return;
  constexpr int kMaxExperts = 256;
  float score[kMaxExperts];
  bool chosen[kMaxExperts];
  for (int e = 0; e < n_exp; ++e) {
    score[e] = dsigmoid(logits[t * n_exp + e]);
    chosen[e] = false;
  }
  for (int k = 0; k < top_k; ++k) {
    int best = -1;
    for (int e = 0; e < n_exp; ++e) {
      if (chosen[e]) continue;
      if (best < 0 || score[e] > score[best]) best = e;
    }
    chosen[best] = true;
  }
  float sum = 0.0f;
  for (int e = 0; e < n_exp; ++e)
    if (chosen[e]) sum += score[e];
  int k = 0;
  for (int e = 0; e < n_exp; ++e) {
    if (!chosen[e]) continue;
    pick_expert[t * top_k + k] = e;
    pick_weight[t * top_k + k] = score[e] / sum;
    ++k;
  }
}

__global__ void gather_rows_kernel(const uint16_t* x, const int32_t* rows, int64_t h,
                                   uint16_t* out) {
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) out[i * h + c] = x[rows[i] * h + c];
}

__global__ void scatter_rows_kernel(const float* ys, const int32_t* slots, int64_t h, float* out) {
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) out[slots[i] * h + c] = ys[i * h + c];
}

// out[t][d] = bf16(sum_k w[t][k] * expert_out[t*top_k + k][d] + sum_s shared[s][t][d]),
// accumulated in that order.
__global__ void combine_kernel(const float* expert_out, const float* weights, int top_k,
                               const float* shared, int n_shared, int64_t t_count, int64_t h,
                               uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= t_count * h) return;
  const int64_t t = i / h, d = i % h;
  float acc = 0.0f;
  for (int k = 0; k < top_k; ++k)
    acc += weights[t * top_k + k] * expert_out[(t * top_k + k) * h + d];
  for (int s = 0; s < n_shared; ++s) acc += shared[(s * t_count + t) * h + d];
  out[i] = f_to_bf(acc);
}

// One SwiGLU expert on bf16 rows x [rows, h] -> out float32 [rows, h], values bf16-exact.
void swiglu(Staging& s, const uint16_t* x, int64_t rows, int64_t h, const SwiGluWeights& w,
            float* out) {
  if (rows == 0) return;
  const int64_t inter = w.gate->dim(1);
  float* gate = s.scratch<float>(rows * inter);
  float* up = s.scratch<float>(rows * inter);
  uint16_t* hidden = s.scratch<uint16_t>(rows * inter);
  gemm(x, as<uint16_t>(s.in(w.gate)), gate, rows, inter, h, false);
  gemm(x, as<uint16_t>(s.in(w.up)), up, rows, inter, h, false);
  swiglu_hidden_kernel<<<blocks_for(rows * inter, 256), 256, 0, stream()>>>(gate, up, rows * inter,
                                                                            hidden);
  gemm(hidden, as<uint16_t>(s.in(w.down)), out, rows, h, inter, false);
  round_f32_kernel<<<blocks_for(rows * h, 256), 256, 0, stream()>>>(out, rows * h);
}

}  // namespace

void linear(LinearArgs& a) {
  Staging s;
  const int64_t t = a.x->dim(0), in = a.x->dim(1), out_dim = a.weight->dim(1);
  gemm_bf16(as<uint16_t>(s.in(a.x)), as<uint16_t>(s.in(a.weight)),
            static_cast<uint16_t*>(s.inout(a.out)), t, out_dim, in);
  s.done();
}

void dense_mlp(DenseMlpArgs& a) {
  Staging s;
  const int64_t t = a.x->dim(0), h = a.x->dim(1);
  float* out = s.scratch<float>(t * h);
  swiglu(s, as<uint16_t>(s.in(a.x)), t, h, a.w, out);
  round_to_bf16(out, static_cast<uint16_t*>(s.inout(a.out)), t * h);
  s.done();
}

namespace {

// The routed experts of every slot t*top_k + k with the picks read on the device (no host
// wait): each expert's weights read once for the slots that picked it, each slot a row with
// the bits a host-grouped product of at most kSkinnyMaxRows rows gives it (skinny_gemm.cu).
// A token picks distinct experts, so an expert takes at most t_count <= kRoutedMaxRows slots.
void routed_experts_on_device(Staging& s, const uint16_t* x, const int32_t* d_expert,
                              int64_t t_count, int top_k, int64_t h,
                              std::span<const SwiGluWeights> experts, float* expert_out) {
  const int64_t inter = experts[0].gate->dim(1), slots = t_count * top_k;
  WeightTable gate, up, down;
  for (size_t e = 0; e < experts.size(); ++e) {
    const SwiGluWeights& w = experts[e];
    if (w.gate->dim(1) != inter || w.down->dim(0) != inter)
      throw std::runtime_error("MoE on CUDA: routed experts of different sizes");
    gate.w[e] = as<uint16_t>(s.in(w.gate));
    up.w[e] = as<uint16_t>(s.in(w.up));
    down.w[e] = as<uint16_t>(s.in(w.down));
  }
  const int n = static_cast<int>(experts.size());
  float* g = s.scratch<float>(slots * inter);
  float* u = s.scratch<float>(slots * inter);
  uint16_t* hidden = s.scratch<uint16_t>(slots * inter);
  routed_gemm(x, top_k, d_expert, gate, n, t_count, g, nullptr, slots, inter, h);
  routed_gemm(x, top_k, d_expert, up, n, t_count, u, nullptr, slots, inter, h);
  swiglu_hidden_kernel<<<blocks_for(slots * inter, 256), 256, 0, stream()>>>(g, u, slots * inter,
                                                                             hidden);
  routed_gemm(hidden, 1, d_expert, down, n, t_count, expert_out, nullptr, slots, h, inter);
  round_f32_kernel<<<blocks_for(slots * h, 256), 256, 0, stream()>>>(expert_out, slots * h);
}

// The routed experts grouped by expert on the host (one wait for the picks): each
// expert's product has as many rows as tokens routed to it.
void routed_experts_grouped(Staging& s, const uint16_t* x, const int32_t* d_expert,
                            int64_t t_count, int top_k, int64_t h,
                            std::span<const SwiGluWeights> experts, float* expert_out) {
  const int64_t n_exp = static_cast<int64_t>(experts.size());
  std::vector<int32_t> picks(static_cast<size_t>(t_count * top_k));
  SPLITCHECK_CUDA_CHECK(cudaMemcpyAsync(picks.data(), d_expert, picks.size() * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, stream()));
  finish();
  // Tokens grouped by expert (ascending token), and the slot t*top_k + k of each.
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(n_exp)), slots_of(rows_of.size());
  for (int64_t t = 0; t < t_count; ++t) {
    for (int k = 0; k < top_k; ++k) {
      const int32_t e = picks[static_cast<size_t>(t * top_k + k)];
      rows_of[e].push_back(static_cast<int32_t>(t));
      slots_of[e].push_back(static_cast<int32_t>(t * top_k + k));
    }
  }
  for (int64_t e = 0; e < n_exp; ++e) {
    const auto& rows = rows_of[e];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    const auto* d_rows = as<int32_t>(s.in_host(rows.data(), rows.size() * sizeof(int32_t)));
    const auto* d_slots = as<int32_t>(s.in_host(slots_of[e].data(), rows.size() * sizeof(int32_t)));
    uint16_t* xs = s.scratch<uint16_t>(n * h);
    float* ys = s.scratch<float>(n * h);
    gather_rows_kernel<<<static_cast<unsigned>(n), 256, 0, stream()>>>(x, d_rows, h, xs);
    swiglu(s, xs, n, h, experts[e], ys);
    scatter_rows_kernel<<<static_cast<unsigned>(n), 256, 0, stream()>>>(ys, d_slots, h, expert_out);
  }
}

}  // namespace

void moe(MoeArgs& a) {
  Staging s;
  const int64_t t_count = a.x->dim(0), h = a.x->dim(1), n_exp = a.router->dim(1);
  const int top_k = a.top_k;
  if (n_exp > 256) throw std::runtime_error("MoE on CUDA routes among at most 256 experts");
  const auto* x = as<uint16_t>(s.in(a.x));
  float* logits = s.scratch<float>(t_count * n_exp);
  gemm(x, as<uint16_t>(s.in(a.router)), logits, t_count, n_exp, h, false);
  auto* d_expert = s.scratch<int32_t>(t_count * top_k);
  auto* d_weight = s.scratch<float>(t_count * top_k);
  if (t_count > 0) {
    route_kernel<<<blocks_for(t_count, 128), 128, 0, stream()>>>(
        logits, t_count, static_cast<int>(n_exp), top_k, d_expert, d_weight);
  }
  float* expert_out = s.scratch<float>(t_count * top_k * h);
  // Up to kRoutedMaxRows tokens are routed on the device; more are grouped by expert on
  // the host after one wait for the picks (products of more rows take cuBLASLt).
  const int64_t slots = t_count * top_k;
  if (slots > 0 && t_count <= kRoutedMaxRows && skinny_applies(1, false)) {
    routed_experts_on_device(s, x, d_expert, t_count, top_k, h, a.experts, expert_out);
  } else if (slots > 0) {
    routed_experts_grouped(s, x, d_expert, t_count, top_k, h, a.experts, expert_out);
  }
  const int n_shared = static_cast<int>(a.shared.size());
  float* shared = s.scratch<float>(std::max<int64_t>(1, n_shared) * t_count * h);
  for (int i = 0; i < n_shared; ++i)
    swiglu(s, x, t_count, h, a.shared[i], shared + i * t_count * h);
  auto* out = static_cast<uint16_t*>(s.inout(a.out));
  if (t_count > 0) {
    combine_kernel<<<blocks_for(t_count * h, 256), 256, 0, stream()>>>(
        expert_out, d_weight, top_k, shared, n_shared, t_count, h, out);
  }
  s.done();
}

}  // namespace splitcheck::cuda
