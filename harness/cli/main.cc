// The splitcheck command line. Exit codes (DESIGN.md): 0 conformant, 1 divergence found,
// 2 invalid input (scenario, dump or other user file), 3 internal error, 4 PP=1 does not
// reproduce itself (sweep --self-check).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "harness/cli/cli.h"
#include "reference/partial_files.h"

int main(int argc, char** argv) {
  // An interrupt removes the temporaries of writes in progress (reference/partial_files.h).
  splitcheck::install_interrupt_cleanup();
  try {
    return splitcheck::run_cli(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "splitcheck: internal error: {}\n", e.what());
    return 3;
  }
}
