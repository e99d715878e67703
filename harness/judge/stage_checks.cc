#include "harness/judge/stage_checks.h"

#include <fmt/format.h>

#include "reference/spec_methods.h"

namespace splitcheck {
namespace {

// Stage `index` of `partition` as the fixed protocol places it (no faults).
StageConfig placed_stage(const Scenario& s, const Partition& partition, int index) {
  return StageConfig{s.model,
                     partition,
                     index,
                     s.capture_ids,
                     s.dump_level,
                     FaultSet{},
                     s.speculative.method,
                     s.speculative.context_only_producer};
}

bool shares_embedding(const Scenario& s) {
  const SpecMethodInfo* m = find_spec_method(s.speculative.method);
  return m != nullptr && m->has_drafter && m->shares_target_embedding;
}

}  // namespace

std::vector<CheckFailure> check_memory(const Scenario& s, const Partition& partition,
                                       const std::vector<StageHoldings>& stages) {
  std::vector<CheckFailure> out;
  for (const StageHoldings& h : stages) {
    const size_t allowed = placed_parameter_bytes(placed_stage(s, partition, h.index));
    const size_t held = h.parameter_bytes;
    if (held == allowed) continue;
    const bool extra = held > allowed;
    out.push_back(CheckFailure{
        "memory",
        fmt::format("memory: stage {} holds {} parameter bytes, its placement allows {}: {} {} "
                    "bytes measured",
                    h.index, held, allowed, extra ? held - allowed : allowed - held,
                    extra ? "extra" : "missing")});
    const bool copy_wanted =
        last_stage_holds_embedding_copy(s.speculative.method, h.index == partition.stages() - 1,
                                        h.index == 0, s.speculative.context_only_producer);
    if (extra && h.embedding == "copy-for-drafter" && !copy_wanted)
      out.back().message += " (it holds an embedding copy no drafter needs)";
  }
  return out;
}

std::vector<CheckFailure> check_embedding_placement(const Scenario& s, const Partition& partition,
                                                    const std::vector<StageHoldings>& stages) {
  std::vector<CheckFailure> out;
  for (const StageHoldings& h : stages) {
    if (h.embedding != "missing") continue;  // an unwanted copy is memory's to report
    const bool first = h.index == 0;
    const bool last = h.index == partition.stages() - 1;
    const bool wanted =
        first || last_stage_holds_embedding_copy(s.speculative.method, last, first,
                                                 s.speculative.context_only_producer);
    if (!wanted) continue;
    out.push_back(CheckFailure{
        "embedding", fmt::format("embedding: stage {} holds no embedding, the {} needs '{}'",
                                 h.index, first ? "target" : s.speculative.method + " drafter",
                                 first ? "real" : "copy-for-drafter")});
  }
  return out;
}

std::optional<CheckFailure> check_drafter_identity(const Scenario& s, const DrafterPlacement& d) {
  if (!shares_embedding(s) || s.speculative.context_only_producer) return std::nullopt;
  if (d.embedding_source == "target" && d.same_object_as_target) return std::nullopt;
  std::string what = fmt::format("a '{}' embedding", d.embedding_source);
  if (d.embedding_source == "own") what += " (never loaded)";
  if (d.embedding_source == "target") what = "an embedding with storage of its own";
  return CheckFailure{
      "embedding",
      fmt::format("embedding: the {} drafter on stage {} uses {}, not the target's object",
                  s.speculative.method, d.stage, what)};
}

std::optional<CheckFailure> check_refusal(const Scenario& s, int stage, const Status& probe) {
  const std::string stage_name = fmt::format("stage {}", stage);
  const bool clear = probe.code() == StatusCode::kConfigRejected &&
                     probe.message().find(stage_name) != std::string::npos &&
                     probe.message().find(s.speculative.method) != std::string::npos;
  if (clear) return std::nullopt;
  const std::string said = probe.is_ok() ? "accepted a missing placeholder" : probe.message();
  return CheckFailure{
      "embedding",
      fmt::format("embedding: loading the {} drafter on {}, which holds no embedding, never "
                  "gives the refusal naming the stage and the method (unreachable refusal: {})",
                  s.speculative.method, stage_name, said)};
}

std::optional<CheckFailure> check_refusal_reachable(const Scenario& s, const Partition& partition,
                                                    WeightSource& source,
                                                    std::string* probe_answer) {
  if (!shares_embedding(s) || partition.stages() < 2 || s.speculative.context_only_producer)
    return std::nullopt;
  const int last = partition.stages() - 1;
  StageConfig config = placed_stage(s, partition, last);
  config.faults = FaultSet{s.faults};
  config.spec_method = "none";  // placed without the drafter's copy
  Result<std::unique_ptr<Stage>> stage = Stage::create(config, source);
  if (!stage.is_ok()) {
    return CheckFailure{
        "embedding", fmt::format("embedding: the refusal probe could not build stage {}: {}", last,
                                 stage.status().message())};
  }
  if ((*stage)->weights().has("embed_tokens.weight")) {
    return CheckFailure{"embedding",
                        fmt::format("embedding: the refusal probe's stage {} holds an embedding "
                                    "it was placed without",
                                    last)};
  }
  const Status probe = probe_drafter_load(s, **stage);
  if (probe_answer != nullptr)
    *probe_answer = probe.is_ok() ? "accepted a missing placeholder" : probe.message();
  return check_refusal(s, last, probe);
}

}  // namespace splitcheck
