// Bisecting a failing sweep (DESIGN.md user 2): the first divergent split point, where
// in it the first divergence lies (forward, layer, site, token, channel), the probable
// cause, and a minimised scenario that still fails with the same cause.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"
#include "harness/sweep/sweep.h"
#include "kernels/status.h"

namespace splitcheck {

// The causes `bisect` names, in the order they are tested. Each follows from where the
// first divergence lies in execution order, whatever the fault behind it:
// - partition structure: some layer is owned by no stage or by two; a verdict at
//   configuration, before anything runs (nothing numeric to minimise);
// - config-rejected: the partition was refused at configuration for another reason;
// - dispatch mismatch: a kernel variant differs at or before the first numeric divergence;
// - handoff input differs: the first divergence is the `pre_attn` of a non-first stage's
//   first layer, the first value computed from what the stage received;
// - carried state: a layer differs although an earlier forward computed it identically
//   and everything before it in this forward is identical: its caches, positions or
//   per-request state carried from an earlier forward differ (serving, rollback);
// - layer weights: a layer differs in the first forward that computes it, with identical
//   inputs and the same kernel variants: the stage computes it with other weights;
// - propagated from earlier: the first divergence lies outside the layers (output, logits)
//   and nothing before it explains it.
inline constexpr const char* kCauseStructural = "partition structure";
inline constexpr const char* kCauseConfigRejected = "config-rejected";
inline constexpr const char* kCauseEmbedding = "embedding";
inline constexpr const char* kCauseNan = "NaN";
inline constexpr const char* kCauseDispatch = "dispatch mismatch";
inline constexpr const char* kCauseTapSource = "tap source";
inline constexpr const char* kCauseHandoff = "handoff input differs";
inline constexpr const char* kCauseCarriedState = "carried state";
inline constexpr const char* kCauseLayerWeights = "layer weights";
inline constexpr const char* kCausePropagated = "propagated from earlier";
// A dataset PP=1 has and the partition lacks comes first in PP=1's execution order: a
// layer's tensors ("layer not computed") or another dataset ("dataset not computed"); or the
// partition has a dataset PP=1 lacks ("dataset only in the partition").
inline constexpr const char* kCauseLayerNotComputed = "layer not computed";
inline constexpr const char* kCauseDatasetNotComputed = "dataset not computed";
inline constexpr const char* kCauseOnlyInPartition = "dataset only in the partition";
// The dump does not show the partition asked (external engines): unproven, or another
// partition ran.
inline constexpr const char* kCausePartitionEvidence = "partition evidence";
inline constexpr const char* kCauseError = "error";

// Where and why one split point first diverged from PP=1.
struct BisectFinding {
  std::string key;  // "split-7"
  std::string layout;
  std::vector<int> cuts;
  Verdict verdict = Verdict::kPass;
  std::string cause;
  std::string message;  // the case's one-line message
  std::string dataset;  // first numerically differing dataset; empty if none
  int32_t forward = -1;
  int32_t layer = -1;
  std::string site;
  int64_t token = -1;    // row of the first differing element
  int64_t channel = -1;  // column of the first differing element
  int32_t request = -1;  // serving scenarios: the request that diverged first; -1 otherwise
  int32_t step = -1;     // serving scenarios: the scheduler step of that forward
};

// The sizes a minimisation shrinks.
struct ScenarioSize {
  int layers = 0;
  int prompts = 0;
  int max_new_tokens = 0;
  int max_prompt_tokens = 0;  // 0 = whole prompt
  int max_in_flight = 0;      // serving scenarios: the concurrency; 0 when not serving
  int partitions = 0;         // split points swept (-1 when not enumerable)
};

// Everything `bisect` found: empty `finding.key` means the sweep was conformant.
struct BisectResult {
  bool conformant = true;
  BisectFinding finding;
  ScenarioSize before;
  ScenarioSize after;
  nlohmann::json repro;            // the minimised scenario, resolved form
  std::vector<std::string> steps;  // one line per reduction tried: kept or dropped
  int sweeps = 0;                  // sweeps run, the first included
};

struct BisectOptions {
  int threads = 0;  // for the first, full sweep; 0: one per core
};

// Why `bisect` refuses a scenario without sweeping it (a Status of kInvalidInput, exit 2),
// named at the start of the message: "bisect refused (<reason>): ...".
inline constexpr const char* kRefusedTransport = "transport";  // stages not in-process

// Names the probable cause of a non-pass case (one of the kCause* strings; "" for an
// interrupted case, which shows none).
std::string classify_cause(const CaseResult& c);

// The first failing case in enumeration order as a finding (an interrupted case is none);
// nullopt when there is none.
std::optional<BisectFinding> first_failure(const SweepResult& r);

// The sizes of a scenario.
ScenarioSize scenario_size(const Scenario& s);

// Sweeps `s`, picks its first failing split point, classifies it and minimises the
// scenario while the same split (remapped) still fails with the same cause.
Result<BisectResult> bisect(const Scenario& s, const BisectOptions& options);

// Writes `j` (pretty, with a trailing newline) to `path` through a temporary file and a
// rename, so a reader never sees a partial file.
Status write_json_atomically(const std::string& path, const nlohmann::json& j);

}  // namespace splitcheck
