// The registry of speculative methods (SPEC 3) and the embedding placement rule of
// SPEC 2.7 that follows from it. Every place that asks "does this stage hold a copy of
// the target's embedding for a drafter?" asks `last_stage_holds_embedding_copy`, so the
// rule has exactly one source.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace splitcheck {

// One speculative method. `shares_target_embedding` / `shares_lm_head`: the drafter
// binds the target's objects (share_with_target) instead of owning its own.
// Choices (SPEC leaves EAGLE-3's embedding open): EAGLE-3-lite shares the target's
// embedding, as the real EAGLE-3 does, and owns its small lm_head; DSpark-lite shares
// both. `none` runs no drafter.
struct SpecMethodInfo {
  std::string_view name;
  bool has_drafter = false;
  bool shares_target_embedding = false;
  bool shares_lm_head = false;
  // The capture ids the method consumes when a scenario names none (SPEC 3.1, 3.2),
  // sorted, unique and clamped to [0, layers].
  std::vector<int> (*default_capture_ids)(int layers) = nullptr;
};

// Every method: none, dspark, eagle3.
std::span<const SpecMethodInfo> spec_method_registry();
// The row named `name`, or nullptr.
const SpecMethodInfo* find_spec_method(std::string_view name);
// The default capture ids of `method` for a model of `layers` layers (dspark's ids for
// an unknown method or none: 0, L/4-1, L/2, 3L/4+1, L).
std::vector<int> method_default_capture_ids(std::string_view method, int layers);
// SPEC 2.7: whether a stage holds a real copy of embed_tokens for the drafter. True only
// on a last stage that is not also the first (the first stage holds the embedding
// itself), when the method's drafter shares the target's embedding, and the stage is not
// a context-only prefill producer (it proposes nothing). A copy never makes tap 0
// resident.
bool last_stage_holds_embedding_copy(std::string_view method, bool is_last, bool is_first,
                                     bool context_only_producer);

}  // namespace splitcheck
