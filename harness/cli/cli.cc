#include "harness/cli/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "harness/cli/approx_cli.h"
#include "harness/cli/assemble_cli.h"
#include "harness/cli/bisect_cli.h"
#include "harness/cli/merge_cli.h"
#include "harness/cli/sweep_cli.h"
#include "harness/cli/version.h"
#include "harness/dump/compare.h"
#include "harness/dump/verify.h"
#include "harness/engine/run.h"
#include "harness/gates/golden.h"
#include "harness/gates/sensitivity.h"
#include "harness/judge/cause.h"
#include "harness/judge/outcome.h"
#include "harness/lanes/properties.h"
#include "harness/reports/escape.h"
#include "harness/reports/report.h"
#include "harness/scenario/partition.h"
#include "harness/sweep/bisect.h"

namespace splitcheck {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitDiverged = 1;
constexpr int kExitInvalid = 2;
constexpr int kExitInternal = 3;
// `run`: the engine refused the configuration (the runner protocol's refusal,
// docs/external-engines.md), its reason at <out>.refusal.
constexpr int kExitConfigRefused = 4;

std::string default_scenario() {
  return std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json";
}

int report_status(const Status& st) {
  fmt::print(stderr, "splitcheck: error: {}\n", st.message());
  return st.code() == StatusCode::kInvalidInput ? kExitInvalid : kExitInternal;
}

// A configuration the engine refused: its reason on stderr and, with --out, at
// <out>.refusal (written under a temporary name, then renamed), exit 4.
int refuse_configuration(const std::string& out, const std::string& reason) {
  fmt::print(stderr, "splitcheck: configuration refused: {}\n", reason);
  if (out.empty()) return kExitConfigRefused;
  const std::string path = out + ".refusal", partial = path + ".partial";
  {
    std::ofstream f(partial, std::ios::binary | std::ios::trunc);
    f << reason << "\n";
    if (!f) return report_status(internal_error(partial + ": cannot write"));
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) return report_status(internal_error(path + ": cannot write: " + ec.message()));
  return kExitConfigRefused;
}

int cmd_run(const std::string& scenario_path, const std::string& out,
            const std::vector<int>& split) {
  Result<Scenario> s = load_scenario(scenario_path);
  if (!s.is_ok()) return report_status(s.status());
  Result<ReferenceRun> run = split.empty() ? run_reference(*s) : run_partitioned(*s, split);
  if (!run.is_ok() && run.status().code() == StatusCode::kConfigRejected)
    return refuse_configuration(out, run.status().message());
  if (!run.is_ok()) return report_status(run.status());
  // The reference engine is one stage over every layer: what a runner needs as the evidence
  // of PP=1's partition, with what it holds (docs/external-engines.md).
  if (split.empty()) record_stage_facts(run->pp1_stage, run->record);
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
    std::error_code ignored;  // a refusal of an earlier run is not this run's
    std::filesystem::remove(out + ".refusal", ignored);
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
  const std::string cause = compare_cause(*r);
  fmt::print("{}{}\n{}\n{}\n", console_line(verdict(*r)),
             cause.empty() ? "" : " (cause: " + cause + ")", digests_line(*r),
             console_line(placement_line(*r)));
  if (const std::string rounded = rounding_line(*r); !rounded.empty())
    fmt::print("{}\n", console_line(rounded));
  if (!report_dir.empty()) {
    Status st =
        write_reports(report_dir, compare_report(*r, a, b, ReportContext{command}, approximate));
    if (!st.is_ok()) return report_status(st);
    fmt::print("report: {}/report.json\n", report_dir);
  }
  // Two files compared are one case: its exit status from the judge's outcome table.
  return outcome_of(r->equal() ? Verdict::kPass : Verdict::kDiverged).exit_status;
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

// The fault sensitivity table (harness/gates/sensitivity.h): exit 0 when every fault is
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

// GPU properties (harness/lanes/properties.h): measured and printed as JSON (also
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

// `run`: PP=1 (or the partitioned engine at --split's cuts) on one scenario.
struct RunCmd {
  std::string scenario = default_scenario(), out;
  std::vector<std::string> split_text;
  CLI::App* command = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand(
        "run", "Run the PP=1 reference on a scenario, print a summary, write its dump");
    command->add_option("scenario", scenario,
                        "Scenario JSON (default: the embedded default scenario)");
    command->add_option("--out", out,
                        "Dump file (HDF5) to write; a configuration the engine refuses exits 4 "
                        "with its reason at <out>.refusal instead");
    command
        ->add_option("--split", split_text,
                     "Run the partitioned engine with these cuts instead of PP=1 (e.g. --split "
                     "12 or --split 8,20; --split \"\" is PP=1, so an external-engine "
                     "template's {cuts} can name any partition)")
        ->delimiter(',');
  }

  int run() const {
    std::vector<int> split;
    for (const std::string& cut : split_text) {
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
      split.push_back(value);
    }
    return cmd_run(scenario, out, split);
  }
};

// `checkpoint`: the scenario's model weights as an HDF5 checkpoint.
struct CheckpointCmd {
  std::string scenario = default_scenario(), out;
  CLI::App* command = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand("checkpoint",
                                 "Write the scenario's model weights as an HDF5 checkpoint");
    command->add_option("scenario", scenario, "Scenario JSON");
    command->add_option("--out", out, "Checkpoint file to write")->required();
  }
  int run() const { return cmd_checkpoint(scenario, out); }
};

