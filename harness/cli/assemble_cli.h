// `splitcheck assemble`: per-stage part files joined into one dump (harness/dump/assemble.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace splitcheck {

struct AssembleCli {
  CLI::App* command = nullptr;
  std::vector<std::string> parts;
  std::string out;
  void add_to(CLI::App& app);
  // Exit code: 0 the dump is written, 2 the parts are refused (invalid input: the message
  // names the file and what; nothing is written), 3 internal error (a write failed).
  int run();
};

}  // namespace splitcheck
