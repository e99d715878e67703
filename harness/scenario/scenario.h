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
#include <optional>
#include <string>
#include <vector>

#include "harness/scenario/engine_spec.h"
#include "kernels/status.h"
#include "reference/config.h"
#include "reference/record.h"

namespace splitcheck {

// Upper bounds on a scenario's sizes (the lower bounds are those of the model): a value
// past one is refused at load (invalid input, exit 2) with its JSON pointer, before
// anything is allocated. scenarios/scenario.schema.json states the same bounds, and the
// docs/scenarios.md lists them. The partition bound is kMaxPartitions
// (harness/scenario/partition.h).
namespace scenario_bounds {
inline constexpr int kLayers = 256;           // /model/overrides/num_hidden_layers
inline constexpr int kHiddenSize = 16384;     // hidden_size, native_attn_res_hidden_sizes
inline constexpr int kVocabSize = 262144;     // vocab_size
inline constexpr int kHeads = 256;            // num_attention_heads
inline constexpr int kHeadDim = 1024;         // head_dim
inline constexpr int kExperts = 1024;         // n_routed_experts, num_experts_per_tok
inline constexpr int kSharedExperts = 64;     // n_shared_experts
inline constexpr int kIntermediate = 65536;   // intermediate_size, moe_intermediate_size
inline constexpr int kLoraRank = 8192;        // kv_lora_rank
inline constexpr int kPrompts = 1024;         // /workload/prompts
inline constexpr int kNewTokens = 4096;       // /workload/max_new_tokens
inline constexpr int kPromptTokens = 8192;    // /workload/max_prompt_tokens, each prompt
inline constexpr int kPrefillChunk = 8192;    // /engine/prefill_chunk
inline constexpr int kGamma = 16;             // /speculative/gamma
inline constexpr int kServingSteps = 100000;  // /serving/arrival_steps, arrival_every
inline constexpr int kServingTokens = 8192;   // /serving/token_budget, chunk
inline constexpr int kServingDepth = 4;       // /serving/depth
}  // namespace scenario_bounds

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

// Serving many requests (SPEC 3.4): the scenario's `serving` block. When present, every
// engine serves the workload's prompts as requests through the scheduler
// (harness/engine/scheduler.h) instead of one prompt at a time.
struct ServingConfig {
  bool enabled = false;
  // Step at which each request arrives (one per prompt, non-decreasing); when empty,
  // request r arrives at step r * arrival_every.
  std::vector<int> arrival_steps;
  int arrival_every = 0;
  int max_in_flight = 8;  // requests admitted and not finished (the concurrency)
  int token_budget = 64;  // tokens per step over every segment
  int chunk = 32;         // at most this many prompt tokens of one request per step
  // Micro-batches in flight: step k is decided from the results of steps <= k - depth,
  // so a request is in at most one of `depth` consecutive steps. Part of the schedule,
  // the same at every partition (PP=1 runs it serially).
  int depth = 2;
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
  ServingConfig serving;
  PartitionSpec partitions;
  std::vector<std::string> faults;  // ids of the fault registry (faults.h)
  // Names of the check registry (checks.h) the sweep evaluates; default: all. A check
  // not listed is not evaluated and cannot fail a case.
  std::vector<std::string> checks;
  std::string backend = "cpu";       // cpu | cuda
  std::string transport = "inproc";  // inproc | mpi | nccl
  // An engine outside this project (harness/runner/), named by the `engine` block's
  // `command`: the sweep runs it once per partition instead of K3-mini; its
  // num_hidden_layers (and attn_res_block_size) are the model's.
  std::optional<ExternalEngine> external;
  // What the sweep must conclude (validated: verdict, identical_splits, identical,
  // diverged, config_rejected, caught_by).
  nlohmann::json expect = nlohmann::json::object();
};

// Reads and validates the scenario file at `path`, then refuses a backend or transport
// this build cannot provide (capabilities.h). Relative paths inside it resolve against
// its directory. A missing file gives `<path>: cannot open`.
Result<Scenario> load_scenario(const std::string& path);

// Validates an already parsed scenario: the file format, every bound and the `expect`
// block, but not what this build provides (a report of a CUDA sweep merges anywhere).
// `source_name` prefixes every error message and gives the default `name` (its stem);
// relative paths resolve against `base_dir`.
Result<Scenario> parse_scenario(const nlohmann::json& j, const std::string& source_name,
                                const std::string& base_dir);

// The scenario as JSON with every field present, defaults filled in and the model fully
// resolved (all ModelConfig fields under `model.overrides`). Keys are sorted, so the dump
// is deterministic; `parse_scenario` accepts it and resolves it to the same JSON.
// `source_path` is left out.
nlohmann::json resolved_scenario_json(const Scenario& s);

// Refuses (invalid input, naming `source_name` and /backend or /transport) a backend or
// transport that this build or machine cannot provide.
Status check_capabilities(const Scenario& scenario, const std::string& source_name);

// Where JSON `text` first nests arrays and objects deeper than `max_depth`, as
// "<line>:<column>: JSON nested deeper than <max_depth> levels"; empty when it does not.
// Every reader of a JSON file (scenarios, waivers) refuses such text before the JSON
// library, whose recursion a hostile file could exhaust, sees it.
std::string json_nesting_error(const std::string& text, int max_depth);

}  // namespace splitcheck
