// Fault sensitivity (issue 14): every committed fault scenario swept at several model
// seeds, each fault judged against the check SPEC 6 names for it (faults.h), and the same
// scenarios with their faults switched off (the fixed protocol) swept at the same seeds,
// where any split point that is not bit-identical is a false alarm.
//
//   ASSIGN_OR_RETURN(SensitivityTable t, fault_sensitivity(paths, {1234, 7, 99}, {}));
//   std::puts(sensitivity_table_text(t).c_str());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/sweep/sweep.h"

namespace splitcheck {

// One fault scenario at one seed.
struct SensitivityRow {
  std::string scenario;       // its name
  std::string fault;          // the fault it switches on (its first, when several)
  std::string check;          // the check SPEC 6 names (FaultInfo::caught_by)
  uint64_t seed = 0;          // model.seed of this row
  int split_points = 0;       // cases of the faulty sweep
  int caught = 0;             // cases where the named check failed (or config-rejected, for config)
  int failing = 0;            // cases that are not a pass
  int failing_elsewhere = 0;  // cases that failed without the named check failing
  // Whether the fault is caught as SPEC 6 asks: at least one case caught, and every case
  // that failed names the check.
  bool caught_as_specified = false;
  // handoff.no_zero_delta only: cuts off the block boundaries, and how many of them
  // failed the dispatch check and the tensors (numeric) check.
  int non_aligned = 0, non_aligned_dispatch = 0, non_aligned_numeric = 0;
  int aligned = 0, aligned_identical = 0;  // block-aligned cuts, and those identical
  // The cases the fault can reach (FaultInfo::reach) and those caught there; the cases it
  // cannot reach, and those identical to PP=1 (a fault is silent where it cannot reach).
  int reached = 0, reached_caught = 0;
  int unreached = 0, unreached_identical = 0;
  // The fixed protocol (the same scenario, no fault) at this seed.
  int fixed_split_points = 0;
  int false_alarms = 0;  // fixed-protocol cases that are not a pass
};

struct SensitivityTable {
  std::vector<uint64_t> seeds;
  std::vector<SensitivityRow> rows;
  // Whether every row is caught as specified with zero false alarms, every case the
  // fault cannot reach identical to PP=1 (and, for handoff.no_zero_delta, every
  // non-aligned cut fails dispatch and every aligned cut is identical).
  bool all_caught() const;
};

// Which split points the table sweeps.
enum class SensitivitySplits {
  kScenario,  // every partition the scenario asks for
  // A PP=2 scenario of every split point at its representative_split_points (faults.h)
  // for its fault's reach: one per class of split point, reached and not; any other
  // scenario at its own partitions.
  kRepresentative,
};

// Sweeps every scenario of `scenario_paths` (each must enable a fault) at each seed of
// `seeds` (overriding model.seed), with and without its faults. `options` is used for
// every sweep (threads). PP=1 runs once per seed and fixed protocol (the scenario without
// its faults), over one weight source, and every faulty and fixed sweep of that protocol
// is judged against it. A scenario that cannot be loaded or swept is an error.
Result<SensitivityTable> fault_sensitivity(const std::vector<std::string>& scenario_paths,
                                           const std::vector<uint64_t>& seeds,
                                           const SweepOptions& options,
                                           SensitivitySplits splits = SensitivitySplits::kScenario);

// The committed fault scenarios: every scenarios/fault-*.json of the source tree, sorted.
std::vector<std::string> committed_fault_scenarios();

// The table as Markdown, one row per scenario and seed.
std::string sensitivity_table_text(const SensitivityTable& table);

}  // namespace splitcheck
