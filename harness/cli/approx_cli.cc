#include "harness/cli/approx_cli.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "harness/lanes/approx_lane.h"
#include "reference/partial_files.h"

namespace splitcheck {
namespace {

int report_error(const Status& st) {
  fmt::print(stderr, "splitcheck: error: {}\n", st.message());
  return st.code() == StatusCode::kInvalidInput ? 2 : 3;
}

Status write_json(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".partial";
  const PartialFile removed_on_interrupt(tmp);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) return internal_error(path + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return internal_error(path + ": cannot rename: " + ec.message());
  return Status::ok();
}

}  // namespace

void ApproxCli::add_to(CLI::App& app, const std::string& default_scenario) {
  scenario = default_scenario;
  command = app.add_subcommand(
      "approx",
      "The approximate lane: every op of the model, on the inputs the PP=1 engine feeds it, "
      "against a float64 evaluation of the same op; per op max abs, max relative and mean "
      "abs error and the fraction not correctly rounded; CPU against CUDA bit for bit (the "
      "exact lane) when both run. Exit 0 every op within the lane, 1 not");
  command->add_option("scenario", scenario, "Scenario JSON (default: the default scenario)");
  command->add_option("--backend", backend, "cpu, cuda or both (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "both"}));
  command->add_option("--json", json_out, "Write the figures and thresholds as JSON here");
  command
      ->add_option("--max-calls", max_calls,
                   "Calls captured per kernel row, the first ones made (default 64)")
      ->check(CLI::PositiveNumber);
}

int ApproxCli::run() {
  Result<Scenario> s = load_scenario(scenario);
  if (!s.is_ok()) return report_error(s.status());
  const bool cpu = backend != "cuda", cuda = backend != "cpu";
  if (cuda) {
    // A lane this machine cannot run is never a pass.
    Scenario on_cuda = *s;
    on_cuda.backend = "cuda";
    Status st = check_capabilities(on_cuda, scenario + " (approx --backend " + backend + ")");
    if (!st.is_ok()) return report_error(st);
  }
  Result<CapturedCalls> captured = capture_op_cases(*s, CaptureOptions{max_calls});
  if (!captured.is_ok()) return report_error(captured.status());
  const ApproxLaneResult result = judge_approx_lane(captured->cases, cpu, cuda);
  fmt::print("scenario {} ({}, L={}, H={}): {} kernel calls captured from the PP=1 run\n", s->name,
             s->model.preset, s->model.num_hidden_layers, s->model.hidden_size,
             captured->cases.size());
  for (const auto& [row, calls] : captured->not_judged)
    fmt::print("not judged (no float64 evaluation): {}, {} calls\n", row, calls);
  fmt::print("{}", approx_lane_text(result));
  if (!json_out.empty()) {
    nlohmann::json j = approx_lane_json(result);
    j["scenario"] = s->name;
    j["calls_captured"] = captured->cases.size();
    j["rows_not_judged"] = captured->not_judged;
    Status st = write_json(json_out, j);
    if (!st.is_ok()) return report_error(st);
    fmt::print("json: {}\n", json_out);
  }
  return result.within() ? 0 : 1;
}

}  // namespace splitcheck
