#include "reference/speculative.h"

#include <algorithm>

#include "kernels/cpu/primitives.h"
#include "reference/splitmix.h"

namespace splitcheck {
namespace {

Tensor proposals_tensor(const std::vector<std::vector<int32_t>>& p, int gamma) {
  Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(p.size()), gamma});
  for (size_t i = 0; i < p.size(); ++i)
    std::copy(p[i].begin(), p[i].end(), t.data<int32_t>() + i * static_cast<size_t>(gamma));
  return t;
}

}  // namespace

bool Departure::departs(int64_t request, int64_t position, int k) const {
  if (rate <= 0.0) return false;
  uint64_t h = splitmix64(seed ^ 0x6465706172747572ull);  // "departur"
  h = splitmix64(h ^ static_cast<uint64_t>(request));
  h = splitmix64(h ^ static_cast<uint64_t>(position));
  h = splitmix64(h ^ static_cast<uint64_t>(k));
  // 53 random bits -> u in [0, 1).
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return u < rate;
}

int32_t second_choice(const float* scores, int64_t n, int32_t best) {
  return static_cast<int32_t>(cpu::second_argmax(scores, n, best));
}

Status Drafter::observe_group(std::span<Drafter* const> group,
                              std::span<const Observation> observations) {
  for (size_t i = 0; i < group.size(); ++i)
    RETURN_IF_ERROR(group[i]->observe(*observations[i].ids, *observations[i].taps));
  return Status::ok();
}

Status Drafter::propose_group(std::span<Drafter* const> group, std::span<const int32_t> anchors,
                              int gamma, std::span<std::vector<int32_t>> proposals) {
  for (size_t i = 0; i < group.size(); ++i) {
    ASSIGN_OR_RETURN(proposals[i], group[i]->propose(anchors[i], gamma));
  }
  return Status::ok();
}

Result<SpeculativeResult> generate_speculative(Engine& engine, Drafter& drafter,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const SpeculativeOptions& options,
                                               RunRecord* record) {
  SpeculativeResult result;
  GenerationResult& gen = result.generation;
  const int gamma = options.gamma;
  const int max_new = options.generation.max_new_tokens;
  result.accepted_histogram.assign(static_cast<size_t>(gamma) + 1, 0);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<int32_t>& prompt = prompts[p];
    if (prompt.empty()) return invalid_input("prompt " + std::to_string(p) + " is empty");
    engine.reset_sequence();
    drafter.reset(static_cast<int64_t>(p));
    SequenceResult seq;
    SpeculativeSequence spec;
    seq.prompt_ids = prompt;
    const size_t chunk = options.generation.prefill_chunk > 0
                             ? static_cast<size_t>(options.generation.prefill_chunk)
                             : prompt.size();
    int32_t anchor = 0;
    for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
      const size_t end = std::min(prompt.size(), begin + chunk);
      ForwardRequest req{{prompt.begin() + begin, prompt.begin() + end},
                         ForwardKind::kPrefill,
                         static_cast<int64_t>(begin),
                         gen.forwards++};
      ASSIGN_OR_RETURN(ForwardResult out, engine.forward(req, record));
      RETURN_IF_ERROR(drafter.observe(req.ids, out.taps));
      anchor = out.next_tokens.data<int32_t>()[out.next_tokens.dim(0) - 1];
    }
    seq.emitted.push_back(anchor);
    int64_t position = static_cast<int64_t>(prompt.size());
    while (static_cast<int>(seq.emitted.size()) < max_new) {
      ASSIGN_OR_RETURN(std::vector<int32_t> x, drafter.propose(anchor, gamma));
      if (static_cast<int>(x.size()) != gamma)
        return internal_error("drafter proposed " + std::to_string(x.size()) + " tokens");
      engine.save_state();
      ForwardRequest verify{{anchor}, ForwardKind::kVerify, position, gen.forwards++};
      verify.ids.insert(verify.ids.end(), x.begin(), x.end());
      ASSIGN_OR_RETURN(ForwardResult v, engine.forward(verify, record));
      const int32_t* y = v.next_tokens.data<int32_t>();
      int a = 0;
      while (a < gamma && x[a] == y[a]) ++a;
      for (int i = 0; i < a; ++i) seq.emitted.push_back(x[i]);
      seq.emitted.push_back(y[a]);
      spec.proposals.push_back(x);
      spec.accepted.push_back(a);
      // Rollback and replay of the verified positions [t_n, x_1..x_a].
      engine.restore_state();
      ForwardRequest replay{{anchor}, ForwardKind::kReplay, position, gen.forwards++};
      replay.ids.insert(replay.ids.end(), x.begin(), x.begin() + a);
      ASSIGN_OR_RETURN(ForwardResult r, engine.forward(replay, record));
      if (r.next_tokens.data<int32_t>()[a] != y[a]) {
        if (options.batch_invariant)
          return internal_error("replay predicted a different bonus token than the verify");
        ++result.replay_bonus_mismatches;
      }
      RETURN_IF_ERROR(drafter.observe(replay.ids, r.taps));
      position += a + 1;
      anchor = y[a];
      ++result.steps;
      result.accepted_total += a;
      ++result.accepted_histogram[static_cast<size_t>(a)];
    }
    std::vector<int32_t> all_emitted = seq.emitted;
    if (static_cast<int>(seq.emitted.size()) > max_new) seq.emitted.resize(max_new);
    if (record != nullptr) {
      const std::string g = "generation/" + std::to_string(p) + "/";
      record->add(g + "prompt_ids", ids_tensor(seq.prompt_ids));
      record->add(g + "emitted", ids_tensor(seq.emitted));
      const std::string s = "spec/" + std::to_string(p) + "/";
      record->add(s + "proposals", proposals_tensor(spec.proposals, gamma));
      record->add(s + "accepted", ids_tensor(spec.accepted));
      record->add(s + "emitted", ids_tensor(all_emitted));
    }
    gen.sequences.push_back(std::move(seq));
    result.sequences.push_back(std::move(spec));
  }
  if (result.steps > 0) {
    const double steps = static_cast<double>(result.steps);
    const double acc = static_cast<double>(result.accepted_total);
    result.mean_accepted = acc / steps;
    result.acceptance_rate = acc / (steps * gamma);
    result.tokens_per_forward = 1.0 + acc / steps;
  }
  if (record != nullptr) {
    Tensor hist = Tensor::zeros(DType::kI32, {gamma + 1});
    std::copy(result.accepted_histogram.begin(), result.accepted_histogram.end(),
              hist.data<int32_t>());
    record->add("spec/accepted_histogram", std::move(hist));
    record->set_attr("spec", "steps", result.steps);
    record->set_attr("spec", "gamma", int64_t{gamma});
    record->set_attr("spec", "acceptance_rate", result.acceptance_rate);
    record->set_attr("spec", "tokens_per_forward", result.tokens_per_forward);
    record->set_attr("spec", "mean_accepted", result.mean_accepted);
  }
  return result;
}

}  // namespace splitcheck
