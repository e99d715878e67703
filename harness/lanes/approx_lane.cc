#include "harness/lanes/approx_lane.h"

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
    case DType::kF16:
      return f16_to_f32(t.data<uint16_t>()[i]);
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
    case DType::kF16: {
      // Nearest of the value and its two neighbours (no K3-mini op writes float16).
      const uint16_t h = t.data<uint16_t>()[i];
      const double err = std::fabs(f16_to_f32(h) - ref);
      for (int step : {-1, 1}) {
        const double n = f16_to_f32(static_cast<uint16_t>(h + step));
        if (std::isfinite(n) && std::fabs(n - ref) < err) return false;
      }
      return std::isfinite(err);
    }
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
    if (!std::isfinite(v) || !std::isfinite(ref[i])) {
      // A NaN or an infinity on either side must be matched by the other: NaN by NaN, an
      // infinity by the infinity of the same sign. Anything else is outside the lane.
      const bool matched = std::isnan(v) ? std::isnan(ref[i]) : v == ref[i];
      errors.non_finite += !matched;
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
// bfloat16 outputs (every activation). A kernel that computes in float32 and rounds once
// is off from the float64 value by its float32 error plus the final rounding: at most
// half a bf16 ulp of the element, i.e. at most 2^-8 of the output's max |ref| (the
// largest element may sit at the bottom of its binade). Where the op itself rounds an
// intermediate to bf16 (MLA's Q, K, V, latents; SwiGLU's products; the input of W_o), a
// float32 value a hair from a rounding boundary can land on the other side of it than the
// float64 value does, and that one-ulp step moves the next product's output: then more
// elements are off the correctly rounded value, by a little. Measured on the CPU backend,
// default scenario (k3-tiny, the first 64 calls of every row, `splitcheck approx
// --backend cpu`): max_rel at most 0.0058 per op (moe.grouped; attn_res 0.0035, i.e.
// half an ulp at scale), 0.0074 for a whole decoder layer; not correctly rounded at most
// 2.1% of elements per op (mla.latent_cache; kda 0.22%, the others under 0.1%), 6.4% for
// a whole layer. The bounds: max_rel <= 2^-6 (2 to 4 ulps of the largest element, twice
// the worst measured) and at most 20% not correctly rounded (three times the worst
// measured, a GPU's other float32 order moves these figures by little). An output one
// ulp off everywhere (~100% not correctly rounded), or off by the bound plus one ulp at
// scale, or an attn_res with a wrong epsilon, is outside.
//
// float32 outputs (logits): a dot product of H bf16 products in float32 is off by a few
// float32 ulps of the sum of |terms|; measured max_rel 3.6e-7 on the CPU. The bound 2^-16
// (1.5e-5, forty times that) leaves room for cuBLASLt's other summation order yet is 500
// times finer than one bf16 ulp. The fraction not correctly rounded is not bounded: most
// float32 sums are a few float32 ulps off (70% on the CPU).
//
// int32 outputs (argmax's token ids): exact: the float64 argmax of the same float32
// logits is the same index (lowest on ties) unless the kernel is wrong.
LaneThresholds lane_thresholds(DType out_dtype) {
  switch (out_dtype) {
    case DType::kBF16:
      return {1.0 / 64.0, 0.20,
              "max |err| <= 2^-6 of the output's max |ref| (2-4 bf16 ulps of the largest "
              "element); at most 20% of elements not the correctly rounded bf16 value (CPU, "
              "default scenario: <= 0.0058 and <= 2.1% per op, 0.0074 and 6.4% per layer)"};
    case DType::kF32:
      return {1.0 / 65536.0, 1.0,
              "max |err| <= 2^-16 of the output's max |ref| (CPU: 3.6e-7); fraction not "
              "correctly rounded not bounded (float32 sums are a few float32 ulps off)"};
    case DType::kI32:
      return {0.0, 0.0, "exact (argmax of the same logits, lowest index on ties)"};
    case DType::kF16:
      return {1.0 / 512.0, 0.20,
              "max |err| <= 2^-9 of the output's max |ref| (2-4 float16 ulps of the largest "
              "element); at most 20% of elements not the correctly rounded float16 value"};
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
