#include "harness/judge/self_check.h"

#include <fmt/format.h>

#include "harness/judge/judge.h"

namespace splitcheck {

Status judge_reproduction(const RunRecord& first, const RunRecord& second, SelfCheckResult& r) {
  CaseResult probe;
  probe.key = "pp1-self-check";
  RETURN_IF_ERROR(compare_records(first, second, probe));
  r.datasets_compared = probe.datasets_compared;
  r.datasets_differing = probe.datasets_differing;
  r.reproduced = probe.datasets_differing == 0 && probe.datasets_compared > 0;
  r.first_difference.clear();
  if (!r.reproduced)
    r.first_difference = probe.datasets_compared == 0
                             ? std::string("the two runs recorded nothing to compare")
                             : probe.message;
  return Status::ok();
}

}  // namespace splitcheck
