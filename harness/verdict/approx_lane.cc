#include "harness/verdict/approx_lane.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <xtensor/xadapt.hpp>

namespace splitcheck {
namespace {

// One output element as a double.
double value_at(const Tensor& t, size_t i) {
  switch (t.dtype()) {
    case DType::kBF16:
      return to_f32(t.data<bf16>()[i]);
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kI32:
      return t.data<int32_t>()[i];
  }
  return 0;
}

// Whether the element is the output dtype's rounding of the float64 value (bit for bit).
bool correctly_rounded(const Tensor& t, size_t i, double ref) {
  switch (t.dtype()) {
    case DType::kBF16: {
      const double r = f64::round_to_bf16(ref);
      return to_f32(t.data<bf16>()[i]) == static_cast<float>(r) &&
             std::signbit(to_f32(t.data<bf16>()[i])) == std::signbit(r);
    }
    case DType::kF32:
      return t.data<float>()[i] == static_cast<float>(ref);
    case DType::kI32:
      return static_cast<double>(t.data<int32_t>()[i]) == ref;
  }
  return false;
}

std::string dtype_label(DType d) { return dtype_name(d); }

nlohmann::json errors_json(const LaneErrors& e, bool within) {
  return {{"calls", e.calls},
          {"elements", e.elements},
          {"max_abs_error", e.max_abs},
          {"max_rel_error", e.max_rel},
          {"mean_abs_error", e.mean_abs()},
          {"beyond_rounding", e.beyond},
          {"beyond_rounding_fraction", e.beyond_fraction()},
          {"non_finite", e.non_finite},
          {"within_lane", within}};
}

}  // namespace

void accumulate_errors(LaneErrors& errors, const f64::Matrix& reference, const Tensor& out) {
  const size_t n = static_cast<size_t>(out.numel());
  if (reference.size() != n)
    throw std::logic_error(
        fmt::format("approx lane: reference has {} elements, output {}", reference.size(), n));
  double scale = 0, call_max = 0;
  const double* ref = reference.data();
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(ref[i])) scale = std::max(scale, std::fabs(ref[i]));
  for (size_t i = 0; i < n; ++i) {
    const double v = value_at(out, i);
    if (!std::isfinite(v)) {
      errors.non_finite += std::isfinite(ref[i]);
      errors.beyond += !correctly_rounded(out, i, ref[i]);
      continue;
    }
    const double err = std::fabs(v - ref[i]);
    call_max = std::max(call_max, err);
    errors.sum_abs += err;
    errors.beyond += !correctly_rounded(out, i, ref[i]);
  }
  errors.max_abs = std::max(errors.max_abs, call_max);
  const double rel =
      scale > 0 ? call_max / scale : (call_max > 0 ? std::numeric_limits<double>::infinity() : 0);
  errors.max_rel = std::max(errors.max_rel, rel);
  errors.elements += static_cast<int64_t>(n);
  errors.calls += 1;
}

