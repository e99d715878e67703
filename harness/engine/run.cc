#include "harness/engine/run.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "harness/build_info.h"
#include "harness/dump/digest.h"
#include "harness/engine/generation.h"
#include "harness/engine/partitioned_engine.h"
#include "harness/engine/stage_evidence.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {

Result<PreparedWorkload> prepare_workload(const Scenario& s) {
  PreparedWorkload w;
  if (!s.workload.file.empty()) {
    ASSIGN_OR_RETURN(w.problems, load_workload(s.workload.file));
  } else {
    w.problems = generate_gsm8k_style(s.workload.seed, s.workload.prompts);
  }
  if (static_cast<int>(w.problems.size()) < s.workload.prompts) {
    return invalid_input(fmt::format("{}: /workload/prompts: {} prompts asked, the workload has {}",
                                     s.source_path, s.workload.prompts, w.problems.size()));
  }
  w.problems.resize(static_cast<size_t>(s.workload.prompts));
  for (const Problem& p : w.problems) {
    std::vector<int32_t> ids = tokenize_bytes(p.prompt());
    const size_t cap = static_cast<size_t>(s.workload.max_prompt_tokens);
    if (cap > 0 && ids.size() > cap) ids.erase(ids.begin(), ids.end() - static_cast<long>(cap));
    if (ids.size() > static_cast<size_t>(scenario_bounds::kPromptTokens)) {
      return invalid_input(
          fmt::format("{}: /workload/max_prompt_tokens: prompt {} has {} tokens, more than {}; set "
                      "max_prompt_tokens to keep its last ones",
                      s.source_path, w.prompts.size(), ids.size(), scenario_bounds::kPromptTokens));
    }
    w.prompts.push_back(std::move(ids));
  }
  return w;
}

Result<WeightStore> scenario_weights(const Scenario& s, const std::vector<std::string>& names) {
  if (s.checkpoint.empty()) return generate_weights(s.model, names);
  return load_checkpoint(s.checkpoint, s.model, names);
}

Result<std::string> scenario_identity_sha256(const Scenario& s) {
  nlohmann::json j = resolved_scenario_json(s);
  if (!s.workload.file.empty()) {
    ASSIGN_OR_RETURN(std::string h, sha256_file(s.workload.file));
    j["workload"]["file"] = "sha256:" + h;
  }
  if (!s.checkpoint.empty()) {
    ASSIGN_OR_RETURN(std::string h, sha256_file(s.checkpoint));
    j["checkpoint"] = "sha256:" + h;
  }
  j.erase("expect");
  j.erase("description");
  const std::string text = j.dump();
  return sha256_hex(std::as_bytes(std::span(text.data(), text.size())));
}

Result<std::string> model_identity_sha256(const Scenario& s) {
  nlohmann::json j = resolved_scenario_json(s)["model"];
  if (!s.checkpoint.empty()) {
    ASSIGN_OR_RETURN(std::string h, sha256_file(s.checkpoint));
    j["checkpoint_sha256"] = h;
  }
  const std::string text = j.dump();
  return sha256_hex(std::as_bytes(std::span(text.data(), text.size())));
}

Result<DumpHeader> make_dump_header(const Scenario& s, const std::string& partition) {
  DumpHeader h;
  h.scenario_json = resolved_scenario_json(s).dump();
  ASSIGN_OR_RETURN(h.scenario_sha256, scenario_identity_sha256(s));
  ASSIGN_OR_RETURN(h.model_sha256, model_identity_sha256(s));
  h.partition = partition;
  h.backend = s.backend;
  h.producer_json = nlohmann::json{{"name", "splitcheck"},
                                   {"version", SPLITCHECK_VERSION},
                                   {"git_revision", SPLITCHECK_GIT_REVISION}}
                        .dump();
  h.env_json = nlohmann::json{{"compiler", SPLITCHECK_COMPILER},
                              {"flags", SPLITCHECK_CXX_FLAGS},
                              {"device", backend_provenance(s.backend)}}
                   .dump();
  h.level = dump_level_name(s.dump_level);
  return h;
}

Device backend_device(const std::string& backend) {
  return backend == "cuda" ? Device::kCuda : Device::kCpu;
}

Status check_weights_on_backend(const WeightStore& weights, const std::string& backend) {
  const Device want = backend_device(backend);
  for (const auto& [name, t] : weights.tensors())
    if (t.device() != want)
      return internal_error(fmt::format(
          "backend \"{}\": weight {} is on the {}, not the backend's device: the run would "
          "compute where its weights live",
          backend, name, t.device() == Device::kCuda ? "GPU" : "host"));
  return Status::ok();
}

