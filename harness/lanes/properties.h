// GPU properties (issue 12), measured and reported, never judged as PP faults: whether a
// token's logits depend on how many rows its forward computes. On a GPU, matrix products
// pick their algorithm and reduction order by shape, so a row computed in a forward of M
// rows may differ from the same row computed alone. PP vs PP=1 is not among them: both
// engines run the same shapes, and the sweep checks that they are identical.
//
// For the scenario's model, backend and first prompt (T tokens, h = T / 2), on the PP=1
// engine:
//   decode_vs_prefill — rows h..T-1 of one prefill of T tokens, against the same tokens
//                       decoded one at a time after a prefill of h tokens;
//   verify_vs_decode  — one verify forward of gamma + 1 rows after a prefill of h tokens
//                       (M = gamma + 1), against the same tokens decoded one at a time
//                       (M = 1): identical means speculation is lossless bit for bit;
//   chunked_vs_whole  — a prefill in chunks (the scenario's prefill_chunk, else T / 4
//                       rounded up) against one prefill of T tokens, all T rows.
//
//   ASSIGN_OR_RETURN(PropertyReport r, measure_properties(scenario));
//   std::puts(properties_json(r).dump(2).c_str());
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"
#include "kernels/tensor.h"

namespace splitcheck {

// How two float32 [R, V] logit tensors differ, bit for bit.
struct RowsDifference {
  int64_t rows = 0;
  int64_t rows_differing = 0;  // rows with at least one differing element
  int64_t elements = 0;
  int64_t elements_differing = 0;
  int64_t argmax_changed = 0;  // rows whose greedy token (lowest index on ties) differs
  double max_abs_diff = 0.0;
  bool identical() const { return rows_differing == 0; }
};

// Compares `a` and `b` (same shape [R, V], float32, either device) bit for bit.
Result<RowsDifference> compare_logit_rows(const Tensor& a, const Tensor& b);

// One measured property.
struct PropertyRow {
  std::string name;         // decode_vs_prefill | verify_vs_decode | chunked_vs_whole
  std::string description;  // what was computed against what
  RowsDifference difference;
};

struct PropertyReport {
  std::string scenario;  // its name
  std::string backend;   // cpu | cuda
  int64_t prompt_tokens = 0;
  int64_t split_at = 0;  // h: the tokens prefilled before the decodes and the verify
  int gamma = 0;         // the verify block has gamma + 1 rows
  int chunk = 0;         // the chunked prefill's chunk size
  std::vector<PropertyRow> rows;
};

// Measures the three properties on the scenario's backend (see the file comment). The
// scenario's first prompt must have at least 2 tokens (invalid input otherwise).
Result<PropertyReport> measure_properties(const Scenario& scenario);

// The report as JSON: scenario, backend, provenance, the sizes above and, per property,
// rows, rows_differing, elements, elements_differing, their fractions, argmax_changed,
// max_abs_diff and identical.
nlohmann::json properties_json(const PropertyReport& report);

}  // namespace splitcheck
