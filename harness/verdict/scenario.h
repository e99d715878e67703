// Scenario files (DESIGN.md "Scenario files"): one JSON file describes one run of the
// harness, i.e. the model, the workload, the engine settings, the partitions to sweep,
// the faults to switch on, the checks to run and what a correct harness must conclude.
//
// Loading validates everything up front: every error is `invalid_input` with a message
// `<file>: <json-pointer>: <what>`, e.g.
//   scenarios/x.json: /model/overrides/hidden_sise: unknown key
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/status.h"
#include "reference/config.h"
#include "reference/record.h"

namespace splitcheck {

// How much a run writes to its dump: a summary, per-layer tensors, or everything.

// The prompts a run feeds the model (SPEC 4).
struct WorkloadConfig {
  std::string file;  // resolved path of a workload JSON; empty = generate from `seed`
  uint64_t seed = 2026;
  int prompts = 2;
  int max_new_tokens = 8;
  int max_prompt_tokens = 0;  // 0 = whole prompt; else keep the LAST n tokens
};

// The speculative method (SPEC 3) and its settings.
struct SpeculativeConfig {
  std::string method = "none";  // none | dspark | eagle3
  int gamma = 7;
  bool context_only_producer = false;  // the last stage is a context-only prefill producer
  // The drafter's seeded departure probability per proposal (SPEC 3.3, Departure in
  // reference/speculative.h): 0 follows its own prediction everywhere.
  double departure_rate = 0.0;
};

// Which partitions to sweep (SPEC 2.7).
struct PartitionSpec {
  int pp = 2;
  std::string mode = "all";  // all | list | pairwise | every-layer | balanced | exhaustive
  // For mode "list": each entry the interior cut points b_1..b_{pp-1}.
  std::vector<std::vector<int>> cuts;
};

// One validated scenario, every default filled in.
struct Scenario {
  std::string name;
  std::string description;
  std::string source_path;  // where it was loaded from; not part of the resolved JSON
  ModelConfig model;
  std::string checkpoint;  // resolved path; empty = generated weights from model.seed
  WorkloadConfig workload;
  int prefill_chunk = 0;  // 0 = whole prompt in one forward
  DumpLevel dump_level = DumpLevel::kLayer;
  std::vector<int> capture_ids;  // resolved: -1 mapped to 0, sorted, unique, in 0..L
  SpeculativeConfig speculative;
  PartitionSpec partitions;
  std::vector<std::string> faults;   // ids of the fault registry (faults.h)
  std::vector<std::string> checks;   // names of the check registry (checks.h); default: all
  std::string backend = "cpu";       // cpu | cuda
  std::string transport = "inproc";  // inproc | mpi | nccl
  nlohmann::json expect = nlohmann::json::object();  // free-form; what the run must conclude
};

// Reads and validates the scenario file at `path`. Relative paths inside it resolve
// against its directory. A missing file gives `<path>: cannot open`.
Result<Scenario> load_scenario(const std::string& path);

// Validates an already parsed scenario. `source_name` prefixes every error message and
// gives the default `name` (its stem); relative paths resolve against `base_dir`.
Result<Scenario> parse_scenario(const nlohmann::json& j, const std::string& source_name,
                                const std::string& base_dir);

// The scenario as JSON with every field present, defaults filled in and the model fully
// resolved (all ModelConfig fields under `model.overrides`). Keys are sorted, so the dump
// is deterministic; `parse_scenario` accepts it and resolves it to the same JSON.
// `source_path` is left out.
nlohmann::json resolved_scenario_json(const Scenario& s);

// "summary", "layer" or "full".

}  // namespace splitcheck
