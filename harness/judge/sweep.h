// The sweep: PP=1 once, then every partition of the scenario, each compared with PP=1
// dataset by dataset in execution order, and the verdicts per split point.
//
// A case is one partition, named from its cuts ("split-12"); verdicts are pass,
// diverged, config-rejected, error and skipped. Each case names which checks of the
// check registry failed, the first numeric divergence (forward, layer, site, token,
// channel), the first dispatch mismatch and the tap verdicts with their cosines.
//
// Only the scenario's `checks` are evaluated: a check that is not selected compares
// nothing and cannot fail a case. "Pass" means every selected check found the case
// identical to PP=1; a case that never ran (skipped) or failed to run (error) is not a
// pass, and a sweep of no case at all is refused as invalid input.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/dump/compare.h"
#include "harness/engine/generation.h"
#include "harness/engine/run.h"
#include "harness/engine/stage.h"
#include "harness/engine/transport.h"
#include "harness/judge/external_run.h"
#include "harness/judge/self_check.h"
#include "harness/judge/waivers.h"
#include "harness/scenario/partition.h"

namespace splitcheck {

// kWaived: diverged, but every failed check is covered by an unexpired waiver
// (harness/judge/waivers.h); reported apart from passes.
// kUnproven (external engines): every judged check found the dump identical to PP=1, but
// the dump does not show that the engine ran the partition asked (no /stages, say); not a
// pass. kInterrupted: splitcheck got SIGINT, SIGTERM or SIGHUP before the case finished.
enum class Verdict {
  kPass,
  kDiverged,
  kConfigRejected,
  kError,
  kSkipped,
  kWaived,
  kUnproven,
  kInterrupted
};
const char* verdict_name(Verdict v);

// The first event where the partitioned trace differs from PP=1's (SPEC 5.3).
struct DispatchMismatch {
  int32_t forward = 0;
  int64_t event = 0;
  int32_t layer = -1;
  std::string site;
  std::string expected;  // "attn_res.native" (PP=1)
  std::string actual;    // "attn_res.fallback" (here)
};

struct TapVerdict {
  int id = 0;
  int64_t mismatches = 0;  // elements over all forwards
  double min_cosine = 1;   // worst forward
};

struct CaseResult {
  std::string key;     // "split-12"
  std::string layout;  // "0-12|12-32"
  std::vector<int> cuts;
  Verdict verdict = Verdict::kSkipped;
  std::string message;                     // one line
  std::vector<std::string> failed_checks;  // names from the check registry
  std::optional<TensorDiff> first_divergence;
  int32_t first_divergence_forward = -1;
  int32_t first_divergence_layer = -1;
  std::string first_divergence_site;
  // Whether an earlier forward than the first divergence's computed its layer (and, being
  // earlier, computed it identically): the layer's weights and code have then been shown
  // equal to PP=1's, so what differs is state carried between forwards (caches, positions,
  // per-request bookkeeping). False in a layer's first forward, and outside layers.
  bool first_divergence_layer_ran_before = false;
  // A dataset PP=1 has and the partition lacks (or, first_missing_extra, the reverse) that
  // comes before the first numeric divergence in PP=1's execution order: the headline, so a
  // stage that skips a layer is named at that layer. Empty when none comes first.
  std::string first_missing;
  bool first_missing_extra = false;
  int32_t first_missing_forward = -1;
  int32_t first_missing_layer = -1;
  std::optional<DispatchMismatch> dispatch;
  int64_t dispatch_mismatches = 0;
  std::vector<TapVerdict> taps;
  std::vector<StageHoldings> stages;
  int64_t datasets_compared = 0;
  int64_t datasets_differing = 0;
  // Datasets compared after rounding: a writer narrowed them (their `source_dtype`, in
  // PP=1's dump or this case's: float32 stored as bfloat16, say), so equal bits there are
  // not the engine's own bits. rounded_examples: the first kRoundedExamples of them, each
  // "<path>: <source dtype> stored as <dtype>".
  int64_t datasets_rounded = 0;
  std::vector<std::string> rounded_examples;
  double seconds = 0;
  AcceptanceFigures acceptance;  // this partition's speculative figures
  DrafterPlacement drafter;      // what the drafter on the last stage was bound to
  std::string refusal_probe;     // what a missing drafter embedding placeholder gets
  // What the engine under test computed for this split point: its stages' layer and head
  // calls and its drafter's calls (every one of them run by the partition, none taken
  // from PP=1); SweepResult::pp1_computed is the same count for PP=1.
  ComputedCalls computed;
  // Serving scenarios (SPEC 3.4): the request of the first divergence (-1: none or not
  // serving), and every request with a differing dataset, ascending.
  int32_t first_divergence_request = -1;
  int32_t first_divergence_step = -1;  // serving: the scheduler step of that forward
  std::vector<int32_t> diverged_requests;
  std::vector<Waiver> waivers;  // the waivers that made this case kWaived
  // External engines (harness/runner/): the dump this case judged, the tail of the
  // engine's stderr when the run failed, and the checks its dump gave no evidence for.
  std::string dump;
  std::string stderr_tail;
  std::vector<NotJudged> not_judged;
  // External engines: what the dump showed of the partition it ran: "shown" (its /stages
  // equal the partition asked), "missing" (then the case is at best unproven), "waived" (the
  // scenario waives it), "contradicted" (another partition ran: the partition check fails).
  std::string evidence;
  double engine_seconds = 0;  // external engines: the engine run's own wall time
};

// How many datasets compared after rounding a case names (CaseResult::rounded_examples).
inline constexpr size_t kRoundedExamples = 3;

// Serving scenarios: every request served alone at PP=1 (its own prefill chunks, a batch
// of one) against the same request in PP=1's batched run, every dataset of its forwards
// and its tokens bit for bit.
struct BatchInvariance {
  bool checked = false;
  // Whether the backend promises batch invariance (kernels/batch.h): on the CPU a request
  // that differs from itself alone fails the sweep (SPEC 3.4); on CUDA, where the product's
  // algorithm depends on the row count, how many equal themselves is a measured property.
  bool required = true;
  int requests = 0;
  int identical = 0;
  // What fails the sweep: PP=1's batched run that does not reproduce itself, and, where
  // batch invariance is required, every request that differs from itself alone.
  std::vector<std::string> differences;
  // Where it is not required: one line per request that differs from itself alone
  // (reported; fails only a scenario whose expect says batch_invariant).
  std::vector<std::string> not_invariant;
};

struct SweepOptions {
  int threads = 0;      // 0: hardware concurrency
  int shard_index = 0;  // run partitions with position % shard_count == shard_index
  int shard_count = 1;
  std::string filter;     // run only cases whose key contains this
  bool progress = false;  // a progress line on stderr
  // Run PP=1 twice before judging any split point (harness/judge/self_check.h); when
  // the two runs differ, no split point is judged and the exit code is 4.
  bool self_check = false;
  // Serving scenarios: serve every request alone at PP=1 and compare it with the batched
  // run (SPEC 3.4, the batch invariance), about a PP=1 run and one run per request. Off
  // for what judges split points only (the fault sensitivity table; tests that sweep one
  // scenario several times); a scenario whose expect block asks for batch_invariant
  // then fails its expect ("not checked"), never passes it.
  bool requests_alone = true;
  // Where PP=1 and every stage load their weights from; null: the scenario's own
  // (generated from its seed, or its checkpoint). Must outlive the sweep.
  WeightSource* weights = nullptr;
  // PP=1 already run over `weights` (required with it) for a scenario that differs from
  // this one at most in its name, description, expect, faults and partitions (no fault
  // reaches PP=1: the fixed protocol's PP=1 is the truth every partition is judged
  // against): the sweep judges against it instead of running PP=1 again. The fault
  // sensitivity table shares one per seed and protocol. Null: the sweep runs PP=1. Must
  // outlive the sweep.
  const ReferenceRun* reference = nullptr;
  // Where the stages of each partition run (engine/transport.h); null: inproc. A
  // scenario whose transport is not inproc is refused without one. The sweep runs one
  // partition at a time on it, and stops (the rest skipped) once it is lost().
  TransportFactory* transport = nullptr;
};

struct SweepResult {
  std::string scenario_name;
  std::string scenario_sha256;
  std::string model_sha256;
  nlohmann::json scenario;  // resolved
  std::vector<CaseResult> cases;
  AcceptanceFigures pp1_acceptance;  // PP=1's speculative figures
  DrafterPlacement pp1_drafter;
  ComputedCalls pp1_computed;        // what PP=1 computed (once per sweep, shared by every case)
  StagesPlacement placement;         // the transport, and where each stage ran
  BatchInvariance batch_invariance;  // serving scenarios only
  std::vector<int32_t> requests;     // serving scenarios: the request ids, ascending
  double pp1_seconds = 0;
  double total_seconds = 0;
  int threads = 1;
  std::vector<std::string> expect_failures;  // what the scenario's `expect` says and did not happen
  std::vector<std::string> checks;           // the checks evaluated, in registry order
  SelfCheckResult self_check;                // PP=1 against itself (when SweepOptions::self_check)
  std::optional<ExternalRunInfo> external;   // a sweep of an external engine (harness/runner/)
  std::vector<std::string> waiver_failures;  // expired waivers of this scenario (apply_waivers)
  // The signal (SIGINT, SIGTERM, SIGHUP) that ended the sweep early; 0: none. The cases not
  // finished then are kInterrupted, the verdict word is "interrupted" and the exit code
  // 128 + the signal.
  int interrupted_by = 0;
  // True when the self-check ran and PP=1 did not reproduce itself: nothing was judged.
  bool refused_to_judge() const { return self_check.ran && !self_check.reproduced; }
  int count(Verdict v) const;
  // "3 pass, 1 diverged, ...": every verdict with its count, in the order of Verdict.
  std::string counts_line() const;
  // At least one case, and every case passed or is waived (skipped, error,
  // config-rejected and diverged cases are not conformant).
  bool conformant() const;
  // True when some case compared a dataset with PP=1, or had its stage holdings judged by
  // a selected memory or embedding check. A sweep whose selected checks are only `config`
  // (or `partition`) judges refusals and ownership, not data.
  bool compared_data() const;
  // Every case passed (conformant), but no case compared any data (compared_data): the
  // verdict is "no-data", never "conformant".
  bool no_data_compared() const { return conformant() && !compared_data(); }
  // The sweep's verdict word in every report form: "interrupted" (interrupted_by),
  // "refused" (refused_to_judge),
  // "no-data" (no_data_compared), "conformant" or "divergent".
  std::string verdict_word() const;
  // The gate's exit code: 4 when PP=1 did not reproduce itself (refused_to_judge), 3 when
  // a case failed to run (error), 1 when a case is neither a pass nor waived, no data was
  // compared (no_data_compared) unless the scenario's `expect` asks for the verdict
  // "no-data", the scenario's `expect` is not met or a waiver of it has expired, 0
  // otherwise.
  int exit_code() const;
};

// Runs the sweep. A Status error means the scenario or an input is invalid (or an
// internal failure); a divergence is a result, not an error.
Result<SweepResult> run_sweep(const Scenario& scenario, const SweepOptions& options);

// Checks the scenario's `expect` block against the result; a block that cannot be read
// is itself a failure.
std::vector<std::string> evaluate_expect(const nlohmann::json& expect, const SweepResult& result);

}  // namespace splitcheck
