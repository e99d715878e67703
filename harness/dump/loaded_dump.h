// One dump as the runner read it (harness/runner/engine_dump.h: load_dump): its records,
// what its stages say they hold, its speculative figures and its own word on itself; what
// the judge reads of an engine nobody here wrote (harness/judge/partition_evidence.h).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/dump/evidence.h"
#include "reference/record.h"

namespace splitcheck {

// One dump, read and checked. Datasets over 16 MiB are read once here (their digests
// checked) and kept in `record` as StoredTensors (reference/record.h) that the judge's
// comparison streams from the file again, so the dump's file must stay in place while it
// is judged; smaller datasets and dispatch traces are held in memory.
struct LoadedDump {
  RunRecord record;
  // Its /stages (empty when it carries none), as the partition's evidence reads them; every
  // attribute of /stages/<s> is also in record's attributes (stages/<s>), where the stage
  // checks read their facts (harness/dump/stage_facts.h: stage_evidence_of).
  std::vector<StageHoldings> stages;
  AcceptanceFigures acceptance;
  std::map<std::string, std::string> root;  // root attributes as text (producer, partition, ...)
  std::set<int32_t> layers;                 // the layers of /forward/<f>/layers/<l> datasets
  // Over every dataset's path, dtype, shape and bytes, in order: PP=1's only (the report's
  // identity), empty for a case.
  std::string content_sha256;
  uintmax_t file_size = 0;
  std::string file_sha256;  // of the file's bytes: PP=1's only (a case's is taken when needed)
  std::string kernels;      // a dispatch dataset's `kernels` attribute (names by code)
};

}  // namespace splitcheck