// The lane's thresholds: the one place they are written.
//
// bfloat16 outputs (every activation): a kernel that computes in float32 and rounds once
// is off from the float64 value by its float32 accumulation error plus the final
// rounding, at most half a bf16 ulp of the element (2^-9 relative to the element, so at
// most 2^-9 of the output's max abs). Intermediates that SPEC itself rounds to bf16
// (MLA's Q, K, V, latent; SwiGLU's products) can land on the other side of a rounding
// boundary than the float64 value does, and that one-ulp step then propagates through
// the next product. Measured on the CPU backend, default scenario (k3-tiny, seed
// 0x4b334d494e49, the first 64 calls of every row): see MEASURED below. The bound is
// 4 bf16 ulps at the output's scale (4 * 2^-8 = 2^-6 of max |ref|), a few times the
// worst measured row, and the fraction of elements that are not the correctly rounded
// bf16 value at most 25%, a few times the worst measured row too. One ulp more per element
// than a correct kernel (or an epsilon that moves the norm) crosses one or the other.
//
// float32 outputs (logits): a dot product of H bf16 products in float32 is off by a few
// float32 ulps of the sum of |terms|; relative to the logits' max abs that is ~1e-6. The
// bound 2^-16 (1.5e-5) leaves room for a GPU's other summation order yet catches any
// bf16-level error. The fraction not correctly rounded in float32 is not bounded (most
// float32 sums are a few float32 ulps off).
//
// int32 outputs (argmax's token ids): exact: the float64 argmax of the same float32
// logits is the same index (lowest on ties) unless the kernel is wrong.
//
// MEASURED (CPU, `splitcheck approx --backend cpu`, default scenario):
//   see README "The approximate lane": worst bf16 row max_rel 0.0039 (0.5 ulp at scale),
//   worst beyond-rounding fraction 6.3% (moe.grouped); logits max_rel 3.4e-7.
LaneThresholds lane_thresholds(DType out_dtype) {
  switch (out_dtype) {
    case DType::kBF16:
      return {4.0 / 256.0, 0.25,
              "bf16: max |err| <= 4 bf16 ulps of the output's max |ref| (2^-6); at most 25% of "
              "elements not the correctly rounded bf16 value (CPU measured: <= 0.5 ulp, <= "
              "6.3%)"};
    case DType::kF32:
      return {1.0 / 65536.0, 1.0,
              "float32: max |err| <= 2^-16 of the output's max |ref| (CPU measured: 3.4e-7); "
              "rounding fraction not bounded (float32 sums are a few float32 ulps off)"};
    case DType::kI32:
      return {0.0, 0.0, "int32: exact (argmax of the same logits, lowest index on ties)"};
  }
  return {};
}

bool within_lane(const LaneErrors& e, DType out_dtype) {
  const LaneThresholds t = lane_thresholds(out_dtype);
  return e.calls > 0 && e.non_finite == 0 && e.max_rel <= t.max_rel &&
         e.beyond_fraction() <= t.max_beyond_fraction;
}

bool ApproxLaneResult::within() const {
  if (rows.empty()) return false;
  for (const RowJudgement& r : rows) {
    if (r.has_cpu && !r.cpu_within) return false;
    if (r.has_cuda && !r.cuda_within) return false;
  }
  return true;
}

ApproxLaneResult judge_approx_lane(const std::vector<OpCase>& cases, bool cpu, bool cuda) {
  ApproxLaneResult result;
  result.ran_cpu = cpu;
  result.ran_cuda = cuda;
  std::map<std::string, size_t> index;
  for (const OpCase& c : cases) {
    auto [it, inserted] = index.try_emplace(c.row_name(), result.rows.size());
    if (inserted) {
      RowJudgement r;
      r.row = c.row_name();
      r.out_dtype = c.out_dtype;
      result.rows.push_back(r);
    }
    RowJudgement& r = result.rows[it->second];
    const f64::Matrix ref = reference_op_case(c);
    Tensor cpu_out, cuda_out;
    if (cpu) {
      cpu_out = run_op_case(c, Device::kCpu);
      accumulate_errors(r.cpu, ref, cpu_out);
      r.has_cpu = true;
    }
    if (cuda) {
      cuda_out = run_op_case(c, Device::kCuda);
      accumulate_errors(r.cuda, ref, cuda_out);
      r.has_cuda = true;
    }
    if (cpu && cuda) {
      const size_t n = static_cast<size_t>(cpu_out.numel()), w = dtype_size(cpu_out.dtype());
      for (size_t i = 0; i < n; ++i)
        r.exact_differing += std::memcmp(cpu_out.bytes() + i * w, cuda_out.bytes() + i * w, w) != 0;
      r.exact_elements += static_cast<int64_t>(n);
    }
  }
  // Whole decoder layers: each backend chains its own ops from the layer's inputs.
  const std::vector<LayerCalls> layers = layer_calls(cases);
  if (!layers.empty()) {
    RowJudgement r;
    r.row = kDecoderLayerRow;
    for (const LayerCalls& l : layers) {
      const f64::Matrix ref = reference_layer_chain(l);
      Tensor cpu_out, cuda_out;
      if (cpu) {
        cpu_out = run_layer_chain(l, Device::kCpu);
        accumulate_errors(r.cpu, ref, cpu_out);
        r.has_cpu = true;
      }
      if (cuda) {
        cuda_out = run_layer_chain(l, Device::kCuda);
        accumulate_errors(r.cuda, ref, cuda_out);
        r.has_cuda = true;
      }
      if (cpu && cuda) {
        for (int64_t i = 0; i < cpu_out.numel(); ++i)
          r.exact_differing += cpu_out.data<bf16>()[i].bits != cuda_out.data<bf16>()[i].bits;
        r.exact_elements += cpu_out.numel();
      }
    }
    result.rows.push_back(r);
  }
  for (RowJudgement& r : result.rows) {
    r.cpu_within = r.has_cpu && within_lane(r.cpu, r.out_dtype);
    r.cuda_within = r.has_cuda && within_lane(r.cuda, r.out_dtype);
  }
  return result;
}

