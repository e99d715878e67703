// Partitions of the layer stack (SPEC 2.7) and their enumerations.
//
// A partition is 0 = b_0 < b_1 < ... < b_n = L; stage s runs layers [b_s, b_{s+1}).
// A planner can get that wrong (partition.remainder_dropped): from_ranges() keeps what it
// produced as it is, and ownership_problem() is the structural check that every layer is
// owned by exactly one stage, run before anything is built or compared.
// Its name is derived from its cuts ("split-12", "split-8-20") and is the filter key and
// the report key of the case.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/dump/evidence.h"
#include "harness/scenario/faults.h"
#include "harness/scenario/scenario.h"
#include "kernels/status.h"

namespace splitcheck {

class Partition {
 public:
  // Validates 0 = b_0 < ... < b_n = layers.
  static Result<Partition> make(std::vector<int> bounds, int layers);
  // The partition with these interior cuts.
  static Result<Partition> from_cuts(const std::vector<int>& cuts, int layers);
  // Stage ranges exactly as a planner produced them, unchecked: use ownership_problem()
  // before running it.
  static Partition from_ranges(std::vector<StageRange> ranges, int layers);

  int stages() const { return static_cast<int>(ranges_.size()); }
  StageRange stage(int s) const { return ranges_[s]; }
  // The stage ends of every stage but the last: the cut positions.
  std::vector<int> cuts() const;
  int layers() const { return layers_; }
  // Empty when every layer in [0, layers) is owned by exactly one stage and the stages
  // follow each other; otherwise which layers are owned by no stage or by two, e.g.
  // "layers 30-31 are owned by no stage".
  std::string ownership_problem() const;
  // "0-12|12-32": the dump attribute.
  std::string layout() const;
  // "split-12", "split-8-20", "pp1" for one stage: the case key.
  std::string key() const;

 private:
  std::vector<StageRange> ranges_;
  int layers_ = 0;
};

// Every partition a scenario asks for, in a fixed order:
//  all         pp=2: every split point 1..L-1; pp>=3: exhaustive when there are at most
//              kExhaustiveLimit partitions, otherwise pairwise.
//  list        the scenario's explicit cut lists.
//  exhaustive  every choice of pp-1 cuts.
//  pairwise    a greedy covering set in which every pair of cut positions {a < b}
//              occurs in some partition (every single position too); deterministic.
//  every-layer one stage per layer: every intermediate capture id is a stage end.
//  balanced    one partition with stage sizes differing by at most one (with the fault
//              partition.remainder_dropped: floor(L/pp) layers each, the rest dropped).
// More than kMaxPartitions partitions is refused (invalid_input) before any is built.
Result<std::vector<Partition>> enumerate_partitions(const PartitionSpec& spec, int layers,
                                                    const FaultSet& faults = {});

constexpr size_t kExhaustiveLimit = 200;

// The most partitions one enumeration may produce (a scenario asking for more is refused
// at load with the pointer /partitions/splits): C(L-1, pp-1) grows past any machine fast
// (C(255, 8) is about 4e14), and each partition is one full run of the model.
constexpr uint64_t kMaxPartitions = 10000;

// How many partitions `enumerate_partitions(spec, layers)` gives, without building them
// and without overflow: exact up to `cap`, and `cap + 1` for anything larger
// (C(L-1, pp-1) for exhaustive; the greedy cover is built, stopping past `cap`, for
// pairwise).
uint64_t partition_count(const PartitionSpec& spec, int layers, uint64_t cap = kMaxPartitions);

}  // namespace splitcheck
