// The self-determinism gate: before a sweep judges any split point, PP=1 runs a second
// time and must reproduce its first run bit for bit. A PP=1 that differs from itself (a
// nondeterministic kernel, say) makes every verdict against it meaningless, so the sweep
// refuses to judge (exit 4) and names the first difference instead of reporting split
// points as divergent.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/status.h"
#include "reference/weight_source.h"

namespace splitcheck {

class RunRecord;
struct Scenario;

// What the second PP=1 run showed.
struct SelfCheckResult {
  bool ran = false;        // --self-check was given
  bool reproduced = true;  // the second run equals the first, dataset for dataset
  int64_t datasets_compared = 0;
  int64_t datasets_differing = 0;
  std::string first_difference;  // one line, naming the dataset, token and channel
  double seconds = 0;            // of the second run and its comparison
};

// Runs PP=1 of `scenario` again over `weights` and compares its record with `first` over
// every check.
Result<SelfCheckResult> check_pp1_reproduces(const Scenario& scenario, WeightSource& weights,
                                             const RunRecord& first);

}  // namespace splitcheck
