// The checks of SPEC 5.4, per stage: what each stage holds (memory, measured), which
// embedding the drafter is bound to (identity, the same storage), and whether a missing
// drafter embedding is refused (a refusal reached through the real loading path).
//
// ONE rule set, judge_stage_checks, decides them from a run's stage facts
// (harness/dump/stage_facts.h): the built-in sweep reads them from its run's record and the
// runner from an engine's dump, through the same reader. Each failure names its row of the
// check registry (checks.h) and carries a one-line message; what the facts cannot show is
// listed as not judged, never passed. The functions after it are the same rules asked of
// the built-in engine's own types (tests and the fault catalogue's probes).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/dump/stage_facts.h"
#include "harness/engine/generation.h"
#include "harness/engine/stage.h"
#include "harness/judge/external_run.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"

namespace splitcheck {

// One failed check: the registry's name ("memory", "embedding") and a one-line message.
struct CheckFailure {
  std::string check;
  std::string message;
};

// What the stage checks found of one case: the failures, the selected stage checks its
// facts cannot judge (with the reason), and whether a selected stage check was judged.
struct StageJudgement {
  std::vector<CheckFailure> failures;
  std::vector<NotJudged> not_judged;
  bool judged = false;
};

// memory and embedding, where `selected` names them, from the case's facts (`run`) and
// PP=1's (`pp1`, whose parameter bytes bound the case's total). The rules, each failing
// its check on its own (where the built-in and the runner once differed, both apply):
//  memory, judged when every stage records parameter_bytes and placed_parameter_bytes:
//   - a stage holds other than the bytes its placement gives it (the extra or missing
//     bytes measured; an unneeded embedding copy named as such);
//   - a stage holds an embedding copy its placement does not give it (whatever its bytes);
//   - the stages together hold fewer bytes than PP=1 (weights not loaded), also where the
//     per-stage bytes are not recorded (then memory is also listed as not judged);
//   - a stage records more distinct storages than tensors;
//  embedding, judged when the run records /stages:
//   - stage 0 holds no real embedding; another stage holds a real one; a stage holds none
//     where its placement gives it one; a non-first stage holds a drafter's copy where no
//     drafter ran (when the placement is not recorded);
//   - a drafter (on a stage its placement gives an embedding) bound to anything but the
//     target's embedding, to another storage (drafter_same_object_as_target 0), or whose
//     storage labels contradict the binding it claims;
//   - a refusal probe whose answer is not the clear refusal (is_clear_refusal), or that
//     claims refusal_clear against what its answer says.
StageJudgement judge_stage_checks(const std::vector<std::string>& selected,
                                  const StageEvidence& run, const StageEvidence& pp1);

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
