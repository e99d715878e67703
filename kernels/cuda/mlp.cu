// The drafters' linear layer, dense SwiGLU and MoE (SPEC 2.5) on the GPU. Matrix products
// through gemm() (skinny_gemm for a few rows, tc_multi_gemm up to 64 rows of a shallow
// weight, else cuBLASLt); routing by a warp a token.
// A few tokens' experts run in two routed launches with the picks read on the device (no
// host wait); more are grouped by expert as on the CPU after one wait for the picks.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <stdexcept>
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
// ascending index, weights = score / sum of the chosen scores (summed in that order). One
// warp a token: its lanes take the scores, lane 0 chooses. The routed rows of the experts'
// products (SkinnyRows) are written too: slot t*top_k + k picks its expert for token t,
// then row slots + i*t_count + t picks shared expert i (as expert n_exp + i) for token t.
constexpr int kRouteWarps = 4;
constexpr int kMaxExperts = 256;
__global__ void route_kernel(const float* logits, int64_t t_count, int n_exp, int top_k,
                             int n_shared, int32_t* pick_expert, float* pick_weight,
                             int32_t* row_pick, int32_t* row_token) {
  __shared__ float scores[kRouteWarps][kMaxExperts];
  __shared__ bool chosen_of[kRouteWarps][kMaxExperts];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * static_cast<int64_t>(kRouteWarps) + warp;
  if (t >= t_count) return;
  float* score = scores[warp];
  bool* chosen = chosen_of[warp];
  for (int e = lane; e < n_exp; e += 32) {
    score[e] = dsigmoid(logits[t * n_exp + e]);
    chosen[e] = false;
  }
  __syncwarp();
  if (lane != 0) return;
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
    if (row_pick != nullptr) {
      row_pick[t * top_k + k] = e;
      row_token[t * top_k + k] = static_cast<int32_t>(t);
    }
    ++k;
  }
  if (row_pick == nullptr) return;
  for (int i = 0; i < n_shared; ++i) {
    row_pick[t_count * top_k + i * t_count + t] = n_exp + i;
    row_token[t_count * top_k + i * t_count + t] = static_cast<int32_t>(t);
  }
}

__global__ void gather_rows_kernel(const uint16_t* x, const int32_t* rows, int64_t h,
                                   uint16_t* out) {
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) out[i * h + c] = x[rows[i] * h + c];
}

// Rows of bf16-exact float values into their slots of a bf16 array.
__global__ void scatter_rows_kernel(const float* ys, const int32_t* slots, int64_t h,
                                    uint16_t* out) {
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
    out[slots[i] * h + c] = f_to_bf(ys[i * h + c]);
}

// out[t][d] = bf16(sum_k w[t][k] * out_row[t*top_k + k][d] + sum_s out_row[slots + s*t_count
// + t][d]), accumulated in that order: the routed experts' rows, then the shared experts'.
__global__ void combine_kernel(const uint16_t* expert_out, const float* weights, int top_k,
                               int n_shared, int64_t t_count, int64_t h, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= t_count * h) return;
  const int64_t t = i / h, d = i % h, slots = t_count * top_k;
  float acc = 0.0f;
  for (int k = 0; k < top_k; ++k)
    acc += weights[t * top_k + k] * bf_to_f(expert_out[(t * top_k + k) * h + d]);
  for (int s = 0; s < n_shared; ++s) acc += bf_to_f(expert_out[(slots + s * t_count + t) * h + d]);
  out[i] = f_to_bf(acc);
}

// SwiGLU's bf16 hidden [rows, inter] of bf16 rows x [rows, h]: gate and up in one launch,
// then the hidden in a second; where the tensor-core kernel takes the products in one
// chunk, all of it in one (tc_swiglu: the same bits, no float32 products stored). Deeper
// weights reach the kernel only under SPLITCHECK_CUDA_TC=all, through multi_gemm.
uint16_t* swiglu_hidden(Staging& s, const uint16_t* x, int64_t rows, int64_t h,
                        const SwiGluWeights& w) {
  const int64_t inter = w.gate->dim(1);
  uint16_t* hidden = s.scratch<uint16_t>(rows * inter);
  const uint16_t* gate_up[2] = {as<uint16_t>(s.in(w.gate)), as<uint16_t>(s.in(w.up))};
  if (tc_applies(rows, h, false) && h <= kTcMaxDepth) {
    tc_swiglu(x, gate_up[0], gate_up[1], hidden, rows, inter, h);
    return hidden;
  }
  float* gate = s.scratch<float>(2 * rows * inter);  // gate, then up: one launch for both
  float* up = gate + rows * inter;
  multi_gemm(x, gate_up, gate, rows, inter, h);
  swiglu_hidden_kernel<<<blocks_for(rows * inter, 256), 256, 0, stream()>>>(gate, up, rows * inter,
                                                                            hidden);
  return hidden;
}

