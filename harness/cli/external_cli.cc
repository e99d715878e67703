#include "harness/cli/external_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>

#include "harness/engine/generation.h"
#include "harness/reports/console.h"
#include "harness/reports/escape.h"
#include "harness/reports/report.h"
#include "harness/reports/writers.h"
#include "harness/sweep/bisect.h"

namespace splitcheck {
namespace {

int fail(const Status& st) {
  fmt::print(stderr, "splitcheck: error: {}\n", st.message());
  return st.code() == StatusCode::kInvalidInput ? 2 : 3;
}

// The stderr tail indented under its case, one line each.
void print_tail(const std::string& tail) {
  size_t start = 0;
  while (start < tail.size()) {
    size_t end = tail.find('\n', start);
    if (end == std::string::npos) end = tail.size();
    fmt::print("      | {}\n", console_line(tail.substr(start, end - start)));
    start = end + 1;
  }
}

void print_opening(const nlohmann::json& report) {
  for (const auto& [k, v] : engine_rows(report))
    fmt::print("{:<16} {}\n", k + ":", console_line(v));
  const std::string tail = str_field(obj_field(report, "engine"), "pp1_stderr_tail");
  if (!tail.empty()) {
    fmt::print("PP=1 stderr (tail):\n");
    print_tail(tail);
  }
}

// The scenario as its author wrote it (or, unreadable, resolved), narrowed to `cuts`, with
// the engine block's paths made absolute; only the engine's blocks when it takes no
// {scenario} (the model, workload and drafter blocks describe K3-mini, not the engine).
nlohmann::json engine_repro(const Scenario& s, const std::vector<int>& cuts) {
  nlohmann::json j;
  if (std::ifstream in(s.source_path); in) j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) j = resolved_scenario_json(s);
  const ExternalEngine& e = *s.external;
  nlohmann::json engine = j.value("engine", nlohmann::json::object());
  engine["cwd"] = e.cwd;
  if (!e.golden.empty()) engine["golden"] = e.golden;
  engine["seed"] = e.seed;
  j["engine"] = engine;
  const bool reads_scenario = std::any_of(e.command.begin(), e.command.end(), [](const auto& t) {
    return t.find("{scenario}") != std::string::npos;
  });
  if (!reads_scenario) {
    nlohmann::json kept = nlohmann::json::object();
    for (const char* key : {"name", "description", "engine", "checks", "faults"})
      if (j.contains(key)) kept[key] = j[key];
    j = kept;
  }
  j["partitions"] = {{"pp", cuts.size() + 1}, {"splits", nlohmann::json::array({cuts})}};
  j.erase("expect");
  return j;
}

// A bisect that names no cause and writes no repro, because what ran proves none: a
// signal stopped it (verdict interrupted) or PP=1 gave no reference (verdict error). The
// report, when asked, is the sweep's of what ran; `why` ends the console.
int bisect_without_cause(const Scenario& s, const SweepResult& r, const std::string& report_dir,
                         const std::string& command_line, const std::string& why) {
  const nlohmann::json report = sweep_report(r, ReportContext{command_line});
  if (!report_dir.empty()) {
    if (Status st = write_reports(report_dir, report); !st.is_ok()) return fail(st);
    fmt::print("report: {}/report.json (the sweep of what ran, verdict {})\n",
               console_line(report_dir), r.verdict_word());
  }
  print_opening(report);
  fmt::print("bisect {}: {}: no cause named, no repro written\n", s.name, why);
  return r.exit_code();
}

// Why a bisect names no cause, or "" when its sweep can name one.
std::string no_cause_reason(const SweepResult& r) {
  if (r.interrupted_by != 0) {
    const char* name = sigabbrev_np(r.interrupted_by);
    return fmt::format("interrupted by {} (engine processes killed) before it finished",
                       name != nullptr ? fmt::format("SIG{}", name) : "a signal");
  }
  if (!r.reference_failure.empty())
    return fmt::format("error: PP=1 gave no reference ({}), no split point judged",
                       console_line(r.reference_failure));
  return "";
}

}  // namespace

int external_sweep_and_report(const Scenario& s, const ExternalSweepOptions& options,
                              const std::string& report_dir, const std::string& command_line,
                              const std::vector<Waiver>& waivers) {
  Result<SweepResult> r = run_external_sweep(s, options);
  if (!r.is_ok()) return fail(r.status());
  apply_waivers(waivers, utc_today(), *r);
  const nlohmann::json report = sweep_report(*r, ReportContext{command_line});
  fmt::print("{}", render_console(report));
  if (!report_dir.empty()) {
    if (Status st = write_reports(report_dir, report); !st.is_ok()) return fail(st);
    fmt::print("report: {}/report.json\n", console_line(report_dir));
  }
  return r->exit_code();
}

int external_bisect(const Scenario& s, const ExternalSweepOptions& options,
                    const std::string& repro_path, const std::string& report_dir,
                    const std::string& command_line) {
  Result<SweepResult> r = run_external_sweep(s, options);
  if (!r.is_ok()) return fail(r.status());
  if (const std::string why = no_cause_reason(*r); !why.empty())
    return bisect_without_cause(s, *r, report_dir, command_line, why);
  BisectResult b;
  b.sweeps = 1;
  b.before = scenario_size(s);
  b.after = b.before;
  std::optional<BisectFinding> f = first_failure(*r);
  b.conformant = !f.has_value();
  const std::string path = repro_path.empty() ? s.name + "-repro.json" : repro_path;
  if (f) {
    b.finding = *f;
    // The external engine cannot be shrunk from here: the repro is the scenario narrowed to
    // the failing split point.
    b.repro = engine_repro(s, f->cuts);
    b.after.partitions = 1;
    b.steps.push_back(
        "external engine: layers, prompts and tokens are the engine's; kept the "
        "failing split point only");
    b.repro["description"] = fmt::format(
        "Narrowed by `splitcheck bisect`: {} of {} fails with cause '{}'. Replay: splitcheck "
        "sweep {}",
        f->key, s.name, f->cause, path);
    if (Status st = write_json_atomically(path, b.repro); !st.is_ok()) return fail(st);
  }
  if (!report_dir.empty()) {
    Result<nlohmann::json> model =
        bisect_report(b, s, b.conformant ? "" : path, ReportContext{command_line});
    if (!model.is_ok()) return fail(model.status());
    (*model)["engine"] = sweep_report(*r, ReportContext{command_line})["engine"];
    (*model)["not_judged"] = sweep_report(*r, ReportContext{command_line})["not_judged"];
    if (Status st = write_reports(report_dir, *model); !st.is_ok()) return fail(st);
    fmt::print("report: {}/report.json\n", report_dir);
  }
  print_opening(sweep_report(*r, ReportContext{command_line}));
  if (!f) {
    fmt::print("bisect {}: conformant at all {} split points, nothing to bisect\n", s.name,
               r->cases.size());
    return r->exit_code() == 3 ? 3 : 0;
  }
  fmt::print("bisect {}: first failing split {} ({}), verdict {}\n", s.name, f->key, f->layout,
             verdict_name(f->verdict));
  if (!f->dataset.empty())
    fmt::print("  first divergence: forward {}, layer {}, site {}, token {}, channel {} ({})\n",
               f->forward, f->layer, f->site, f->token, f->channel, f->dataset);
  fmt::print("  detail: {}\n  cause: {}\n  repro: {} (replay: splitcheck sweep {})\n", f->message,
             f->cause, path, path);
  if (r->interrupted_by != 0) return 128 + r->interrupted_by;
  return outcome_of(f->verdict).exit_status;
}

}  // namespace splitcheck
