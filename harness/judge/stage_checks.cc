#include "harness/judge/stage_checks.h"

#include <fmt/format.h>

#include <algorithm>

#include "harness/judge/cause.h"

namespace splitcheck {
namespace {

bool all_of_stages(const std::vector<StageFacts>& stages, bool (*has)(const StageFacts&)) {
  return !stages.empty() && std::all_of(stages.begin(), stages.end(), has);
}
bool has_bytes(const StageFacts& f) { return f.parameter_bytes.has_value(); }
bool has_placed_bytes(const StageFacts& f) { return f.placed_parameter_bytes.has_value(); }

std::string method_of(const StageFacts& f) {
  return f.drafter_method.empty() ? std::string("drafter's") : f.drafter_method;
}

// memory's per-stage rules: the bytes held against the bytes placed, and a copy held that
// the placement does not give.
void per_stage_memory(const StageFacts& f, std::vector<CheckFailure>& out) {
  bool bytes_differ = false;
  if (f.parameter_bytes && f.placed_parameter_bytes) {
    const int64_t held = *f.parameter_bytes, allowed = *f.placed_parameter_bytes;
    bytes_differ = held != allowed;
    if (bytes_differ) {
      const bool extra = held > allowed;
      std::string m = fmt::format(
          "memory: stage {} holds {} parameter bytes, its placement allows {}: {} {} bytes "
          "measured",
          f.index, held, allowed, extra ? held - allowed : allowed - held,
          extra ? "extra" : "missing");
      if (extra && f.embedding == "copy-for-drafter" && f.placed_embedding != "copy-for-drafter")
        m += " (it holds an embedding copy no drafter needs)";
      out.push_back({"memory", std::move(m)});
    }
  }
  if (!bytes_differ && f.embedding == "copy-for-drafter" && f.placed_embedding == "missing")
    out.push_back({"memory", fmt::format("memory: stage {} holds an embedding copy its placement "
                                         "does not give it (placed_embedding \"missing\")",
                                         f.index)});
  if (f.held_tensors && f.held_storages && *f.held_storages > *f.held_tensors)
    out.push_back({"memory", fmt::format("memory: stage {} records {} held storages over {} held "
                                         "tensors",
                                         f.index, *f.held_storages, *f.held_tensors)});
}

void memory_rules(const StageEvidence& run, const StageEvidence& pp1, StageJudgement& j) {
  if (run.stages.empty()) {
    j.not_judged.push_back({"memory", "its dump carries no /stages"});
    return;
  }
  for (const StageFacts& f : run.stages) per_stage_memory(f, j.failures);
  if (all_of_stages(run.stages, has_bytes) && all_of_stages(pp1.stages, has_bytes)) {
    int64_t held = 0, pp1_held = 0;
    for (const StageFacts& f : run.stages) held += *f.parameter_bytes;
    for (const StageFacts& f : pp1.stages) pp1_held += *f.parameter_bytes;
    if (held < pp1_held)
      j.failures.push_back({"memory", fmt::format("memory: the stages hold {} parameter bytes, {} "
                                                  "fewer than PP=1's {} (weights not loaded)",
                                                  held, pp1_held - held, pp1_held)});
  }
  if (!all_of_stages(run.stages, has_bytes))
    j.not_judged.push_back({"memory", "its /stages carry no parameter_bytes"});
  else if (!all_of_stages(run.stages, has_placed_bytes))
    j.not_judged.push_back({"memory",
                            "its /stages carry no placed_parameter_bytes (the bytes its "
                            "placement gives each stage)"});
  else
    j.judged = true;
}

// embedding's placement rules on one stage.
void held_embedding(const StageFacts& f, bool drafter_ran, std::vector<CheckFailure>& out) {
  const std::string& e = f.embedding;
  const bool placed = !f.placed_embedding.empty();
  if (e == "missing" && placed && f.placed_embedding != "missing") {
    out.push_back(
        {"embedding", fmt::format("embedding: stage {} holds no embedding, the {} needs "
                                  "'{}'",
                                  f.index, f.index == 0 ? "target" : method_of(f) + " drafter",
                                  f.placed_embedding)});
  } else if (f.index == 0 && e != "real") {
    out.push_back({"embedding", fmt::format("embedding: stage 0 holds \"{}\", not the real "
                                            "embedding",
                                            e)});
  }
  if (f.index > 0 && e == "real")
    out.push_back({"embedding", fmt::format("embedding: stage {} holds a real embedding (only the "
                                            "first stage does)",
                                            f.index)});
  if (f.index > 0 && e == "copy-for-drafter" && !placed && !drafter_ran)
    out.push_back({"embedding", fmt::format("embedding: stage {} holds a copy for a drafter, but "
                                            "no drafter ran (no /spec)",
                                            f.index)});
}

// embedding's identity rule on the drafter beside one stage.
void drafter_identity(const StageFacts& f, std::vector<CheckFailure>& out) {
  const std::string& d = f.drafter_embedding;
  // No drafter here, or one on a stage its placement gives no embedding (a context-only
  // producer's: it proposes nothing).
  if (d.empty() || d == "none" || f.placed_embedding == "missing") return;
  const std::string who = fmt::format("the {} drafter on stage {}", method_of(f), f.index);
  if (d != "target") {
    out.push_back({"embedding", fmt::format("embedding: {} uses a '{}' embedding{}, not the "
                                            "target's object",
                                            who, d, d == "own" ? " (never loaded)" : "")});
    return;
  }
  if (f.drafter_same_object_as_target == false) {
    out.push_back({"embedding", fmt::format("embedding: {} uses an embedding with storage of its "
                                            "own, not the target's object",
                                            who)});
    return;
  }
  if (!f.embedding_storage.empty() && !f.drafter_embedding_storage.empty() &&
      f.embedding_storage != f.drafter_embedding_storage)
    out.push_back(
        {"embedding", fmt::format("embedding: {} claims the target's object, but its "
                                  "storage {} is not the stage's embedding storage {}",
                                  who, f.drafter_embedding_storage, f.embedding_storage)});
}

// embedding's refusal rule on the probe recorded on one stage.
void refusal(const StageFacts& f, std::vector<CheckFailure>& out) {
  if (f.refusal_status.empty()) return;
  const bool shown = is_clear_refusal(f.refusal_status, f.refusal_probe, f.index, f.drafter_method);
  if (shown && f.refusal_clear != false) return;
  std::string m = fmt::format(
      "embedding: loading the {} drafter on stage {}, which holds no embedding, never gives the "
      "refusal naming the stage and the method (unreachable refusal: {})",
      method_of(f), f.index, f.refusal_probe);
  if (!shown && f.refusal_clear == true) m += "; its refusal_clear says 1, its answer does not";
  if (shown && f.refusal_clear == false) m += "; its refusal_clear says 0";
  out.push_back({"embedding", std::move(m)});
}

void embedding_rules(const StageEvidence& run, const StageEvidence& pp1, StageJudgement& j) {
  if (run.stages.empty()) {
    j.not_judged.push_back({"embedding", "its dump carries no /stages"});
    return;
  }
  j.judged = true;
  for (const StageFacts& f : run.stages) held_embedding(f, run.drafter_ran, j.failures);
  for (const StageFacts& f : run.stages) drafter_identity(f, j.failures);
  for (const StageFacts& f : run.stages) refusal(f, j.failures);
  const std::vector<CheckFailure> tied = tied_head_rule(run, pp1);
  j.failures.insert(j.failures.end(), tied.begin(), tied.end());
}

}  // namespace

StageJudgement judge_stage_checks(const std::vector<std::string>& selected,
                                  const StageEvidence& run, const StageEvidence& pp1) {
  auto wanted = [&](const char* check) {
    return std::find(selected.begin(), selected.end(), check) != selected.end();
  };
  StageJudgement j;
  if (wanted("embedding")) embedding_rules(run, pp1, j);
  if (wanted("memory")) memory_rules(run, pp1, j);
  return j;
}

std::vector<CheckFailure> embedding_placement_rule(const StageFacts& f, bool drafter_ran) {
  std::vector<CheckFailure> out;
  held_embedding(f, drafter_ran, out);
  return out;
}

std::vector<CheckFailure> drafter_identity_rule(const StageFacts& f) {
  std::vector<CheckFailure> out;
  drafter_identity(f, out);
  return out;
}

std::vector<CheckFailure> tied_head_rule(const StageEvidence& run, const StageEvidence& pp1) {
  std::vector<CheckFailure> out;
  const bool pp1_tied = std::any_of(pp1.stages.begin(), pp1.stages.end(),
                                    [](const StageFacts& f) { return f.head_tied == true; });
  if (!pp1_tied) return out;
  bool recorded = false;
  for (const StageFacts& f : run.stages) {
    if (f.head_storage.empty() && !f.head_tied) continue;
    recorded = true;
    if (f.head_tied == true) continue;
    out.push_back(
        {"embedding",
         fmt::format("{}: stage {}'s head{} is not the embedding's storage{}; PP=1's head is",
                     kCauseHeadNotTied, f.index,
                     f.head_storage.empty() ? "" : " (" + f.head_storage + ")",
                     f.embedding_storage.empty() ? " (the stage holds no embedding)"
                                                 : " (" + f.embedding_storage + ")"),
         kCauseHeadNotTied});
  }
  if (!recorded)
    out.push_back({"embedding",
                   fmt::format("{}: no stage records its head (head_storage, head_tied); PP=1's "
                               "head is the embedding's storage",
                               kCauseHeadNotTied),
                   kCauseHeadNotTied});
  return out;
}

std::vector<CheckFailure> refusal_rule(const StageFacts& f) {
  std::vector<CheckFailure> out;
  refusal(f, out);
  return out;
}

}  // namespace splitcheck
