// The check registry: every comparison the harness can run (SPEC 5), in report order.
//
// A scenario's `checks` list names rows of this table; a fault's `caught_by` (faults.h)
// names the row whose failure must report it. Adding a check is one row here plus its
// comparison.
#pragma once

#include <span>
#include <string_view>

namespace splitcheck {

// One check: its scenario/report name and a one-line description.
struct CheckInfo {
  std::string_view name;  // e.g. "tensors"
  std::string_view what;  // what it compares against PP=1
};

// Every check, in the order a report lists them.
std::span<const CheckInfo> check_registry();

// The row for `name`, or nullptr when no check has that name.
const CheckInfo* find_check(std::string_view name);

}  // namespace splitcheck