// One SwiGLU expert on bf16 rows x [rows, h] -> out float32 [rows, h], values bf16-exact.
void swiglu(Staging& s, const uint16_t* x, int64_t rows, int64_t h, const SwiGluWeights& w,
            float* out) {
  if (rows == 0) return;
  const int64_t inter = w.gate->dim(1);
  gemm(swiglu_hidden(s, x, rows, h, w), as<uint16_t>(s.in(w.down)), out, rows, h, inter, false);
  round_f32_kernel<<<blocks_for(rows * h, 256), 256, 0, stream()>>>(out, rows * h);
}

// The same expert into bf16 out [rows, h]: the down product rounded once (gemm_bf16, in
// its launch where the path allows), the bits of swiglu()'s values.
void swiglu_bf16(Staging& s, const uint16_t* x, int64_t rows, int64_t h, const SwiGluWeights& w,
                 uint16_t* out) {
  if (rows == 0) return;
  const int64_t inter = w.gate->dim(1);
  gemm_bf16(swiglu_hidden(s, x, rows, h, w), as<uint16_t>(s.in(w.down)), out, rows, h, inter);
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
  swiglu_bf16(s, as<uint16_t>(s.in(a.x)), t, h, a.w, static_cast<uint16_t*>(s.inout(a.out)));
  s.done();
}

