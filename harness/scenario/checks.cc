#include "harness/scenario/checks.h"

namespace splitcheck {

namespace {

// SPEC 5, one row per check.
constexpr CheckInfo kChecks[] = {
    {"partition", CheckKind::kSweep,
     "every layer owned by exactly one stage, checked before anything runs"},
    {"tensors", CheckKind::kDataset,
     "per-layer tensors, the AttnRes bank and the final output, bit for bit"},
    {"taps", CheckKind::kDataset, "captured auxiliary hidden states (SPEC 2.6), bit for bit"},
    {"logits", CheckKind::kDataset, "target and drafter logits, bit for bit"},
    {"tokens", CheckKind::kDataset, "input ids and emitted tokens"},
    {"dispatch", CheckKind::kDataset, "the kernel dispatch trace, event for event (SPEC 5.3)"},
    {"embedding", CheckKind::kStage, "which embedding the drafter uses on each stage (SPEC 5.4)"},
    {"memory", CheckKind::kStage, "parameter bytes held per stage (SPEC 5.4)"},
    {"acceptance", CheckKind::kDataset,
     "proposals, accepted counts and acceptance figures (SPEC 5.5)"},
    {"config", CheckKind::kSweep,
     "configuration-time refusals: which partitions are rejected, and why"},
};

}  // namespace

std::span<const CheckInfo> check_registry() { return kChecks; }

const CheckInfo* find_check(std::string_view name) {
  for (const CheckInfo& c : kChecks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

bool check_is(std::string_view name, CheckKind kind) {
  const CheckInfo* c = find_check(name);
  return c != nullptr && c->kind == kind;
}

std::vector<std::string> checks_of_kind(const std::vector<std::string>& names, CheckKind kind) {
  std::vector<std::string> out;
  for (const std::string& n : names)
    if (check_is(n, kind)) out.push_back(n);
  return out;
}

std::vector<std::string> checks_of_kind(CheckKind kind) {
  std::vector<std::string> out;
  for (const CheckInfo& c : kChecks)
    if (c.kind == kind) out.emplace_back(c.name);
  return out;
}

}  // namespace splitcheck
