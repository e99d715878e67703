#include "harness/sweep/stage_probes.h"

#include "harness/engine/stage_evidence.h"
#include "harness/judge/stage_checks.h"

namespace splitcheck {

std::vector<CheckFailure> check_memory(const Scenario& s, const Partition& partition,
                                       const std::vector<StageHoldings>& stages) {
  StageEvidence run{partition_stage_facts(s, partition, stages, DrafterPlacement{}), false};
  std::vector<CheckFailure> out;
  for (const CheckFailure& f : judge_stage_checks({"memory"}, run, StageEvidence{}).failures)
    if (f.check == "memory") out.push_back(f);
  return out;
}

std::vector<CheckFailure> check_embedding_placement(const Scenario& s, const Partition& partition,
                                                    const std::vector<StageHoldings>& stages) {
  std::vector<CheckFailure> out;
  for (const StageFacts& f : partition_stage_facts(s, partition, stages, DrafterPlacement{}))
    for (const CheckFailure& c : embedding_placement_rule(f, /*drafter_ran=*/true))
      out.push_back(c);
  return out;
}

std::optional<CheckFailure> check_drafter_identity(const Scenario& s, const DrafterPlacement& d) {
  StageFacts f;
  f.index = d.stage;
  f.placed_embedding = s.speculative.context_only_producer ? "missing" : "real";
  f.drafter_method = d.method;
  f.drafter_embedding = d.embedding_source;
  f.drafter_same_object_as_target = d.same_object_as_target;
  const std::vector<CheckFailure> out = drafter_identity_rule(f);
  if (out.empty()) return std::nullopt;
  return out.front();
}

std::optional<CheckFailure> check_refusal(const Scenario& s, int stage, const Status& probe) {
  StageFacts f;
  f.index = stage;
  f.drafter_method = s.speculative.method;
  f.refusal_status = status_word(probe.code());
  f.refusal_probe = probe.is_ok() ? "accepted a missing placeholder" : probe.message();
  const std::vector<CheckFailure> out = refusal_rule(f);
  if (out.empty()) return std::nullopt;
  return out.front();
}

std::optional<CheckFailure> check_refusal_reachable(const Scenario& s, const Partition& partition,
                                                    WeightSource& source,
                                                    std::string* probe_answer) {
  std::vector<StageFacts> facts(static_cast<size_t>(partition.stages()));
  for (int i = 0; i < partition.stages(); ++i) facts[i].index = i;
  add_refusal_probe(s, partition, source, facts);
  const StageFacts& last = facts.back();
  if (probe_answer != nullptr) *probe_answer = last.refusal_probe;
  const std::vector<CheckFailure> out = refusal_rule(last);
  if (out.empty()) return std::nullopt;
  return out.front();
}

}  // namespace splitcheck
