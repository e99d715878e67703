// The report model and its writers. One model (JSON, validated by
// harness/reports/report.schema.json) is built from a sweep, compare or bisect result and is
// rendered four ways: report.json, report.html (self-contained), junit.xml, summary.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "harness/dump/compare.h"
#include "harness/judge/result.h"
#include "harness/sweep/bisect.h"
#include "kernels/status.h"

namespace splitcheck {

// What the report says about how it was made.
struct ReportContext {
  std::string command;  // the exact command line to reproduce
};

// The report model's `counts`: the total, then each verdict's count under its key in the
// outcome table (harness/judge/outcome.h).
nlohmann::json counts_json(const SweepResult& result);

// The report model of a sweep.
nlohmann::json sweep_report(const SweepResult& result, const ReportContext& context);

// What an engine computed, as the report's `computed` objects hold it
// ({"layer_calls", "head_calls", "drafter_calls"}).
nlohmann::json computed_json(const ComputedCalls& calls);
// One case's calls against PP=1's, as every report form states them:
// "layer calls 1728 of 1728, head calls 54 of 54, drafter calls 120 of 120". `of` is
// PP=1's count for the same workload; the case's own count comes first.
std::string computed_text(const ComputedCalls& calls, const ComputedCalls& of);
std::string computed_text(const nlohmann::json& calls, const nlohmann::json& of);
// The sweep's line: what the engine under test computed over every split point, and
// that nothing was taken from PP=1 (from the report model's `computed` object).
std::string computed_summary(const nlohmann::json& report);
std::string computed_summary(const SweepResult& result);

// The report's `placement` object (the transport, and for each stage its rank, process,
// host and device), and the one line that says it in the console, report.html and
// summary.md: "mpi: stage 0 on rank 0 (pid 7, host h, cpu), stage 1 on rank 1 (...)".
nlohmann::json placement_json(const StagesPlacement& placement);
std::string placement_line(const nlohmann::json& placement);

// The report model of a comparison of dump `b` against dump `a` (kind "compare"): one
// case per differing, structurally different or missing dataset; counts.total is the
// datasets seen in either file, counts.pass the equal ones.
nlohmann::json compare_report(const CompareResult& result, const std::string& a,
                              const std::string& b, const ReportContext& context,
                              bool approximate = false);

// The report model of a bisection of `scenario` (kind "bisect"): one case, the first
// failing split, with its cause, first divergence, the minimised scenario written to
// `repro_path` and the command that replays it; none when the sweep was conformant.
Result<nlohmann::json> bisect_report(const BisectResult& result, const Scenario& scenario,
                                     const std::string& repro_path, const ReportContext& context);

// Writes report.json, report.html, junit.xml and summary.md into `dir` (created when
// missing). Each file is written under a temporary name and renamed.
Status write_reports(const std::string& dir, const nlohmann::json& report);

}  // namespace splitcheck
