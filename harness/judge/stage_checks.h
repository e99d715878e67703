// The checks of SPEC 5.4, per stage: what each stage holds (memory, measured), which
// embedding the drafter is bound to (identity, the same storage), and whether a missing
// drafter embedding is refused (a refusal reached through the real loading path).
//
// Each returns the failures it finds, each naming its row of the check registry
// (checks.h) and carrying a one-line message; no failure means the check passed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/engine/generation.h"
#include "harness/engine/stage.h"
#include "harness/judge/result.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"

namespace splitcheck {

// memory: each stage's parameter bytes, measured from what it holds, against the bytes of
// exactly the tensors the placement rule gives it (placed_parameter_bytes). A stage that
// holds more fails with the measured extra bytes (a producer's embedding copy: V x H x 2);
// one that holds less fails with the bytes it lacks.
std::vector<CheckFailure> check_memory(const Scenario& scenario, const Partition& partition,
                                       const std::vector<StageHoldings>& stages);

// embedding: a stage that the placement rule gives the embedding (the first stage, and
// the drafter's stage when its method shares it) but that does not hold it.
std::vector<CheckFailure> check_embedding_placement(const Scenario& scenario,
                                                    const Partition& partition,
                                                    const std::vector<StageHoldings>& stages);

// embedding: the drafter must be bound to the target's embedding object, the same storage
// as its stage's embed_tokens (a copy with equal values fails). Nothing to check without
// a drafter that shares the embedding, or on a context-only producer.
std::optional<CheckFailure> check_drafter_identity(const Scenario& scenario,
                                                   const DrafterPlacement& drafter);

// embedding: `probe` is what the drafter-loading path said on stage `stage`, which does
// not hold the embedding (probe_drafter_load). It must be the clear refusal: a load error
// naming the stage and the method. Anything else (an internal error, an accepted
// placeholder) is an unreachable refusal.
std::optional<CheckFailure> check_refusal(const Scenario& scenario, int stage, const Status& probe);

// The refusal probe of a partition: builds, through Stage::create over `source`, the
// partition's last stage placed without the embedding (as a run with no drafter places
// it), loads the scenario's drafter there (probe_drafter_load) and checks the answer
// (check_refusal). Nothing to check without a drafter that shares the embedding, at PP=1,
// or on a context-only producer.
std::optional<CheckFailure> check_refusal_reachable(const Scenario& scenario,
                                                    const Partition& partition,
                                                    WeightSource& source,
                                                    std::string* probe_answer = nullptr);

}  // namespace splitcheck
