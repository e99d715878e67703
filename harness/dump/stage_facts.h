// What a run says each of its stages held (SPEC 5.4), as the attributes of /stages/<s>/ in
// its dump (docs/dump-format.md): the layer range, the embedding it holds and the one its
// placement gives it, the parameter bytes measured and the bytes the placement allows, the
// drafter's embedding and whether it is the stage's own storage, the head's storage and
// whether it is the embedding's (tied weights), and the refusal probe's answer. Plain facts, no
// engine types: the built-in sweep writes them into its run's record and reads them back through
// stage_evidence_of, exactly as the runner reads them from an engine's dump, and the judge's stage
// checks (harness/judge/stage_checks.h) decide from them alone. A fact a dump does not record is
// absent here (empty or nullopt), never a default that could pass.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/record.h"

namespace splitcheck {

struct StageFacts {
  int index = 0;
  std::optional<int64_t> layer_begin, layer_end;
  std::string embedding;         // held: real | missing | copy-for-drafter ("": not recorded)
  std::string placed_embedding;  // what the placement rule gives the stage, same words
  std::optional<int64_t> parameter_bytes;         // measured from what the stage holds
  std::optional<int64_t> placed_parameter_bytes;  // the bytes the placement rule gives it
  std::optional<int64_t> held_tensors, held_storages;
  std::string embedding_storage, drafter_embedding_storage;  // labels ("storage:0", "unheld")
  // The head (lm_head) on the stage that holds it: its storage label and whether it was
  // measured to be the embedding's storage (tied weights); "" / nullopt: no head recorded.
  std::string head_storage;
  std::optional<bool> head_tied;
  std::string drafter_method;     // the drafter beside this stage ("": not recorded)
  std::string drafter_embedding;  // target | own | missing | none (no drafter beside it)
  std::optional<bool> drafter_same_object_as_target;
  // The refusal probe (a drafter loaded on this stage placed without the embedding): what
  // it answered, its status ("config-rejected", "ok", "internal-error", ...) and whether it
  // was the clear refusal (is_clear_refusal). refusal_status "" : no probe recorded here.
  std::string refusal_probe, refusal_status;
  std::optional<bool> refusal_clear;
};

// What the judge's stage checks read of one run: its stages' facts (empty: the dump carries
// no /stages) and whether a drafter ran (the run carries /spec/accepted_histogram).
struct StageEvidence {
  std::vector<StageFacts> stages;
  bool drafter_ran = false;
};

// Writes `f` as the attributes of stages/<f.index> in `record` (only what it records).
void record_stage_facts(const StageFacts& f, RunRecord& record);

// The facts of stages/0, stages/1, ... of `record` (until the first absent one), and
// whether it carries /spec. The one reader of stage facts: the built-in sweep's record and
// an external engine's loaded dump alike.
StageEvidence stage_evidence_of(const RunRecord& record);

// Whether a refusal probe's answer is the clear refusal: a configuration-time rejection
// whose message names the stage ("stage 1") and the drafter's method.
bool is_clear_refusal(const std::string& status, const std::string& answer, int stage,
                      const std::string& method);

}  // namespace splitcheck
