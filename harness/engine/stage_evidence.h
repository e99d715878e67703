// The facts the built-in engine records of its stages (harness/dump/stage_facts.h), the
// same for `splitcheck run`'s dump and the built-in sweep's record: what each stage holds,
// measured, beside what the placement rule gives it (computed from the scenario with no
// fault, SPEC 2.6-2.7), the drafter's embedding, and the refusal probe's answer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/dump/stage_facts.h"
#include "harness/engine/generation.h"
#include "harness/engine/stage.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"

namespace splitcheck {

// Every stage of `partition`: its holdings (measured), what the placement rule gives it,
// and on the drafter's stage what the drafter was bound to (`drafter`, "none": no drafter).
std::vector<StageFacts> partition_stage_facts(const Scenario& scenario, const Partition& partition,
                                              const std::vector<StageHoldings>& holdings,
                                              const DrafterPlacement& drafter);

// PP=1's one stage: every layer, the weights the reference engine holds, its drafter.
StageFacts pp1_stage_facts(const Scenario& scenario, const WeightStore& weights,
                           const DrafterPlacement& drafter);

// The refusal probe of a partition: builds, through Stage::create over `source`, its last
// stage placed without the embedding (as a run with no drafter places it), loads the
// scenario's drafter there (probe_drafter_load) and records the answer on that stage's
// facts (refusal_probe, refusal_status, refusal_clear). Nothing is recorded without a
// drafter that shares the embedding, at PP=1, or on a context-only producer.
void add_refusal_probe(const Scenario& scenario, const Partition& partition, WeightSource& source,
                       std::vector<StageFacts>& facts);

// A status code's word in a dump: "ok", "invalid-input", "internal-error", "config-rejected".
std::string status_word(StatusCode code);

}  // namespace splitcheck
