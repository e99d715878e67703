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
    return r.caught_as_specified && r.false_alarms == 0 && r.fixed_split_points > 0 &&
           r.unreached_identical == r.unreached && delta_ok;
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

namespace {

// One committed fault scenario, read, with its fault's row in the registry.
struct FaultCase {
  std::string path;
  Scenario scenario;
  const FaultInfo* info = nullptr;
};

// Reads each fault scenario; with kRepresentative, a PP=2 sweep of every split point is
// narrowed to the representative ones of the fault's reach.
Result<std::vector<FaultCase>> load_fault_cases(const std::vector<std::string>& scenario_paths,
                                                SensitivitySplits splits) {
  std::vector<FaultCase> faults;
  for (const std::string& path : scenario_paths) {
    ASSIGN_OR_RETURN(Scenario base, load_scenario(path));
    if (base.faults.empty())
      return invalid_input(fmt::format("{}: /faults: a fault scenario enables no fault", path));
    const FaultInfo* info = find_fault(base.faults.front());
    if (info == nullptr) return invalid_input(fmt::format("{}: /faults/0: unknown fault", path));
    if (splits == SensitivitySplits::kRepresentative && base.partitions.pp == 2 &&
        base.partitions.mode == "all") {
      base.partitions.mode = "list";
      base.partitions.cuts.clear();
      for (int cut : representative_split_points(info->reach, base.model.num_hidden_layers,
                                                 base.model.attn_res_block_size, base.capture_ids))
        base.partitions.cuts.push_back({cut});
    }
    faults.push_back({path, std::move(base), info});
  }
  return faults;
}

// Tallies the faulty sweep `r` into `row`: caught by the fault's check, failing elsewhere,
// caught where the fault reaches and identical where it cannot, and for
// handoff.no_zero_delta the block-aligned cuts against the others.
Status tally_faulty_sweep(const FaultCase& fault, const Scenario& faulty, const SweepResult& r,
                          SensitivityRow& row) {
  row.split_points = static_cast<int>(r.cases.size());
  const int block = faulty.model.attn_res_block_size;
  for (const CaseResult& c : r.cases) {
    if (c.verdict == Verdict::kError)
      return internal_error(
          fmt::format("{} at seed {}: {}: {}", fault.path, row.seed, c.key, c.message));
    const bool caught = caught_by(c, row.check);
    row.caught += caught;
    row.failing += c.verdict != Verdict::kPass;
    row.failing_elsewhere += c.verdict != Verdict::kPass && !caught;
    if (fault_reaches(fault.info->reach, c.cuts, block, faulty.capture_ids)) {
      ++row.reached;
      row.reached_caught += caught;
    } else {
      ++row.unreached;
      row.unreached_identical += c.verdict == Verdict::kPass;
    }
    if (row.fault == "handoff.no_zero_delta") {
      // A non-first stage starts off a block boundary at some cut: its first layer is the
      // one the fault touches.
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
  return Status::ok();
}

// What one fixed protocol at one seed shares: its weights and its PP=1 (keyed by the
// resolved scenario without name, description, expect, faults and partitions), and its
// sweeps (keyed with the partitions: several fault scenarios share one fixed protocol).
struct Protocol {
  std::unique_ptr<WeightSource> weights;
  ReferenceRun pp1;
};
struct SeedRuns {
  std::map<std::string, Protocol> protocols;
  std::map<std::string, std::pair<int, int>> fixed_runs;  // split points, false alarms
};

// One row: the fault's sweep at `seed` against its fixed protocol's shared PP=1, and the
// fixed protocol's own sweep (its false alarms), run once per protocol and partitions.
Result<SensitivityRow> sensitivity_row(const FaultCase& fault, uint64_t seed,
                                       const SweepOptions& options, SeedRuns& runs) {
  SensitivityRow row;
  row.scenario = fault.scenario.name;
  row.fault = fault.scenario.faults.front();
  row.check = std::string(fault.info->caught_by);
  row.seed = seed;
  Scenario faulty = fault.scenario;
  faulty.model.seed = seed;
  faulty.expect = nlohmann::json::object();
  Scenario fixed = faulty;
  fixed.faults.clear();
  nlohmann::json identity = resolved_scenario_json(fixed);
  for (const char* k : {"name", "description", "expect"}) identity.erase(k);
  const std::string fixed_key = identity.dump();
  identity.erase("partitions");
  auto [protocol, fresh_protocol] = runs.protocols.try_emplace(identity.dump());
  if (fresh_protocol) {
    protocol->second.weights = scenario_weight_source(fixed);
    ASSIGN_OR_RETURN(protocol->second.pp1, run_reference(fixed, *protocol->second.weights),
                     fmt::format("{} without its fault at seed {}: PP=1", fault.path, seed));
  }
  SweepOptions shared = options;
  shared.weights = protocol->second.weights.get();
  shared.reference = &protocol->second.pp1;
  ASSIGN_OR_RETURN(SweepResult r, run_sweep(faulty, shared),
                   fmt::format("{} at seed {}", fault.path, seed));
  RETURN_IF_ERROR(tally_faulty_sweep(fault, faulty, r, row));
  auto [it, fresh] = runs.fixed_runs.try_emplace(fixed_key);
  if (fresh) {
    ASSIGN_OR_RETURN(SweepResult f, run_sweep(fixed, shared),
                     fmt::format("{} without its fault at seed {}", fault.path, seed));
    it->second.first = static_cast<int>(f.cases.size());
    for (const CaseResult& c : f.cases) it->second.second += c.verdict != Verdict::kPass;
  }
  row.fixed_split_points = it->second.first;
  row.false_alarms = it->second.second;
  return row;
}

}  // namespace

Result<SensitivityTable> fault_sensitivity(const std::vector<std::string>& scenario_paths,
                                           const std::vector<uint64_t>& seeds,
                                           const SweepOptions& options, SensitivitySplits splits) {
  SensitivityTable table;
  table.seeds = seeds;
  ASSIGN_OR_RETURN(std::vector<FaultCase> faults, load_fault_cases(scenario_paths, splits));
  // The table reads the split points' verdicts only; serving each request alone at PP=1
  // (a serving sweep's costliest part) tells it nothing.
  SweepOptions sweep_options = options;
  sweep_options.requests_alone = false;
  for (uint64_t seed : seeds) {
    SeedRuns runs;
    for (const FaultCase& fault : faults) {
      ASSIGN_OR_RETURN(SensitivityRow row, sensitivity_row(fault, seed, sweep_options, runs));
      table.rows.push_back(std::move(row));
    }
  }
  // One row per scenario and seed, in the order of the scenarios, then of the seeds.
  std::vector<SensitivityRow> rows;
  for (size_t f = 0; f < faults.size(); ++f)
    for (size_t s = 0; s < seeds.size(); ++s)
      rows.push_back(std::move(table.rows[s * faults.size() + f]));
  table.rows = std::move(rows);
  return table;
}

std::string sensitivity_table_text(const SensitivityTable& t) {
  std::string out =
      "| fault | check (SPEC 6) | seed | caught | failing elsewhere | non-aligned cuts: "
      "dispatch / numeric | aligned identical | unreached identical | fixed protocol: false "
      "alarms |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  for (const SensitivityRow& r : t.rows) {
    std::string delta = "";
    std::string aligned = "";
    if (r.fault == "handoff.no_zero_delta") {
      delta = fmt::format("{}/{} / {}/{}", r.non_aligned_dispatch, r.non_aligned,
                          r.non_aligned_numeric, r.non_aligned);
      aligned = fmt::format("{}/{}", r.aligned_identical, r.aligned);
    }
    out += fmt::format(
        "| `{}` | {} | {} | {}/{}{} | {} | {} | {} | {}/{} | {}/{} |\n", r.fault, r.check, r.seed,
        r.caught, r.split_points, r.caught_as_specified ? "" : " (NOT caught)", r.failing_elsewhere,
        delta, aligned, r.unreached_identical, r.unreached, r.false_alarms, r.fixed_split_points);
  }
  return out;
}

}  // namespace splitcheck
