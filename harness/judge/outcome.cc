#include "harness/judge/outcome.h"

#include <algorithm>

namespace splitcheck {
namespace {

// A skipped case never ran, so it proves nothing: it fails the gate as a divergence does.
// A waived case is a known divergence that the scenario accepts until its waiver expires.
constexpr CaseOutcome kCaseOutcomes[] = {
    {Verdict::kPass, "pass", "pass", false, 0, JunitElement::kNone},
    {Verdict::kDiverged, "diverged", "diverged", true, 1, JunitElement::kFailure},
    {Verdict::kConfigRejected, "config-rejected", "config_rejected", true, 1,
     JunitElement::kFailure},
    {Verdict::kError, "error", "error", true, 3, JunitElement::kError},
    {Verdict::kSkipped, "skipped", "skipped", true, 1, JunitElement::kSkipped},
    {Verdict::kWaived, "waived", "waived", false, 0, JunitElement::kSkipped},
    {Verdict::kUnproven, "unproven", "unproven", true, 1, JunitElement::kFailure},
    {Verdict::kInterrupted, "interrupted", "interrupted", true, 1, JunitElement::kError},
};

constexpr SweepOutcome kSweepOutcomes[] = {
    {SweepVerdict::kConformant, "conformant", false, 0},
    {SweepVerdict::kDivergent, "divergent", true, 1},
    {SweepVerdict::kNoData, "no-data", true, 1},
    {SweepVerdict::kRefused, "refused", true, 4},
    {SweepVerdict::kError, "error", true, 3},
    {SweepVerdict::kInterrupted, "interrupted", true, 128},
};

// Severity of an exit status, for worse_exit_status.
int rank(int status) {
  switch (status) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 3:
      return 2;
    case 4:
      return 3;
    default:
      return status >= 128 ? 4 : 1;
  }
}

}  // namespace

std::span<const CaseOutcome> case_outcomes() { return kCaseOutcomes; }

const CaseOutcome& outcome_of(Verdict v) {
  for (const CaseOutcome& o : kCaseOutcomes)
    if (o.verdict == v) return o;
  return kCaseOutcomes[static_cast<int>(Verdict::kError)];
}

const CaseOutcome* find_outcome(std::string_view name) {
  for (const CaseOutcome& o : kCaseOutcomes)
    if (o.name == name) return &o;
  return nullptr;
}

const char* verdict_name(Verdict v) { return outcome_of(v).name.data(); }

std::span<const SweepOutcome> sweep_outcomes() { return kSweepOutcomes; }

const SweepOutcome& outcome_of(SweepVerdict v) {
  for (const SweepOutcome& o : kSweepOutcomes)
    if (o.verdict == v) return o;
  return kSweepOutcomes[static_cast<int>(SweepVerdict::kDivergent)];
}

const SweepOutcome* find_sweep_outcome(std::string_view word) {
  for (const SweepOutcome& o : kSweepOutcomes)
    if (o.word == word) return &o;
  return nullptr;
}

int worse_exit_status(int a, int b) { return rank(b) > rank(a) ? b : a; }

}  // namespace splitcheck
