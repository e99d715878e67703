// The deterministic scheduler of the serving loop (SPEC 3.4), shared by both engines.
//
// Each step's batch is a pure function of the serving config, the requests (arrival
// step, prompt length) and what the loop has applied of earlier steps' results, which
// are identical at every partition; so PP=1 and every split point run the same schedule.
// Rules, in request-id order (first come, first served): a request that has arrived is
// admitted while fewer than max_in_flight requests are admitted and unfinished; an
// admitted request is eligible at step k when its last step j has k >= j + depth (its
// results are in); its segment is the next prefill chunk (at most `chunk` tokens and what
// is left of the step's token budget), a decode token, a verify block (gamma + 1 tokens)
// or a replay (a + 1 tokens); a segment other than a prefill chunk is only taken whole.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "harness/scenario/scenario.h"
#include "reference/engine.h"

namespace splitcheck {

// What a request needs next.
enum class RequestPhase { kPrefill, kDecode, kVerify, kReplay, kFinished };

// The scheduler's view of one request; the serving loop advances phase, prefilled and
// replay_tokens as results come in.
struct RequestSlot {
  int32_t id = 0;
  int arrival = 0;
  int64_t prompt_tokens = 0;
  int64_t prefilled = 0;
  RequestPhase phase = RequestPhase::kPrefill;
  int replay_tokens = 0;
  bool admitted = false;
  int last_step = -1000000;
  // Prefill chunk lengths to take exactly, in order (replaying another run's chunks when
  // a request is served alone); empty: the budget and `chunk` decide.
  std::vector<int> forced_chunks;
  size_t next_forced = 0;
};

// One segment of a step as decided (the loop fills in the token ids).
struct ScheduledSegment {
  int32_t request = 0;
  ForwardKind kind = ForwardKind::kPrefill;
  int64_t tokens = 0;
};

// The segments of step `step` (ascending request id), marking the requests it admits and
// schedules; `gamma` is the verify block's draft count (0 without speculation).
std::vector<ScheduledSegment> schedule_step(const ServingConfig& config, int gamma, int step,
                                            std::vector<RequestSlot>& requests);

}  // namespace splitcheck
