// The built-in sweep: PP=1 once, then every partition of the scenario on the engine built
// here, each judged against PP=1 by the one judge (harness/judge/judge.h), and the
// verdicts per split point (harness/judge/result.h).
#pragma once

#include <string>

#include "harness/engine/run.h"
#include "harness/engine/transport.h"
#include "harness/judge/result.h"
#include "harness/scenario/scenario.h"
#include "kernels/status.h"
#include "reference/weight_source.h"

namespace splitcheck {

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

// Runs the sweep. A Status error means the scenario or an input is invalid (or an
// internal failure); a divergence is a result, not an error.
Result<SweepResult> run_sweep(const Scenario& scenario, const SweepOptions& options);

}  // namespace splitcheck
