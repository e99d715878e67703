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

// Which partitions a fault can change: where a sweep must look to see it caught, and where
// it must stay silent (a partition it cannot reach is bit-identical to PP=1).
enum class FaultReach {
  kEveryPartition,    // every partition of more than one stage
  kTapAtStageEnd,     // those where a capture id equals a non-last stage's end
  kOffBlockBoundary,  // those where a non-first stage starts off an AttnRes block boundary
  kPartitionPlan,     // the planning of partitions itself (which ones are enumerated)
};

// One row of SPEC 6's fault catalogue.
struct FaultInfo {
  std::string_view id;         // scenario key, e.g. "handoff.no_zero_delta"
  std::string_view restores;   // the historical behaviour the fault brings back
  std::string_view caught_by;  // the check (checks.h) whose failure must report it
  std::string_view expected;   // what the harness must report, in SPEC 6's words
  FaultReach reach = FaultReach::kEveryPartition;
};

// Every fault, in SPEC 6's order.
std::span<const FaultInfo> fault_registry();

// The row for `id`, or nullptr when no fault has that id.
const FaultInfo* find_fault(std::string_view id);

// Whether a fault of `reach` can change the partition with interior cuts `cuts` of a model
// whose AttnRes blocks have `block_size` layers and whose taps are at `capture_ids`
// (kPartitionPlan: every partition, the plan being what it changes).
bool fault_reaches(FaultReach reach, std::span<const int> cuts, int block_size,
                   std::span<const int> capture_ids);

// The PP=2 split points (1..layers-1) that stand for all of them in showing a fault of
// `reach` caught and silent elsewhere: the first split point of each class the code under
// test tells apart, a class being whether the fault reaches it, whether it is on a block
// boundary, whether a capture id is there, and whether a stage of one layer is first or
// last. For k3-tiny (32 layers, blocks of 8, taps at 7, 16, 25): 1, 2, 7, 8, 16, 31.
std::vector<int> representative_split_points(FaultReach reach, int layers, int block_size,
                                             std::span<const int> capture_ids);

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
