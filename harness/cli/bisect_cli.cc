#include "harness/cli/bisect_cli.h"

#include <fmt/format.h>

#include "harness/cli/external_cli.h"
#include "harness/reports/escape.h"
#include "harness/reports/report.h"
#include "harness/runner/interrupt.h"
#include "harness/sweep/bisect.h"

namespace splitcheck {

using nlohmann::json;

void BisectCli::add_to(CLI::App& app) {
  command = app.add_subcommand(
      "bisect",
      "Find the first divergent split of a failing sweep, name the cause, write a minimised "
      "scenario that still fails");
  command->add_option("scenario", scenario, "Scenario JSON")->required();
  command->add_option("--out", out, "Minimised scenario to write (default: <name>-repro.json)");
  command->add_option("--threads", threads, "Split points run at once in the first sweep");
  command->add_option("--jobs", jobs,
                      "External engines: engine runs at once (default: --threads, one per core), "
                      "as sweep's --jobs");
  command->add_option("--report", report,
                      "Directory for report.json, report.html, junit.xml, summary.md");
  command->add_option("--work-dir", work_dir,
                      "External engines: directory for the dumps and each run's stdout/stderr "
                      "(kept; default: a new directory under $TMPDIR, removed at the end); one "
                      "sweep or bisect at a time (exit 2 when another holds it)");
  command->add_flag("--keep-runs", keep_runs,
                    "External engines: keep the directory made under $TMPDIR");
}

int BisectCli::run() {
  auto fail = [](const Status& st) {
    fmt::print(stderr, "splitcheck: error: {}\n", st.message());
    return st.code() == StatusCode::kInvalidInput ? 2 : 3;
  };
  Result<Scenario> s = load_scenario(scenario);
  if (!s.is_ok()) return fail(s.status());
  if (s->external) {
    ExternalSweepOptions options;
    options.jobs = jobs > 0 ? jobs : threads;
    options.work_dir = work_dir;
    options.keep_runs = keep_runs;
    const InterruptWatch watch;
    return external_bisect(*s, options, out, report, command_line);
  }
  BisectOptions opts;
  opts.threads = threads;
  Result<BisectResult> r = bisect(*s, opts);
  if (!r.is_ok()) return fail(r.status());
  const std::string path = out.empty() ? s->name + "-repro.json" : out;
  // The report is written after the repro file it names.
  auto write_report = [&]() -> Status {
    if (report.empty()) return Status::ok();
    ASSIGN_OR_RETURN(json model, bisect_report(*r, *s, r->conformant ? "" : path, {command_line}));
    RETURN_IF_ERROR(write_reports(report, model));
    fmt::print("report: {}/report.json\n", report);
    return Status::ok();
  };
  if (r->conformant) {
    if (Status st = write_report(); !st.is_ok()) return fail(st);
    fmt::print("bisect {}: conformant at all {} split points, nothing to bisect\n", s->name,
               r->before.partitions);
    return 0;
  }
  const BisectFinding& f = r->finding;
  json repro = r->repro;
  repro["description"] = fmt::format(
      "Minimised by `splitcheck bisect {}`: {} of {} fails with cause '{}'. Replay: "
      "splitcheck sweep {}",
      scenario, f.key, s->name, f.cause, path);
  Status st = write_json_atomically(path, repro);
  if (!st.is_ok()) return fail(st);
  st = write_report();
  if (!st.is_ok()) return fail(st);

  fmt::print("bisect {}: first failing split {} ({}), verdict {}\n", s->name, f.key, f.layout,
             verdict_name(f.verdict));
  if (f.request >= 0)
    fmt::print("  first diverging request: {}{}\n", f.request,
               f.step >= 0 ? fmt::format(" (scheduler step {})", f.step) : std::string());
  if (!f.dataset.empty()) {
    fmt::print("  first divergence: forward {}, layer {}, site {}, token {}, channel {} ({})\n",
               f.forward, f.layer, console_line(f.site), f.token, f.channel,
               console_line(f.dataset));
  } else if (f.forward >= 0) {
    fmt::print("  first divergence: forward {}, layer {}, site {} (dispatch)\n", f.forward, f.layer,
               console_line(f.site));
  }
  fmt::print("  detail: {}\n", console_line(f.message));
  fmt::print("  cause: {}\n", f.cause);
  for (const std::string& step : r->steps) fmt::print("  minimise: {}\n", step);
  auto size = [](const ScenarioSize& z) {
    return fmt::format(
        "{} layers, {} prompts, {} new tokens, {} prompt tokens, {} split points{}", z.layers,
        z.prompts, z.max_new_tokens,
        z.max_prompt_tokens == 0 ? std::string("all") : std::to_string(z.max_prompt_tokens),
        z.partitions,
        z.max_in_flight > 0 ? fmt::format(", {} in flight", z.max_in_flight) : std::string());
  };
  fmt::print("  before: {}\n", size(r->before));
  fmt::print("  after:  {}\n", size(r->after));
  fmt::print("  repro: {} (replay: splitcheck sweep {})\n", path, path);
  return 1;
}

}  // namespace splitcheck
