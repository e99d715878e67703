// How a run of a scenario generates tokens: plain greedy decoding, or speculative
// decoding with the scenario's drafter running beside the stage that holds the last
// layers (the reference engine at PP=1, the last stage under PP). Both engines go
// through this one function, so their only difference is the engine.
#pragma once

#include <string>

#include "harness/engine/prepared_workload.h"
#include "harness/verdict/faults.h"
#include "reference/speculative.h"
#include "reference/weight_source.h"

namespace splitcheck {

// Where the drafter runs and what it was bound to (SPEC 5.4).
struct DrafterPlacement {
  std::string method = "none";
  int stage = 0;
  std::string embedding_source = "none";  // target | own | missing | none (no drafter)
  bool same_object_as_target = false;
  std::string refusal;  // the load-time refusal, when one was made
};

// What a generation produced, beyond the record.
struct GenerationSummary {
  GenerationResult generation;
  bool speculative = false;
  SpeculativeResult spec;
  int strict_correct = 0;
  int flexible_correct = 0;
  DrafterPlacement drafter;
};

// The acceptance figures of SPEC 5.5 for a report.
struct AcceptanceFigures {
  bool speculative = false;
  int64_t steps = 0;
  int64_t accepted = 0;
  double acceptance_rate = 0;
  double tokens_per_forward = 0;
  double mean_accepted = 0;
  // Steps that accepted a tokens, a = 0..gamma (SPEC 3.3); empty without a drafter.
  std::vector<int64_t> accepted_histogram;
  int strict_correct = 0;
  int flexible_correct = 0;
  int prompts = 0;
};
AcceptanceFigures acceptance_figures(const GenerationSummary& summary);
// Whether a run's figures equal PP=1's: both speculative, the same steps, accepted total,
// accepted-length histogram and GSM8K-style scores.
bool same_acceptance(const AcceptanceFigures& run, const AcceptanceFigures& pp1);
// "a=0: n0, a=1: n1, ..." for a console line.
std::string histogram_text(const std::vector<int64_t>& histogram);

// The checkpoint names of the scenario's drafter (empty without one).
std::vector<std::string> drafter_tensor_names(const Scenario& scenario);

// Runs the scenario's prompts on `engine`. `host` is the weights of the stage where the
// drafter runs (`host_stage`; `host_is_first` when that stage also holds layer 0).
// Records "spec" figures (including the GSM8K-style strict and flexible scores) when
// speculative. A refused drafter binding is StatusCode::kConfigRejected.
Result<GenerationSummary> run_generation(const Scenario& scenario, Engine& engine,
                                         const WeightStore& host, int host_stage,
                                         bool host_is_first, WeightSource& source,
                                         const PreparedWorkload& workload, RunRecord* record);

// The probe of SPEC 3.1's refusal: binds a drafter to a stage whose embedding
// placeholder is missing and returns what check_shared_embedding said. OK means the
// refusal never appeared.
Status probe_missing_embedding_refusal(const Scenario& scenario, int stage);

}  // namespace splitcheck
