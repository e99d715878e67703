#include "harness/lanes/float64_reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <xtensor/xadapt.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xvectorize.hpp>
#include <xtensor/xview.hpp>

namespace splitcheck::f64 {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Rows of `m` scaled by 1 / sqrt(mean of squares + eps), times w [1, n] when given.
Matrix rms_rows(const Matrix& m, const Matrix* w, double eps) {
  Matrix out = m;
  const size_t n = m.shape(1);
  for (size_t t = 0; t < m.shape(0); ++t) {
    auto row = xt::row(out, t);
    const double r = 1.0 / std::sqrt(xt::sum(row * row)() / static_cast<double>(n) + eps);
    row *= r;
    if (w != nullptr) row *= xt::row(*w, 0);
  }
  return out;
}

Matrix rounded(Matrix m) {
  for (double& v : m) v = round_to_bf16(v);
  return m;
}

// Softmax of v in place (max subtracted, which changes nothing in exact arithmetic).
void softmax(std::vector<double>& v) {
  const double mx = *std::max_element(v.begin(), v.end());
  double sum = 0.0;
  for (double& x : v) {
    x = std::exp(x - mx);
    sum += x;
  }
  for (double& x : v) x /= sum;
}

}  // namespace

Matrix widen(const Tensor& t) {
  if (t.device() != Device::kCpu) throw std::logic_error("f64::widen: tensor not on the host");
  const size_t cols = t.shape().empty() ? 1 : static_cast<size_t>(t.shape().back());
  const size_t rows = cols == 0 ? 0 : static_cast<size_t>(t.numel()) / cols;
  Matrix m = xt::zeros<double>({rows, cols});
  const size_t n = rows * cols;
  switch (t.dtype()) {
    case DType::kBF16: {
      auto v = xt::adapt(t.data<bf16>(), n, xt::no_ownership(), std::vector<size_t>{rows, cols});
      std::transform(v.begin(), v.end(), m.begin(), [](bf16 b) { return double(to_f32(b)); });
      break;
    }
    case DType::kF32: {
      auto v = xt::adapt(t.data<float>(), n, xt::no_ownership(), std::vector<size_t>{rows, cols});
      m = xt::cast<double>(v);
      break;
    }
    case DType::kI32: {
      auto v = xt::adapt(t.data<int32_t>(), n, xt::no_ownership(), std::vector<size_t>{rows, cols});
      m = xt::cast<double>(v);
      break;
    }
    case DType::kF16: {
      const uint16_t* h = t.data<uint16_t>();
      std::transform(h, h + n, m.begin(), [](uint16_t b) { return double(f16_to_f32(b)); });
      break;
    }
  }
  return m;
}

