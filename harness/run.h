// From a scenario to a run: its prompts, its weights, the PP=1 run, and dump files.
#pragma once

#include <string>
#include <vector>

#include "harness/dump.h"
#include "harness/scenario.h"
#include "reference/engine.h"
#include "reference/generate.h"
#include "reference/workload.h"

namespace splitcheck {

// The scenario's prompts: its workload file (or the generator), the first `prompts`
// problems, byte-tokenised, cut to the last max_prompt_tokens when that is set.
struct PreparedWorkload {
  std::vector<Problem> problems;
  std::vector<std::vector<int32_t>> prompts;
};
Result<PreparedWorkload> prepare_workload(const Scenario& scenario);

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
};

// The PP=1 run of the scenario with everything recorded at the scenario's dump level.
Result<ReferenceRun> run_reference(const Scenario& scenario);

// Writes a record as one dump file (temporary name, then renamed).
Status write_record(const std::string& path, const RunRecord& record, const DumpHeader& header,
                    bool compress = false);

}  // namespace splitcheck
