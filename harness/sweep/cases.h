// The cases of a sweep, for every engine: the scenario's partitions enumerated, those this
// run takes (its shard, its filter), each case's place in the enumeration (the index every
// report form and merge order cases by), and the refusal of a selection that leaves no case.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/judge/result.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"
#include "kernels/status.h"

namespace splitcheck {

struct SweepCases {
  size_t enumerated = 0;              // every partition the scenario enumerates
  std::vector<Partition> partitions;  // those this run takes, in enumeration order
  std::vector<int64_t> index;         // each one's place in the enumeration
};

// Enumerates the scenario's partitions and takes those with position % shard_count ==
// shard_index whose key contains `filter` (empty: every key). A selection of none is
// invalid input naming the file, the shard or filter and the count: a sweep that compares
// nothing proves nothing.
Result<SweepCases> select_cases(const Scenario& s, int shard_index, int shard_count,
                                const std::string& filter);

// Gives each case of `cases` (one per partition taken, in order) its place in the
// enumeration.
void index_cases(const SweepCases& taken, std::vector<CaseResult>& cases);

}  // namespace splitcheck
