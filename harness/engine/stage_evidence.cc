#include "harness/engine/stage_evidence.h"

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

std::string placed_embedding(const Scenario& s, const Partition& partition, int index) {
  const bool first = index == 0, last = index == partition.stages() - 1;
  if (first) return "real";
  return last_stage_holds_embedding_copy(s.speculative.method, last, first,
                                         s.speculative.context_only_producer)
             ? "copy-for-drafter"
             : "missing";
}

void add_drafter(const DrafterPlacement& d, std::vector<StageFacts>& facts) {
  if (d.embedding_source == "none" || d.stage < 0 || d.stage >= static_cast<int>(facts.size()))
    return;
  StageFacts& f = facts[d.stage];
  f.drafter_method = d.method;
  f.drafter_embedding = d.embedding_source;
  f.drafter_same_object_as_target = d.same_object_as_target;
  // The drafter's embedding is the stage's own storage, or one the stage does not hold.
  f.drafter_embedding_storage = d.same_object_as_target ? f.embedding_storage : "unheld";
}

}  // namespace

std::string status_word(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidInput:
      return "invalid-input";
    case StatusCode::kInternal:
      return "internal-error";
    case StatusCode::kConfigRejected:
      return "config-rejected";
  }
  return "unknown";
}

std::vector<StageFacts> partition_stage_facts(const Scenario& s, const Partition& partition,
                                              const std::vector<StageHoldings>& holdings,
                                              const DrafterPlacement& drafter) {
  std::vector<StageFacts> facts;
  for (const StageHoldings& h : holdings) {
    StageFacts f;
    f.index = h.index;
    f.layer_begin = h.range.begin;
    f.layer_end = h.range.end;
    f.embedding = h.embedding;
    f.placed_embedding = placed_embedding(s, partition, h.index);
    f.parameter_bytes = static_cast<int64_t>(h.parameter_bytes);
    f.placed_parameter_bytes =
        static_cast<int64_t>(placed_parameter_bytes(placed_stage(s, partition, h.index)));
    f.held_tensors = static_cast<int64_t>(h.tensors);
    f.held_storages = static_cast<int64_t>(h.storages);
    f.embedding_storage = h.embedding_storage;
    f.head_storage = h.head_storage;
    // Measured: the head is tied when it is the stage's own embedding storage.
    if (!h.head_storage.empty()) f.head_tied = h.head_storage == h.embedding_storage;
    if (f.placed_embedding == "copy-for-drafter") f.drafter_method = s.speculative.method;
    facts.push_back(std::move(f));
  }
  add_drafter(drafter, facts);
  return facts;
}

StageFacts pp1_stage_facts(const Scenario& s, const WeightStore& weights,
                           const DrafterPlacement& drafter) {
  const Partition whole = *Partition::from_cuts({}, s.model.num_hidden_layers);
  const StageHoldings held = measure_holdings(placed_stage(s, whole, 0), weights);
  return partition_stage_facts(s, whole, {held}, drafter).front();
}

void add_refusal_probe(const Scenario& s, const Partition& partition, WeightSource& source,
                       std::vector<StageFacts>& facts) {
  const int last = partition.stages() - 1;
  if (!shares_embedding(s) || partition.stages() < 2 || s.speculative.context_only_producer ||
      last >= static_cast<int>(facts.size()))
    return;
  StageFacts& f = facts[last];
  f.drafter_method = s.speculative.method;
  StageConfig config = placed_stage(s, partition, last);
  config.faults = FaultSet{s.faults};
  config.spec_method = "none";  // placed without the drafter's copy
  Result<std::unique_ptr<Stage>> stage = Stage::create(config, source);
  if (!stage.is_ok()) {
    f.refusal_status = "not-probed";
    f.refusal_probe = fmt::format("the refusal probe could not build stage {}: {}", last,
                                  stage.status().message());
  } else if ((*stage)->weights().has("embed_tokens.weight")) {
    f.refusal_status = "not-probed";
    f.refusal_probe =
        fmt::format("the refusal probe's stage {} holds an embedding it was placed without", last);
  } else {
    const Status probe = probe_drafter_load(s, **stage);
    f.refusal_status = status_word(probe.code());
    f.refusal_probe = probe.is_ok() ? "accepted a missing placeholder" : probe.message();
  }
  f.refusal_clear = is_clear_refusal(f.refusal_status, f.refusal_probe, last, f.drafter_method);
}

}  // namespace splitcheck
