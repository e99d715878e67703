// `splitcheck sweep` and `splitcheck bisect` on a scenario whose engine is external
// (harness/runner/): the console lines and the four report forms.
#pragma once

#include <string>
#include <vector>

#include "harness/judge/waivers.h"
#include "harness/sweep/external_sweep.h"

namespace splitcheck {

// Sweeps the external engine of `s`, prints the report's opening (the PP=1 command as run,
// the settings requested and in effect, splitcheck's version), one line per case (an
// error with its engine's stderr tail), the checks not judged and the summary; writes the
// reports into `report_dir` when given. Returns the exit code (0/1/2/3).
int external_sweep_and_report(const Scenario& s, const ExternalSweepOptions& options,
                              const std::string& report_dir, const std::string& command_line,
                              const std::vector<Waiver>& waivers);

// `bisect` of an external engine: sweeps it, names the first failing split point in
// enumeration order with its first divergence and cause, and writes the scenario narrowed
// to that split point to `repro_path`. Exit 0 when conformant, 1 when a split point fails.
// The repro holds the blocks the engine uses: the scenario as its author wrote it (the
// engine may read any of it through {scenario}), or only `engine`, `partitions`, `checks`
// and `faults` when the command does not take {scenario}.
int external_bisect(const Scenario& s, const ExternalSweepOptions& options,
                    const std::string& repro_path, const std::string& report_dir,
                    const std::string& command_line);

}  // namespace splitcheck
