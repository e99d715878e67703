#include "harness/scenario/faults.h"

#include <algorithm>
#include <array>
#include <set>

namespace splitcheck {

namespace {

// SPEC 6, one row per fault. `caught_by` names a row of the check registry. Every fault is
// caught at default settings: the engine under test computes every call it is judged on.
constexpr FaultInfo kFaults[] = {
    {"handoff.no_zero_delta", "receiver passes no delta after folding it", "dispatch",
     "dispatch mismatch (native at PP=1, fallback here) at the first layer of each non-first "
     "stage not on a block boundary; numeric divergence from there for some splits; "
     "block-aligned cuts stay identical",
     FaultReach::kOffBlockBoundary},
    {"tap.boundary_uses_prefix", "a tap at a stage end exports bf16(P + D)", "taps",
     "tap mismatch exactly where a capture id equals a non-last stage end, with its cosine to "
     "the true feature",
     FaultReach::kTapAtStageEnd},
    {"tap.boundary_rejected",
     "partitions with a capture id at a stage end are refused at "
     "configuration",
     "config",
     "those splits reported as configuration-rejected with the offending ids, never as crashes",
     FaultReach::kTapAtStageEnd},
    {"weights.no_boundary_copy", "checkpoint lacks the boundary copies", "config",
     "configuration-time error, no NaN tap exported", FaultReach::kTapAtStageEnd},
    {"draft.own_embedding",
     "under PP the drafter builds and loads its own embedding, absent from its checkpoint",
     "embedding",
     "embedding check fails (own, unloaded), proposals and acceptance differ from PP=1, "
     "emitted tokens still equal"},
    {"tap.embed_resident_by_module", "the last stage's embedding copy makes tap 0 look resident",
     "taps", "tap 0 not relayed: tap mismatch at the last stage, acceptance differs"},
    {"draft.vocab_from_embedding", "the vocab check reads the missing embedding first", "embedding",
     "the clear refusal never appears: reported as an unreachable refusal, not as a crash of "
     "the harness"},
    {"pd.producer_embedding", "a context-only producer still builds the last-stage copy", "memory",
     "memory check reports the extra V x H x 2 bytes"},
    {"weights.stage_layer_offset",
     "the first stage of a cut at b loads layer b's weights for its last layer b-1 (a layer "
     "range read one past its end)",
     "tensors", "tensor divergence at layer b-1 at every split point"},
    {"partition.remainder_dropped",
     "a balanced partition gives each stage floor(L/pp) layers and drops the remainder "
     "(Megatron-LM issue 1304, mlx-lm issue 1688)",
     "partition",
     "structural verdict at configuration: layers owned by no stage (or by two) are named, "
     "before anything is compared; never a pass",
     FaultReach::kPartitionPlan},
    {"spec.rollback_last_stage_only",
     "after a partly rejected verify only the last stage rolls back positions and caches "
     "(vLLM PR 44697)",
     "tensors",
     "divergence in the next forward of that request at the first stage's layers; invisible "
     "on one request at a time only if no draft is ever rejected"},
    {"batch.stale_microbatch_state",
     "a stage reads per-request state through the batch of pp_size steps earlier (vLLM issue "
     "55951)",
     "tensors",
     "divergence at the first step whose batch membership changed; none on a single-request "
     "workload"},
    {"prefill.chunk_token_dropped",
     "a prompt split across steps under PP loses the token at the chunk boundary (the class "
     "of vLLM issue 41133)",
     "tensors",
     "divergence of that request from its first chunked step; none when prompts fit in one "
     "step"},
    {"dispatch.stage_context_fallback",
     "a non-first stage chooses attn_res's variant from where it runs (the stage it is, not "
     "the op's arguments): fallback where PP=1 takes native",
     "dispatch",
     "dispatch mismatch at every layer of the non-first stage that PP=1 runs native, with the "
     "numeric divergence where the variants disagree; caught at default settings"},
    {"weights.rebound_after_load",
     "after loading, a non-first stage re-binds one layer weight to a modified copy (the bytes "
     "it computes with are not the bytes it loaded)",
     "tensors",
     "tensor divergence at that layer from the first forward; caught at default settings"},
};

}  // namespace

std::span<const FaultInfo> fault_registry() { return kFaults; }

const FaultInfo* find_fault(std::string_view id) {
  for (const FaultInfo& f : kFaults) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

bool fault_reaches(FaultReach reach, std::span<const int> cuts, int block_size,
                   std::span<const int> capture_ids) {
  switch (reach) {
    case FaultReach::kEveryPartition:
      return !cuts.empty();
    case FaultReach::kTapAtStageEnd:
      return std::any_of(cuts.begin(), cuts.end(), [&](int c) {
        return std::find(capture_ids.begin(), capture_ids.end(), c) != capture_ids.end();
      });
    case FaultReach::kOffBlockBoundary:
      return block_size > 0 &&
             std::any_of(cuts.begin(), cuts.end(), [&](int c) { return c % block_size != 0; });
    case FaultReach::kPartitionPlan:
      return true;
  }
  return true;
}

std::vector<int> representative_split_points(FaultReach reach, int layers, int block_size,
                                             std::span<const int> capture_ids) {
  std::vector<int> out;
  std::set<std::array<bool, 5>> seen;
  for (int cut = 1; cut < layers; ++cut) {
    const int cuts[] = {cut};
    const std::array<bool, 5> kind = {
        fault_reaches(reach, cuts, block_size, capture_ids),
        block_size > 0 && cut % block_size == 0,
        std::find(capture_ids.begin(), capture_ids.end(), cut) != capture_ids.end(), cut == 1,
        cut == layers - 1};
    if (seen.insert(kind).second) out.push_back(cut);
  }
  return out;
}

bool FaultSet::has(std::string_view id) const {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace splitcheck
