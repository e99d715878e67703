// The subcommands of `splitcheck` and their wiring (CLI11). Kept out of main.cc so tests
// can drive the same code paths.
#pragma once

namespace splitcheck {

// Parses argv and runs one subcommand; returns the process exit code.
int run_cli(int argc, char** argv);

}  // namespace splitcheck
