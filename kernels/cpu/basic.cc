// Embedding gather, RMSNorm, the output head, argmax and the Markov chain on the CPU.
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/primitives.h"

namespace splitcheck::cpu {

void embed(EmbedArgs& a) {
  const int64_t t_count = a.ids->dim(0);
  const int64_t h = a.table->dim(1);
  const int64_t v = a.table->dim(0);
  for (int64_t t = 0; t < t_count; ++t) {
    int32_t id = a.ids->data<int32_t>()[t];
    if (id < 0 || id >= v) id = 0;  // callers validate ids; never read out of bounds
    const bf16* row = a.table->data<bf16>() + static_cast<int64_t>(id) * h;
    std::copy(row, row + h, a.out->data<bf16>() + t * h);
  }
}

void rms_norm(RmsNormArgs& a) {
  const int64_t t_count = a.x->dim(0);
  const int64_t h = a.x->dim(1);
  std::vector<float> x(h), w(h);
  widen(a.weight->data<bf16>(), h, w.data());
  for (int64_t t = 0; t < t_count; ++t) {
    widen(a.x->data<bf16>() + t * h, h, x.data());
    const float r = rms_scale(x.data(), h, a.eps);
    bf16* o = a.out->data<bf16>() + t * h;
    for (int64_t d = 0; d < h; ++d) o[d] = to_bf16(x[d] * r * w[d]);
  }
}

void lm_head(LmHeadArgs& a) {
  const int64_t t_count = a.x->dim(0);
  const int64_t h = a.x->dim(1);
  const int64_t v = a.lm_head->dim(0);
  std::vector<float> x(t_count * h);
  widen(a.x->data<bf16>(), t_count * h, x.data());
  matmul_nt(x.data(), t_count, h, a.lm_head->data<bf16>(), v, a.logits->data<float>());
}

void argmax(ArgmaxArgs& a) {
  const int64_t t_count = a.logits->dim(0);
  const int64_t v = a.logits->dim(1);
  for (int64_t t = 0; t < t_count; ++t) {
    a.tokens->data<int32_t>()[t] =
        static_cast<int32_t>(cpu::argmax(a.logits->data<float>() + t * v, v));
  }
}

void markov_chain(MarkovChainArgs& a) {
  const int64_t gamma = a.gamma(), v = a.u->dim(1), r = a.w1->dim(1);
  std::vector<float> row(r), bias(v), scores(v);
  a.tokens->clear();
  for (int64_t c = 0; c < a.chains(); ++c) {
    int64_t prev = a.anchors[static_cast<size_t>(c)];
    for (int64_t k = 0; k < gamma; ++k) {
      const int64_t step = c * gamma + k;
      widen(a.w1->data<bf16>() + prev * r, r, row.data());
      matmul_nt(row.data(), 1, r, a.w2->data<bf16>(), v, bias.data());
      const float* u = a.u->data<float>() + step * v;
      for (int64_t i = 0; i < v; ++i) scores[i] = u[i] + bias[i];
      prev = cpu::argmax(scores.data(), v);
      if (a.departs_at(step)) prev = second_argmax(scores.data(), v, prev);
      a.tokens->push_back(static_cast<int32_t>(prev));
    }
  }
}

}  // namespace splitcheck::cpu
