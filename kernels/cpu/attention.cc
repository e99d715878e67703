// MLA-lite and KDA-lite (SPEC 2.4) on the CPU.
//
// Choices SPEC leaves open, fixed here: weights are [in, out]; MLA's normalised latent
// c' is rounded to bf16 (it leaves the norm); Q, K, V are bf16 (SPEC); scores, softmax
// and O stay float32; O * g is rounded to bf16 as the input of W_o. KDA's q, k, v, beta,
// alpha and state stay float32; rmsnorm(o) uses the weight o_norm [hd]; the product
// rmsnorm(o) * sigmoid(x W_g) is rounded to bf16 as the input of W_o.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/primitives.h"
#include "kernels/math.h"

namespace splitcheck::cpu {
namespace {

std::vector<float> widened(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  widen(t.data<bf16>(), t.numel(), v.data());
  return v;
}

void round_all(std::vector<float>& v) {
  for (float& x : v) x = round_bf16(x);
}

void l2_normalize(float* v, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
  const float r = fmath::rsqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) v[i] = v[i] * r;
}

}  // namespace

void mla_attention(MlaArgs& a) {
  if (!a.begin.empty()) return for_each_segment(a, mla_attention);
  const int64_t t_count = a.x->dim(0);
  const int64_t h = a.x->dim(1);
  const int64_t r = a.w_dkv->dim(1);
  const int64_t qd = static_cast<int64_t>(a.heads) * a.head_dim;
  const std::vector<float> x = widened(*a.x);

  std::vector<float> q(t_count * qd), g(t_count * qd), c(t_count * r);
  matmul(x.data(), t_count, h, a.w_q->data<bf16>(), qd, q.data());
  round_all(q);
  matmul(x.data(), t_count, h, a.w_g->data<bf16>(), qd, g.data());
  matmul(x.data(), t_count, h, a.w_dkv->data<bf16>(), r, c.data());
  const int64_t first_pos = a.cache->positions;
  const int64_t n_ctx = first_pos + t_count;
  reserve_latents(*a.cache, n_ctx, r, Device::kCpu);
  bf16* latents = a.cache->rows.data<bf16>();
  for (int64_t i = 0; i < t_count * r; ++i) latents[first_pos * r + i] = to_bf16(c[i]);
  a.cache->positions = n_ctx;

  // K and V for every cached position (earlier ones and this forward's).
  std::vector<float> cn(n_ctx * r), kv_norm(r);
  widen(a.kv_norm->data<bf16>(), r, kv_norm.data());
  widen(latents, n_ctx * r, cn.data());
  for (int64_t j = 0; j < n_ctx; ++j) {
    float* row = cn.data() + j * r;
    const float s = rms_scale(row, r, a.eps);
    for (int64_t i = 0; i < r; ++i) row[i] = round_bf16(row[i] * s * kv_norm[i]);
  }
  std::vector<float> k(n_ctx * qd), v(n_ctx * qd);
  matmul(cn.data(), n_ctx, r, a.w_uk->data<bf16>(), qd, k.data());
  matmul(cn.data(), n_ctx, r, a.w_uv->data<bf16>(), qd, v.data());
  round_all(k);
  round_all(v);

  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  std::vector<float> og(t_count * qd), scores(n_ctx);
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t visible = first_pos + t + 1;  // causal: positions <= own
    for (int hd = 0; hd < a.heads; ++hd) {
      const float* qv = q.data() + t * qd + hd * a.head_dim;
      for (int64_t j = 0; j < visible; ++j) {
        const float* kv = k.data() + j * qd + hd * a.head_dim;
        float dot = 0.0f;
        for (int d = 0; d < a.head_dim; ++d) dot += qv[d] * kv[d];
        scores[j] = dot * inv_sqrt_d;
      }
      softmax(scores.data(), visible);
      for (int d = 0; d < a.head_dim; ++d) {
        float o = 0.0f;
        for (int64_t j = 0; j < visible; ++j) o += scores[j] * v[j * qd + hd * a.head_dim + d];
        const int64_t idx = t * qd + hd * a.head_dim + d;
        og[idx] = round_bf16(o * fmath::sigmoid(g[idx]));
      }
    }
  }
  std::vector<float> out(t_count * h);
  matmul(og.data(), t_count, qd, a.w_o->data<bf16>(), h, out.data());
  for (int64_t i = 0; i < t_count * h; ++i) a.out->data<bf16>()[i] = to_bf16(out[i]);
}

