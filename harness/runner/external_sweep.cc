#include "harness/runner/external_sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include "harness/dump/digest.h"
#include "harness/dump/dump.h"
#include "harness/dump/verify.h"
#include "harness/engine/partition.h"
#include "harness/runner/engine_process.h"
#include "harness/verdict/checks.h"
#include "harness/verdict/faults.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The checks judged from datasets, by the check each dataset path belongs to.
constexpr const char* kDatasetChecks[] = {"tensors", "taps",     "logits",
                                          "tokens",  "dispatch", "acceptance"};
// The checks judged from /stages.
constexpr const char* kStageChecks[] = {"partition", "embedding", "memory"};

bool is_dataset_check(const std::string& c) {
  return std::any_of(std::begin(kDatasetChecks), std::end(kDatasetChecks),
                     [&](const char* n) { return c == n; });
}

// One dump, read whole and checked: its datasets in execution order, what its stages hold
// and its speculative figures.
struct LoadedDump {
  RunRecord record;
  std::vector<StageHoldings> stages;                           // empty when it carries no /stages
  std::vector<std::map<std::string, std::string>> stage_text;  // other stage attributes
  bool stage_bytes = false;  // every stage carries parameter_bytes
  AcceptanceFigures acceptance;
};

Result<LoadedDump> load_dump(const std::string& path) {
  RETURN_IF_ERROR(verify_dump(path).status());
  ASSIGN_OR_RETURN(DumpReader r, DumpReader::open(path));
  LoadedDump d;
  for (const DatasetInfo& info : r.datasets()) {
    ASSIGN_OR_RETURN(Tensor t, r.read(info.path));
    if (info.path.ends_with("/dispatch") &&
        (t.dtype() != DType::kI32 || t.shape().size() != 2 || t.dim(1) != 4))
      return invalid_input(
          fmt::format("{}: {}: a dispatch trace is int32 [events, 4] (layer, site, kernel, aux)",
                      path, info.path));
    d.record.add(info.path.substr(1), std::move(t));
  }
  for (int s = 0;; ++s) {
    const std::string g = fmt::format("/stages/{}", s);
    if (!r.exists(g)) break;
    StageHoldings h;
    h.index = s;
    ASSIGN_OR_RETURN(int64_t b, r.attr_int(g, "layer_begin"));
    ASSIGN_OR_RETURN(int64_t e, r.attr_int(g, "layer_end"));
    h.range = StageRange{static_cast<int>(b), static_cast<int>(e)};
    if (Result<std::string> emb = r.attr_string(g, "embedding"); emb.is_ok()) h.embedding = *emb;
    Result<int64_t> bytes = r.attr_int(g, "parameter_bytes");
    if (bytes.is_ok()) h.parameter_bytes = static_cast<size_t>(*bytes);
    d.stage_bytes = (s == 0 || d.stage_bytes) && bytes.is_ok();
    std::map<std::string, std::string> text;
    ASSIGN_OR_RETURN(auto attrs, r.attributes(g));
    for (const auto& [name, value] : attrs) text[name] = value.text;
    d.stages.push_back(std::move(h));
    d.stage_text.push_back(std::move(text));
  }
  if (const Tensor* hist = d.record.find("spec/accepted_histogram");
      hist != nullptr && hist->dtype() == DType::kI32 && hist->numel() > 1) {
    AcceptanceFigures& a = d.acceptance;
    a.speculative = true;
    for (int64_t i = 0; i < hist->numel(); ++i) {
      const int64_t n = hist->data<int32_t>()[i];
      a.accepted_histogram.push_back(n);
      a.steps += n;
      a.accepted += i * n;
    }
    if (a.steps > 0) {
      const double steps = static_cast<double>(a.steps), acc = static_cast<double>(a.accepted);
      a.mean_accepted = acc / steps;
      a.acceptance_rate = acc / (steps * static_cast<double>(hist->numel() - 1));
      a.tokens_per_forward = 1 + acc / steps;
    }
  }
  return d;
}

