#include "harness/sweep/reproduce.h"

#include <fmt/format.h>

#include <chrono>

#include "harness/engine/run.h"

namespace splitcheck {

Result<ReferenceRun> run_pp1(const Scenario& scenario, WeightSource& weights,
                             const std::string& what) {
  Result<ReferenceRun> run = internal_error(what + " did not start");
  try {
    run = run_reference(scenario, weights);
  } catch (const std::exception& e) {
    return internal_error(fmt::format("{}: exception: {}", what, e.what()));
  }
  if (!run.is_ok()) return run.status().with_context(what);
  return run;
}

Result<SelfCheckResult> check_pp1_reproduces(const Scenario& scenario, WeightSource& weights,
                                             const RunRecord& first) {
  const auto t0 = std::chrono::steady_clock::now();
  SelfCheckResult r;
  r.ran = true;
  ASSIGN_OR_RETURN(ReferenceRun run, run_pp1(scenario, weights, "PP=1 self-check run"));
  RETURN_IF_ERROR(judge_reproduction(first, run.record, r));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace splitcheck
