// The GSM8K-style workload (SPEC 4): seeded grade-school word problems written for this
// project, byte-level tokenisation, lm-eval style answer extraction, and the workload file.
//
// A problem is shown to the model as `Question: <question>\nAnswer:`; its reference text
// is `Question: <question>\nAnswer: <solution> #### <answer>`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

// One word problem with its worked solution and exact integer answer.
struct Problem {
  std::string question;  // the word problem text
  std::string solution;  // short arithmetic steps, e.g. "4 * 3 = 12. 12 - 5 = 7."
  int64_t answer = 0;    // exact integer answer

  // The text the model is prompted with: "Question: <question>\nAnswer:".
  std::string prompt() const;
  // The full reference text: "Question: <question>\nAnswer: <solution> #### <answer>".
  std::string reference() const;

  friend bool operator==(const Problem&, const Problem&) = default;
};

// Generates `count` problems from `seed`. The result depends on nothing but the two
// arguments (a counter-based splitmix64 stream, no standard distributions), so every
// machine and compiler produces the same problems. Prompts are 60 to 120 bytes and every
// intermediate value and answer is a non-negative integer that fits int32.
std::vector<Problem> generate_gsm8k_style(uint64_t seed, int count);

// Byte-level tokenisation: each byte becomes the token id of its value (0..255), so the
// model's vocab_size must be at least 256.
std::vector<int32_t> tokenize_bytes(std::string_view text);

// The inverse of tokenize_bytes; an id outside 0..255 renders as "<id>", e.g. "<300>".
std::string detokenize(std::span<const int32_t> ids);

// lm-eval "strict-match": the integer right after the last "####" (spaces skipped, an
// optional sign, thousands commas removed). "#### 1,234" -> 1234; nullopt when there is
// no "####", no digits follow it, or the value overflows int64.
std::optional<int64_t> extract_strict(std::string_view text);

// lm-eval "flexible-extract": the last integer anywhere in the text, with a '-' directly
// before it and commas between digits honoured. "3 + 5 = 8." -> 8; nullopt when the
// text has no digit or the last number overflows int64.
std::optional<int64_t> extract_flexible(std::string_view text);

// The workload file: {"format": "splitcheck.workload", "format_version": 1,
// "generator": "gsm8k-style", "seed": ..., "problems": [{"question", "solution",
// "answer"}, ...]}.
nlohmann::json workload_to_json(uint64_t seed, const std::vector<Problem>& problems);

// Reads a workload file. Errors are invalid_input and name the file and the JSON pointer,
// e.g. "w.json: /problems/3/answer: expected integer".
Result<std::vector<Problem>> load_workload(const std::string& path);

}  // namespace splitcheck