std::string closer_text(const RowJudgement& r) {
  if (!r.has_cpu || !r.has_cuda) return "";
  const double a = r.cpu.mean_abs(), b = r.cuda.mean_abs();
  if (a == b) return "tie: equal mean abs error";
  const bool cpu_closer = a < b;
  const double ratio = cpu_closer ? (b > 0 ? a / b : 0) : (a > 0 ? b / a : 0);
  return fmt::format("{} closer: mean abs error {:.3g}x {}'s", cpu_closer ? "cpu" : "cuda", ratio,
                     cpu_closer ? "CUDA" : "CPU");
}

std::string approx_lane_text(const ApproxLaneResult& result) {
  std::string s = "approximate lane: every op against its float64 evaluation on the same inputs\n";
  for (DType d : {DType::kBF16, DType::kF32, DType::kI32})
    s += fmt::format("  thresholds {}: {}\n", dtype_label(d), lane_thresholds(d).why);
  s += fmt::format("  {:<26} {:<5} {:>5} {:>9} {:>11} {:>11} {:>11} {:>9}  {}\n", "row", "bknd",
                   "calls", "elements", "max_abs", "max_rel", "mean_abs", "beyond", "verdict");
  for (const RowJudgement& r : result.rows) {
    auto line = [&](const char* name, const LaneErrors& e, bool within) {
      s += fmt::format("  {:<26} {:<5} {:>5} {:>9} {:>11.4g} {:>11.4g} {:>11.4g} {:>8.4f}%  {}\n",
                       r.row, name, e.calls, e.elements, e.max_abs, e.max_rel, e.mean_abs(),
                       100.0 * e.beyond_fraction(), within ? "within" : "OUTSIDE THE LANE");
    };
    if (r.has_cpu) line("cpu", r.cpu, r.cpu_within);
    if (r.has_cuda) line("cuda", r.cuda, r.cuda_within);
    if (r.has_cpu && r.has_cuda)
      s += fmt::format("  {:<26} exact lane: {} of {} elements differ bit for bit; {}\n", r.row,
                       r.exact_differing, r.exact_elements, closer_text(r));
  }
  s += result.within() ? "every op within the approximate lane\n"
                       : "NOT every op within the approximate lane\n";
  return s;
}

nlohmann::json approx_lane_json(const ApproxLaneResult& result) {
  nlohmann::json thresholds = nlohmann::json::object();
  for (DType d : {DType::kBF16, DType::kF32, DType::kI32}) {
    const LaneThresholds t = lane_thresholds(d);
    thresholds[dtype_label(d)] = {{"max_rel_error", t.max_rel},
                                  {"max_beyond_rounding_fraction", t.max_beyond_fraction},
                                  {"why", t.why}};
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const RowJudgement& r : result.rows) {
    nlohmann::json j{{"row", r.row}, {"out_dtype", dtype_label(r.out_dtype)}};
    if (r.has_cpu) j["cpu"] = errors_json(r.cpu, r.cpu_within);
    if (r.has_cuda) j["cuda"] = errors_json(r.cuda, r.cuda_within);
    if (r.has_cpu && r.has_cuda) {
      j["exact_lane"] = {{"elements", r.exact_elements},
                         {"differing", r.exact_differing},
                         {"identical", r.exact_differing == 0}};
      j["closer"] = closer_text(r);
    }
    rows.push_back(j);
  }
  return {{"lane", "approximate"},
          {"reference", "float64"},
          {"backends", {{"cpu", result.ran_cpu}, {"cuda", result.ran_cuda}}},
          {"thresholds", thresholds},
          {"rows", rows},
          {"within", result.within()}};
}

}  // namespace splitcheck
