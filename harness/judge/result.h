// What the judge decides about a sweep: each case's result (its verdict from the outcome
// table, the checks that failed, the first divergence in PP=1's execution order, the
// dispatch mismatch, the taps, what could not be judged) and the sweep's (its cases, the
// checks judged, the self-check, what `expect` says and did not happen). Every engine's
// sweep fills these (harness/sweep/, harness/runner/); every report form renders them.
//
// A case is one partition, named from its cuts ("split-12"). Only the scenario's `checks`
// are evaluated: a check that is not selected compares nothing and cannot fail a case.
// "Pass" means every selected check found the case identical to PP=1; a case that never ran
// (skipped) or failed to run (error) is not a pass, and a sweep of no case at all is never
// conformant.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/dump/compare.h"
#include "harness/dump/evidence.h"
#include "harness/judge/external_run.h"
#include "harness/judge/outcome.h"
#include "harness/judge/self_check.h"
#include "harness/judge/waivers.h"
#include "reference/engine.h"

namespace splitcheck {

// One failed check: the registry's name ("memory", "embedding"), a one-line message and,
// for a rule that names its own cause (harness/judge/cause.h: "head not tied to the
// embedding"), that cause; empty: the check's own.
struct CheckFailure {
  std::string check;
  std::string message;
  std::string cause = {};
};

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
  int64_t index = -1;  // its place in the scenario's enumeration of partitions (report order)
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
  // first_missing is a layer's dataset and the partition records another dataset of that
  // layer in that forward: a site not recorded, not a layer not computed.
  bool first_missing_layer_partly_recorded = false;
  // The first divergence is the logits and both runs record that forward's final norm output
  // (`final_norm`), equal: the lm_head differs, not the norm.
  bool final_norm_recorded = false;
  // The cause the first stage-check failure names for itself (CheckFailure::cause); empty
  // when none does.
  std::string stage_failure_cause;
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
  // Why the scenario's `expect` was not evaluated (a partial run: --filter, --shard); empty
  // when it was, or when the scenario declares none (judge_expect, expect.h).
  std::string expect_not_evaluated;
  std::vector<std::string> checks;           // the checks evaluated, in registry order
  SelfCheckResult self_check;                // PP=1 against itself (when SweepOptions::self_check)
  // Why PP=1 gave no reference (the engine's PP=1 run failed, or its dump is not a PP=1
  // run); empty when it stands. Then nothing is judged: every case is an error naming it,
  // and the sweep's verdict is "error".
  std::string reference_failure;
  // The selected checks the engine's evidence judged in no case, each with its reason (a
  // check PP=1's dump gives no evidence for, a waived evidence, a stage check no case
  // could judge); every report form lists them, and none of them is a pass.
  std::vector<NotJudged> not_judged;
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
  // At least one case, and no case's verdict fails the gate (outcome.h: skipped, error,
  // config-rejected, unproven, interrupted and diverged cases are not conformant).
  bool conformant() const;
  // True when some case compared a dataset with PP=1, or had its stage holdings judged by
  // a selected memory or embedding check. A sweep whose selected checks are only `config`
  // (or `partition`) judges refusals and ownership, not data.
  bool compared_data() const;
  // Every case passed (conformant), but no case compared any data (compared_data): the
  // verdict is "no-data", never "conformant".
  bool no_data_compared() const { return conformant() && !compared_data(); }
  // The sweep's verdict (outcome.h): interrupted (interrupted_by), refused
  // (refused_to_judge), error (reference_failure), no-data (no_data_compared), conformant or divergent; and its word in
  // every report form.
  SweepVerdict sweep_verdict() const;
  std::string verdict_word() const;
  // The gate's exit code, from the outcome tables (outcome.h): the sweep verdict's status
  // (128 + the signal when interrupted, 4 when refused), else the worst of the cases'
  // statuses (3 for an error, 1 for any other verdict that fails the gate), 1 when no data
  // was compared unless the scenario's `expect` asks for the verdict "no-data", when the
  // scenario's `expect` is not met or a waiver of it has expired; 0 otherwise.
  int exit_code() const;
};

}  // namespace splitcheck
