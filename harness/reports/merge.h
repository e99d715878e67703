// `splitcheck merge`: joins the reports of a sharded sweep (`sweep --shard i/N --report
// dirI`) into the report an unsharded run writes.
//
// Each input must be a sweep report.json of this format version, and all must share the
// scenario's sha256. Cases are joined and ordered by their enumeration `index`; duplicate
// keys or indices are refused, and missing split points are found by re-enumerating the
// partitions of `scenario.resolved` (restricted to the shards' `--filter`, if any). The
// counts, verdict, exit code and `expect.failures` are recomputed from the joined cases.
//
// Volatile fields are not reproducible and are combined, not compared: `timing.pp1_seconds`
// and `timing.threads` take the maximum over the shards, `timing.total_seconds` the sum
// (the work done, not the wall clock), `timing.shards` the number of reports merged, and
// `cases[].seconds` are kept per case. `command` is the first shard's command with
// `--shard` dropped and `--report` pointing at the merged directory.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

// Reads and validates one report.json; errors name the file (and the parse position).
Result<nlohmann::json> load_report(const std::string& path);

// Merges parsed shard reports (`paths` name them in errors). `report_dir` is the
// directory the merged report goes to, used to rebuild `command`.
Result<nlohmann::json> merge_reports(const std::vector<nlohmann::json>& reports,
                                     const std::vector<std::string>& paths,
                                     const std::string& report_dir);

}  // namespace splitcheck
