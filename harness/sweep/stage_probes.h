// The stage checks' rules (harness/judge/stage_checks.h) asked of the built-in engine's own
// types: its stages' holdings under a partition, its drafter's binding, and the refusal
// probe reached through the real loading path (tests and the fault catalogue use them; the
// sweep judges through judge_stage_checks over recorded facts).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/dump/evidence.h"
#include "harness/judge/result.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"
#include "kernels/status.h"
#include "reference/weight_source.h"

namespace splitcheck {

// memory over the built-in engine's holdings of `partition` (no PP=1 bound).
std::vector<CheckFailure> check_memory(const Scenario& scenario, const Partition& partition,
                                       const std::vector<StageHoldings>& stages);

// embedding's placement rules over the built-in engine's holdings of `partition`.
std::vector<CheckFailure> check_embedding_placement(const Scenario& scenario,
                                                    const Partition& partition,
                                                    const std::vector<StageHoldings>& stages);

// embedding's identity rule over what the drafter was bound to. Nothing to check without a
// drafter that shares the embedding, or on a context-only producer.
std::optional<CheckFailure> check_drafter_identity(const Scenario& scenario,
                                                   const DrafterPlacement& drafter);

// embedding's refusal rule over `probe`, what the drafter-loading path said on stage
// `stage`, which does not hold the embedding: it must be the clear refusal.
std::optional<CheckFailure> check_refusal(const Scenario& scenario, int stage, const Status& probe);

// The refusal probe of a partition (add_refusal_probe) and the refusal rule over its answer.
std::optional<CheckFailure> check_refusal_reachable(const Scenario& scenario,
                                                    const Partition& partition,
                                                    WeightSource& source,
                                                    std::string* probe_answer = nullptr);

}  // namespace splitcheck
