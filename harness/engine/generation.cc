#include "harness/engine/generation.h"

#include <fmt/format.h>

#include <atomic>

#include "harness/engine/run.h"
#include "kernels/batch.h"
#include "reference/dspark.h"
#include "reference/eagle3.h"
#include "reference/spec_methods.h"

namespace splitcheck {
void score(const Scenario&, const PreparedWorkload& w, const GenerationResult& g,
           GenerationSummary& out) {
  for (size_t p = 0; p < g.sequences.size() && p < w.problems.size(); ++p) {
    const std::string text = detokenize(g.sequences[p].emitted);
    const auto st = extract_strict(text);
    const auto fl = extract_flexible(text);
    out.strict_correct += st && *st == w.problems[p].answer;
    out.flexible_correct += fl && *fl == w.problems[p].answer;
  }
}

std::vector<std::string> drafter_tensor_names(const Scenario& s) {
  std::vector<TensorSpec> specs;
  if (s.speculative.method == "eagle3") specs = eagle3_tensor_specs(s.model);
  if (s.speculative.method == "dspark")
    specs = drafter_tensor_specs(s.model, "dspark", static_cast<int>(s.capture_ids.size()));
  std::vector<std::string> names;
  for (const TensorSpec& t : specs) names.push_back(t.name);
  return names;
}

AcceptanceFigures acceptance_figures(const GenerationSummary& g) {
  AcceptanceFigures f;
  f.speculative = g.speculative;
  f.steps = g.spec.steps;
  f.accepted = g.spec.accepted_total;
  f.acceptance_rate = g.spec.acceptance_rate;
  f.tokens_per_forward = g.spec.tokens_per_forward;
  f.mean_accepted = g.spec.mean_accepted;
  f.accepted_histogram = g.spec.accepted_histogram;
  f.strict_correct = g.strict_correct;
  f.flexible_correct = g.flexible_correct;
  f.prompts = static_cast<int>(g.generation.sequences.size());
  return f;
}

Status bind_drafter(const Scenario& s, const DrafterHost& host, DrafterBinding& binding) {
  const FaultSet faults{s.faults};
  binding = share_with_target(host.weights);
  if (faults.has("draft.own_embedding") && !host.is_first) {
    // The historical bug: under PP the drafter builds its own embedding, which its
    // checkpoint does not have, so it stays as constructed (zeros), on the device the
    // drafter runs on, like every weight of its stage.
    binding.own_embedding = Tensor::zeros(
        DType::kBF16, {s.model.vocab_size, s.model.hidden_size}, backend_device(s.backend));
    binding.embed = &binding.own_embedding;
    binding.source = "own";
  }
  if (s.speculative.context_only_producer) return Status::ok();
  return check_shared_embedding(binding, s.model, host.stage, s.speculative.method,
                                faults.has("draft.vocab_from_embedding"));
}

DrafterPlacement describe_drafter(const Scenario& s, const DrafterBinding& binding,
                                  const DrafterHost& host) {
  DrafterPlacement p;
  p.method = s.speculative.method;
  p.stage = host.stage;
  p.embedding_source = binding.source;
  p.same_object_as_target = binds_target_embedding(binding, host.weights);
  return p;
}

Status probe_drafter_load(const Scenario& s, const Stage& stage) {
  DrafterBinding binding;
  return bind_drafter(s, DrafterHost{stage.weights(), stage.index(), stage.is_first()}, binding);
}

bool same_acceptance(const AcceptanceFigures& a, const AcceptanceFigures& ref) {
  return a.speculative && ref.speculative && a.steps == ref.steps && a.accepted == ref.accepted &&
         a.accepted_histogram == ref.accepted_histogram && a.strict_correct == ref.strict_correct &&
         a.flexible_correct == ref.flexible_correct;
}

std::string histogram_text(const std::vector<int64_t>& h) {
  std::string out;
  for (size_t a = 0; a < h.size(); ++a) out += fmt::format("{}a={}: {}", a ? ", " : "", a, h[a]);
  return out;
}

namespace {

// A drafter that counts the calls it forwards to the one it wraps.
class CountedDrafter : public Drafter {
 public:
  CountedDrafter(std::unique_ptr<Drafter> inner, int64_t* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  void reset(int64_t request) override { inner_->reset(request); }
  // Serving runs several requests' drafters at once, so the shared count is atomic.
  Status observe(const std::vector<int32_t>& ids, const Tensor& taps) override {
    std::atomic_ref<int64_t>(*calls_).fetch_add(1);
    return inner_->observe(ids, taps);
  }
  Result<std::vector<int32_t>> propose(int32_t anchor, int gamma) override {
    std::atomic_ref<int64_t>(*calls_).fetch_add(1);
    return inner_->propose(anchor, gamma);
  }
  // A group call counts a call a drafter and passes the wrapped drafters on.
  bool groups() const override { return inner_->groups(); }
  Status observe_group(std::span<Drafter* const> group,
                       std::span<const Observation> observations) override {
    std::atomic_ref<int64_t>(*calls_).fetch_add(static_cast<int64_t>(group.size()));
    const std::vector<Drafter*> inner = unwrapped(group);
    return inner_->observe_group(inner, observations);
  }
  Status propose_group(std::span<Drafter* const> group, std::span<const int32_t> anchors, int gamma,
                       std::span<std::vector<int32_t>> proposals) override {
    std::atomic_ref<int64_t>(*calls_).fetch_add(static_cast<int64_t>(group.size()));
    const std::vector<Drafter*> inner = unwrapped(group);
    return inner_->propose_group(inner, anchors, gamma, proposals);
  }

 private:
  // The drafters a group's counted drafters wrap (any other as it is).
  static std::vector<Drafter*> unwrapped(std::span<Drafter* const> group) {
    std::vector<Drafter*> out;
    for (Drafter* d : group) {
      auto* counted = dynamic_cast<CountedDrafter*>(d);
      out.push_back(counted != nullptr ? counted->inner_.get() : d);
    }
    return out;
  }
  std::unique_ptr<Drafter> inner_;
  int64_t* calls_;
};

Result<std::unique_ptr<Drafter>> make_uncounted_drafter(const Scenario& s, const WeightStore& own,
                                                        const DrafterBinding& binding) {
  const int n_taps = static_cast<int>(s.capture_ids.size());
  const Departure departure{s.model.seed, s.speculative.departure_rate};
  if (s.speculative.method == "eagle3") {
    if (n_taps != kEagle3Taps)
      return config_rejected("the eagle3 drafter fuses " + std::to_string(kEagle3Taps) +
                             " taps; the scenario captures " + std::to_string(n_taps));
    ASSIGN_OR_RETURN(std::unique_ptr<Eagle3Drafter> e,
                     Eagle3Drafter::create(s.model, own, binding));
    e->set_departure(departure);
    return std::unique_ptr<Drafter>(std::move(e));
  }
  if (s.speculative.method != "dspark")
    return config_rejected("no drafter for speculative method " + s.speculative.method);
  ASSIGN_OR_RETURN(std::unique_ptr<DsparkDrafter> d,
                   DsparkDrafter::create(s.model, own, binding, n_taps));
  d->set_departure(departure);
  return std::unique_ptr<Drafter>(std::move(d));
}

}  // namespace

Result<std::unique_ptr<Drafter>> make_drafter(const Scenario& s, const WeightStore& own,
                                              const DrafterBinding& binding, int64_t* calls) {
  ASSIGN_OR_RETURN(std::unique_ptr<Drafter> d, make_uncounted_drafter(s, own, binding));
  if (calls == nullptr) return d;
  return std::unique_ptr<Drafter>(std::make_unique<CountedDrafter>(std::move(d), calls));
}

Result<GenerationSummary> run_generation(const Scenario& s, Engine& engine, const DrafterHost& host,
                                         WeightSource& source, const PreparedWorkload& workload,
                                         RunRecord* record) {
  if (s.serving.enabled) return run_serving_generation(s, engine, host, source, workload, record);
  GenerationSummary out;
  const GenerationOptions gen{s.workload.max_new_tokens, s.prefill_chunk};
  const SpecMethodInfo* method = find_spec_method(s.speculative.method);
  out.drafter.method = s.speculative.method;
  out.drafter.stage = host.stage;
  const bool eagle3 = s.speculative.method == "eagle3";
  if (method == nullptr || !method->has_drafter || (s.speculative.method != "dspark" && !eagle3)) {
    ASSIGN_OR_RETURN(out.generation, generate_greedy(engine, workload.prompts, gen, record));
    score(s, workload, out.generation, out);
    return out;
  }

  // share_with_target on the stage where the drafter runs, then the load-time check.
  DrafterBinding binding;
  const Status bound = bind_drafter(s, host, binding);
  out.drafter = describe_drafter(s, binding, host);
  if (!bound.is_ok()) {
    out.drafter.refusal = bound.message();
    return bound;
  }
  const bool producer = s.speculative.context_only_producer;
  const std::vector<std::string> names = drafter_tensor_names(s);
  ASSIGN_OR_RETURN(WeightStore own, load_weights(source, names),
                   std::string(s.speculative.method) + " drafter");
  if (producer) {
    // A context-only producer writes the draft's context KV for every prompt position and
    // proposes nothing: prefill only, no embedding needed.
    binding.embed = binding.embed ? binding.embed : &binding.own_embedding;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Drafter> drafter,
                   make_drafter(s, own, binding, &out.drafter_calls));
  SpeculativeOptions opts{gen, s.speculative.gamma, batch_invariant(backend_device(s.backend))};
  if (producer) opts.generation.max_new_tokens = 1;
  ASSIGN_OR_RETURN(out.spec,
                   generate_speculative(engine, *drafter, workload.prompts, opts, record));
  out.speculative = true;
  out.generation = out.spec.generation;
  score(s, workload, out.generation, out);
  if (record != nullptr) {
    record->set_attr("spec", "strict_correct", int64_t{out.strict_correct});
    record->set_attr("spec", "flexible_correct", int64_t{out.flexible_correct});
    record->set_attr("spec", "prompts", static_cast<int64_t>(workload.prompts.size()));
  }
  return out;
}

}  // namespace splitcheck
