// The external-engine block of a scenario (docs/external-engines.md): a command template
// that runs an engine outside this project once per partition and writes a dump.
//
//   "engine": {"command": ["python3", "run.py", "--cuts", "{cuts}", "--out", "{out}"],
//              "cwd": ".", "env": {"KEY": "VALUE"}, "timeout_s": 120,
//              "num_hidden_layers": 16, "attn_res_block_size": 4, "golden": "pp1.h5",
//              "seed": 7, "evidence": {"waived": "engine writes no /stages yet, issue 12"}}
//
// Placeholders expand in one left-to-right pass ({pp}, {cuts}, {split}, {out},
// {scenario}, {seed}; "{{" and "}}" stand for literal braces), each inside the one argv
// element it is written in: a value that contains "{pp}" is never expanded again, and no
// shell ever sees the result.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

// The placeholders a command template may use, in the order docs list them.
inline constexpr const char* kEnginePlaceholders[] = {"pp",  "cuts",     "split",
                                                      "out", "scenario", "seed"};

struct ExternalEngine {
  std::vector<std::string> command;  // argv templates; command[0] is the program
  std::string cwd;                   // absolute (resolved against the scenario's directory)
  std::vector<std::pair<std::string, std::string>> env;  // added to the inherited environment
  double timeout_s = 600;                                // per run, wall clock
  int num_hidden_layers = 0;
  int attn_res_block_size = 0;  // 0: not given (the model preset's)
  std::string golden;           // absolute path of a PP=1 dump to take instead of running PP=1
  // What {seed} expands to: the block's "seed" (the engine's own), else 0.
  int64_t seed = 0;
  // Why the scenario waives the evidence of the partition (every dump's /stages equal to the
  // partition asked, PP=1 one stage over every layer): `"evidence": {"waived": "<reason>"}`.
  // Empty: the evidence is required, and a case without it is `unproven`, never a pass.
  std::string evidence_waived;
};

// The keys of an external engine block, beside the built-in engine's own.
inline constexpr const char* kExternalEngineKeys[] = {
    "command", "cwd",  "env",     "timeout_s", "num_hidden_layers", "attn_res_block_size",
    "golden",  "seed", "evidence"};

// Reads the external part of the scenario's `engine` object `j` (which has "command").
// Errors are invalid input "<source>: /engine/<key>: <what>", e.g. an unknown placeholder
// "<source>: /engine/command/3: unknown placeholder {outt} (known: ...)". Relative `cwd`
// and `golden` resolve against `base_dir`.
Result<ExternalEngine> parse_external_engine(const nlohmann::json& j, const std::string& source,
                                             const std::string& base_dir);

// The block as the resolved scenario writes it (parse_external_engine reads it back).
nlohmann::json external_engine_json(const ExternalEngine& e);

// Checks one template: empty when every placeholder is known, else what is wrong.
std::string template_error(const std::string& text);

// Expands one template in a single left-to-right pass; the template must pass
// template_error(). An unknown name expands to nothing (never reached after validation).
std::string expand_template(const std::string& text,
                            const std::map<std::string, std::string>& values);

// Every argv element of `e.command` expanded with `values`.
std::vector<std::string> expand_command(const ExternalEngine& e,
                                        const std::map<std::string, std::string>& values);

}  // namespace splitcheck
