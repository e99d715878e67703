// attn_res (SPEC 2.2): the native and fallback variants on the CPU.
//
// Both compute the same math; they differ only in float32 operation order, like the
// real fused kernel and its tiled fallback:
//   native   — score weight applied as (v * norm_w) * proj_w, channel sums in ascending
//              order, one softmax over all sources, output scale m * r * out_w.
//   fallback — score weight precombined (norm_w * proj_w), channel sums in 4 interleaved
//              lanes joined as (l0 + l1) + (l2 + l3), an online softmax over tiles of
//              BLOCK_L sources (running max and sum, accumulator rescaled per tile),
//              output scale (m * out_w) * r.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/primitives.h"
#include "kernels/math.h"
#include "kernels/ops.h"

namespace splitcheck::cpu {
namespace {

// Steps 1 and 2 of SPEC 2.2 for token t: fold the delta into the prefix, write the bank.
void absorb_and_write(AttnResArgs& a, int64_t t, int64_t h, float* p) {
  bf16* prow = a.prefix->data<bf16>() + t * h;
  for (int64_t d = 0; d < h; ++d) p[d] = to_f32(prow[d]);
  if (a.delta != nullptr) {
    const bf16* drow = a.delta->data<bf16>() + t * h;
    for (int64_t d = 0; d < h; ++d) {
      p[d] = round_bf16(p[d] + to_f32(drow[d]));
      prow[d] = to_bf16(p[d]);
    }
  }
  if (a.write_idx >= 0) {
    const int64_t rows = a.bank->dim(1);
    bf16* brow = a.bank->data<bf16>() + (t * rows + a.write_idx) * h;
    for (int64_t d = 0; d < h; ++d) brow[d] = to_bf16(p[d]);
  }
}

// Pointers to the sources of token t: bank rows [0, nb) then the prefix p.
void gather_sources(const AttnResArgs& a, int64_t t, int64_t h, const float* p,
                    std::vector<float>& bank_f32, std::vector<const float*>& src) {
  const int64_t rows = a.bank->dim(1);
  bank_f32.resize(static_cast<size_t>(a.nb * h));
  const bf16* b = a.bank->data<bf16>() + t * rows * h;
  widen(b, a.nb * h, bank_f32.data());
  src.clear();
  for (int i = 0; i < a.nb; ++i) src.push_back(bank_f32.data() + i * h);
  src.push_back(p);
}

float lanes_dot(const float* v, const float* w, int64_t h) {
  float l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t d = 0;
  for (; d + 4 <= h; d += 4) {
    for (int j = 0; j < 4; ++j) l[j] += v[d + j] * w[d + j];
  }
  for (; d < h; ++d) l[d % 4] += v[d] * w[d];
  return (l[0] + l[1]) + (l[2] + l[3]);
}

float lanes_rms_scale(const float* v, int64_t h, float eps) {
  float l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t d = 0;
  for (; d + 4 <= h; d += 4) {
    for (int j = 0; j < 4; ++j) l[j] += v[d + j] * v[d + j];
  }
  for (; d < h; ++d) l[d % 4] += v[d] * v[d];
  return fmath::rsqrt(((l[0] + l[1]) + (l[2] + l[3])) / static_cast<float>(h) + eps);
}

}  // namespace

void attn_res_native(AttnResArgs& a) {
  const int64_t t_count = a.prefix->dim(0);
  const int64_t h = a.prefix->dim(1);
  std::vector<float> p(h), m(h), norm(h), proj(h), out_w(h), bank_f32;
  std::vector<const float*> src;
  std::vector<float> s;
  widen(a.norm_w->data<bf16>(), h, norm.data());
  widen(a.proj_w->data<bf16>(), h, proj.data());
  if (a.out_w) widen(a.out_w->data<bf16>(), h, out_w.data());
  for (int64_t t = 0; t < t_count; ++t) {
    absorb_and_write(a, t, h, p.data());
    if (a.nb == 0) {
      m = p;
    } else {
      gather_sources(a, t, h, p.data(), bank_f32, src);
      s.assign(src.size(), 0.0f);
      for (size_t i = 0; i < src.size(); ++i) {
        float dot = 0.0f;
        for (int64_t d = 0; d < h; ++d) dot += src[i][d] * norm[d] * proj[d];
        s[i] = dot * rms_scale(src[i], h, a.eps);
      }
      softmax(s.data(), static_cast<int64_t>(s.size()));
      for (int64_t d = 0; d < h; ++d) m[d] = 0.0f;
      for (size_t i = 0; i < src.size(); ++i) {
        for (int64_t d = 0; d < h; ++d) m[d] += s[i] * src[i][d];
      }
    }
    bf16* o = a.out->data<bf16>() + t * h;
    if (a.out_w) {
      const float r = rms_scale(m.data(), h, a.out_eps);
      for (int64_t d = 0; d < h; ++d) o[d] = to_bf16(m[d] * r * out_w[d]);
    } else {
      for (int64_t d = 0; d < h; ++d) o[d] = to_bf16(m[d]);
    }
  }
}

void attn_res_fallback(AttnResArgs& a) {
  const int64_t t_count = a.prefix->dim(0);
  const int64_t h = a.prefix->dim(1);
  const int block_l = attn_res_fallback_block_l(t_count, a.nb);
  std::vector<float> p(h), m(h), w(h), out_w(h), bank_f32;
  std::vector<const float*> src;
  std::vector<float> s;
  for (int64_t d = 0; d < h; ++d)
    w[d] = to_f32(a.norm_w->data<bf16>()[d]) * to_f32(a.proj_w->data<bf16>()[d]);
  if (a.out_w) widen(a.out_w->data<bf16>(), h, out_w.data());
  for (int64_t t = 0; t < t_count; ++t) {
    absorb_and_write(a, t, h, p.data());
    if (a.nb == 0) {
      m = p;
    } else {
      gather_sources(a, t, h, p.data(), bank_f32, src);
      const int64_t n_src = static_cast<int64_t>(src.size());
      s.assign(src.size(), 0.0f);
      for (int64_t i = 0; i < n_src; ++i) {
        s[i] = lanes_dot(src[i], w.data(), h) * lanes_rms_scale(src[i], h, a.eps);
      }
      // Online softmax over tiles of block_l sources.
      float run_max = -std::numeric_limits<float>::infinity();
      float run_sum = 0.0f;
      for (int64_t d = 0; d < h; ++d) m[d] = 0.0f;
      for (int64_t i0 = 0; i0 < n_src; i0 += block_l) {
        const int64_t i1 = std::min<int64_t>(i0 + block_l, n_src);
        float tile_max = s[i0];
        for (int64_t i = i0 + 1; i < i1; ++i) tile_max = s[i] > tile_max ? s[i] : tile_max;
        const float new_max = tile_max > run_max ? tile_max : run_max;
        const float rescale = fmath::exp(run_max - new_max);
        run_sum *= rescale;
        for (int64_t d = 0; d < h; ++d) m[d] *= rescale;
        for (int64_t i = i0; i < i1; ++i) {
          const float e = fmath::exp(s[i] - new_max);
          run_sum += e;
          for (int64_t d = 0; d < h; ++d) m[d] += e * src[i][d];
        }
        run_max = new_max;
      }
      for (int64_t d = 0; d < h; ++d) m[d] = m[d] / run_sum;
    }
    bf16* o = a.out->data<bf16>() + t * h;
    if (a.out_w) {
      const float r = lanes_rms_scale(m.data(), h, a.out_eps);
      for (int64_t d = 0; d < h; ++d) o[d] = to_bf16(m[d] * out_w[d] * r);
    } else {
      for (int64_t d = 0; d < h; ++d) o[d] = to_bf16(m[d]);
    }
  }
}

}  // namespace splitcheck::cpu