namespace {

// Rows [0, t_count*top_k) of expert_out are the routed slots, then n_shared blocks of
// t_count rows, one a shared expert: each bf16 [h].
struct MoeRows {
  int64_t t_count, slots, h;
  int top_k, n_shared;
  int64_t all() const { return slots + n_shared * t_count; }
};

// The experts with the picks read on the device (no host wait): one launch for every gate
// and up product, one for every down product on the SwiGLU hidden, each expert's weights
// read once for the rows that picked it, each row with the bits a product of at most
// kSkinnyMaxRows rows gives it (skinny_gemm.cu). The shared experts are rows of the same
// launches (as experts n_exp + i) when gemm() would take the skinny kernel for them too;
// otherwise they are left to the caller. A token picks distinct experts, so an expert
// takes at most t_count <= kRoutedMaxRows rows.
void experts_on_device(Staging& s, const uint16_t* x, const int32_t* row_pick,
                       const int32_t* row_token, const MoeRows& r, bool with_shared,
                       std::span<const SwiGluWeights> experts,
                       std::span<const SwiGluWeights> shared, uint16_t* expert_out) {
  const int64_t inter = experts[0].gate->dim(1);
  const int64_t rows = with_shared ? r.all() : r.slots;
  const size_t n = experts.size() + (with_shared ? shared.size() : 0);
  if (2 * n > std::size(WeightTable{}.w))
    throw std::logic_error("MoE on CUDA: more than 128 experts in a routed launch");
  WeightTable gate_up, down;
  for (size_t e = 0; e < n; ++e) {
    const SwiGluWeights& w = e < experts.size() ? experts[e] : shared[e - experts.size()];
    if (w.gate->dim(1) != inter || w.down->dim(0) != inter)
      throw std::runtime_error("MoE on CUDA: routed experts of different sizes");
    gate_up.w[2 * e] = as<uint16_t>(s.in(w.gate));
    gate_up.w[2 * e + 1] = as<uint16_t>(s.in(w.up));
    down.w[e] = as<uint16_t>(s.in(w.down));
  }
  float* gu = s.scratch<float>(2 * rows * inter);  // gate rows, then up rows
  const SkinnyRows both{row_pick, row_token, 2, static_cast<int>(rows)};
  routed_gemm(SkinnyOperand{x}, both, r.t_count, gate_up, static_cast<int>(2 * n), gu, nullptr,
              inter, r.h);
  const SkinnyRows one{row_pick, nullptr, 1, static_cast<int>(rows)};
  routed_gemm(SkinnyOperand{nullptr, gu, gu + rows * inter}, one, r.t_count, down,
              static_cast<int>(n), nullptr, expert_out, r.h, inter);
}

// The routed experts grouped by expert on the host (one wait for the picks): each
// expert's product has as many rows as tokens routed to it.
void routed_experts_grouped(Staging& s, const uint16_t* x, const int32_t* d_expert,
                            const MoeRows& r, std::span<const SwiGluWeights> experts,
                            uint16_t* expert_out) {
  const int64_t n_exp = static_cast<int64_t>(experts.size()), h = r.h;
  std::vector<int32_t> picks(static_cast<size_t>(r.slots));
  SPLITCHECK_CUDA_CHECK(cudaMemcpyAsync(picks.data(), d_expert, picks.size() * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, stream()));
  finish();
  // Tokens grouped by expert (ascending token), and the slot t*top_k + k of each.
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(n_exp)), slots_of(rows_of.size());
  for (int64_t t = 0; t < r.t_count; ++t) {
    for (int k = 0; k < r.top_k; ++k) {
      const int32_t e = picks[static_cast<size_t>(t * r.top_k + k)];
      rows_of[e].push_back(static_cast<int32_t>(t));
      slots_of[e].push_back(static_cast<int32_t>(t * r.top_k + k));
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
  if (n_exp > kMaxExperts) throw std::runtime_error("MoE on CUDA routes among at most 256 experts");
  const MoeRows r{t_count, t_count * top_k, h, top_k, static_cast<int>(a.shared.size())};
  if (t_count == 0) {
    s.done();
    return;
  }
  const auto* x = as<uint16_t>(s.in(a.x));
  // Up to kRoutedMaxRows tokens of at most 128 experts (a routed launch's table holds a
  // gate and an up weight of each) are routed on the device; more are grouped by expert on
  // the host after one wait for the picks (their products through gemm()). The
  // shared experts join the routed launches where gemm() would give them the same bits.
  const auto fits = [&](int64_t experts) { return 2 * experts <= std::ssize(WeightTable{}.w); };
  const bool on_device =
      r.slots > 0 && t_count <= kRoutedMaxRows && skinny_applies(1, false) && fits(n_exp);
  bool shared_with_routed = on_device && skinny_applies(t_count, false) && fits(n_exp + r.n_shared);
  for (const SwiGluWeights& w : a.shared)
    shared_with_routed = shared_with_routed && w.gate->dim(1) == a.experts[0].gate->dim(1);
  // Shared experts outside the routed launches need only x, into their rows of
  // expert_out. Where their weights are large they run on the side stream, beside the
  // router and the routed experts; small ones (k3-tiny's 96 KiB) take a few microseconds
  // of the device, less than the fork and join cost the host, and run in line.
  auto* expert_out = s.scratch<uint16_t>(r.all() * h);
  std::optional<SideWork> shared_experts;
  if (!shared_with_routed && r.n_shared > 0) {
    size_t bytes = 0;
    for (const SwiGluWeights& w : a.shared)
      bytes += w.gate->nbytes() + w.up->nbytes() + w.down->nbytes();
    shared_experts.emplace(
        [&] {
          for (int i = 0; i < r.n_shared; ++i)
            swiglu_bf16(s, x, t_count, h, a.shared[i], expert_out + (r.slots + i * t_count) * h);
        },
        bytes >= kSideMinBytes);
  }
  float* logits = s.scratch<float>(t_count * n_exp);
  gemm(x, as<uint16_t>(s.in(a.router)), logits, t_count, n_exp, h, false);
  auto* d_expert = s.scratch<int32_t>(r.slots);
  auto* d_weight = s.scratch<float>(r.slots);
  int32_t* row_pick = on_device ? s.scratch<int32_t>(r.all()) : nullptr;
  int32_t* row_token = on_device ? s.scratch<int32_t>(r.all()) : nullptr;
  route_kernel<<<blocks_for(t_count, kRouteWarps), kRouteWarps * 32, 0, stream()>>>(
      logits, t_count, static_cast<int>(n_exp), top_k, r.n_shared, d_expert, d_weight, row_pick,
      row_token);
  if (on_device) {
    experts_on_device(s, x, row_pick, row_token, r, shared_with_routed, a.experts, a.shared,
                      expert_out);
  } else if (r.slots > 0) {
    routed_experts_grouped(s, x, d_expert, r, a.experts, expert_out);
  }
  if (shared_experts) shared_experts->join();
  auto* out = static_cast<uint16_t*>(s.inout(a.out));
  combine_kernel<<<blocks_for(t_count * h, 256), 256, 0, stream()>>>(expert_out, d_weight, top_k,
                                                                     r.n_shared, t_count, h, out);
  s.done();
}

}  // namespace splitcheck::cuda
