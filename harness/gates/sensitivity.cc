#include "harness/gates/sensitivity.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "harness/scenario/faults.h"

namespace splitcheck {
namespace {

bool failed_check(const CaseResult& c, const std::string& check) {
  return std::find(c.failed_checks.begin(), c.failed_checks.end(), check) != c.failed_checks.end();
}

// Whether case `c` reports the fault through `check`: the check failed, or (config) the
// partition was refused at configuration.
bool caught_by(const CaseResult& c, const std::string& check) {
  return failed_check(c, check) || (check == "config" && c.verdict == Verdict::kConfigRejected);
}

}  // namespace

bool SensitivityTable::all_caught() const {
  if (rows.empty()) return false;
  return std::all_of(rows.begin(), rows.end(), [](const SensitivityRow& r) {
    const bool delta_ok =
        r.fault != "handoff.no_zero_delta" ||
        (r.non_aligned_dispatch == r.non_aligned && r.aligned_identical == r.aligned);
    return r.caught_as_specified && r.false_alarms == 0 && r.fixed_split_points > 0 && delta_ok;
  });
}

std::vector<std::string> committed_fault_scenarios() {
  std::vector<std::string> paths;
  const std::filesystem::path dir = std::filesystem::path(SPLITCHECK_SOURCE_DIR) / "scenarios";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("fault-", 0) == 0 && entry.path().extension() == ".json")
      paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

Result<SensitivityTable> fault_sensitivity(const std::vector<std::string>& scenario_paths,
                                           const std::vector<uint64_t>& seeds,
                                           const SweepOptions& options) {
  SensitivityTable table;
  table.seeds = seeds;
  // The table reads the split points' verdicts only; serving each request alone at PP=1
  // (a serving sweep's costliest part) tells it nothing.
  SweepOptions sweep_options = options;
  sweep_options.requests_alone = false;
  // Fixed-protocol sweeps already run, by the resolved scenario without its name,
  // description and expect: several fault scenarios share one fixed protocol.
  std::map<std::string, std::pair<int, int>> fixed_runs;
  for (const std::string& path : scenario_paths) {
    ASSIGN_OR_RETURN(Scenario base, load_scenario(path));
    if (base.faults.empty())
      return invalid_input(fmt::format("{}: /faults: a fault scenario enables no fault", path));
    const FaultInfo* info = find_fault(base.faults.front());
    if (info == nullptr) return invalid_input(fmt::format("{}: /faults/0: unknown fault", path));
    for (uint64_t seed : seeds) {
      SensitivityRow row;
      row.scenario = base.name;
      row.fault = base.faults.front();
      row.check = std::string(info->caught_by);
      row.seed = seed;
      Scenario faulty = base;
      faulty.model.seed = seed;
      faulty.expect = nlohmann::json::object();
      ASSIGN_OR_RETURN(SweepResult r, run_sweep(faulty, sweep_options),
                       fmt::format("{} at seed {}", path, seed));
      row.split_points = static_cast<int>(r.cases.size());
      const int block = faulty.model.attn_res_block_size;
      for (const CaseResult& c : r.cases) {
        if (c.verdict == Verdict::kError)
          return internal_error(fmt::format("{} at seed {}: {}: {}", path, seed, c.key, c.message));
        const bool caught = caught_by(c, row.check);
        row.caught += caught;
        row.failing += c.verdict != Verdict::kPass;
        row.failing_elsewhere += c.verdict != Verdict::kPass && !caught;
        if (row.fault == "handoff.no_zero_delta") {
          // A non-first stage starts off a block boundary at some cut: its first layer is
          // the one the fault touches.
          const bool aligned =
              std::all_of(c.cuts.begin(), c.cuts.end(), [&](int b) { return b % block == 0; });
          if (aligned) {
            ++row.aligned;
            row.aligned_identical += c.verdict == Verdict::kPass;
          } else {
            ++row.non_aligned;
            row.non_aligned_dispatch += failed_check(c, "dispatch");
            row.non_aligned_numeric += failed_check(c, "tensors");
          }
        }
      }
      row.caught_as_specified = row.caught > 0 && row.failing_elsewhere == 0;

      Scenario fixed = faulty;
      fixed.faults.clear();
      nlohmann::json identity = resolved_scenario_json(fixed);
      for (const char* k : {"name", "description", "expect"}) identity.erase(k);
      auto [it, fresh] = fixed_runs.try_emplace(identity.dump());
      if (fresh) {
        ASSIGN_OR_RETURN(SweepResult f, run_sweep(fixed, sweep_options),
                         fmt::format("{} without its fault at seed {}", path, seed));
        it->second.first = static_cast<int>(f.cases.size());
        for (const CaseResult& c : f.cases) it->second.second += c.verdict != Verdict::kPass;
      }
      row.fixed_split_points = it->second.first;
      row.false_alarms = it->second.second;
      table.rows.push_back(std::move(row));
    }
  }
  return table;
}

std::string sensitivity_table_text(const SensitivityTable& t) {
  std::string out =
      "| fault | check (SPEC 6) | seed | caught | failing elsewhere | non-aligned cuts: "
      "dispatch / numeric | aligned identical | fixed protocol: false alarms |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const SensitivityRow& r : t.rows) {
    std::string delta = "";
    std::string aligned = "";
    if (r.fault == "handoff.no_zero_delta") {
      delta = fmt::format("{}/{} / {}/{}", r.non_aligned_dispatch, r.non_aligned,
                          r.non_aligned_numeric, r.non_aligned);
      aligned = fmt::format("{}/{}", r.aligned_identical, r.aligned);
    }
    out +=
        fmt::format("| `{}` | {} | {} | {}/{}{} | {} | {} | {} | {}/{} |\n", r.fault, r.check,
                    r.seed, r.caught, r.split_points, r.caught_as_specified ? "" : " (NOT caught)",
                    r.failing_elsewhere, delta, aligned, r.false_alarms, r.fixed_split_points);
  }
  return out;
}

}  // namespace splitcheck
