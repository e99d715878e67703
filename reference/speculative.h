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

#include <span>
#include <vector>

#include "reference/generate.h"

namespace splitcheck {

// SPEC 3.3's seeded, controlled departure. A drafter proposes its own best guess of the
// target's next token, except where departs() says so: there it proposes its second
// choice instead (and continues its chain from that token). Whether proposal k (1..gamma)
// of the step anchored at `position` (the anchor's position) of request `request`
// departs is a pure function of (seed, request, position, k): every partition, which
// computes the same positions, gets the same departures. `rate` is the probability of a
// departure per proposal (scenario field speculative.departure_rate); 0 never departs,
// 1 always does.
struct Departure {
  uint64_t seed = 0;
  double rate = 0.0;
  bool departs(int64_t request, int64_t position, int k) const;
};

// The lowest-index maximum of scores[0..n) other than `best` (a drafter's second choice).
int32_t second_choice(const float* scores, int64_t n, int32_t best);

// One drafter's verified positions in a group call (Drafter::observe_group).
struct Observation {
  const std::vector<int32_t>* ids = nullptr;
  const Tensor* taps = nullptr;
};

// A drafter as the verify loop sees it.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Starts request `request` (its index in the workload): empty draft cache, position 0.
  virtual void reset(int64_t request) = 0;
  // Verified positions: their ids and the target's taps [T, n*H] (ascending capture id).
  virtual Status observe(const std::vector<int32_t>& ids, const Tensor& taps) = 0;
  // gamma proposals from `anchor` (the last verified token, not yet consumed).
  virtual Result<std::vector<int32_t>> propose(int32_t anchor, int gamma) = 0;

  // Group calls: the calls of several drafters of this one's kind (a serving step's
  // requests, each drafter its own request's), `group` holding this drafter among them;
  // observations[i] and anchors[i] are group[i]'s, and so is proposals[i]. A drafter that
  // groups() runs a group's calls together, a launch serving every request where it can;
  // by default they run one by one. Either way each drafter ends as its own calls leave
  // it, and on a backend whose rows keep their bits whatever the row count
  // (kernels/batch.h) with the same bits.
  virtual bool groups() const { return false; }
  virtual Status observe_group(std::span<Drafter* const> group,
                               std::span<const Observation> observations);
  virtual Status propose_group(std::span<Drafter* const> group, std::span<const int32_t> anchors,
                               int gamma, std::span<std::vector<int32_t>> proposals);
};

struct SpeculativeOptions {
  GenerationOptions generation;
  int gamma = 7;
  // Whether the engine's products give a row the same bits whatever the row count
  // (kernels/dispatch.h: batch_invariant). Then a replay whose bonus token differs from
  // the verify's is an internal error; otherwise (CUDA: cuBLASLt's algorithm depends on the
  // shape) it is counted in replay_bonus_mismatches and the verify's token is kept.
  bool batch_invariant = true;
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
  // How many steps accepted a tokens, for a = 0..gamma (SPEC 3.3's histogram).
  std::vector<int64_t> accepted_histogram;
  // Steps whose replay (a + 1 rows) predicted another bonus token than the verify
  // (gamma + 1 rows): zero on a batch-invariant backend (SpeculativeOptions).
  int64_t replay_bonus_mismatches = 0;
};

// Runs every prompt speculatively. Records the forwards, "generation/<p>/{prompt_ids,
// emitted}" as generate_greedy does (emitted truncated to max_new_tokens), and
// "spec/<p>/{proposals [steps, gamma], accepted [steps], emitted}", then
// "spec/accepted_histogram" (int32 [gamma + 1], steps per accepted length over every
// prompt), with the figures as attributes of the "spec" group.
Result<SpeculativeResult> generate_speculative(Engine& engine, Drafter& drafter,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const SpeculativeOptions& options,
                                               RunRecord* record);

}  // namespace splitcheck