// `golden verify` and `golden update`: the committed PP=1 goldens.
struct GoldenCmd {
  std::string dir = std::string(SPLITCHECK_SOURCE_DIR) + "/golden";
  std::string reason, backend;
  std::vector<std::string> scenarios;
  CLI::App* command = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* update = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand("golden", "Verify or update the committed PP=1 goldens");
    command->require_subcommand(1);
    command->add_option("--dir", dir, "Golden directory (default: the source tree's golden/)");
    verify = command->add_subcommand("verify", "Recompute every golden and compare bit for bit");
    update = command->add_subcommand("update",
                                     "Regenerate goldens; the reason is recorded in MANIFEST.json");
    update->add_option("--reason", reason, "Why the golden changes")->required();
    update->add_option("scenarios", scenarios, "Scenario files (default: every golden's)");
    update
        ->add_option("--backend", backend,
                     "Run the scenarios on this backend and record it in the manifest (cuda: a "
                     "GPU golden, fingerprinted with the GPU, SM count, driver, CUDA and "
                     "cuBLASLt versions); default: each scenario's own")
        ->check(CLI::IsMember({"cpu", "cuda"}));
  }

  int run() const {
    if (*verify) return cmd_golden_verify(dir);
    Status st = update_goldens(SPLITCHECK_SOURCE_DIR, dir, scenarios, reason, backend);
    if (!st.is_ok()) return report_status(st);
    fmt::print("goldens updated: {}\n", reason);
    return kExitOk;
  }
};

// `compare A B` and `verify-dump FILE`: dump files, bit for bit.
struct CompareCmd {
  std::string a, b, report, verify_path;
  bool approximate = false, full = false, trust_digests = false;
  CLI::App* command = nullptr;
  CLI::App* verify_dump = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand(
        "compare",
        "Compare two dumps of the splitcheck format bit for bit (every byte read, both files' "
        "digests verified in the same pass, attributes that carry results compared)");
    command->add_option("a", a, "Golden (or first) dump")->required();
    command->add_option("b", b, "Candidate dump")->required();
    command->add_flag("--approximate", approximate, "Use the approximate lane's thresholds");
    auto* trust_flag = command->add_flag(
        "--trust-digests", trust_digests,
        "Take datasets with equal stored digests as equal without reading them; every report "
        "form then says the verdict rests on unverified digests");
    command
        ->add_flag("--full", full,
                   "Read every byte (the default; kept so that older scripts still run)")
        ->excludes(trust_flag);
    verify_dump = app.add_subcommand(
        "verify-dump",
        "Check one dump's integrity: format, format_version, every dataset's digest against "
        "its bytes, order 0..n-1 once each, every attribute readable; exit 0 or 2");
    verify_dump->add_option("file", verify_path, "Dump file (HDF5)")->required();
    command->add_option("--report", report,
                        "Directory for report.json, report.html, junit.xml, summary.md");
  }
};

