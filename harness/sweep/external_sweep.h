// The sweep of an external engine (a scenario whose `engine` block has a `command`): the
// command runs once for PP=1 (or the block's `golden` dump is taken), then once per
// partition, several at a time; each dump's integrity is checked (format, order, every
// digest), then it is judged against PP=1 with every check its dumps give evidence for.
//
// A work directory serves one sweep at a time (an exclusive lock on <work>/.splitcheck-lock;
// a second sweep is refused, exit 2), and a case counts only a dump its own run made: the
// file at {out} is removed before the run, and one last modified before the run started is
// no dump of it.
//
// A case ends in exactly one state: pass, diverged, or error (the engine exited non-zero,
// was killed, hung past its timeout, wrote no dump or a corrupt one), each naming its
// split point; an error carries the tail of the engine's stderr, whose whole text stays
// beside the dump (<work>/<case>.stderr). A check with no evidence in the dumps is listed
// as not judged (SweepResult::not_judged), never passed. The cases are run and judged by
// the one sweep driver (harness/sweep/driver.h), as the built-in engine's are.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/judge/result.h"
#include "harness/scenario/scenario.h"
#include "kernels/status.h"

namespace splitcheck {

struct ExternalSweepOptions {
  int jobs = 0;  // engine runs at once; 0: one per core
  int shard_index = 0;
  int shard_count = 1;
  std::string filter;    // only cases whose key contains this
  std::string work_dir;  // dumps and engine output; empty: a new directory under $TMPDIR
  // Keep the work directory made under $TMPDIR (a `work_dir` given is always kept); by
  // default it is removed when the sweep ends, dumps and engine output with it.
  bool keep_runs = false;
  bool progress = false;
  // Run the engine's PP=1 twice before judging any split point; when the two dumps differ
  // (datasets, bit for bit), no split point is judged (SweepResult::refused_to_judge, exit 4).
  // With the engine's `golden`, the engine's PP=1 still runs twice; the golden stays the
  // reference.
  bool self_check = false;
};

// The placeholder values of one run: pp, cuts ("" at PP=1, "5", "4,9"), split ("pp1",
// "pp2/split-5"), out, scenario, seed.
std::map<std::string, std::string> placeholder_values(const Scenario& s,
                                                      const std::vector<int>& cuts,
                                                      const std::string& out,
                                                      const std::string& scenario_file);

// Runs the sweep. A Status error means the scenario or an input is invalid (exit 2) or
// the harness failed (exit 3); a failing engine run is a case verdict, not an error.
Result<SweepResult> run_external_sweep(const Scenario& s, const ExternalSweepOptions& options);

}  // namespace splitcheck
