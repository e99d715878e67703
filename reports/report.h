// The report model and its writers. One model (JSON, validated by
// reports/report.schema.json) is built from a sweep, compare or bisect result and is
// rendered four ways: report.json, report.html (self-contained), junit.xml, summary.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "harness/dump/compare.h"
#include "harness/verdict/bisect.h"
#include "harness/verdict/sweep.h"
#include "kernels/status.h"

namespace splitcheck {

// What the report says about how it was made.
struct ReportContext {
  std::string command;  // the exact command line to reproduce
};

// The report model of a sweep.
nlohmann::json sweep_report(const SweepResult& result, const ReportContext& context);

// The report's `reuse` object (what the sweep took from PP=1), and the one line that
// says it in the console, report.html and summary.md.
nlohmann::json reuse_json(const ReuseSummary& reuse);
std::string reuse_line(const nlohmann::json& reuse);

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