double round_to_bf16(double x) {
  if (!std::isfinite(x) || x == 0.0) return x;
  // bf16 keeps 8 significant bits with float32's exponent range; below float32's
  // smallest normal the quantum is fixed at 2^-133.
  constexpr double kMinNormal = 1.1754943508222875e-38;  // 2^-126
  double r;
  if (std::fabs(x) < kMinNormal) {
    r = std::ldexp(std::nearbyint(std::ldexp(x, 133)), -133);
  } else {
    int e = 0;
    const double m = std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
    r = std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
  }
  constexpr double kMaxBf16 = 3.3895313892515355e38;  // (2 - 2^-7) * 2^127
  if (std::fabs(r) > kMaxBf16) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

Matrix matmul(const Matrix& x, const Matrix& w) {
  if (x.shape(1) != w.shape(0)) throw std::logic_error("f64::matmul: inner dimensions differ");
  const size_t rows = x.shape(0), inner = x.shape(1), cols = w.shape(1);
  Matrix out = xt::zeros<double>({rows, cols});
  for (size_t t = 0; t < rows; ++t) {
    for (size_t k = 0; k < inner; ++k) {
      const double xv = x(t, k);
      if (xv == 0.0) continue;
      for (size_t n = 0; n < cols; ++n) out(t, n) += xv * w(k, n);
    }
  }
  return out;
}

Matrix attn_res(const Matrix& prefix, const Matrix& delta, const Matrix& bank, int64_t bank_rows,
                const Matrix& norm_w, const Matrix& proj_w, const Matrix& out_w, int nb, double eps,
                double out_eps) {
  const size_t t_count = prefix.shape(0), h = prefix.shape(1);
  Matrix out = xt::zeros<double>({t_count, h});
  const auto score_w = xt::eval(xt::row(norm_w, 0) * xt::row(proj_w, 0));
  for (size_t t = 0; t < t_count; ++t) {
    xt::xtensor<double, 1> p = xt::row(prefix, t);
    if (delta.size() > 0) {
      p += xt::row(delta, t);
      for (double& v : p) v = round_to_bf16(v);  // SPEC 2.2 step 1: p = f32(bf16(p + D))
    }
    xt::xtensor<double, 1> m = p;
    if (nb > 0) {
      std::vector<xt::xtensor<double, 1>> src;
      for (int i = 0; i < nb; ++i) src.emplace_back(xt::row(bank, t * bank_rows + i));
      src.push_back(p);
      std::vector<double> a;
      for (const auto& v : src) {
        const double ms = xt::sum(v * v)() / static_cast<double>(h);
        a.push_back(xt::sum(v * score_w)() / std::sqrt(ms + eps));
      }
      softmax(a);
      m = xt::zeros<double>({h});
      for (size_t i = 0; i < src.size(); ++i) m += a[i] * src[i];
    }
    if (out_w.size() > 0) {
      const double ms = xt::sum(m * m)() / static_cast<double>(h);
      m = m / std::sqrt(ms + out_eps) * xt::row(out_w, 0);
    }
    xt::row(out, t) = m;
  }
  return out;
}

Matrix rms_norm(const Matrix& x, const Matrix& w, double eps) { return rms_rows(x, &w, eps); }

Matrix lm_head(const Matrix& x, const Matrix& lm_head_w) {
  return matmul(x, xt::transpose(lm_head_w));
}

Matrix argmax(const Matrix& logits) {
  Matrix out = xt::zeros<double>({logits.shape(0), size_t{1}});
  for (size_t t = 0; t < logits.shape(0); ++t) {
    size_t best = 0;
    for (size_t v = 1; v < logits.shape(1); ++v)
      if (logits(t, v) > logits(t, best)) best = v;
    out(t, 0) = static_cast<double>(best);
  }
  return out;
}

Matrix mla(const Matrix& x, const MlaWeights& w, const Matrix& cache, int heads, int head_dim,
           double eps) {
  const size_t t_count = x.shape(0), r = w.w_dkv.shape(1);
  const Matrix q = rounded(matmul(x, w.w_q));
  const Matrix g = matmul(x, w.w_g);
  const Matrix c = rounded(matmul(x, w.w_dkv));
  const size_t n_prev = cache.size() == 0 ? 0 : cache.shape(0);
  Matrix all_c = xt::zeros<double>({n_prev + t_count, r});
  if (n_prev > 0) xt::view(all_c, xt::range(0, n_prev), xt::all()) = cache;
  xt::view(all_c, xt::range(n_prev, n_prev + t_count), xt::all()) = c;
  const Matrix cn = rounded(rms_rows(all_c, &w.kv_norm, eps));
  const Matrix k = rounded(matmul(cn, w.w_uk));
  const Matrix v = rounded(matmul(cn, w.w_uv));
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Matrix og = xt::zeros<double>({t_count, static_cast<size_t>(heads * head_dim)});
  for (size_t t = 0; t < t_count; ++t) {
    const size_t visible = n_prev + t + 1;
    for (int hh = 0; hh < heads; ++hh) {
      auto cols = xt::range(hh * head_dim, (hh + 1) * head_dim);
      const auto qh = xt::view(q, t, cols);
      std::vector<double> s(visible);
      for (size_t j = 0; j < visible; ++j) s[j] = xt::sum(qh * xt::view(k, j, cols))() * scale;
      softmax(s);
      xt::xtensor<double, 1> o = xt::zeros<double>({static_cast<size_t>(head_dim)});
      for (size_t j = 0; j < visible; ++j) o += s[j] * xt::view(v, j, cols);
      xt::view(og, t, cols) = o * xt::vectorize(sigmoid)(xt::view(g, t, cols));
    }
  }
  return matmul(rounded(og), w.w_o);
}

Matrix kda(const Matrix& x, const KdaWeights& w, const Matrix& state, int heads, int head_dim,
           double eps) {
  const size_t t_count = x.shape(0), hd = static_cast<size_t>(head_dim);
  const Matrix q = matmul(x, w.w_q), k = matmul(x, w.w_k), v = matmul(x, w.w_v);
  const Matrix b = matmul(x, w.w_b), a = matmul(x, w.w_a), g = matmul(x, w.w_g);
  Matrix st = state;
  Matrix og = xt::zeros<double>({t_count, static_cast<size_t>(heads) * hd});
  auto l2 = [eps](xt::xtensor<double, 1> u) {
    return xt::xtensor<double, 1>(u / std::sqrt(xt::sum(u * u)() + eps));
  };
  for (size_t t = 0; t < t_count; ++t) {
    for (int hh = 0; hh < heads; ++hh) {
      auto cols = xt::range(hh * head_dim, (hh + 1) * head_dim);
      const xt::xtensor<double, 1> qh = l2(xt::view(q, t, cols));
      const xt::xtensor<double, 1> kh = l2(xt::view(k, t, cols));
      const xt::xtensor<double, 1> vh = xt::view(v, t, cols);
      const double beta = sigmoid(b(t, static_cast<size_t>(hh)));
      auto s = xt::view(st, xt::range(hh * head_dim, (hh + 1) * head_dim), xt::all());
      for (size_t i = 0; i < hd; ++i) {
        const double alpha = 1.0 / (1.0 + std::exp(a(t, hh * hd + i)));  // exp(-softplus)
        xt::row(s, i) *= alpha;
      }
      xt::xtensor<double, 1> u = xt::zeros<double>({hd});  // kᵀ St
      for (size_t i = 0; i < hd; ++i) u += kh(i) * xt::row(s, i);
      for (size_t i = 0; i < hd; ++i) xt::row(s, i) += beta * kh(i) * (vh - u);
      xt::xtensor<double, 1> o = xt::zeros<double>({hd});  // Stᵀ q
      for (size_t i = 0; i < hd; ++i) o += qh(i) * xt::row(s, i);
      const double r = 1.0 / std::sqrt(xt::sum(o * o)() / static_cast<double>(hd) + eps);
      xt::view(og, t, cols) =
          o * r * xt::row(w.o_norm, 0) * xt::vectorize(sigmoid)(xt::view(g, t, cols));
    }
  }
  return matmul(rounded(og), w.w_o);
}

Matrix swiglu(const Matrix& x, const SwiGlu& w) {
  const Matrix gate = rounded(matmul(x, w.gate));
  const Matrix up = rounded(matmul(x, w.up));
  Matrix hidden = gate * xt::vectorize(sigmoid)(gate) * up;
  return matmul(rounded(hidden), w.down);
}

Matrix moe(const Matrix& x, const Matrix& router, const std::vector<SwiGlu>& experts,
           const std::vector<SwiGlu>& shared, int top_k) {
  const size_t t_count = x.shape(0), h = x.shape(1), n_exp = router.shape(1);
  const Matrix logits = matmul(x, router);
  Matrix out = xt::zeros<double>({t_count, h});
  for (size_t t = 0; t < t_count; ++t) {
    const Matrix xt_row = xt::view(x, xt::range(t, t + 1), xt::all());
    std::vector<double> score(n_exp);
    for (size_t e = 0; e < n_exp; ++e) score[e] = sigmoid(logits(t, e));
    std::vector<size_t> order(n_exp);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t l, size_t r) { return score[l] > score[r]; });
    std::vector<size_t> chosen(order.begin(), order.begin() + top_k);
    std::sort(chosen.begin(), chosen.end());
    double sum = 0.0;
    for (size_t e : chosen) sum += score[e];
    auto row = xt::row(out, t);
    for (size_t e : chosen) row += score[e] / sum * xt::row(rounded(swiglu(xt_row, experts[e])), 0);
    for (const SwiGlu& s : shared) row += xt::row(rounded(swiglu(xt_row, s)), 0);
  }
  return out;
}

Matrix dense_attention(const Matrix& q, const Matrix& k, const Matrix& v, int heads, int head_dim) {
  const size_t tq = q.shape(0), tk = k.shape(0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Matrix out = xt::zeros<double>({tq, static_cast<size_t>(heads * head_dim)});
  for (size_t t = 0; t < tq; ++t) {
    for (int hh = 0; hh < heads; ++hh) {
      auto cols = xt::range(hh * head_dim, (hh + 1) * head_dim);
      std::vector<double> s(tk);
      for (size_t j = 0; j < tk; ++j)
        s[j] = xt::sum(xt::view(q, t, cols) * xt::view(k, j, cols))() * scale;
      softmax(s);
      auto o = xt::view(out, t, cols);
      for (size_t j = 0; j < tk; ++j) o += s[j] * xt::view(v, j, cols);
    }
  }
  return out;
}

}  // namespace splitcheck::f64
