// What an external engine's dump shows, read and checked: its datasets in execution
// order, what its stages say they hold, its speculative figures; and the evidence the
// runner takes from it for the judge (harness/judge/judge.h): the stage checks' findings,
// the partition it shows against the one asked, whether the file is its own run, and which
// dataset checks PP=1's dump gives evidence for. Each figure is read from the file, and what
// the file cannot show is listed as not judged; but the file is the engine's own record of
// its run. Evidence here is records that contradict each other or the partition asked (its
// /stages, its `partition` attribute, its layers, its dispatch trace's stages); an engine
// that fabricates every record consistently is beyond any check of its dump. What rests on
// splitcheck alone is that the file is this run's (harness/sweep/external_sweep.h).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "harness/engine/generation.h"
#include "harness/engine/stage.h"
#include "harness/judge/judge.h"
#include "harness/scenario/partition.h"
#include "kernels/status.h"
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

// Reads and verifies `path` (layout, every digest, the dispatch trace's shape).
// `reference`: PP=1's dump, whose file and content digests the runner keeps.
Result<LoadedDump> load_dump(const std::string& path, bool reference = false);

// Judges `d` against the partition asked (`part`, over `layers` layers): its /stages must
// hold one range per stage, equal to the partition's; its root `partition` attribute, when
// written, must name the same layout; its per-layer tensors must name no layer past the
// model's last, and at PP=1 (one stage) every layer; its dispatch trace's stages
// (/stage_trace/<f>, one per event of /forward/<f>/dispatch) must name no stage past the
// last, and each event of a layer must come from the stage that owns the layer.
PartitionEvidence partition_evidence(const LoadedDump& d, const Partition& part, int layers);

// What shows that the case's dump file is not its own run: a symbolic link, the PP=1 dump's
// file itself (a hard link), or a byte-for-byte copy of it under another partition.
std::vector<std::string> file_identity_problems(const std::string& dump, const LoadedDump& d,
                                                const std::string& pp1_dump, const LoadedDump& pp1,
                                                int stages);

// The dataset checks of `selected` that the PP=1 dump gives evidence for; the others are
// appended to `not_judged`.
std::vector<std::string> judged_dataset_checks(const std::vector<std::string>& selected,
                                               const RunRecord& pp1,
                                               std::vector<NotJudged>& not_judged);

}  // namespace splitcheck
