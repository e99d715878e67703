// The self-determinism gate: before a sweep judges any split point, PP=1 runs a second
// time and must reproduce its first run bit for bit. A PP=1 that differs from itself (a
// nondeterministic kernel, say) makes every verdict against it meaningless, so the sweep
// refuses to judge (exit 4) and names the first difference instead of reporting split
// points as divergent.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/status.h"

namespace splitcheck {

class RunRecord;

// What the second PP=1 run showed.
struct SelfCheckResult {
  bool ran = false;        // --self-check was given
  bool reproduced = true;  // the second run equals the first, dataset for dataset
  int64_t datasets_compared = 0;
  int64_t datasets_differing = 0;
  std::string first_difference;  // one line, naming the dataset, token and channel
  double seconds = 0;            // of the second run and its comparison
};

// The self-check's one decision, for every engine: whether PP=1's second record `second`
// reproduces its first, `first`, over every dataset (a second run that recorded nothing to
// compare does not reproduce it). Fills r's counts, `reproduced` and `first_difference`.
Status judge_reproduction(const RunRecord& first, const RunRecord& second, SelfCheckResult& r);

}  // namespace splitcheck
