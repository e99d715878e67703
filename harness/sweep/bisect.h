// Bisecting a failing sweep (DESIGN.md user 2): the first divergent split point, where
// in it the first divergence lies (forward, layer, site, token, channel), the probable
// cause, and a minimised scenario that still fails with the same cause.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/judge/cause.h"
#include "harness/scenario/scenario.h"
#include "harness/sweep/sweep.h"
#include "kernels/status.h"

namespace splitcheck {

// The causes `bisect` names are the judge's (harness/judge/cause.h: classify_cause, the one
// rule book sweep and compare read too).

// Where and why one split point first diverged from PP=1.
struct BisectFinding {
  std::string key;  // "split-7"
  std::string layout;
  std::vector<int> cuts;
  Verdict verdict = Verdict::kPass;
  std::string cause;
  std::string message;  // the case's one-line message
  std::string dataset;  // first numerically differing dataset; empty if none
  int32_t forward = -1;
  int32_t layer = -1;
  std::string site;
  int64_t token = -1;    // row of the first differing element
  int64_t channel = -1;  // column of the first differing element
  int32_t request = -1;  // serving scenarios: the request that diverged first; -1 otherwise
  int32_t step = -1;     // serving scenarios: the scheduler step of that forward
};

// The sizes a minimisation shrinks.
struct ScenarioSize {
  int layers = 0;
  int prompts = 0;
  int max_new_tokens = 0;
  int max_prompt_tokens = 0;  // 0 = whole prompt
  int max_in_flight = 0;      // serving scenarios: the concurrency; 0 when not serving
  int partitions = 0;         // split points swept (-1 when not enumerable)
};

// Everything `bisect` found: empty `finding.key` means the sweep was conformant.
struct BisectResult {
  bool conformant = true;
  BisectFinding finding;
  ScenarioSize before;
  ScenarioSize after;
  nlohmann::json repro;            // the minimised scenario, resolved form
  std::vector<std::string> steps;  // one line per reduction tried: kept or dropped
  int sweeps = 0;                  // sweeps run, the first included
};

struct BisectOptions {
  int threads = 0;  // for the first, full sweep; 0: one per core
};

// Why `bisect` refuses a scenario without sweeping it (a Status of kInvalidInput, exit 2),
// named at the start of the message: "bisect refused (<reason>): ...".
inline constexpr const char* kRefusedTransport = "transport";  // stages not in-process

// The first failing case in enumeration order as a finding (an interrupted case is none);
// nullopt when there is none.
std::optional<BisectFinding> first_failure(const SweepResult& r);

// The sizes of a scenario.
ScenarioSize scenario_size(const Scenario& s);

// Sweeps `s`, picks its first failing split point, classifies it and minimises the
// scenario while the same split (remapped) still fails with the same cause.
Result<BisectResult> bisect(const Scenario& s, const BisectOptions& options);

// Writes `j` (pretty, with a trailing newline) to `path` through a temporary file and a
// rename, so a reader never sees a partial file.
Status write_json_atomically(const std::string& path, const nlohmann::json& j);

}  // namespace splitcheck
