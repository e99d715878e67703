#include "harness/judge/result.h"

#include <fmt/format.h>

#include <algorithm>

#include "harness/scenario/checks.h"

namespace splitcheck {

int SweepResult::count(Verdict v) const {
  return static_cast<int>(std::count_if(cases.begin(), cases.end(),
                                        [&](const CaseResult& c) { return c.verdict == v; }));
}

std::string SweepResult::counts_line() const {
  std::string line;
  for (const CaseOutcome& o : case_outcomes())
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", count(o.verdict), o.name);
  return line;
}

bool SweepResult::conformant() const {
  return !cases.empty() && std::none_of(cases.begin(), cases.end(), [](const CaseResult& c) {
    return outcome_of(c.verdict).fails_gate;
  });
}

bool SweepResult::compared_data() const {
  const bool judges_stages = !checks_of_kind(checks, CheckKind::kStage).empty();
  return std::any_of(cases.begin(), cases.end(), [&](const CaseResult& c) {
    return c.datasets_compared > 0 || (judges_stages && !c.stages.empty());
  });
}

SweepVerdict SweepResult::sweep_verdict() const {
  if (interrupted_by != 0) return SweepVerdict::kInterrupted;
  if (refused_to_judge()) return SweepVerdict::kRefused;
  if (!reference_failure.empty()) return SweepVerdict::kError;
  if (no_data_compared()) return SweepVerdict::kNoData;
  return conformant() ? SweepVerdict::kConformant : SweepVerdict::kDivergent;
}

std::string SweepResult::verdict_word() const {
  return std::string(outcome_of(sweep_verdict()).word);
}

int SweepResult::exit_code() const {
  const SweepVerdict v = sweep_verdict();
  if (v == SweepVerdict::kInterrupted) return outcome_of(v).exit_status + interrupted_by;
  if (v == SweepVerdict::kRefused) return outcome_of(v).exit_status;
  int status = cases.empty() ? 1 : 0;
  if (v == SweepVerdict::kError) status = outcome_of(v).exit_status;
  for (const CaseResult& c : cases)
    status = worse_exit_status(status, outcome_of(c.verdict).exit_status);
  // Passes that compared nothing are exit 0 only where `expect` asks for exactly that.
  const nlohmann::json expect =
      scenario.is_object() ? scenario.value("expect", nlohmann::json()) : nlohmann::json();
  const bool no_data_expected =
      expect.is_object() && expect.value("verdict", nlohmann::json()) == "no-data";
  if (v == SweepVerdict::kNoData && !no_data_expected)
    status = worse_exit_status(status, outcome_of(v).exit_status);
  if (!expect_failures.empty() || !waiver_failures.empty()) status = worse_exit_status(status, 1);
  return status;
}

}  // namespace splitcheck
