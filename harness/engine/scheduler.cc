#include "harness/engine/scheduler.h"

#include <algorithm>

namespace splitcheck {

std::vector<ScheduledSegment> schedule_step(const ServingConfig& cfg, int gamma, int step,
                                            std::vector<RequestSlot>& requests) {
  int admitted = 0;
  for (const RequestSlot& r : requests)
    admitted += r.admitted && r.phase != RequestPhase::kFinished;
  int64_t budget = cfg.token_budget;
  std::vector<ScheduledSegment> out;
  for (RequestSlot& r : requests) {
    if (r.phase == RequestPhase::kFinished || r.arrival > step) continue;
    if (!r.admitted) {
      if (admitted >= cfg.max_in_flight) continue;
      r.admitted = true;
      ++admitted;
    }
    if (step < r.last_step + cfg.depth || budget <= 0) continue;
    ScheduledSegment seg{r.id, ForwardKind::kPrefill, 0};
    switch (r.phase) {
      case RequestPhase::kPrefill: {
        const int64_t left = r.prompt_tokens - r.prefilled;
        if (r.next_forced < r.forced_chunks.size()) {
          seg.tokens = r.forced_chunks[r.next_forced];
          if (seg.tokens > budget) continue;
        } else {
          seg.tokens = std::min<int64_t>({left, cfg.chunk, budget});
        }
        break;
      }
      case RequestPhase::kDecode:
        seg = {r.id, ForwardKind::kDecode, 1};
        break;
      case RequestPhase::kVerify:
        seg = {r.id, ForwardKind::kVerify, gamma + 1};
        break;
      case RequestPhase::kReplay:
        seg = {r.id, ForwardKind::kReplay, r.replay_tokens};
        break;
      case RequestPhase::kFinished:
        continue;
    }
    if (seg.tokens > budget || seg.tokens <= 0) continue;
    if (r.phase == RequestPhase::kPrefill && r.next_forced < r.forced_chunks.size())
      ++r.next_forced;
    budget -= seg.tokens;
    r.last_step = step;
    out.push_back(seg);
  }
  return out;
}

}  // namespace splitcheck
