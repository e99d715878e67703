// The outcomes of the gate, each written once with what it means (LLVM lit's ResultCode):
// a case's verdict with its name in every report form, whether it fails the gate, the exit
// status it asks for and how JUnit shows it; and the sweep's verdict word with the same
// columns. The console, report.json's counts, JUnit, HTML, merge and the exit status read
// "does this fail the gate?" from these tables; none decides it again.
#pragma once

#include <span>
#include <string_view>

namespace splitcheck {

// A case's verdict. kWaived: diverged, but every failed check is covered by an unexpired
// waiver (harness/judge/waivers.h); reported apart from passes. kUnproven (external engines):
// every judged check found the dump identical to PP=1, but the dump does not show that the
// engine ran the partition asked (no /stages, say); not a pass. kInterrupted: splitcheck got
// SIGINT, SIGTERM or SIGHUP before the case finished.
enum class Verdict {
  kPass,
  kDiverged,
  kConfigRejected,
  kError,
  kSkipped,
  kWaived,
  kUnproven,
  kInterrupted
};

// How a JUnit test case shows a verdict: no element (a pass), <failure>, <error>, <skipped>.
enum class JunitElement { kNone, kFailure, kError, kSkipped };

// One row of the case outcomes.
struct CaseOutcome {
  Verdict verdict;
  std::string_view name;       // in every report form: "config-rejected"
  std::string_view count_key;  // its key in report.json's counts: "config_rejected"
  bool fails_gate;             // whether one such case makes the sweep not conformant
  int exit_status;             // what one such case asks of the sweep's exit status
  JunitElement junit;
};

// Every case outcome, in the order of Verdict (the order the counts are listed in).
std::span<const CaseOutcome> case_outcomes();

// The row of `v`.
const CaseOutcome& outcome_of(Verdict v);

// The row named `name` ("diverged"), or nullptr when no verdict has that name.
const CaseOutcome* find_outcome(std::string_view name);

// outcome_of(v).name, as a C string.
const char* verdict_name(Verdict v);

// The sweep's verdict word. kInterrupted: a signal ended it (exit 128 + the signal);
// kRefused: PP=1 does not reproduce itself, nothing was judged; kError: PP=1 gave no
// reference (its run failed), nothing was judged; kNoData: every case passed
// but none compared any data (exit 0 only where the scenario's expect asks for it).
enum class SweepVerdict { kConformant, kDivergent, kNoData, kRefused, kError, kInterrupted };

struct SweepOutcome {
  SweepVerdict verdict;
  std::string_view word;  // "no-data"
  bool fails_gate;
  int exit_status;  // kInterrupted: 128, to which the signal's number is added
};

std::span<const SweepOutcome> sweep_outcomes();
const SweepOutcome& outcome_of(SweepVerdict v);
const SweepOutcome* find_sweep_outcome(std::string_view word);

// The more severe of two exit statuses the gate may give: an error (3) outranks a failure
// (1), which outranks a pass (0); a refusal (4) and an interruption (128 + n) outrank both.
int worse_exit_status(int a, int b);

}  // namespace splitcheck