void fail_check(CaseResult& c, const std::string& check, const std::string& message) {
  if (std::find(c.failed_checks.begin(), c.failed_checks.end(), check) == c.failed_checks.end())
    c.failed_checks.push_back(check);
  if (c.verdict == Verdict::kPass) {
    c.verdict = Verdict::kDiverged;
    c.message = message;
  } else {
    c.message += c.message.empty() ? message : "; " + message;
  }
}

// partition, embedding and memory from what the case's dump says its stages hold.
void judge_stages(const std::vector<std::string>& selected, const Partition& part,
                  const LoadedDump& pp1, const LoadedDump& d, CaseResult& c) {
  auto wanted = [&](const char* check) {
    return std::find(selected.begin(), selected.end(), check) != selected.end();
  };
  for (const char* check : kStageChecks) {
    if (!wanted(check)) continue;
    const bool memory = std::string(check) == "memory";
    if (d.stages.empty())
      c.not_judged.push_back({check, "its dump carries no /stages"});
    else if (memory && !(d.stage_bytes && pp1.stage_bytes))
      c.not_judged.push_back({check, pp1.stage_bytes
                                         ? "its /stages carry no parameter_bytes"
                                         : "the PP=1 dump's /stages carry no parameter_bytes"});
  }
  if (d.stages.empty()) return;
  if (wanted("partition")) {
    std::vector<std::string> wrong;
    if (static_cast<int>(d.stages.size()) != part.stages())
      wrong.push_back(
          fmt::format("{} stages in the dump, {} asked", d.stages.size(), part.stages()));
    for (int s = 0; s < std::min<int>(part.stages(), static_cast<int>(d.stages.size())); ++s) {
      const StageRange want = part.stage(s), got = d.stages[s].range;
      if (want.begin != got.begin || want.end != got.end)
        wrong.push_back(fmt::format("stage {} ran layers {}-{}, asked {}-{}", s, got.begin, got.end,
                                    want.begin, want.end));
    }
    if (!wrong.empty())
      fail_check(c, "partition", fmt::format("partition: {}", fmt::join(wrong, "; ")));
  }
  if (wanted("embedding")) {
    const bool drafter = d.record.find("spec/accepted_histogram") != nullptr;
    for (size_t s = 0; s < d.stages.size(); ++s) {
      const std::string& e = d.stages[s].embedding;
      if (s == 0 && e != "real")
        fail_check(c, "embedding",
                   fmt::format("embedding: stage 0 holds \"{}\", not the real "
                               "embedding",
                               e));
      if (s > 0 && e == "real")
        fail_check(c, "embedding",
                   fmt::format("embedding: stage {} holds a real embedding "
                               "(only the first stage does)",
                               s));
      if (s > 0 && e == "copy-for-drafter" && !drafter)
        fail_check(c, "embedding",
                   fmt::format("embedding: stage {} holds a copy for a drafter, "
                               "but no drafter ran (no /spec)",
                               s));
      const auto& text = d.stage_text[s];
      // "none": no drafter runs beside this stage (docs/dump-format.md).
      if (auto it = text.find("drafter_embedding");
          it != text.end() && it->second != "target" && it->second != "none")
        fail_check(c, "embedding",
                   fmt::format("embedding: the drafter on stage {} uses the "
                               "\"{}\" embedding, not the target's",
                               s, it->second));
      if (auto it = text.find("drafter_same_object_as_target");
          it != text.end() && it->second == "0")
        fail_check(c, "embedding",
                   fmt::format("embedding: the drafter on stage {} uses a copy, "
                               "not the target's embedding object",
                               s));
    }
  }
  if (wanted("memory") && d.stage_bytes && pp1.stage_bytes) {
    size_t held = 0, pp1_held = 0;
    for (const StageHoldings& h : d.stages) held += h.parameter_bytes;
    for (const StageHoldings& h : pp1.stages) pp1_held += h.parameter_bytes;
    if (held < pp1_held)
      fail_check(c, "memory",
                 fmt::format("memory: the stages hold {} parameter bytes, {} fewer "
                             "than PP=1's {} (weights not loaded)",
                             held, pp1_held - held, pp1_held));
  }
}

