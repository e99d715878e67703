#include "harness/judge/self_check.h"

#include <fmt/format.h>

#include <chrono>

#include "harness/engine/run.h"
#include "harness/judge/judge.h"

namespace splitcheck {

Result<SelfCheckResult> check_pp1_reproduces(const Scenario& scenario, WeightSource& weights,
                                             const RunRecord& first) {
  const auto t0 = std::chrono::steady_clock::now();
  SelfCheckResult r;
  r.ran = true;
  Result<ReferenceRun> second = internal_error("PP=1 self-check run did not start");
  try {
    second = run_reference(scenario, weights);
  } catch (const std::exception& e) {
    return internal_error(fmt::format("PP=1 self-check run: exception: {}", e.what()));
  }
  ASSIGN_OR_RETURN(ReferenceRun run, std::move(second), "PP=1 self-check run");
  CaseResult probe;
  probe.key = "pp1-self-check";
  RETURN_IF_ERROR(compare_records(first, run.record, probe));
  r.datasets_compared = probe.datasets_compared;
  r.datasets_differing = probe.datasets_differing;
  r.reproduced = probe.datasets_differing == 0 && probe.datasets_compared > 0;
  if (!r.reproduced) {
    r.first_difference = probe.datasets_compared == 0
                             ? std::string("the two runs recorded nothing to compare")
                             : probe.message;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace splitcheck
