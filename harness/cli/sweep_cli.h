// The `sweep` subcommand's options and entry point.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

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
  bool self_check = false;
  std::string waivers;       // waiver file (harness/verdict/waivers.h)
  std::string command_line;  // recorded in the report as the command to reproduce
  void add_to(CLI::App& app);
  // Runs the sweep when its subcommand was given; returns the exit code.
  int run();
};

}  // namespace splitcheck
