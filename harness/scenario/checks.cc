#include "harness/scenario/checks.h"

namespace splitcheck {

namespace {

// SPEC 5, one row per check.
constexpr CheckInfo kChecks[] = {
    {"partition", "every layer owned by exactly one stage, checked before anything runs"},
    {"tensors", "per-layer tensors, the AttnRes bank and the final output, bit for bit"},
    {"taps", "captured auxiliary hidden states (SPEC 2.6), bit for bit"},
    {"logits", "target and drafter logits, bit for bit"},
    {"tokens", "input ids and emitted tokens"},
    {"dispatch", "the kernel dispatch trace, event for event (SPEC 5.3)"},
    {"embedding", "which embedding the drafter uses on each stage (SPEC 5.4)"},
    {"memory", "parameter bytes held per stage (SPEC 5.4)"},
    {"acceptance", "proposals, accepted counts and acceptance figures (SPEC 5.5)"},
    {"config", "configuration-time refusals: which partitions are rejected, and why"},
};

}  // namespace

std::span<const CheckInfo> check_registry() { return kChecks; }

const CheckInfo* find_check(std::string_view name) {
  for (const CheckInfo& c : kChecks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace splitcheck
