#include "harness/cli/merge_cli.h"

#include <fmt/format.h>

#include "harness/reports/merge.h"
#include "harness/reports/report.h"

namespace splitcheck {

int run_merge(const std::vector<std::string>& paths, const std::string& report_dir) {
  std::vector<nlohmann::json> reports;
  for (const std::string& p : paths) {
    Result<nlohmann::json> r = load_report(p);
    if (!r.is_ok()) {
      fmt::print(stderr, "splitcheck: error: {}\n", r.status().message());
      return 2;
    }
    reports.push_back(std::move(*r));
  }
  Result<nlohmann::json> merged = merge_reports(reports, paths, report_dir);
  if (!merged.is_ok()) {
    fmt::print(stderr, "splitcheck: error: {}\n", merged.status().message());
    return merged.status().code() == StatusCode::kInvalidInput ? 2 : 3;
  }
  const nlohmann::json& m = *merged;
  const auto& c = m["counts"];
  fmt::print(
      "merge: {} reports, {} split points: {} pass, {} diverged, {} config-rejected, {} "
      "error, {} skipped; verdict {}\n",
      paths.size(), c["total"].get<int64_t>(), c["pass"].get<int64_t>(),
      c["diverged"].get<int64_t>(), c["config_rejected"].get<int64_t>(), c["error"].get<int64_t>(),
      c["skipped"].get<int64_t>(), m["verdict"].get<std::string>());
  for (const auto& f : m["expect"]["failures"])
    fmt::print("expect: NOT MET: {}\n", f.get<std::string>());
  Status st = write_reports(report_dir, m);
  if (!st.is_ok()) {
    fmt::print(stderr, "splitcheck: error: {}\n", st.message());
    return st.code() == StatusCode::kInvalidInput ? 2 : 3;
  }
  fmt::print("report: {}/report.json\n", report_dir);
  return m["exit_code"].get<int>();
}

}  // namespace splitcheck
