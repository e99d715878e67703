// `splitcheck approx`: the approximate lane with its float64 judge (harness/lanes/
// approx_lane.h) on one scenario, for the CPU backend, the CUDA backend or both.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace splitcheck {

struct ApproxCli {
  CLI::App* command = nullptr;
  std::string scenario;
  std::string backend = "cpu";  // cpu | cuda | both
  std::string json_out;
  int max_calls = 64;
  void add_to(CLI::App& app, const std::string& default_scenario);
  // Exit code: 0 every op within the lane, 1 not, 2 invalid input (a backend this machine
  // cannot run among them), 3 internal error.
  int run();
};

}  // namespace splitcheck
