// The `sweep` subcommand's options and entry point.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "harness/sweep/sweep.h"

namespace splitcheck {

struct SweepCli {
  CLI::App* command = nullptr;
  std::string scenario;
  std::string report_dir;
  int threads = 0;
  std::string shard;
  std::string filter;
  std::string transport;           // overrides the scenario's transport when given
  double transport_timeout = 120;  // seconds a transport's receive waits
  bool progress = false;           // a progress line on stderr even when it is no terminal
  std::string command_line;        // recorded in the report as the command to reproduce
  std::vector<std::string> args;   // the arguments after the program name, as given
  int ranks = 0;                   // --ranks N: start mpirun -np N and supervise it
  bool self_check = false;
  std::string waivers;     // waiver file (harness/judge/waivers.h)
  int jobs = 0;            // external engines: runs at once (0: as --threads, one per core)
  std::string work_dir;    // external engines: where dumps and engine output are kept
  bool keep_runs = false;  // external engines: keep the work directory made under $TMPDIR
  void add_to(CLI::App& app);
  // Runs the sweep when its subcommand was given; returns the exit code. Under the `mpi`
  // transport every rank calls it: rank 0 sweeps and reports, the others serve stages.
  int run();

 private:
  // Runs the sweep with `opts`, prints it and writes the reports; the exit code.
  int sweep_and_report(const Scenario& s, SweepOptions& opts);
  // The sweep in this process (under mpirun: as its rank); the exit code.
  int run_here();
  // The external engine's sweep of `s`, its reports written; the exit code.
  int run_external(const Scenario& s, int shard_index, int shard_count);
  // Under the mpi and nccl transports (built with MPI): this rank's part of the sweep with
  // `opts`, rank 0 sweeping and reporting; the exit code.
  int run_on_ranks(const Scenario& s, SweepOptions& opts);
  // --ranks: runs this sweep under mpirun, supervised (rank_launcher.h); the exit code.
  int launch();
  std::vector<Waiver> waiver_list_;  // read from `waivers` before the sweep
};

}  // namespace splitcheck
