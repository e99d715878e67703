#include "harness/sweep_cli.h"

namespace splitcheck {

void SweepCli::add_to(CLI::App& app) {
  scenario = std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json";
  command = app.add_subcommand("sweep", "Run PP=1 and every split point of a scenario, compare");
  command->add_option("scenario", scenario, "Scenario JSON (default: the embedded default)");
  command->add_option("--report", report_dir, "Directory for report.json, report.html, junit.xml, summary.md");
}

int SweepCli::run() { return 3; }

}  // namespace splitcheck
