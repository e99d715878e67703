// Greedy generation over any Engine: prefill (whole or in chunks), then one decode
// forward per new token. The same loop drives the reference and the partitioned engine,
// so any difference between their dumps comes from the engines, never from the loop.
#pragma once

#include <vector>

#include "reference/engine.h"

namespace splitcheck {

struct GenerationOptions {
  int max_new_tokens = 8;
  int prefill_chunk = 0;  // 0: the whole prompt in one forward
};

struct SequenceResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> emitted;
};

struct GenerationResult {
  std::vector<SequenceResult> sequences;
  int32_t forwards = 0;
};

// Runs every prompt; records forwards and, per prompt, "generation/<p>/prompt_ids" and
// "generation/<p>/emitted".
Result<GenerationResult> generate_greedy(Engine& engine,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         const GenerationOptions& options, RunRecord* record);

}  // namespace splitcheck
