// The built-in engine's side of the self-determinism gate (harness/judge/self_check.h):
// PP=1 runs a second time and is judged against its first run.
#pragma once

#include <string>

#include "harness/engine/run.h"
#include "harness/judge/self_check.h"
#include "harness/scenario/scenario.h"
#include "kernels/status.h"
#include "reference/record.h"
#include "reference/weight_source.h"

namespace splitcheck {

// Runs PP=1 of `scenario` over `weights`; an error or exception in it is an internal error
// whose context is `what` ("PP=1 run").
Result<ReferenceRun> run_pp1(const Scenario& scenario, WeightSource& weights,
                             const std::string& what);

// Runs PP=1 of `scenario` again over `weights` and judges it against `first`
// (judge_reproduction).
Result<SelfCheckResult> check_pp1_reproduces(const Scenario& scenario, WeightSource& weights,
                                             const RunRecord& first);

}  // namespace splitcheck
