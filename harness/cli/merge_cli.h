// `splitcheck merge`: loads shard reports, merges them (harness/reports/merge.h), writes the
// result.
#pragma once

#include <string>
#include <vector>

namespace splitcheck {

// The `merge` subcommand: loads, merges, writes with write_reports. Returns the merged
// report's exit code (0 conformant, 1 divergent), 2 on invalid input, 3 on a write failure.
int run_merge(const std::vector<std::string>& paths, const std::string& report_dir);

}  // namespace splitcheck
