// What an engine's dump shows of the partition it ran, and which dataset checks PP=1's dump
// gives evidence for: the rules the judge applies to an engine nobody here wrote, over the
// dump as the runner read it (harness/dump/loaded_dump.h).
#pragma once

#include <string>
#include <vector>

#include "harness/dump/loaded_dump.h"
#include "harness/judge/judge.h"
#include "harness/scenario/partition.h"

namespace splitcheck {

// Judges `d` against the partition asked (`part`, over `layers` layers): its /stages must
// hold one range per stage, equal to the partition's; its root `partition` attribute, when
// written, must name the same layout; its per-layer tensors must name no layer past the
// model's last, and at PP=1 (one stage) every layer; its dispatch trace's stages
// (/stage_trace/<f>, one per event of /forward/<f>/dispatch) must name no stage past the
// last, and each event of a layer must come from the stage that owns the layer.
PartitionEvidence partition_evidence(const LoadedDump& d, const Partition& part, int layers);

// The dataset checks of `selected` that the PP=1 dump gives evidence for; the others are
// appended to `not_judged`.
std::vector<std::string> judged_dataset_checks(const std::vector<std::string>& selected,
                                               const RunRecord& pp1,
                                               std::vector<NotJudged>& not_judged);

}  // namespace splitcheck
