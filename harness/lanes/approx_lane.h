// The approximate lane (SPEC 5.2) with its float64 judge: for every op of SPEC 2, the
// backends' outputs on the inputs the PP=1 engine actually feeds that op
// (op_cases.h) against a float64 evaluation of the same op on the same inputs
// (float64_reference.h). Per registry row and backend: max abs error, max relative error
// (scaled by the float64 output's max abs), mean abs error, and the fraction of elements
// that are not the output dtype's rounding of the float64 value. The lane's thresholds
// live in one place (lane_thresholds, approx_lane.cc, with their justification) and are
// printed beside every verdict. Where both backends ran, it also says which is closer and
// by how much, and counts the elements where they differ bit for bit (the exact lane,
// which is expected to say they differ).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/lanes/op_cases.h"

namespace splitcheck {

// One backend's errors against the float64 reference over the calls of one row.
struct LaneErrors {
  int64_t calls = 0;
  int64_t elements = 0;
  double max_abs = 0;  // max |out - ref|
  double max_rel = 0;  // max over calls of max |out - ref| / max |ref| of that call
  double sum_abs = 0;  // sum |out - ref| (mean_abs = sum_abs / elements)
  int64_t beyond = 0;  // elements whose value is not the dtype's rounding of ref
  // Elements where either side is NaN or infinite and the other does not match it (NaN
  // against a number, inf against a finite value, +inf against -inf).
  int64_t non_finite = 0;
  double mean_abs() const { return elements ? sum_abs / static_cast<double>(elements) : 0; }
  double beyond_fraction() const {
    return elements ? static_cast<double>(beyond) / static_cast<double>(elements) : 0;
  }
};

// Adds one call's output (host tensor of dtype bf16, float32 or int32) against its float64
// reference (same element count) to `errors`.
void accumulate_errors(LaneErrors& errors, const f64::Matrix& reference, const Tensor& out);

// What the lane allows, per output dtype.
struct LaneThresholds {
  double max_rel = 0;              // max |out - ref| / max |ref|, per call
  double max_beyond_fraction = 0;  // elements not the correctly rounded value
  const char* why = "";            // the justification, shown in reports
};
LaneThresholds lane_thresholds(DType out_dtype);
// True when the errors are within the thresholds (and no non-finite value is unmatched).
bool within_lane(const LaneErrors& errors, DType out_dtype);

// One registry row's judgement.
struct RowJudgement {
  std::string row;  // "attn_res.native"
  DType out_dtype = DType::kBF16;
  bool has_cpu = false, has_cuda = false;
  LaneErrors cpu, cuda;
  bool cpu_within = false, cuda_within = false;
  int64_t exact_elements = 0;   // compared bit for bit, CPU against CUDA (both ran)
  int64_t exact_differing = 0;  // of which differ
};

// The row of whole decoder layers (SPEC 2.3, op_cases.h's layer chain): each backend runs
// the four ops of a layer one after the other from the layer's captured inputs, against
// the same chain in float64; judged with the bf16 thresholds.
inline constexpr const char* kDecoderLayerRow = "decoder_layer.chain";

// The lane over every row of the captured cases.
struct ApproxLaneResult {
  std::vector<RowJudgement> rows;
  bool ran_cpu = false, ran_cuda = false;
  // True when every backend that ran is within the lane on every row (and a row ran).
  bool within() const;
};

// Judges the cases on the CPU and/or CUDA backends (at least one).
ApproxLaneResult judge_approx_lane(const std::vector<OpCase>& cases, bool cpu, bool cuda);

// "cpu closer: mean abs error 0.61x CUDA's" (both ran), else "".
std::string closer_text(const RowJudgement& row);
// The result as a table (one line per row and backend, thresholds beside each verdict).
std::string approx_lane_text(const ApproxLaneResult& result);
// The result as JSON: thresholds with their justification, and per row the figures.
nlohmann::json approx_lane_json(const ApproxLaneResult& result);

}  // namespace splitcheck
