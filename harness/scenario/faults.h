// The fault registry: SPEC 6's historical bugs, each a scenario switch.
//
// Every fault the harness knows is one row of `fault_registry()`; engines ask a
// `FaultSet` whether a fault is on, and the report checks that a faulty run fails the
// check named in `caught_by`. Adding a fault is one row here plus the code it switches.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace splitcheck {

// One row of SPEC 6's fault catalogue.
struct FaultInfo {
  std::string_view id;         // scenario key, e.g. "handoff.no_zero_delta"
  std::string_view restores;   // the historical behaviour the fault brings back
  std::string_view caught_by;  // the check (checks.h) whose failure must report it
  std::string_view expected;   // what the harness must report, in SPEC 6's words
};

// Every fault, in SPEC 6's order.
std::span<const FaultInfo> fault_registry();

// The row for `id`, or nullptr when no fault has that id.
const FaultInfo* find_fault(std::string_view id);

// The faults a scenario enables (ids already validated against the registry).
//   FaultSet faults{scenario.faults};
//   if (faults.has("handoff.no_zero_delta")) { ... }
struct FaultSet {
  std::vector<std::string> ids;

  // True when fault `id` is enabled.
  bool has(std::string_view id) const;
  // True when no fault is enabled (the fixed protocol).
  bool empty() const { return ids.empty(); }
};

}  // namespace splitcheck
