#include "reference/generate.h"

#include <algorithm>

namespace splitcheck {

Result<GenerationResult> generate_greedy(Engine& engine,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         const GenerationOptions& options, RunRecord* record) {
  GenerationResult result;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<int32_t>& prompt = prompts[p];
    if (prompt.empty()) return invalid_input("prompt " + std::to_string(p) + " is empty");
    engine.reset_sequence();
    SequenceResult seq;
    seq.prompt_ids = prompt;
    const size_t chunk =
        options.prefill_chunk > 0 ? static_cast<size_t>(options.prefill_chunk) : prompt.size();
    int32_t next = 0;
    for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
      const size_t end = std::min(prompt.size(), begin + chunk);
      ForwardRequest req{{prompt.begin() + begin, prompt.begin() + end},
                         ForwardKind::kPrefill,
                         static_cast<int64_t>(begin),
                         result.forwards++};
      ASSIGN_OR_RETURN(ForwardResult out, engine.forward(req, record));
      next = out.next_tokens.data<int32_t>()[out.next_tokens.dim(0) - 1];
    }
    seq.emitted.push_back(next);
    int64_t position = static_cast<int64_t>(prompt.size());
    while (static_cast<int>(seq.emitted.size()) < options.max_new_tokens) {
      ForwardRequest req{{next}, ForwardKind::kDecode, position++, result.forwards++};
      ASSIGN_OR_RETURN(ForwardResult out, engine.forward(req, record));
      next = out.next_tokens.data<int32_t>()[0];
      seq.emitted.push_back(next);
    }
    if (record != nullptr) {
      const std::string g = "generation/" + std::to_string(p) + "/";
      record->add(g + "prompt_ids", ids_tensor(seq.prompt_ids));
      record->add(g + "emitted", ids_tensor(seq.emitted));
    }
    result.sequences.push_back(std::move(seq));
  }
  return result;
}

}  // namespace splitcheck
