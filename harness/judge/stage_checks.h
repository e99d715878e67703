// The checks of SPEC 5.4, per stage: what each stage holds (memory, measured), which
// embedding the drafter is bound to (identity, the same storage), and whether a missing
// drafter embedding is refused (a refusal reached through the real loading path).
//
// ONE rule set, judge_stage_checks, decides them from a run's stage facts
// (harness/dump/stage_facts.h): the built-in sweep reads them from its run's record and the
// runner from an engine's dump, through the same reader. Each failure names its row of the
// check registry (checks.h) and carries a one-line message; what the facts cannot show is
// listed as not judged, never passed. The same rules over the built-in engine's own types
// are in harness/sweep/stage_probes.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/dump/stage_facts.h"
#include "harness/judge/external_run.h"
#include "harness/judge/result.h"

namespace splitcheck {

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
//     claims refusal_clear against what its answer says;
//   - tied weights (tied_head_rule): PP=1's head is the embedding's storage (head_tied 1)
//     and a stage's head is not, or no stage records its head: "head not tied to the
//     embedding", that failure's own cause.
StageJudgement judge_stage_checks(const std::vector<std::string>& selected,
                                  const StageEvidence& run, const StageEvidence& pp1);

// The rules judge_stage_checks applies to one stage, asked on their own (the built-in
// engine's probes, harness/sweep/stage_probes.h): embedding's placement rule (drafter_ran:
// a drafter ran, so a non-first stage may hold its copy), the drafter's identity, and the
// refusal probe's answer.
std::vector<CheckFailure> embedding_placement_rule(const StageFacts& stage, bool drafter_ran);
std::vector<CheckFailure> drafter_identity_rule(const StageFacts& stage);
std::vector<CheckFailure> refusal_rule(const StageFacts& stage);
// embedding's tied-head rule over a run's stages against PP=1's.
std::vector<CheckFailure> tied_head_rule(const StageEvidence& run, const StageEvidence& pp1);

}  // namespace splitcheck
