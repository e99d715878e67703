#include "harness/cli/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>

#include "harness/cli/approx_cli.h"
#include "harness/cli/assemble_cli.h"
#include "harness/cli/bisect_cli.h"
#include "harness/cli/merge_cli.h"
#include "harness/cli/sweep_cli.h"
#include "harness/cli/version.h"
#include "harness/dump/compare.h"
#include "harness/dump/verify.h"
#include "harness/engine/partition.h"
#include "harness/engine/run.h"
#include "harness/verdict/bisect.h"
#include "harness/verdict/golden.h"
#include "harness/verdict/properties.h"
#include "harness/verdict/sensitivity.h"
#include "reports/report.h"

namespace splitcheck {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitDiverged = 1;
constexpr int kExitInvalid = 2;
constexpr int kExitInternal = 3;

std::string default_scenario() {
  return std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json";
}

int report_status(const Status& st) {
  fmt::print(stderr, "splitcheck: error: {}\n", st.message());
  return st.code() == StatusCode::kInvalidInput ? kExitInvalid : kExitInternal;
}

int cmd_run(const std::string& scenario_path, const std::string& out,
            const std::vector<int>& split) {
  Result<Scenario> s = load_scenario(scenario_path);
  if (!s.is_ok()) return report_status(s.status());
  Result<ReferenceRun> run = split.empty() ? run_reference(*s) : run_partitioned(*s, split);
  if (!run.is_ok()) return report_status(run.status());
  if (split.empty()) {
    // The reference engine is one stage over every layer, holding the embedding: what a
    // runner needs as the evidence of PP=1's partition (docs/external-engines.md).
    run->record.set_attr("stages/0", "layer_begin", int64_t{0});
    run->record.set_attr("stages/0", "layer_end", int64_t{s->model.num_hidden_layers});
    run->record.set_attr("stages/0", "embedding", std::string("real"));
  }
  const auto& seqs = run->generation.sequences;
  const std::string layout = split.empty() ? "PP=1" : fmt::format("cuts {}", fmt::join(split, ","));
  fmt::print("scenario {} ({}, L={}, H={}): {}, {} prompts, {} forwards\n", s->name,
             s->model.preset, s->model.num_hidden_layers, s->model.hidden_size, layout, seqs.size(),
             run->generation.forwards);
  if (run->summary.speculative) {
    const SpeculativeResult& sp = run->summary.spec;
    fmt::print(
        "  speculative {} (gamma {}, departure rate {}): {} steps, mean accepted length {:.3f}, "
        "acceptance rate {:.3f}, tokens per forward {:.3f}\n  accepted lengths: {}\n",
        s->speculative.method, s->speculative.gamma, s->speculative.departure_rate, sp.steps,
        sp.mean_accepted, sp.acceptance_rate, sp.tokens_per_forward,
        histogram_text(sp.accepted_histogram));
  }
  int strict = 0, flexible = 0;
  for (size_t p = 0; p < seqs.size(); ++p) {
    const std::string text = detokenize(seqs[p].emitted);
    const int64_t answer = run->workload.problems[p].answer;
    const auto st = extract_strict(text);
    const auto fl = extract_flexible(text);
    strict += st && *st == answer;
    flexible += fl && *fl == answer;
    fmt::print("  prompt {}: {} prompt tokens, emitted {:?}\n", p, seqs[p].prompt_ids.size(), text);
  }
  fmt::print("  GSM8K-style score: strict {}/{}, flexible {}/{}\n", strict, seqs.size(), flexible,
             seqs.size());
  if (!out.empty()) {
    std::string partition = fmt::format("0-{}", s->model.num_hidden_layers);
    if (!split.empty())
      partition = Partition::from_cuts(split, s->model.num_hidden_layers)->layout();
    Result<DumpHeader> header = make_dump_header(*s, partition);
    if (!header.is_ok()) return report_status(header.status());
    Status st = write_record(out, run->record, *header);
    if (!st.is_ok()) return report_status(st);
    fmt::print("  dump: {} ({} datasets, level {})\n", out, run->record.entries().size(),
               dump_level_name(s->dump_level));
  }
  return kExitOk;
}

int cmd_checkpoint(const std::string& scenario_path, const std::string& out) {
  Result<Scenario> s = load_scenario(scenario_path);
  if (!s.is_ok()) return report_status(s.status());
  Result<WeightStore> w = scenario_weights(*s);
  if (!w.is_ok()) return report_status(w.status());
  // The drafter's own tensors travel in the same checkpoint (one namespace, SPEC 2.1).
  std::unique_ptr<WeightSource> source = scenario_weight_source(*s);
  for (const std::string& name : drafter_tensor_names(*s)) {
    Result<Tensor> t = source->load(name);
    if (!t.is_ok()) return report_status(t.status());
    w->put(name, *t);
  }
  Status st = write_checkpoint(out, s->model, *w);
  if (!st.is_ok()) return report_status(st);
  fmt::print("checkpoint {}: {} tensors, {} bytes of parameters\n", out, w->tensors().size(),
             w->parameter_bytes());
  return kExitOk;
}

int cmd_golden_verify(const std::string& golden_dir) {
  Result<std::vector<GoldenCheck>> checks = verify_goldens(SPLITCHECK_SOURCE_DIR, golden_dir);
  if (!checks.is_ok()) return report_status(checks.status());
  // A golden of another environment whose data differ is not judged (exit 2 unless a
  // golden of this environment diverged: exit 1).
  int failed = 0, not_judged = 0;
  for (const GoldenCheck& c : *checks) {
    fmt::print("golden {}: {} ({})\n", c.name,
               c.passed ? "pass" : (c.not_judged ? "NOT JUDGED" : "FAIL"), c.message);
    for (const std::string& d : c.environment_differences)
      fmt::print("  environment differs: {}\n", d);
    if (!c.unrecorded_fields.empty())
      fmt::print("  environment: the golden does not record {} (not compared)\n",
                 fmt::join(c.unrecorded_fields, ", "));
    failed += !c.passed && !c.not_judged;
    not_judged += c.not_judged;
  }
  fmt::print("{} passed, {} failed, {} not judged\n", checks->size() - failed - not_judged, failed,
             not_judged);
  if (failed) return kExitDiverged;
  return not_judged ? kExitInvalid : kExitOk;
}

int cmd_compare(const std::string& a, const std::string& b, bool approximate, bool trust_digests,
                const std::string& report_dir, const std::string& command) {
  CompareOptions opts;
  opts.approximate = approximate;
  opts.trust_digest = trust_digests;
  // Placement (/stages, /stage_trace) is judged when both dumps record it; a PP=1 dump
  // records none, and the console and every report form then say it was not judged.
  opts.judge_placement = true;
  Result<CompareResult> r = compare_dumps(a, b, opts);
  if (!r.is_ok()) return report_status(r.status());
  fmt::print("{}\n{}\n{}\n", verdict(*r), digests_line(*r), placement_line(*r));
  if (!report_dir.empty()) {
    Status st =
        write_reports(report_dir, compare_report(*r, a, b, ReportContext{command}, approximate));
    if (!st.is_ok()) return report_status(st);
    fmt::print("report: {}/report.json\n", report_dir);
  }
  return r->equal() ? kExitOk : kExitDiverged;
}

int cmd_verify_dump(const std::string& path) {
  Result<DumpIntegrity> r = verify_dump(path);
  if (!r.is_ok()) return report_status(r.status());
  fmt::print(
      "{}: sound ({} datasets, {} bytes, every digest verified; order 0..{} once each; {} "
      "attributes of {} objects read)\n",
      path, r->datasets, r->bytes, r->datasets - 1, r->attributes, r->objects);
  return kExitOk;
}

// The fault sensitivity table (harness/verdict/sensitivity.h): exit 0 when every fault is
// caught by its check at every seed with no false alarm, 1 otherwise.
int cmd_sensitivity(std::vector<std::string> scenarios, const std::vector<uint64_t>& seeds,
                    int threads) {
  if (scenarios.empty()) scenarios = committed_fault_scenarios();
  SweepOptions options;
  options.threads = threads;
  Result<SensitivityTable> t = fault_sensitivity(scenarios, seeds, options);
  if (!t.is_ok()) return report_status(t.status());
  fmt::print("{}", sensitivity_table_text(*t));
  const bool ok = t->all_caught();
  fmt::print("{}\n", ok ? "every fault caught by its check at every seed; no false alarm"
                        : "NOT every fault caught, or a false alarm");
  return ok ? kExitOk : kExitDiverged;
}

// GPU properties (harness/verdict/properties.h): measured and printed as JSON (also
// written to `json_out` when given). Exit 0 when measured, whatever they show: they are
// reports, not verdicts.
int cmd_properties(const std::string& scenario_path, const std::string& json_out) {
  Result<Scenario> s = load_scenario(scenario_path);
  if (!s.is_ok()) return report_status(s.status());
  Result<PropertyReport> r = measure_properties(*s);
  if (!r.is_ok()) return report_status(r.status());
  const nlohmann::json j = properties_json(*r);
  if (!json_out.empty()) {
    Status st = write_json_atomically(json_out, j);
    if (!st.is_ok()) return report_status(st);
  }
  fmt::print("{}\n", j.dump(2));
  return kExitOk;
}

int run_cli_unguarded(int argc, char** argv) {
  CLI::App app{
      "splitcheck: proves a pipeline-parallel engine computes exactly what the single-stage "
      "(PP=1) engine computes, at every split point.\n"
      "Exit codes: 0 conformant, 1 divergence, 2 invalid input, 3 internal error, 4 PP=1 does "
      "not reproduce itself (sweep --self-check)."};
  app.require_subcommand(1);
  // Ends the command line's parse with the text on stdout and exit 0 (CLI::CallForVersion).
  app.set_version_flag("--version", [] {
    std::string text = version_text();
    text.pop_back();  // CLI11 adds the last newline
    return text;
  });
  std::string golden_dir = std::string(SPLITCHECK_SOURCE_DIR) + "/golden";

  std::string scenario = default_scenario();
  std::string out;
  auto* run = app.add_subcommand(
      "run", "Run the PP=1 reference on a scenario, print a summary, write its dump");
  run->add_option("scenario", scenario, "Scenario JSON (default: the embedded default scenario)");
  run->add_option("--out", out, "Dump file (HDF5) to write");
  std::vector<std::string> run_split_text;
  run->add_option("--split", run_split_text,
                  "Run the partitioned engine with these cuts instead of PP=1 (e.g. --split 12 or "
                  "--split 8,20; --split \"\" is PP=1, so an external-engine template's {cuts} "
                  "can name any partition)")
      ->delimiter(',');

  std::string ckpt_out;
  std::string ckpt_scenario = default_scenario();
  auto* ckpt =
      app.add_subcommand("checkpoint", "Write the scenario's model weights as an HDF5 checkpoint");
  ckpt->add_option("scenario", ckpt_scenario, "Scenario JSON");
  ckpt->add_option("--out", ckpt_out, "Checkpoint file to write")->required();

  auto* golden = app.add_subcommand("golden", "Verify or update the committed PP=1 goldens");
  golden->require_subcommand(1);
  golden->add_option("--dir", golden_dir, "Golden directory (default: the source tree's golden/)");
  auto* verify = golden->add_subcommand("verify", "Recompute every golden and compare bit for bit");
  std::string reason;
  std::vector<std::string> update_scenarios;
  auto* update = golden->add_subcommand(
      "update", "Regenerate goldens; the reason is recorded in MANIFEST.json");
  update->add_option("--reason", reason, "Why the golden changes")->required();
  update->add_option("scenarios", update_scenarios, "Scenario files (default: every golden's)");
  std::string update_backend;
  update
      ->add_option("--backend", update_backend,
                   "Run the scenarios on this backend and record it in the manifest (cuda: a "
                   "GPU golden, fingerprinted with the GPU, SM count, driver, CUDA and cuBLASLt "
                   "versions); default: each scenario's own")
      ->check(CLI::IsMember({"cpu", "cuda"}));

  std::string cmp_a, cmp_b;
  bool approximate = false, full = false, trust_digests = false;
  auto* compare = app.add_subcommand(
      "compare",
      "Compare two dumps of the splitcheck format bit for bit (every byte read, both files' "
      "digests verified in the same pass, attributes that carry results compared)");
  compare->add_option("a", cmp_a, "Golden (or first) dump")->required();
  compare->add_option("b", cmp_b, "Candidate dump")->required();
  compare->add_flag("--approximate", approximate, "Use the approximate lane's thresholds");
  auto* trust_flag = compare->add_flag(
      "--trust-digests", trust_digests,
      "Take datasets with equal stored digests as equal without reading them; every report "
      "form then says the verdict rests on unverified digests");
  compare
      ->add_flag("--full", full,
                 "Read every byte (the default; kept so that older scripts still run)")
      ->excludes(trust_flag);

  std::string verify_path;
  auto* verify_dump_cmd = app.add_subcommand(
      "verify-dump",
      "Check one dump's integrity: format, format_version, every dataset's digest against "
      "its bytes, order 0..n-1 once each, every attribute readable; exit 0 or 2");
  verify_dump_cmd->add_option("file", verify_path, "Dump file (HDF5)")->required();
  std::string cmp_report;
  compare->add_option("--report", cmp_report,
                      "Directory for report.json, report.html, junit.xml, summary.md");

  SweepCli sweep_cli;
  sweep_cli.add_to(app);
  BisectCli bisect_cli;
  bisect_cli.add_to(app);
  ApproxCli approx_cli;
  approx_cli.add_to(app, default_scenario());
  AssembleCli assemble_cli;
  assemble_cli.add_to(app);

  std::vector<std::string> merge_inputs;
  std::string merge_dir;
  auto* merge = app.add_subcommand(
      "merge", "Join shard reports (sweep --shard i/N --report DIR) into one unsharded report");
  merge->add_option("reports", merge_inputs, "Shard report.json files")->required();
  merge->add_option("--report", merge_dir, "Directory for the merged report")->required();

  std::vector<std::string> sens_scenarios;
  std::vector<uint64_t> sens_seeds{0x4b334d494e49ull, 1234, 7};
  int sens_threads = 0;
  auto* sens = app.add_subcommand(
      "sensitivity",
      "Sweep every fault scenario at several model seeds, with and without its fault: print "
      "which check caught it and the false alarms of the fixed protocol");
  sens->add_option("scenarios", sens_scenarios,
                   "Fault scenarios (default: every committed scenarios/fault-*.json)");
  sens->add_option("--seeds", sens_seeds, "Model seeds (default: the preset's, 1234, 7)")
      ->delimiter(',');
  sens->add_option("--threads", sens_threads, "Threads per sweep (0: one per core)");

  std::string props_scenario = default_scenario();
  std::string props_json;
  auto* props = app.add_subcommand(
      "properties",
      "Measure whether a token's logits depend on its forward's row count (decode vs prefill, "
      "verify vs decode, chunked vs whole prefill) on the scenario's backend; print JSON");
  props->add_option("scenario", props_scenario, "Scenario JSON (default: the default scenario)");
  props->add_option("--json", props_json, "Also write the JSON to this file");

  for (int i = 0; i < argc; ++i) sweep_cli.command_line += (i ? " " : "") + std::string(argv[i]);
  sweep_cli.args.assign(argv + std::min(argc, 1), argv + argc);
  bisect_cli.command_line = sweep_cli.command_line;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitInvalid;
  }
  if (*run) {
    std::vector<int> run_split;
    for (const std::string& cut : run_split_text) {
      if (cut.empty()) continue;
      size_t used = 0;
      int value = -1;
      try {
        value = std::stoi(cut, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != cut.size() || used == 0) {
        fmt::print(stderr, "splitcheck: error: --split: \"{}\" is not a layer number\n", cut);
        return kExitInvalid;
      }
      run_split.push_back(value);
    }
    return cmd_run(scenario, out, run_split);
  }
  if (*ckpt) return cmd_checkpoint(ckpt_scenario, ckpt_out);
  if (*verify) return cmd_golden_verify(golden_dir);
  if (*update) {
    Status st =
        update_goldens(SPLITCHECK_SOURCE_DIR, golden_dir, update_scenarios, reason, update_backend);
    if (!st.is_ok()) return report_status(st);
    fmt::print("goldens updated: {}\n", reason);
    return kExitOk;
  }
  if (*compare)
    return cmd_compare(cmp_a, cmp_b, approximate, trust_digests, cmp_report,
                       sweep_cli.command_line);
  if (*verify_dump_cmd) return cmd_verify_dump(verify_path);
  if (*bisect_cli.command) return bisect_cli.run();
  if (*approx_cli.command) return approx_cli.run();
  if (*assemble_cli.command) return assemble_cli.run();
  if (*merge) return run_merge(merge_inputs, merge_dir);
  if (*props) return cmd_properties(props_scenario, props_json);
  if (*sens) return cmd_sensitivity(sens_scenarios, sens_seeds, sens_threads);
  return sweep_cli.run();
}

}  // namespace

int run_cli(int argc, char** argv) {
  // An exception that escapes a command is an internal error (exit 3), never a crash.
  try {
    return run_cli_unguarded(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "splitcheck: error: internal error: {}\n", e.what());
  } catch (...) {
    fmt::print(stderr, "splitcheck: error: internal error: unknown exception\n");
  }
  return kExitInternal;
}

}  // namespace splitcheck
