// The report model and its writers. One model (JSON, validated by
// reports/report.schema.json) is built from a sweep, compare or bisect result and is
// rendered four ways: report.json, report.html (self-contained), junit.xml, summary.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "harness/sweep.h"
#include "kernels/status.h"

namespace splitcheck {

// What the report says about how it was made.
struct ReportContext {
  std::string command;  // the exact command line to reproduce
};

// The report model of a sweep.
nlohmann::json sweep_report(const SweepResult& result, const ReportContext& context);

// Writes report.json, report.html, junit.xml and summary.md into `dir` (created when
// missing). Each file is written under a temporary name and renamed.
Status write_reports(const std::string& dir, const nlohmann::json& report);

}  // namespace splitcheck
