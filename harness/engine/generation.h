// How a run of a scenario generates tokens: plain greedy decoding, or speculative
// decoding with the scenario's drafter running beside the stage that holds the last
// layers (the reference engine at PP=1, the last stage under PP). Both engines go
// through this one function, so their only difference is the engine.
#pragma once

#include <string>

#include "harness/dump/evidence.h"
#include "harness/engine/prepared_workload.h"
#include "harness/engine/stage.h"
#include "harness/scenario/faults.h"
#include "reference/dspark.h"
#include "reference/speculative.h"
#include "reference/weight_source.h"

namespace splitcheck {

// The stage the drafter runs beside: its weights (the embedding and lm_head the drafter
// shares), its index, and whether it is the first stage (the one that holds layer 0 and the
// real embedding). PP=1's is {its weights, 0, true}; a partition's, its last stage's.
struct DrafterHost {
  const WeightStore& weights;
  int stage = 0;
  bool is_first = true;
};

// The drafter-loading path on the stage where it runs (SPEC 3.1): share_with_target binds
// the host stage's embedding and lm_head; under draft.own_embedding, off a first stage, the
// drafter builds its own embedding instead; then, unless the scenario's stage is a
// context-only producer, check_shared_embedding refuses a missing placeholder
// (StatusCode::kConfigRejected naming the stage and the method). `binding` is filled in
// either case; it points into the host's weights, which must outlive it.
Status bind_drafter(const Scenario& scenario, const DrafterHost& host, DrafterBinding& binding);

// What `binding` says of the drafter on the host stage, its identity measured against the
// stage's embed_tokens (binds_target_embedding).
DrafterPlacement describe_drafter(const Scenario& scenario, const DrafterBinding& binding,
                                  const DrafterHost& host);

// What a generation produced, beyond the record.
struct GenerationSummary {
  GenerationResult generation;
  bool speculative = false;
  SpeculativeResult spec;
  int strict_correct = 0;
  int flexible_correct = 0;
  DrafterPlacement drafter;
  int64_t drafter_calls = 0;  // observe and propose calls the drafter computed
};

AcceptanceFigures acceptance_figures(const GenerationSummary& summary);
// The GSM8K-style strict and flexible scores of a generation (prompt p against problem p).
void score(const Scenario& scenario, const PreparedWorkload& workload,
           const GenerationResult& generation, GenerationSummary& out);
// Whether a run's figures equal PP=1's: both speculative, the same steps, accepted total,
// accepted-length histogram and GSM8K-style scores.
bool same_acceptance(const AcceptanceFigures& run, const AcceptanceFigures& pp1);
// "a=0: n0, a=1: n1, ..." for a console line.
std::string histogram_text(const std::vector<int64_t>& histogram);

// The checkpoint names of the scenario's drafter (empty without one).
std::vector<std::string> drafter_tensor_names(const Scenario& scenario);

// The scenario's drafter (dspark or eagle3) over its own tensors `own` and the embedding
// `binding` bound, with the scenario's departure settings. With `calls`, every observe and
// propose call the drafter computes adds one to *calls. An eagle3 drafter without its three
// taps is StatusCode::kConfigRejected.
Result<std::unique_ptr<Drafter>> make_drafter(const Scenario& scenario, const WeightStore& own,
                                              const DrafterBinding& binding,
                                              int64_t* calls = nullptr);

// Runs the scenario's prompts on `engine`, the drafter (if any) beside `host`.
// Records "spec" figures (including the GSM8K-style strict and flexible scores) when
// speculative, and counts the drafter's calls (GenerationSummary::drafter_calls). A
// refused drafter binding is StatusCode::kConfigRejected.
Result<GenerationSummary> run_generation(const Scenario& scenario, Engine& engine,
                                         const DrafterHost& host, WeightSource& source,
                                         const PreparedWorkload& workload, RunRecord* record);

// run_generation for a scenario with a `serving` block (serving.h): every prompt a
// request, served through Engine::submit/collect. `serving` (when not null) receives the
// schedule and per-request histograms; `ids`, `arrivals` and `forced_chunks` serve a
// subset of the requests (ServingOptions), e.g. one request alone.
struct ServingResult;
struct ServingOptions;
Result<GenerationSummary> run_serving_generation(const Scenario& scenario, Engine& engine,
                                                 const DrafterHost& host, WeightSource& source,
                                                 const PreparedWorkload& workload,
                                                 RunRecord* record,
                                                 const ServingOptions* subset = nullptr,
                                                 ServingResult* serving = nullptr);

// Loads the scenario's drafter on `stage` through bind_drafter, as if it ran there, and
// returns what the loading path said: on a stage without the embedding, the clear
// refusal (kConfigRejected) when it is reachable; OK where the stage holds it.
Status probe_drafter_load(const Scenario& scenario, const Stage& stage);

}  // namespace splitcheck
