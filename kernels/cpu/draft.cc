// The drafters' generic ops on the CPU: a bf16 linear layer and dense attention.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/primitives.h"

namespace splitcheck::cpu {

void linear(LinearArgs& a) {
  const int64_t t = a.x->dim(0), in = a.x->dim(1), out_dim = a.weight->dim(1);
  std::vector<float> x(t * in), out(t * out_dim);
  widen(a.x->data<bf16>(), t * in, x.data());
  matmul(x.data(), t, in, a.weight->data<bf16>(), out_dim, out.data());
  for (int64_t i = 0; i < t * out_dim; ++i) a.out->data<bf16>()[i] = to_bf16(out[i]);
}

void dense_attention(DenseAttentionArgs& a) {
  if (!a.begin.empty()) {
    for (size_t i = 0; i + 1 < a.begin.size(); ++i) {
      const Tensor q = a.q->rows(a.begin[i], a.begin[i + 1]);
      Tensor out = a.out->rows(a.begin[i], a.begin[i + 1]);
      DenseAttentionArgs one{&q, a.keys[i], a.values[i], a.heads, a.head_dim, &out, {}, {}, {}};
      dense_attention(one);
    }
    return;
  }
  const int64_t tq = a.q->dim(0), tk = a.k->dim(0);
  const int64_t qd = static_cast<int64_t>(a.heads) * a.head_dim;
  std::vector<float> q(tq * qd), k(tk * qd), v(tk * qd), s(tk);
  widen(a.q->data<bf16>(), tq * qd, q.data());
  widen(a.k->data<bf16>(), tk * qd, k.data());
  widen(a.v->data<bf16>(), tk * qd, v.data());
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  for (int64_t t = 0; t < tq; ++t) {
    for (int h = 0; h < a.heads; ++h) {
      const float* qv = q.data() + t * qd + h * a.head_dim;
      for (int64_t j = 0; j < tk; ++j) {
        const float* kv = k.data() + j * qd + h * a.head_dim;
        float dot = 0.0f;
        for (int d = 0; d < a.head_dim; ++d) dot += qv[d] * kv[d];
        s[j] = dot * inv_sqrt_d;
      }
      softmax(s.data(), tk);
      for (int d = 0; d < a.head_dim; ++d) {
        float o = 0.0f;
        for (int64_t j = 0; j < tk; ++j) o += s[j] * v[j * qd + h * a.head_dim + d];
        a.out->data<bf16>()[t * qd + h * a.head_dim + d] = to_bf16(o);
      }
    }
  }
}

}  // namespace splitcheck::cpu
