// run_generation for serving scenarios: the drafter bound once on its stage, one drafter
// instance per request, the serving loop.
#include <fmt/format.h>

#include "harness/engine/generation.h"
#include "harness/engine/run.h"
#include "harness/engine/serving.h"
#include "kernels/batch.h"
#include "reference/spec_methods.h"

namespace splitcheck {

Result<GenerationSummary> run_serving_generation(const Scenario& s, Engine& engine,
                                                 const DrafterHost& host, WeightSource& source,
                                                 const PreparedWorkload& workload,
                                                 RunRecord* record, const ServingOptions* subset,
                                                 ServingResult* serving) {
  GenerationSummary out;
  out.drafter.method = s.speculative.method;
  out.drafter.stage = host.stage;
  ServingOptions opt;
  if (subset != nullptr) opt = *subset;
  opt.config = s.serving;
  opt.max_new_tokens = s.workload.max_new_tokens;
  // The backend decides, unless the caller already asked for the other behaviour.
  opt.batch_invariant = opt.batch_invariant && batch_invariant(backend_device(s.backend));
  std::vector<std::vector<int32_t>> prompts;
  if (subset != nullptr && !subset->ids.empty()) {
    for (int32_t id : subset->ids) {
      if (id < 0 || static_cast<size_t>(id) >= workload.prompts.size())
        return internal_error(fmt::format("request {} is not in the workload", id));
      prompts.push_back(workload.prompts[static_cast<size_t>(id)]);
    }
  } else {
    prompts = workload.prompts;
  }
  const SpecMethodInfo* method = find_spec_method(s.speculative.method);
  const bool speculative = method != nullptr && method->has_drafter;
  DrafterBinding binding;
  WeightStore own;
  DrafterFactory factory;
  if (speculative) {
    const Status bound = bind_drafter(s, host, binding);
    out.drafter = describe_drafter(s, binding, host);
    if (!bound.is_ok()) {
      out.drafter.refusal = bound.message();
      return bound;
    }
    ASSIGN_OR_RETURN(own, load_weights(source, drafter_tensor_names(s)),
                     s.speculative.method + " drafter");
    // One drafter per request, each with its own draft cache; refused up front when the
    // scenario cannot have one (an eagle3 drafter without its three taps).
    RETURN_IF_ERROR(make_drafter(s, own, binding).status());
    opt.gamma = s.speculative.gamma;
    factory = [&](int32_t request) -> Result<std::unique_ptr<Drafter>> {
      ASSIGN_OR_RETURN(std::unique_ptr<Drafter> d,
                       make_drafter(s, own, binding, &out.drafter_calls));
      d->reset(request);
      return d;
    };
  }
  ASSIGN_OR_RETURN(ServingResult served, serve_requests(engine, prompts, factory, opt, record));
  out.speculative = speculative;
  out.spec = served.spec;
  out.generation = served.spec.generation;
  if (subset == nullptr) score(s, workload, out.generation, out);
  if (record != nullptr && speculative) {
    record->set_attr("spec", "strict_correct", int64_t{out.strict_correct});
    record->set_attr("spec", "flexible_correct", int64_t{out.flexible_correct});
    record->set_attr("spec", "prompts", static_cast<int64_t>(prompts.size()));
  }
  if (serving != nullptr) *serving = std::move(served);
  return out;
}

}  // namespace splitcheck
