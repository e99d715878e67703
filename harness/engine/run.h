// From a scenario to a run: its prompts, its weights, the PP=1 run, and dump files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/dump/dump.h"
#include "harness/dump/stage_facts.h"
#include "harness/engine/generation.h"
#include "harness/scenario/scenario.h"
#include "reference/engine.h"
#include "reference/generate.h"
#include "reference/workload.h"

namespace splitcheck {

// The named tensors (all when empty), generated from the model seed or read from the
// scenario's checkpoint.
Result<WeightStore> scenario_weights(const Scenario& scenario,
                                     const std::vector<std::string>& names = {});

// A portable identity of the scenario: the resolved JSON with file paths replaced by
// the sha256 of the files' contents, so the hash is equal on every machine.
Result<std::string> scenario_identity_sha256(const Scenario& scenario);
// sha256 of the resolved model config plus the checkpoint's sha256 when one is named.
Result<std::string> model_identity_sha256(const Scenario& scenario);

// The header of a dump of this scenario at `partition` ("0-32", "0-12|12-32").
Result<DumpHeader> make_dump_header(const Scenario& scenario, const std::string& partition);

struct ReferenceRun {
  RunRecord record;
  GenerationResult generation;
  PreparedWorkload workload;
  GenerationSummary summary;  // speculative figures and the drafter's binding
  ComputedCalls computed;     // what the engine computed, drafter calls included
  StageFacts pp1_stage;       // run_reference: its one stage (what /stages/0 records)
};

// The PP=1 run of the scenario with everything recorded at the scenario's dump level,
// over `source` (the scenario's own weights unless given).
Result<ReferenceRun> run_reference(const Scenario& scenario);
Result<ReferenceRun> run_reference(const Scenario& scenario, WeightSource& source);

// One partitioned run of the scenario at the partition with these interior cuts, with
// /stages/<s>/ recorded (what each stage holds: harness/engine/stage_evidence.h, the
// refusal probe included). A configuration the engine refuses is a kConfigRejected status.
Result<ReferenceRun> run_partitioned(const Scenario& scenario, const std::vector<int>& cuts);

// The scenario's weights by name: generated from the model seed, or its checkpoint, on
// the device of the scenario's backend (so every kernel runs there: kernels/dispatch.h).
std::unique_ptr<WeightSource> scenario_weight_source(const Scenario& scenario);

// The device of a backend name ("cuda": kCuda; otherwise kCpu).
Device backend_device(const std::string& backend);
// Ok when every tensor of `weights` is on `backend`'s device; otherwise an internal error
// naming the first that is not. The registry runs an op where its weight lives, so host
// weights would run a "cuda" scenario on the CPU without a word: every engine built for a
// scenario checks its weights first.
Status check_weights_on_backend(const WeightStore& weights, const std::string& backend);
// The dump's env.device: "cpu", or on CUDA the GPU, toolkit, cuBLASLt version, SM count
// and every matrix-product algorithm the run pinned (kernels/cuda/runtime.h).
nlohmann::json backend_provenance(const std::string& backend);

// Writes a record as one dump file (temporary name, then renamed).
Status write_record(const std::string& path, const RunRecord& record, const DumpHeader& header,
                    bool compress = false);

}  // namespace splitcheck
