// The one judge: a case's verdict from PP=1's record and the case's own, the checks
// selected and the evidence each carries. The sweep driver's two case sources, the built-in
// engine (harness/sweep/sweep.cc) and an external engine (harness/sweep/external_sweep.cc),
// gather that evidence their own way (an engine built here, a dump an engine wrote) and hand
// it to judge_case; the self-checks compare through compare_records; bisect and merge read
// the verdicts these give. No caller sets a case's verdict from a comparison of its own.
//
// What it decides, in this order: the selected dataset checks compared dataset by dataset
// in PP=1's execution order (the first missing or extra dataset and the first numeric
// divergence, the first dispatch mismatch, taps); the stage checks' findings; what could
// not be judged; whether anything was judged at all; and, for an engine nobody here wrote,
// whether its dump shows the partition asked (a contradiction fails `partition`; no
// evidence leaves a pass unproven unless the scenario waives it).
#pragma once

#include <string>
#include <vector>

#include "harness/judge/result.h"
#include "reference/record.h"

namespace splitcheck {

// What a dump shows of the partition its engine ran (DESIGN.md, "External engines").
struct PartitionEvidence {
  std::vector<std::string> contradictions;  // what shows another partition ran
  std::string missing;                      // what is absent (no /stages); empty when shown
  bool shown() const { return contradictions.empty() && missing.empty(); }
};

struct JudgeInput {
  const RunRecord* pp1 = nullptr;
  const RunRecord* candidate = nullptr;
  // The dataset checks compared (those PP=1's record gives evidence for); empty: none.
  std::vector<std::string> dataset_checks;
  // The names of dispatch kernel codes as the dump declares them; empty: the registry's.
  std::vector<std::string> kernel_names;
  // What the selected stage checks (memory, embedding) found wrong on this case.
  std::vector<CheckFailure> stage_failures;
  // Whether a selected stage check was judged on this case (its evidence was there).
  bool stages_judged = false;
  // Checks this case's evidence cannot judge, with the reason.
  std::vector<NotJudged> not_judged;
  // A case that judged nothing at all is an error, not a pass (external engines, whose
  // dumps may carry no evidence for any selected check).
  bool require_judgement = false;
  // External engines: what the case's dump shows of its partition, what PP=1's failed to
  // show ("" when it did) and the scenario's waiver of that evidence. Null: an engine built
  // here, whose partition is the one it was built with.
  const PartitionEvidence* partition = nullptr;
  std::string pp1_unproven;
  std::string evidence_waived;
};

// Judges one case that ran: fills c's verdict (pass, diverged, unproven or error),
// message, failed checks, first divergence, dispatch mismatch, taps, counts, not_judged
// and evidence. c.key and c.layout name the case in an error's message.
void judge_case(const JudgeInput& in, CaseResult& c);

// The dataset-by-dataset part of judge_case: compares a run's record with PP=1's, filling
// the comparison fields of `c` and its verdict (pass or diverged). Only datasets of the
// named checks (check registry) are compared; empty: every check. `kernel_names`: the
// names of dispatch kernel codes as the dump declares them; empty: the kernel registry's.
Status compare_records(const RunRecord& reference, const RunRecord& candidate, CaseResult& c,
                       const std::vector<std::string>& checks = {},
                       const std::vector<std::string>& kernel_names = {});

// Why a partition was refused before anything of it was compared: a layer owned twice or
// never (Partition::ownership_problem), or a configuration-time refusal by the engine.
enum class Refusal { kOwnership, kConfiguration };

// Judges a refused partition, for every engine alike: the case is config-rejected with
// `message`, and fails `partition` (kOwnership) or `config` (kConfiguration) when that check
// is selected.
void judge_refusal(Refusal why, const std::string& message,
                   const std::vector<std::string>& selected, CaseResult& c);

// The checks a sweep judged, in registry order: the selected ones less those judged for no
// case. `sweep_not_judged` holds what the whole sweep is known not to judge beforehand (a
// check PP=1's dump gives no evidence for, a waived evidence) and gains each selected stage
// check that no case which ran (neither error nor config-rejected) judged, with the first
// reason a case gave. The built-in sweep, the runner and merge all call this.
std::vector<std::string> judged_checks(const std::vector<std::string>& selected,
                                       const std::vector<CaseResult>& cases,
                                       std::vector<NotJudged>& sweep_not_judged);

// The check a dataset of a record belongs to, by its path ("forward/0/taps/7": "taps");
// empty for what no dataset check compares (stages/, stage_trace/).
std::string dataset_check(const std::string& path);

}  // namespace splitcheck
