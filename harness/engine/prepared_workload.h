// The prompts of a scenario, prepared for the engines.
#pragma once

#include <vector>

#include "harness/scenario/scenario.h"
#include "reference/workload.h"

namespace splitcheck {

// The scenario's prompts: its workload file (or the generator), the first `prompts`
// problems, byte-tokenised, cut to the last max_prompt_tokens when that is set.
struct PreparedWorkload {
  std::vector<Problem> problems;
  std::vector<std::vector<int32_t>> prompts;
};
Result<PreparedWorkload> prepare_workload(const Scenario& scenario);

}  // namespace splitcheck
