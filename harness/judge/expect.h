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

}  // namespace splitcheck
