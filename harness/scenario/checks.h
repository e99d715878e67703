// The check registry: every comparison the harness can run (SPEC 5), in report order.
//
// A scenario's `checks` list names rows of this table; a fault's `caught_by` (faults.h)
// names the row whose failure must report it. Adding a check is one row here plus its
// comparison.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace splitcheck {

// What a check judges from, which decides who gathers its evidence: kDataset, datasets of
// the dump compared with PP=1's (judge_case, dataset by dataset); kStage, what each stage
// holds (its /stages record: bytes, embeddings, the drafter's binding); kSweep, what the
// sweep itself observes of a partition (its ownership, a configuration-time refusal).
enum class CheckKind { kDataset, kStage, kSweep };

// One check: its scenario/report name, its kind and a one-line description.
struct CheckInfo {
  std::string_view name;  // e.g. "tensors"
  CheckKind kind;
  std::string_view what;  // what it compares against PP=1
};

// Every check, in the order a report lists them.
std::span<const CheckInfo> check_registry();

// The row for `name`, or nullptr when no check has that name.
const CheckInfo* find_check(std::string_view name);

// Whether `name` is a check of kind `kind` (false for a name no check has).
bool check_is(std::string_view name, CheckKind kind);

// The names in `names` that are checks of kind `kind`, in their order.
std::vector<std::string> checks_of_kind(const std::vector<std::string>& names, CheckKind kind);

// Every check of kind `kind`, in registry order.
std::vector<std::string> checks_of_kind(CheckKind kind);

}  // namespace splitcheck
