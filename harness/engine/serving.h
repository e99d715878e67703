// The serving loop (SPEC 3.4): requests with arrival steps, continuous batching through
// the scheduler (scheduler.h), chunked prefill, greedy decoding or speculative decoding
// per request, and micro-batches in flight. One loop drives both engines through
// Engine::submit/collect, so their only difference is the engine.
//
// Speculation per request (SPEC 3.3): a verify block [t_n, x_1..x_gamma]; when every
// draft is accepted, the caches already hold exactly the verified positions and the next
// verify follows; otherwise the next step carries a rollback update for the request
// (every holder of its state returns to the snapshot taken before the verify) and the
// request's next segment is the replay [t_n, x_1..x_a].
//
// Records, besides every segment's forward: "serving/schedule" (int32 [N, 6]: step,
// request, kind, first position, tokens, forward index, one row per segment in execution
// order), per request "generation/<r>/{prompt_ids, emitted}" and, when speculative,
// "spec/<r>/{proposals, accepted, emitted, accepted_histogram}", then
// "spec/accepted_histogram" and the figures as in generate_speculative.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "harness/engine/scheduler.h"
#include "reference/speculative.h"

namespace splitcheck {

struct ServingOptions {
  ServingConfig config;
  int max_new_tokens = 8;
  int gamma = 0;  // 0: greedy decoding
  // Request ids of the prompts (default: their indices) and their arrival steps (default:
  // from the config); a request served alone keeps its id, so its drafter departs alike.
  std::vector<int32_t> ids;
  std::vector<int> arrivals;
  // Prefill chunks to replay per request id (RequestSlot::forced_chunks).
  std::map<int32_t, std::vector<int>> forced_chunks;
  // Whether the engine's backend gives a row the same bits whatever the row count
  // (kernels/batch.h). Then a replay goes on from its own prediction of the bonus token
  // (equal to the verify's unless the engine under test failed to roll back, which the
  // comparison reports); otherwise (CUDA: a replay of a + 1 rows may predict another token
  // than the verify of gamma + 1) from the verify's bonus token, the one emitted, and a
  // replay that predicts another is counted (SpeculativeResult::replay_bonus_mismatches).
  bool batch_invariant = true;
};

// One row of the schedule.
struct ScheduleRow {
  int32_t step = 0, request = 0;
  ForwardKind kind = ForwardKind::kPrefill;
  int64_t first_position = 0, tokens = 0;
  int32_t forward = 0;
};

struct ServingResult {
  SpeculativeResult spec;  // spec.generation: per request in prompt order
  std::vector<ScheduleRow> schedule;
  int32_t steps = 0;                             // steps decided, empty ones included
  std::vector<std::vector<int64_t>> histograms;  // per request, accepted lengths 0..gamma
  int64_t tokens = 0;                            // tokens run through the model over every segment
};

// Makes the drafter of one request (speculative serving), already reset to it.
using DrafterFactory = std::function<Result<std::unique_ptr<Drafter>>(int32_t request)>;

// Serves `prompts` on `engine` (drafters from `drafters` when options.gamma > 0).
Result<ServingResult> serve_requests(Engine& engine,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const DrafterFactory& drafters, const ServingOptions& options,
                                     RunRecord* record);

// The prefill chunk lengths of every request in a schedule, by request id.
std::map<int32_t, std::vector<int>> prefill_chunks(const std::vector<ScheduleRow>& schedule);

}  // namespace splitcheck
