// Dense SwiGLU and MoE (SPEC 2.5) on the CPU.
//
// SwiGLU: gate = bf16(x W_gate), up = bf16(x W_up), hidden = bf16(silu(gate) * up),
// out = bf16(hidden W_down). MoE: router logits x W_r in float32, sigmoid scores, top-k
// by score with ties to the lower expert index, weights = selected / their sum; the
// output is bf16(sum over selected experts in ascending index of w_e * out_e + shared),
// accumulated in float32 in that order, shared experts last.
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/primitives.h"
#include "kernels/math.h"

namespace splitcheck::cpu {

void swiglu_rows(const float* x, int64_t rows, int64_t h, const SwiGluWeights& w, float* out) {
  const int64_t inter = w.gate->dim(1);
  std::vector<float> gate(rows * inter), up(rows * inter);
  matmul(x, rows, h, w.gate->data<bf16>(), inter, gate.data());
  matmul(x, rows, h, w.up->data<bf16>(), inter, up.data());
  for (int64_t i = 0; i < rows * inter; ++i) {
    gate[i] = round_bf16(fmath::silu(round_bf16(gate[i])) * round_bf16(up[i]));
  }
  matmul(gate.data(), rows, inter, w.down->data<bf16>(), h, out);
  for (int64_t i = 0; i < rows * h; ++i) out[i] = round_bf16(out[i]);
}

void dense_mlp(DenseMlpArgs& a) {
  const int64_t t_count = a.x->dim(0);
  const int64_t h = a.x->dim(1);
  std::vector<float> x(t_count * h), out(t_count * h);
  widen(a.x->data<bf16>(), t_count * h, x.data());
  swiglu_rows(x.data(), t_count, h, a.w, out.data());
  for (int64_t i = 0; i < t_count * h; ++i) a.out->data<bf16>()[i] = to_bf16(out[i]);
}

void moe(MoeArgs& a) {
  const int64_t t_count = a.x->dim(0);
  const int64_t h = a.x->dim(1);
  const int64_t n_exp = a.router->dim(1);
  std::vector<float> x(t_count * h), logits(t_count * n_exp);
  widen(a.x->data<bf16>(), t_count * h, x.data());
  matmul(x.data(), t_count, h, a.router->data<bf16>(), n_exp, logits.data());

  // Route every token; group tokens by expert (rows are independent, so grouping changes
  // no bit of any row's result).
  std::vector<std::vector<int64_t>> tokens_of(n_exp);
  std::vector<std::vector<std::pair<int, float>>> picks(t_count);
  std::vector<int> order(n_exp);
  std::vector<float> score(n_exp);
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t e = 0; e < n_exp; ++e) score[e] = fmath::sigmoid(logits[t * n_exp + e]);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int l, int r) { return score[l] > score[r]; });
    std::vector<int> chosen(order.begin(), order.begin() + a.top_k);
    std::sort(chosen.begin(), chosen.end());
    float sum = 0.0f;
    for (int e : chosen) sum += score[e];
    for (int e : chosen) {
      picks[t].push_back({e, score[e] / sum});
      tokens_of[e].push_back(t);
    }
  }
  // Expert outputs per token, indexed [t][pick].
  std::vector<std::vector<float>> expert_out(t_count * a.top_k);
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < n_exp; ++e) {
    const auto& rows = tokens_of[e];
    if (rows.empty()) continue;
    xs.resize(rows.size() * h);
    ys.resize(rows.size() * h);
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy_n(x.data() + rows[i] * h, h, xs.data() + i * h);
    swiglu_rows(xs.data(), static_cast<int64_t>(rows.size()), h, a.experts[e], ys.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t t = rows[i];
      for (int k = 0; k < a.top_k; ++k) {
        if (picks[t][k].first == e) {
          expert_out[t * a.top_k + k].assign(ys.data() + i * h, ys.data() + (i + 1) * h);
        }
      }
    }
  }
  std::vector<std::vector<float>> shared_out;
  for (const SwiGluWeights& s : a.shared) {
    shared_out.emplace_back(t_count * h);
    swiglu_rows(x.data(), t_count, h, s, shared_out.back().data());
  }
  for (int64_t t = 0; t < t_count; ++t) {
    bf16* o = a.out->data<bf16>() + t * h;
    for (int64_t d = 0; d < h; ++d) {
      float acc = 0.0f;
      for (int k = 0; k < a.top_k; ++k) acc += picks[t][k].second * expert_out[t * a.top_k + k][d];
      for (const auto& s : shared_out) acc += s[t * h + d];
      o[d] = to_bf16(acc);
    }
  }
}

}  // namespace splitcheck::cpu
