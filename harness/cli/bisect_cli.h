// `splitcheck bisect`: the command line over bisect() (harness/sweep/bisect.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace splitcheck {

// The `bisect` subcommand's options and entry point.
struct BisectCli {
  CLI::App* command = nullptr;
  std::string scenario;
  std::string out;
  int threads = 0;
  int jobs = 0;              // external engines: engine runs at once (0: --threads)
  std::string report;        // --report DIR: the report's four forms; empty: none
  std::string work_dir;      // external engines: where dumps and engine output are kept
  bool keep_runs = false;    // external engines: keep the work directory made under $TMPDIR
  std::string command_line;  // the invocation, recorded in the report
  void add_to(CLI::App& app);
  // Runs bisect; returns 1 when a divergence was found and minimised, 0 when the sweep
  // is conformant, 2 on invalid input, 3 on internal error.
  int run();
};

}  // namespace splitcheck