void kda_attention(KdaArgs& a) {
  if (!a.begin.empty()) return for_each_segment(a, kda_attention);
  const int64_t t_count = a.x->dim(0);
  const int64_t h = a.x->dim(1);
  const int hd = a.head_dim;
  const int64_t qd = static_cast<int64_t>(a.heads) * hd;
  const std::vector<float> x = widened(*a.x);
  std::vector<float> q(t_count * qd), k(t_count * qd), v(t_count * qd), b(t_count * a.heads),
      al(t_count * qd), g(t_count * qd);
  matmul(x.data(), t_count, h, a.w_q->data<bf16>(), qd, q.data());
  matmul(x.data(), t_count, h, a.w_k->data<bf16>(), qd, k.data());
  matmul(x.data(), t_count, h, a.w_v->data<bf16>(), qd, v.data());
  matmul(x.data(), t_count, h, a.w_b->data<bf16>(), a.heads, b.data());
  matmul(x.data(), t_count, h, a.w_a->data<bf16>(), qd, al.data());
  matmul(x.data(), t_count, h, a.w_g->data<bf16>(), qd, g.data());
  std::vector<float> o_norm(hd);
  widen(a.o_norm->data<bf16>(), hd, o_norm.data());

  float* st = a.state->data<float>();
  std::vector<float> u(hd), o(hd), og(t_count * qd);
  for (int64_t t = 0; t < t_count; ++t) {
    for (int head = 0; head < a.heads; ++head) {
      const int64_t base = t * qd + head * hd;
      float* qv = q.data() + base;
      float* kv = k.data() + base;
      const float* vv = v.data() + base;
      l2_normalize(qv, hd, a.eps);
      l2_normalize(kv, hd, a.eps);
      const float beta = fmath::sigmoid(b[t * a.heads + head]);
      float* s = st + static_cast<int64_t>(head) * hd * hd;  // [d_k][d_v]
      // Two passes over the state, each row i finished before the next: decay the row
      // and add its term to u (u sums over i ascending), then update the row and add its
      // term to o (likewise). The same operations, in the same order per element, as one
      // pass per step.
      for (int j = 0; j < hd; ++j) u[j] = 0.0f;
      for (int i = 0; i < hd; ++i) {
        const float alpha = fmath::decay_from_logit(al[base + i]);  // exp(-softplus(.))
        float* row = s + i * hd;
        for (int j = 0; j < hd; ++j) {
          row[j] *= alpha;
          u[j] += kv[i] * row[j];
        }
      }
      for (int j = 0; j < hd; ++j) o[j] = 0.0f;
      for (int i = 0; i < hd; ++i) {
        const float bk = beta * kv[i];
        float* row = s + i * hd;
        for (int j = 0; j < hd; ++j) {
          row[j] = (row[j] - bk * u[j]) + bk * vv[j];
          o[j] += row[j] * qv[i];
        }
      }
      const float rs = rms_scale(o.data(), hd, a.eps);
      for (int j = 0; j < hd; ++j) {
        og[base + j] = round_bf16(o[j] * rs * o_norm[j] * fmath::sigmoid(g[base + j]));
      }
    }
  }
  std::vector<float> out(t_count * h);
  matmul(og.data(), t_count, qd, a.w_o->data<bf16>(), h, out.data());
  for (int64_t i = 0; i < t_count * h; ++i) a.out->data<bf16>()[i] = to_bf16(out[i]);
}

}  // namespace splitcheck::cpu
