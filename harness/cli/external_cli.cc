#include "harness/cli/external_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>

#include "harness/engine/generation.h"
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

// A bisect that SIGINT, SIGTERM or SIGHUP stopped: what ran proves no cause, so no repro is
// written; the report, when asked, is the sweep's of what finished (verdict interrupted).
int interrupted_bisect(const Scenario& s, const SweepResult& r, const std::string& report_dir,
                       const std::string& command_line) {
  const nlohmann::json report = sweep_report(r, ReportContext{command_line});
  if (!report_dir.empty()) {
    if (Status st = write_reports(report_dir, report); !st.is_ok()) return fail(st);
    fmt::print("report: {}/report.json (the sweep of what finished)\n", console_line(report_dir));
  }
  print_opening(report);
  const char* name = sigabbrev_np(r.interrupted_by);
  fmt::print(
      "bisect {}: interrupted by {} (engine processes killed) before it finished: no "
      "cause named, no repro written\n",
      s.name, name != nullptr ? fmt::format("SIG{}", name) : "a signal");
  return 128 + r.interrupted_by;
}

}  // namespace

int external_sweep_and_report(const Scenario& s, const ExternalSweepOptions& options,
                              const std::string& report_dir, const std::string& command_line,
                              const std::vector<Waiver>& waivers) {
  Result<SweepResult> r = run_external_sweep(s, options);
  if (!r.is_ok()) return fail(r.status());
  apply_waivers(waivers, utc_today(), *r);
  const nlohmann::json report = sweep_report(*r, ReportContext{command_line});
  print_opening(report);
  if (r->self_check.ran)
    fmt::print("self-check: {}\n",
               r->self_check.reproduced
                   ? fmt::format("PP=1 run twice, bit-identical ({} datasets)",
                                 r->self_check.datasets_compared)
                   : fmt::format("PP=1 run twice DIFFERS ({} of {} datasets): {}; no split point "
                                 "judged (exit 4)",
                                 r->self_check.datasets_differing, r->self_check.datasets_compared,
                                 console_line(r->self_check.first_difference)));
  fmt::print("sweep {} ({} split points, external engine)\n", s.name, r->cases.size());
  for (const CaseResult& c : r->cases) {
    fmt::print("  {:<16} {:<16} {}\n", c.key, verdict_name(c.verdict), console_line(c.message));
    // What this case could not judge, beyond what the sweep as a whole could not.
    for (const NotJudged& n : c.not_judged)
      if (std::none_of(r->external->not_judged.begin(), r->external->not_judged.end(),
                       [&](const NotJudged& w) { return w.check == n.check; }))
        fmt::print("      {}: not judged ({})\n", n.check, console_line(n.reason));
    if (!c.stderr_tail.empty()) print_tail(c.stderr_tail);
  }
  fmt::print("checks: {}\n", fmt::join(r->checks, ", "));
  for (const std::string& line : not_judged_lines(report)) fmt::print("  {}\n", console_line(line));
  for (const std::string& line : rounding_lines(report)) fmt::print("{}\n", console_line(line));
  const int64_t rounded = obj_field(report, "rounded").value("cases", int64_t{0});
  fmt::print(
      "summary: {}{}\n", r->counts_line(),
      rounded > 0
          ? fmt::format(" ({} compared after rounding, not on the engine's own bits)", rounded)
          : "");
  fmt::print("time: PP=1 {:.2f} s, sweep {:.2f} s with {} jobs; engine runs {:.2f} s in all\n",
             r->pp1_seconds, r->total_seconds, r->threads, r->external->engine_seconds);
  if (r->pp1_acceptance.speculative) {
    int equal = 0;
    for (const CaseResult& c : r->cases) equal += same_acceptance(c.acceptance, r->pp1_acceptance);
    fmt::print(
        "speculative: PP=1 acceptance rate {:.4f}, accepted lengths [{}]; {} of {} split "
        "points with the same acceptance\n",
        r->pp1_acceptance.acceptance_rate, histogram_text(r->pp1_acceptance.accepted_histogram),
        equal, r->cases.size());
  }
  for (const std::string& f : r->waiver_failures) fmt::print("waiver: EXPIRED: {}\n", f);
  for (const std::string& f : r->expect_failures) fmt::print("expect: NOT MET: {}\n", f);
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
  if (r->interrupted_by != 0) return interrupted_bisect(s, *r, report_dir, command_line);
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