// `merge`: shard reports joined into one.
struct MergeCmd {
  std::vector<std::string> inputs;
  std::string dir;
  CLI::App* command = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand(
        "merge", "Join shard reports (sweep --shard i/N --report DIR) into one unsharded report");
    command->add_option("reports", inputs, "Shard report.json files")->required();
    command->add_option("--report", dir, "Directory for the merged report")->required();
  }
  int run() const { return run_merge(inputs, dir); }
};

// `sensitivity`: every fault scenario at several seeds, with and without its fault.
struct SensitivityCmd {
  std::vector<std::string> scenarios;
  std::vector<uint64_t> seeds{0x4b334d494e49ull, 1234, 7};
  int threads = 0;
  CLI::App* command = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand(
        "sensitivity",
        "Sweep every fault scenario at several model seeds, with and without its fault: print "
        "which check caught it and the false alarms of the fixed protocol");
    command->add_option("scenarios", scenarios,
                        "Fault scenarios (default: every committed scenarios/fault-*.json)");
    command->add_option("--seeds", seeds, "Model seeds (default: the preset's, 1234, 7)")
        ->delimiter(',');
    command->add_option("--threads", threads, "Threads per sweep (0: one per core)");
  }
  int run() const { return cmd_sensitivity(scenarios, seeds, threads); }
};

// `properties`: GPU properties of the scenario's backend, as JSON.
struct PropertiesCmd {
  std::string scenario = default_scenario(), json;
  CLI::App* command = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand(
        "properties",
        "Measure whether a token's logits depend on its forward's row count (decode vs "
        "prefill, verify vs decode, chunked vs whole prefill) on the scenario's backend; "
        "print JSON");
    command->add_option("scenario", scenario, "Scenario JSON (default: the default scenario)");
    command->add_option("--json", json, "Also write the JSON to this file");
  }
  int run() const { return cmd_properties(scenario, json); }
};

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
  RunCmd run;
  run.add_to(app);
  CheckpointCmd checkpoint;
  checkpoint.add_to(app);
  GoldenCmd golden;
  golden.add_to(app);
  CompareCmd compare;
  compare.add_to(app);
  SweepCli sweep_cli;
  sweep_cli.add_to(app);
  BisectCli bisect_cli;
  bisect_cli.add_to(app);
  ApproxCli approx_cli;
  approx_cli.add_to(app, default_scenario());
  AssembleCli assemble_cli;
  assemble_cli.add_to(app);
  MergeCmd merge;
  merge.add_to(app);
  SensitivityCmd sensitivity;
  sensitivity.add_to(app);
  PropertiesCmd properties;
  properties.add_to(app);

  for (int i = 0; i < argc; ++i) sweep_cli.command_line += (i ? " " : "") + std::string(argv[i]);
  sweep_cli.args.assign(argv + std::min(argc, 1), argv + argc);
  bisect_cli.command_line = sweep_cli.command_line;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitInvalid;
  }
  if (*run.command) return run.run();
  if (*checkpoint.command) return checkpoint.run();
  if (*golden.command) return golden.run();
  if (*compare.command)
    return cmd_compare(compare.a, compare.b, compare.approximate, compare.trust_digests,
                       compare.report, sweep_cli.command_line);
  if (*compare.verify_dump) return cmd_verify_dump(compare.verify_path);
  if (*bisect_cli.command) return bisect_cli.run();
  if (*approx_cli.command) return approx_cli.run();
  if (*assemble_cli.command) return assemble_cli.run();
  if (*merge.command) return merge.run();
  if (*properties.command) return properties.run();
  if (*sensitivity.command) return sensitivity.run();
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