// The dataset checks of `selected` that the PP=1 dump gives evidence for; the others are
// appended to `not_judged`.
std::vector<std::string> judged_dataset_checks(const std::vector<std::string>& selected,
                                               const RunRecord& pp1,
                                               std::vector<NotJudged>& not_judged) {
  std::set<std::string> present;
  for (const RecordEntry& e : pp1.entries()) present.insert(dataset_check(e.path));
  std::vector<std::string> judged;
  for (const std::string& c : selected) {
    if (!is_dataset_check(c)) continue;
    if (present.count(c)) {
      judged.push_back(c);
      continue;
    }
    const std::string what = c == "dispatch"     ? "no dispatch trace"
                             : c == "acceptance" ? "no /spec"
                             : c == "taps"       ? "no taps"
                             : c == "logits"     ? "no logits"
                             : c == "tokens"     ? "no token datasets"
                                                 : "no per-layer tensors";
    not_judged.push_back({c, "the PP=1 dump carries " + what});
  }
  return judged;
}

std::string make_work_dir(const std::string& requested) {
  if (!requested.empty()) return fs::absolute(requested).lexically_normal().string();
  const char* tmp = std::getenv("TMPDIR");
  std::string templ =
      std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/splitcheck-runs-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

// Runs the engine for one partition (or PP=1: empty cuts) into `dump`; an empty string
// when it wrote a dump, else why not (with `stderr_tail` set).
std::string run_engine(const Scenario& s, const std::vector<int>& cuts, const std::string& dump,
                       const std::string& scenario_file, ProcessOutcome& outcome,
                       std::string& stderr_tail) {
  const ExternalEngine& e = *s.external;
  std::error_code ec;
  fs::remove(dump, ec);
  const std::string stem = dump.substr(0, dump.size() - 3);
  EngineProcess p{expand_command(e, placeholder_values(s, cuts, dump, scenario_file)),
                  e.cwd,
                  e.env,
                  e.timeout_s,
                  stem + ".stdout",
                  stem + ".stderr"};
  Result<ProcessOutcome> o = run_engine_process(p);
  if (!o.is_ok()) return o.status().message();
  outcome = *o;
  std::string why;
  if (!outcome.ok())
    why = "engine " + outcome.describe(e.timeout_s);
  else if (!fs::is_regular_file(dump, ec))
    why = fmt::format("engine exited with status 0 but wrote no dump at {}", dump);
  if (!why.empty()) stderr_tail = file_tail(p.stderr_path);
  return why;
}

}  // namespace

std::map<std::string, std::string> placeholder_values(const Scenario& s,
                                                      const std::vector<int>& cuts,
                                                      const std::string& out,
                                                      const std::string& scenario_file) {
  std::string split = "pp1";
  if (!cuts.empty()) {
    Result<Partition> p = Partition::from_cuts(cuts, s.model.num_hidden_layers);
    split = fmt::format("pp{}/{}", cuts.size() + 1,
                        p.is_ok() ? p->key() : fmt::format("split-{}", fmt::join(cuts, "-")));
  }
  return {{"pp", std::to_string(cuts.size() + 1)},
          {"cuts", fmt::format("{}", fmt::join(cuts, ","))},
          {"split", split},
          {"out", out},
          {"scenario", scenario_file},
          {"seed", std::to_string(s.model.seed)}};
}

