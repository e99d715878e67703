// The one sweep driver, for every engine: the cases a run takes (its shard, its filter),
// PP=1 once, the self-check's decision, the ownership refusals, the worker pool and its
// progress line, the judged-checks list and the `expect` evaluation. What differs between
// engines is a CaseSource: the built-in engine (harness/sweep/sweep.h) and an engine run
// through its command template (harness/sweep/external_sweep.h) each supply their PP=1
// and their cases, and nothing else.
#pragma once

#include <string>
#include <vector>

#include "harness/judge/result.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"
#include "harness/sweep/cases.h"
#include "kernels/status.h"

namespace splitcheck {

// One engine's side of a sweep. The driver calls begin, reference, (reproduce), then
// run_case once per partition (jobs() at a time, from worker threads), then end.
class CaseSource {
 public:
  virtual ~CaseSource() = default;
  // Before anything runs: the model's identity (result.model_sha256) and the engine's own
  // settings in the result; may refuse the cases taken (a transport too small for them).
  virtual Status begin(const SweepCases& taken, SweepResult& result) = 0;
  // PP=1, once. A Status error is invalid input or an internal failure (no report); a PP=1
  // run that failed to give a reference is not an error: reference_failure() then says why,
  // and every case is an error that names it.
  virtual Status reference(SweepResult& result) = 0;
  virtual std::string reference_failure() const { return ""; }
  // The self-check: PP=1 a second time, judged against the first (result.self_check).
  virtual Status reproduce(SweepResult& result) = 0;
  // After the reference stands (the self-check passed or was not asked): what PP=1 shows
  // that the cases are judged with.
  virtual Status take_reference(SweepResult& result) = 0;
  // How many cases may run at once when `requested` are asked (0: one per core).
  virtual int jobs(int requested) const { return requested; }
  // Runs and judges one partition whose ownership is sound; c.key, c.layout and c.cuts are
  // set. Called from several threads at once (jobs()).
  virtual void run_case(const Partition& part, CaseResult& c) = 0;
  // The selected checks the engine's evidence cannot judge in any case (each case's own
  // not-judged list comes with its result).
  virtual std::vector<NotJudged> sweep_not_judged() const { return {}; }
  // Once every case has run (or the self-check refused them all).
  virtual void end(SweepResult&) {}
};

struct DriveOptions {
  int jobs = 0;         // cases at once; 0: one per core (CaseSource::jobs may lower it)
  int shard_index = 0;  // run partitions with position % shard_count == shard_index
  int shard_count = 1;
  std::string filter;     // run only cases whose key contains this
  bool progress = false;  // a progress line on stderr
  // PP=1 twice before judging any split point (harness/judge/self_check.h); when the two
  // runs differ no split point is judged (SweepResult::refused_to_judge, exit 4).
  bool self_check = false;
};

// Sweeps `scenario` with the cases `source` runs. A Status error means the scenario or an
// input is invalid (or an internal failure); a divergence is a result, not an error.
Result<SweepResult> drive_sweep(const Scenario& scenario, const DriveOptions& options,
                                CaseSource& source);

}  // namespace splitcheck
