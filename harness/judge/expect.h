// The scenario's `expect` block (what a correct harness must conclude about this sweep)
// judged against a sweep's result: every expectation that did not happen, one line each.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/judge/result.h"

namespace splitcheck {

// Checks the scenario's `expect` block against the result; a block that cannot be read
// is itself a failure.
std::vector<std::string> evaluate_expect(const nlohmann::json& expect, const SweepResult& result);

// Judges the scenario's `expect` for one run of it, the built-in sweep's and an external
// engine's alike: a run that is only part of the sweep (a --filter, one --shard of several)
// can neither meet nor miss it, so result.expect_not_evaluated says why (every report form
// prints it) and no expectation is evaluated; `splitcheck merge` evaluates it once the shards
// are joined. Otherwise result.expect_failures gets evaluate_expect's lines.
void judge_expect(const nlohmann::json& expect, const std::string& filter, int shard_index,
                  int shard_count, SweepResult& result);

}  // namespace splitcheck
