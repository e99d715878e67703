// The greedy verify loop of SPEC 3.3 over any Engine (reference or partitioned), with
// the drafter behind an interface so the same loop drives every method.
//
// Per step: the drafter proposes x_1..x_gamma from the anchor t_n; the engine saves its
// state and runs [t_n, x_1..x_gamma] as a verify forward, predicting y_0..y_gamma; the
// accepted count a is the longest prefix with x_i == y_{i-1}; x_1..x_a, y_a are emitted.
// Rollback: restore_state() returns every cache to the pre-verify snapshot (MLA caches
// without the verify block's latents, KDA states before it) and [t_n, x_1..x_a] is
// replayed as a replay forward, so the caches equal those of a run that never drafted.
#pragma once

#include <vector>

#include "reference/generate.h"

namespace splitcheck {

// A drafter as the verify loop sees it.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Starts a new sequence: empty draft cache.
  virtual void reset() = 0;
  // Verified positions: their ids and the target's taps [T, n*H] (ascending capture id).
  virtual Status observe(const std::vector<int32_t>& ids, const Tensor& taps) = 0;
  // gamma proposals from `anchor` (the last verified token, not yet consumed).
  virtual Result<std::vector<int32_t>> propose(int32_t anchor, int gamma) = 0;
};

struct SpeculativeOptions {
  GenerationOptions generation;
  int gamma = 7;
};

// Per prompt figures (SPEC 5.5).
struct SpeculativeSequence {
  std::vector<std::vector<int32_t>> proposals;  // [steps][gamma]
  std::vector<int32_t> accepted;                // [steps]
};

struct SpeculativeResult {
  GenerationResult generation;
  std::vector<SpeculativeSequence> sequences;
  int64_t steps = 0;
  int64_t accepted_total = 0;
  double acceptance_rate = 0;     // sum(a) / (steps * gamma)
  double tokens_per_forward = 0;  // 1 + sum(a) / steps
  double mean_accepted = 0;       // sum(a) / steps
};

// Runs every prompt speculatively. Records the forwards, "generation/<p>/{prompt_ids,
// emitted}" as generate_greedy does (emitted truncated to max_new_tokens), and
// "spec/<p>/{proposals [steps, gamma], accepted [steps], emitted}" with the figures as
// attributes of the "spec" group.
Result<SpeculativeResult> generate_speculative(Engine& engine, Drafter& drafter,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const SpeculativeOptions& options,
                                               RunRecord* record);

}  // namespace splitcheck
