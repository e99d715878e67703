// Per-stage part files joined into one dump, in execution order (docs/external-engines.md,
// "Per-stage writers"; python/splitcheck_dump/parts.py writes the parts and joins them
// the same way).
//
// A part is a dump restricted to what one stage of a run computed, whose root also holds
// part_format ("splitcheck.dump-part"), part_format_version, part_run (the run id),
// part_stage, part_stages, part_layer_begin and part_layer_end, and whose datasets hold
// their position: part_segment (the forward), part_rank and part_joined. The dump lists
// the datasets by (segment, rank, stage, the part's own order); a joined dataset
// (dispatch, stage_trace) is one dataset of every stage's rows in stage order.
//
//   ASSIGN_OR_RETURN(AssembleSummary s, assemble_parts({"p0.h5", "p1.h5"}, "run.h5"));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

inline constexpr const char* kPartFormat = "splitcheck.dump-part";
inline constexpr int64_t kPartFormatVersion = 1;

// What assemble_parts wrote.
struct AssembleSummary {
  std::string run;     // the parts' part_run
  int64_t stages = 0;  // one part each
  size_t datasets = 0;
};

// Joins the part files `parts` (any order) into one dump at `out`. Refuses, with
// kInvalidInput naming the file and what, files that are not parts (or not dumps), parts
// of different runs, formats or stage counts, a stage given twice or missing, layer
// ranges that overlap or leave a gap, a layer outside its part's range, a dataset two
// parts both hold (other than a joined one), attributes the parts disagree on (root
// attributes but `created`, which is stage 0's), an attribute that is not a string, an
// integer or a float, and bytes that do not match their digest. The dump is built at
// `out + ".partial"` and renamed: after any error nothing is at `out` that was not there
// before. Groups that hold neither attributes nor datasets are not carried.
Result<AssembleSummary> assemble_parts(const std::vector<std::string>& parts,
                                       const std::string& out);

}  // namespace splitcheck