Result<SweepResult> run_external_sweep(const Scenario& s, const ExternalSweepOptions& options) {
  const auto t0 = Clock::now();
  const std::string where = s.source_path.empty() ? s.name : s.source_path;
  if (!s.external) return invalid_input(where + ": /engine: no external engine (no \"command\")");
  const ExternalEngine& e = *s.external;
  SweepResult result;
  result.scenario_name = s.name;
  result.scenario = resolved_scenario_json(s);
  ASSIGN_OR_RETURN(result.scenario_sha256, scenario_identity_sha256(s));
  // The model is the engine's, which splitcheck cannot hash: the engine block names it.
  const std::string engine_text = external_engine_json(e).dump();
  result.model_sha256 =
      sha256_hex(std::as_bytes(std::span(engine_text.data(), engine_text.size())));
  ExternalRunInfo& info = result.external.emplace();
  info.cwd = e.cwd;
  info.env = e.env;
  info.timeout_s = e.timeout_s;
  info.golden = e.golden;
  info.jobs_requested = options.jobs;

  ASSIGN_OR_RETURN(
      std::vector<Partition> all,
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults}));
  const std::vector<Partition> parts =
      select_partitions(all, options.shard_index, options.shard_count, options.filter);
  if (parts.empty())
    return invalid_input(fmt::format(
        "{}: {} of its {} split point(s): nothing to compare", where,
        options.filter.empty() ? "the shard holds none" : "--filter matches none", all.size()));
  info.work_dir = make_work_dir(options.work_dir);
  std::error_code ec;
  if (info.work_dir.empty() || (fs::create_directories(info.work_dir, ec), ec))
    return invalid_input(fmt::format("{}: cannot create the work directory", info.work_dir));
  const std::string scenario_file = info.work_dir + "/scenario.json";
  {
    std::ofstream out(scenario_file, std::ios::binary);
    out << result.scenario.dump(2) << "\n";
    if (!out) return internal_error(scenario_file + ": cannot write");
  }
  const std::string pp1_dump = info.work_dir + "/pp1.h5";
  info.pp1_command = expand_command(e, placeholder_values(s, {}, pp1_dump, scenario_file));

  // PP=1, once (or its golden).
  const auto t_ref = Clock::now();
  LoadedDump pp1;
  std::string pp1_failure;
  if (!e.golden.empty()) {
    Result<LoadedDump> g = load_dump(e.golden);
    if (!g.is_ok())
      return invalid_input(fmt::format("{}: /engine/golden: {}", where, g.status().message()));
    pp1 = std::move(*g);
    info.pp1_outcome = "golden " + e.golden;
  } else {
    ProcessOutcome o;
    pp1_failure = run_engine(s, {}, pp1_dump, scenario_file, o, info.pp1_stderr_tail);
    info.engine_seconds += o.seconds;
    if (pp1_failure.empty()) {
      Result<LoadedDump> g = load_dump(pp1_dump);
      if (g.is_ok())
        pp1 = std::move(*g);
      else
        pp1_failure = "corrupt dump: " + g.status().message();
    }
    info.pp1_outcome = pp1_failure.empty()
                           ? fmt::format("exited with status 0 in {:.2f} s", o.seconds)
                           : pp1_failure;
  }
  result.pp1_seconds = seconds_since(t_ref);
  result.pp1_acceptance = pp1.acceptance;
  info.pp1_failed = !pp1_failure.empty();

  std::vector<NotJudged> sweep_not_judged;
  const std::vector<std::string> dataset_checks =
      judged_dataset_checks(s.checks, pp1.record, sweep_not_judged);
  if (std::find(s.checks.begin(), s.checks.end(), "config") != s.checks.end())
    sweep_not_judged.push_back(
        {"config", "an external engine's configuration-time refusals are not observed"});

  result.cases.resize(parts.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex mu;
  auto worker = [&] {
    for (size_t i = next++; i < parts.size(); i = next++) {
      const auto tc = Clock::now();
      CaseResult& c = result.cases[i];
      const Partition& part = parts[i];
      c.key = part.key();
      c.layout = part.layout();
      c.cuts = part.cuts();
      auto error = [&](const std::string& why) {
        c.verdict = Verdict::kError;
        c.message = fmt::format("{} ({}): {}", c.key, c.layout, why);
      };
      try {
        if (const std::string problem = part.ownership_problem(); !problem.empty()) {
          c.verdict = Verdict::kConfigRejected;
          c.message = fmt::format("partition {}: {}", c.layout, problem);
        } else if (info.pp1_failed) {
          error("not judged: the PP=1 run failed (" + pp1_failure + ")");
        } else {
          c.dump = info.work_dir + "/" + c.key + ".h5";
          ProcessOutcome o;
          const std::string why = run_engine(s, c.cuts, c.dump, scenario_file, o, c.stderr_tail);
          {
            std::lock_guard<std::mutex> lock(mu);
            info.engine_seconds += o.seconds;
          }
          Result<LoadedDump> d =
              why.empty() ? load_dump(c.dump) : Result<LoadedDump>(invalid_input(why));
          if (!why.empty()) {
            error(why);
          } else if (!d.is_ok()) {
            error("corrupt dump: " + d.status().message());
          } else {
            c.acceptance = d->acceptance;
            c.stages = d->stages;
            bool judged_any = !dataset_checks.empty();
            if (!dataset_checks.empty()) {
              Status st = compare_records(pp1.record, d->record, c, dataset_checks);
              if (!st.is_ok()) error(st.message());
            } else {
              c.verdict = Verdict::kPass;
            }
            if (c.verdict != Verdict::kError) {
              judge_stages(s.checks, part, pp1, *d, c);
              for (const char* check : kStageChecks) {
                const bool selected =
                    std::find(s.checks.begin(), s.checks.end(), check) != s.checks.end();
                const bool not_here =
                    std::any_of(c.not_judged.begin(), c.not_judged.end(),
                                [&](const NotJudged& n) { return n.check == check; });
                judged_any |= selected && !not_here;
              }
              if (!judged_any)
                error("nothing judged: the dumps give no evidence for any check");
              else if (c.verdict == Verdict::kPass && dataset_checks.empty())
                c.message = "passed every check its dump gives evidence for";
            }
          }
        }
      } catch (const std::exception& ex) {
        error(fmt::format("exception: {}", ex.what()));
      }
      c.seconds = seconds_since(tc);
      const size_t n = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(mu);
        fmt::print(stderr, "\r[{}/{}] split points done   {}", n, parts.size(),
                   n == parts.size() ? "\n" : "");
      }
    }
  };
  int jobs = options.jobs > 0 ? options.jobs
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(parts.size())));
  info.jobs = jobs;
  result.threads = jobs;
  std::vector<std::thread> pool;
  for (int i = 0; i < jobs; ++i) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();

  // A stage check is not judged for the sweep when no case that ran could judge it.
  for (const char* check : kStageChecks) {
    if (std::find(s.checks.begin(), s.checks.end(), check) == s.checks.end()) continue;
    bool judged = false;
    std::string reason;
    for (const CaseResult& c : result.cases) {
      if (c.verdict == Verdict::kError || c.verdict == Verdict::kConfigRejected) continue;
      auto it = std::find_if(c.not_judged.begin(), c.not_judged.end(),
                             [&](const NotJudged& n) { return n.check == check; });
      if (it == c.not_judged.end())
        judged = true;
      else if (reason.empty())
        reason = "no partition's dump gives evidence: " + it->reason;
    }
    if (!judged) sweep_not_judged.push_back({check, reason.empty() ? "no partition ran" : reason});
  }
  info.not_judged = sweep_not_judged;
  for (const CheckInfo& check : check_registry()) {
    const std::string name(check.name);
    const bool selected = std::find(s.checks.begin(), s.checks.end(), name) != s.checks.end();
    const bool not_judged = std::any_of(sweep_not_judged.begin(), sweep_not_judged.end(),
                                        [&](const NotJudged& n) { return n.check == name; });
    if (selected && !not_judged) result.checks.push_back(name);
  }
  result.total_seconds = seconds_since(t0);
  const bool partial = !options.filter.empty() || options.shard_count > 1;
  result.expect_failures = evaluate_expect(partial ? nlohmann::json::object() : s.expect, result);
  return result;
}

}  // namespace splitcheck
