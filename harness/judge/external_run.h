// What a sweep of an external engine (harness/sweep/external_sweep.h) records beside its
// cases: the command as run for PP=1 and the settings as requested and in effect.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace splitcheck {

// A check of the scenario that the dumps give no evidence for: listed, never passed.
struct NotJudged {
  std::string check;
  std::string reason;  // "the PP=1 dump carries no dispatch trace"
};

struct ExternalRunInfo {
  std::vector<std::string> pp1_command;  // PP=1's expanded argv (empty when `golden` is used)
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;
  double timeout_s = 0;
  std::string golden;           // the PP=1 dump taken instead of a PP=1 run
  std::string work_dir;         // where the dumps and the engine's stdout/stderr are kept
  int jobs_requested = 0;       // 0: the default (one per core)
  int jobs = 0;                 // in effect
  std::string pp1_outcome;      // "exited with status 0 in 1.23 s", or why PP=1 failed
  std::string pp1_stderr_tail;  // when PP=1 failed
  bool pp1_failed = false;
  double engine_seconds = 0;  // the engine runs' own time, summed (PP=1 included)
  // The engine's own word on itself, from the PP=1 dump's root attributes: `producer`
  // (JSON: name, version, ...), `backend`, and the dispatch trace's `kernels` (names by code).
  std::string producer;
  std::string backend;
  std::string kernels;
  std::vector<std::string> command_template;  // the scenario's engine.command, unexpanded
  // SHA-256 over the PP=1 dump's datasets (path, dtype, shape, bytes, in order): what
  // `merge` requires equal across shards.
  std::string pp1_content_sha256;
  std::string evidence_waived;   // the scenario's reason for waiving the partition's evidence
  int interrupted_by = 0;        // the signal that ended the sweep early (0: none)
  bool pp1_interrupted = false;  // PP=1's run was stopped by it: no case ran
};

}  // namespace splitcheck
