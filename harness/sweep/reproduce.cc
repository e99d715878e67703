#include "harness/sweep/reproduce.h"

#include <fmt/format.h>

#include <chrono>

#include "harness/engine/run.h"

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
  RETURN_IF_ERROR(judge_reproduction(first, run.record, r));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace splitcheck
