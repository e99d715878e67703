// SPEC 3.4's batch invariance as a check: every request of a serving run, served alone at
// PP=1 (a batch of one, with the prefill chunks it had in the batch), must equal the same
// request in the batched run, bit for bit: every dataset of its forwards (input ids,
// per-layer tensors, bank, output, logits, taps, next tokens, dispatch) in order, and its
// generation and spec datasets.
#pragma once

#include <optional>
#include <string>

#include "harness/engine/run.h"
#include "harness/sweep/sweep.h"

namespace splitcheck {

// Whether two records hold the same datasets with the same bytes (stage traces aside);
// nullopt when they do, else the first difference.
std::optional<std::string> compare_records_exactly(const RunRecord& a, const RunRecord& b);

// Compares request `request` of `batched` with the run `alone` that served it alone;
// nullopt when equal, else the first difference in one line.
std::optional<std::string> compare_request_alone(const RunRecord& batched, const RunRecord& alone,
                                                 int32_t request);

// Serves every request of PP=1's batched run `batched` alone on a reference engine over
// `source` and compares each with compare_request_alone. On a backend
// that is not batch-invariant (kernels/batch.h) a request that differs alone is measured
// (BatchInvariance::not_invariant), not a failure.
Result<BatchInvariance> check_requests_alone(const Scenario& scenario, WeightSource& source,
                                             const ReferenceRun& batched);

}  // namespace splitcheck
