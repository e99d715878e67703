#include "harness/cli/assemble_cli.h"

#include <fmt/format.h>

#include "harness/dump/assemble.h"
#include "harness/reports/escape.h"

namespace splitcheck {

void AssembleCli::add_to(CLI::App& app) {
  command = app.add_subcommand(
      "assemble",
      "Join per-stage part files (each stage process's own, python/splitcheck_dump "
      "PartWriter) into one dump in execution order; exit 0 written, 2 refused");
  command->add_option("parts", parts, "Part files, one per stage, in any order")->required();
  command->add_option("--out", out, "Dump file (HDF5) to write")->required();
}

int AssembleCli::run() {
  Result<AssembleSummary> r = assemble_parts(parts, out);
  if (!r.is_ok()) {
    // Part files name their run and hold attribute values: shown escaped, on one line.
    fmt::print(stderr, "splitcheck: error: {}\n", console_line(r.status().message()));
    return r.status().code() == StatusCode::kInvalidInput ? 2 : 3;
  }
  fmt::print("assembled {}: {} stages of run {}, {} datasets\n", out, r->stages,
             console_line(r->run), r->datasets);
  return 0;
}

}  // namespace splitcheck
