// The `sweep` subcommand's options and entry point.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "harness/verdict/sweep.h"

namespace splitcheck {

struct SweepCli {
  CLI::App* command = nullptr;
  std::string scenario;
  std::string report_dir;
  int threads = 0;
  std::string shard;
  std::string filter;
  std::string reuse = "on";
  size_t reuse_memory_mib = 1024;
  std::string transport;           // overrides the scenario's transport when given
  double transport_timeout = 120;  // seconds a transport's receive waits
  bool progress = false;           // a progress line on stderr even when it is no terminal
  std::string command_line;        // recorded in the report as the command to reproduce
  bool self_check = false;
  std::string waivers;  // waiver file (harness/verdict/waivers.h)
  void add_to(CLI::App& app);
  // Runs the sweep when its subcommand was given; returns the exit code. Under the `mpi`
  // transport every rank calls it: rank 0 sweeps and reports, the others serve stages.
  int run();

 private:
  // Runs the sweep with `opts`, prints it and writes the reports; the exit code.
  int sweep_and_report(const Scenario& s, SweepOptions& opts);
  // One console line: the transport and where the stages ran (set before the sweep).
  std::string stages_line_;
  std::vector<Waiver> waiver_list_;  // read from `waivers` before the sweep
};

}  // namespace splitcheck