nlohmann::json backend_provenance(const std::string& backend) {
#ifdef SPLITCHECK_HAVE_CUDA
  if (backend_device(backend) == Device::kCuda && cuda::unavailable_reason().empty())
    return nlohmann::json::parse(cuda::provenance_json());
#endif
  return backend_device(backend) == Device::kCuda ? "cuda" : "cpu";
}

std::unique_ptr<WeightSource> scenario_weight_source(const Scenario& s) {
  const Device device = backend_device(s.backend);
  if (s.checkpoint.empty()) return std::make_unique<GeneratedWeights>(s.model, device);
  return std::make_unique<CheckpointWeights>(s.checkpoint, s.model, device);
}

Result<ReferenceRun> run_reference(const Scenario& s) {
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  return run_reference(s, *source);
}

Result<ReferenceRun> run_reference(const Scenario& s, WeightSource& source) {
  ReferenceRun run;
  ASSIGN_OR_RETURN(run.workload, prepare_workload(s));
  std::vector<std::string> names;
  for (const TensorSpec& t : model_tensor_specs(s.model)) names.push_back(t.name);
  ASSIGN_OR_RETURN(WeightStore weights, load_weights(source, names));
  RETURN_IF_ERROR(check_weights_on_backend(weights, s.backend));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ReferenceEngine> engine,
      ReferenceEngine::create(s.model, std::move(weights),
                              EngineOptions{s.capture_ids, s.dump_level, s.speculative.method,
                                            s.speculative.context_only_producer}));
  ASSIGN_OR_RETURN(run.summary, run_generation(s, *engine, DrafterHost{engine->weights()}, source,
                                               run.workload, &run.record));
  run.generation = run.summary.generation;
  run.computed = engine->computed();
  run.computed.drafter = run.summary.drafter_calls;
  run.pp1_stage = pp1_stage_facts(s, engine->weights(), run.summary.drafter);
  return run;
}

Result<ReferenceRun> run_partitioned(const Scenario& s, const std::vector<int>& cuts) {
  // Stages as processes are the sweep's (splitcheck sweep under mpirun); nothing runs as
  // threads in their place.
  if (s.transport != "inproc")
    return invalid_input(fmt::format(
        "{}: /transport: \"{}\" runs under `mpirun ... splitcheck sweep`, not `run --split`",
        s.source_path.empty() ? s.name : s.source_path, s.transport));
  ReferenceRun run;
  ASSIGN_OR_RETURN(run.workload, prepare_workload(s));
  ASSIGN_OR_RETURN(Partition partition, Partition::from_cuts(cuts, s.model.num_hidden_layers));
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  const EngineOptions options{s.capture_ids, s.dump_level, s.speculative.method,
                              s.speculative.context_only_producer};
  ASSIGN_OR_RETURN(
      std::unique_ptr<PartitionedEngine> engine,
      PartitionedEngine::create(s.model, partition, options, FaultSet{s.faults}, *source));
  const int last = partition.stages() - 1;
  ASSIGN_OR_RETURN(
      run.summary,
      run_generation(s, *engine, DrafterHost{engine->last_stage_weights(), last, last == 0},
                     *source, run.workload, &run.record));
  run.generation = run.summary.generation;
  run.computed = engine->computed();
  run.computed.drafter = run.summary.drafter_calls;
  engine->record_holdings(run.record);  // owned_taps beside the facts
  // What each stage holds against its placement, the drafter's embedding and the refusal
  // probe (SPEC 5.4): the facts the stage checks judge, the built-in sweep's own.
  std::vector<StageFacts> facts =
      partition_stage_facts(s, partition, engine->holdings(), run.summary.drafter);
  add_refusal_probe(s, partition, *source, facts);
  for (const StageFacts& f : facts) record_stage_facts(f, run.record);
  return run;
}

Status write_record(const std::string& path, const RunRecord& record, const DumpHeader& header,
                    bool compress) {
  ASSIGN_OR_RETURN(DumpWriter writer, DumpWriter::create(path, header, compress));
  for (const RecordEntry& e : record.entries()) {
    RETURN_IF_ERROR(writer.write("/" + e.path, e.tensor), path);
  }
  for (const auto& [object, attrs] : record.attrs()) {
    for (const auto& [name, value] : attrs) {
      // Named copies: clang 14 cannot capture structured bindings in a lambda.
      const std::string object_path = "/" + object;
      const std::string& attr_name = name;
      Status st = std::visit(
          [&](const auto& v) { return writer.set_attr(object_path, attr_name, v); }, value);
      RETURN_IF_ERROR(st, path);
    }
  }
  return writer.finish();
}

}  // namespace splitcheck
