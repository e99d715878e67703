#include "harness/judge/sweep.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "harness/engine/inproc.h"
#include "harness/engine/partitioned_engine.h"
#include "harness/judge/judge.h"
#include "harness/judge/serving_checks.h"
#include "harness/judge/stage_checks.h"
#include "harness/scenario/checks.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// SPEC 5.4 on one case: memory measured per stage against the placement rule, the
// embedding each stage holds, the drafter's binding (the same storage as its stage's
// embed_tokens) and the refusal of a missing placeholder, reached through the drafter's
// loading path on a stage without the embedding.
// A check that is not selected is not evaluated and cannot fail the case. Returns what
// failed, for the judge.
std::vector<CheckFailure> check_stages(const Scenario& s, const Partition& p, WeightSource& source,
                                       CaseResult& c,
                                       const std::function<bool(std::string_view)>& selected) {
  std::vector<CheckFailure> failures;
  auto fail = [&](const CheckFailure& f) {
    if (selected(f.check)) failures.push_back(f);
  };
  if (selected("memory"))
    for (const CheckFailure& f : check_memory(s, p, c.stages)) fail(f);
  if (selected("embedding")) {
    for (const CheckFailure& f : check_embedding_placement(s, p, c.stages)) fail(f);
    if (c.drafter.embedding_source != "none") {
      if (std::optional<CheckFailure> f = check_drafter_identity(s, c.drafter)) fail(*f);
    }
    if (std::optional<CheckFailure> f = check_refusal_reachable(s, p, source, &c.refusal_probe))
      fail(*f);
  }
  return failures;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kDiverged:
      return "diverged";
    case Verdict::kConfigRejected:
      return "config-rejected";
    case Verdict::kError:
      return "error";
    case Verdict::kSkipped:
      return "skipped";
    case Verdict::kWaived:
      return "waived";
    case Verdict::kUnproven:
      return "unproven";
    case Verdict::kInterrupted:
      return "interrupted";
  }
  return "?";
}

int SweepResult::count(Verdict v) const {
  return static_cast<int>(std::count_if(cases.begin(), cases.end(),
                                        [&](const CaseResult& c) { return c.verdict == v; }));
}

std::string SweepResult::counts_line() const {
  std::string line;
  for (const Verdict v : {Verdict::kPass, Verdict::kDiverged, Verdict::kConfigRejected,
                          Verdict::kError, Verdict::kSkipped, Verdict::kWaived, Verdict::kUnproven,
                          Verdict::kInterrupted})
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", count(v), verdict_name(v));
  return line;
}

bool SweepResult::conformant() const {
  return !cases.empty() && std::all_of(cases.begin(), cases.end(), [](const CaseResult& c) {
    return c.verdict == Verdict::kPass || c.verdict == Verdict::kWaived;
  });
}

bool SweepResult::compared_data() const {
  const bool judges_stages = std::any_of(checks.begin(), checks.end(), [](const std::string& n) {
    return n == "memory" || n == "embedding";
  });
  return std::any_of(cases.begin(), cases.end(), [&](const CaseResult& c) {
    return c.datasets_compared > 0 || (judges_stages && !c.stages.empty());
  });
}

std::string SweepResult::verdict_word() const {
  if (interrupted_by != 0) return "interrupted";
  if (refused_to_judge()) return "refused";
  if (no_data_compared()) return "no-data";
  return conformant() ? "conformant" : "divergent";
}

int SweepResult::exit_code() const {
  if (interrupted_by != 0) return 128 + interrupted_by;
  if (refused_to_judge()) return 4;
  if (count(Verdict::kError) > 0) return 3;
  // Passes that compared nothing are exit 0 only where `expect` asks for exactly that.
  const nlohmann::json expect =
      scenario.is_object() ? scenario.value("expect", nlohmann::json()) : nlohmann::json();
  if (no_data_compared() &&
      !(expect.is_object() && expect.value("verdict", nlohmann::json()) == "no-data"))
    return 1;
  return conformant() && expect_failures.empty() && waiver_failures.empty() ? 0 : 1;
}

namespace {

std::vector<std::string> expect_failures_of(const nlohmann::json& expect, const SweepResult& r) {
  std::vector<std::string> fails;
  auto keys_with = [&](Verdict v) {
    std::vector<std::string> k;
    for (const CaseResult& c : r.cases)
      if (c.verdict == v) k.push_back(c.key);
    return k;
  };
  if (expect.contains("verdict")) {
    const std::string want = expect["verdict"].get<std::string>();
    const std::string got = r.verdict_word();
    if (want != got) fails.push_back(fmt::format("expected verdict {}, got {}", want, got));
  }
  if (r.no_data_compared() && expect.value("verdict", "") != "no-data")
    fails.push_back(fmt::format(
        "no data compared: the selected checks ({}) compared no dataset and judged no stage; "
        "only \"expect\": {{\"verdict\": \"no-data\"}} accepts that",
        fmt::join(r.checks, ", ")));
  if (expect.contains("identical_splits")) {
    const int want = expect["identical_splits"].get<int>();
    if (r.count(Verdict::kPass) != want)
      fails.push_back(
          fmt::format("expected {} identical split points, got {}", want, r.count(Verdict::kPass)));
  }
  for (const auto& [field, verdict] : {std::pair{"identical", Verdict::kPass},
                                       std::pair{"config_rejected", Verdict::kConfigRejected},
                                       std::pair{"diverged", Verdict::kDiverged}}) {
    if (!expect.contains(field)) continue;
    std::vector<std::string> want = expect[field].get<std::vector<std::string>>();
    std::vector<std::string> got = keys_with(verdict);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    if (want != got)
      fails.push_back(fmt::format("expected {} = [{}], got [{}]", field, fmt::join(want, ", "),
                                  fmt::join(got, ", ")));
  }
  if (expect.contains("caught_by")) {
    const std::string check = expect["caught_by"].get<std::string>();
    int caught = 0;
    for (const CaseResult& c : r.cases) {
      const bool named =
          std::find(c.failed_checks.begin(), c.failed_checks.end(), check) != c.failed_checks.end();
      if (c.verdict == Verdict::kDiverged && !named)
        fails.push_back(fmt::format("{} diverged but the {} check did not fail", c.key, check));
      caught += named || (check == "config" && c.verdict == Verdict::kConfigRejected);
    }
    if (caught == 0) fails.push_back(fmt::format("no split point failed the {} check", check));
  }
  // SPEC 3.3 on PP=1's acceptance: its range, and every accepted length 0..gamma.
  const AcceptanceFigures& a = r.pp1_acceptance;
  for (const auto& [field, at_most] :
       {std::pair{"acceptance_rate_at_least", false}, std::pair{"acceptance_rate_at_most", true}}) {
    if (!expect.contains(field)) continue;
    const double bound = expect[field].get<double>();
    if (!a.speculative)
      fails.push_back(fmt::format("expected {} {}, but the run is not speculative", field, bound));
    else if (at_most ? a.acceptance_rate > bound : a.acceptance_rate < bound)
      fails.push_back(fmt::format("expected {} {}, got acceptance rate {:.4f}", field, bound,
                                  a.acceptance_rate));
  }
  if (expect.value("batch_invariant", false) && !r.batch_invariance.checked)
    fails.push_back("expected every request to equal itself served alone, but nothing checked it");
  // On a backend that does not promise it, batch invariance is measured; a scenario that
  // still expects it fails when a request differs.
  if (expect.value("batch_invariant", false) && !r.batch_invariance.not_invariant.empty())
    fails.push_back(fmt::format(
        "expected every request to equal itself served alone, but {} of {} differ (the backend "
        "is not batch-invariant): {}",
        r.batch_invariance.not_invariant.size(), r.batch_invariance.requests,
        r.batch_invariance.not_invariant.front()));
  if (expect.value("every_accepted_length", false)) {
    std::vector<size_t> missing;
    for (size_t n = 0; n < a.accepted_histogram.size(); ++n)
      if (a.accepted_histogram[n] == 0) missing.push_back(n);
    if (!a.speculative || a.accepted_histogram.empty())
      fails.push_back("expected every accepted length, but the run is not speculative");
    else if (!missing.empty())
      fails.push_back(fmt::format("expected every accepted length 0..{}, never accepted: {}",
                                  a.accepted_histogram.size() - 1, fmt::join(missing, ", ")));
  }
  return fails;
}

}  // namespace

std::vector<std::string> evaluate_expect(const nlohmann::json& expect, const SweepResult& r) {
  std::vector<std::string> fails;
  // The loader validates `expect` (scenario.cc); a block that still cannot be read here
  // (a hand-edited report given to merge, say) fails rather than passes.
  if (!expect.is_object()) {
    fails.push_back("expect cannot be read: expected an object, got " + expect.dump());
  } else {
    try {
      fails = expect_failures_of(expect, r);
    } catch (const nlohmann::json::exception& e) {
      fails.push_back(fmt::format("expect cannot be read: {}", e.what()));
    }
  }
  for (const CaseResult& c : r.cases)
    if (c.verdict == Verdict::kError)
      fails.push_back(fmt::format("{}: error: {}", c.key, c.message));
  // SPEC 3.4: on a batch-invariant backend a request in a batch equals the same request
  // served alone. Not an expectation a scenario may waive: a difference always fails the
  // sweep (BatchInvariance::differences holds only what must fail).
  for (const std::string& d : r.batch_invariance.differences)
    fails.push_back("batch invariance: " + d);
  return fails;
}

namespace {

// A sweep that compares nothing proves nothing: refuse a filter or shard that leaves no
// split point.
Status check_not_empty(const Scenario& s, const SweepOptions& options, size_t all, size_t kept) {
  if (kept > 0) return Status::ok();
  std::string why;
  if (!options.filter.empty()) why = fmt::format("--filter \"{}\" matches none", options.filter);
  if (options.shard_count > 1)
    why += fmt::format("{}shard {}/{} holds none", why.empty() ? "" : " and ", options.shard_index,
                       options.shard_count);
  if (why.empty()) why = "the scenario enumerates none";
  return invalid_input(fmt::format("{}: {} of its {} split point(s): nothing to compare",
                                   s.source_path.empty() ? s.name : s.source_path, why, all));
}

// The scenario's transport must be the one the sweep was given (nothing runs in-process
// in its place), with room for the partition with the most stages that would run. A
// partition that owns some layer twice or never is rejected at configuration before any
// stage is built (run_case's structural verdict), so it needs no rank: an MPI job with
// fewer ranks than its stages still gives its verdict.
Status check_transport(const Scenario& s, const SweepOptions& options,
                       const std::vector<Partition>& parts) {
  const std::string where = s.source_path.empty() ? s.name : s.source_path;
  if (s.transport != "inproc" && options.transport == nullptr)
    return invalid_input(fmt::format(
        "{}: /transport: \"{}\" needs its launcher (mpirun -np <stages> splitcheck sweep "
        "--transport {}); the sweep was given none",
        where, s.transport, s.transport));
  if (options.transport == nullptr) return Status::ok();
  for (const Partition& p : parts) {
    if (!p.ownership_problem().empty()) continue;  // rejected before anything runs
    if (p.stages() > options.transport->max_stages())
      return invalid_input(fmt::format(
          "{}: partition {} has {} stages, but the {} transport has {} rank(s): launch with "
          "mpirun -np {} or more",
          where, p.key(), p.stages(), s.transport, options.transport->max_stages(), p.stages()));
  }
  return Status::ok();
}

// One case: builds the partitioned engine, runs the workload, compares with PP=1 and
// evaluates the selected checks.
// What every case of one built-in sweep shares: the scenario and the engine's settings, the
// weight source and transport the stages are built over, and PP=1's workload and record.
struct SweepRun {
  const Scenario& s;
  EngineOptions engine_options;
  FaultSet faults;
  WeightSource& source;
  TransportFactory* transport;  // null: inproc
  const PreparedWorkload& workload;
  const RunRecord& ref_record;
};

// One case: builds the partitioned engine at `part`, runs the workload, and has the judge
// compare its record with PP=1's, with the stage checks' findings.
void run_case(const SweepRun& run, const Partition& part, CaseResult& c) {
  const Scenario& s = run.s;
  WeightSource& source = run.source;
  const std::function<bool(std::string_view)> selected = [&](std::string_view check) {
    return std::find(s.checks.begin(), s.checks.end(), check) != s.checks.end();
  };
  // A refused configuration never ran: it is not a pass whatever `checks` says, and it
  // fails the config check when that check is selected.
  auto refused = [&](const Status& st) {
    const bool rejected = st.code() == StatusCode::kConfigRejected;
    c.verdict = rejected ? Verdict::kConfigRejected : Verdict::kError;
    c.message = rejected ? st.message() : fmt::format("{} ({}): {}", c.key, c.layout, st.message());
    if (rejected && selected("config")) c.failed_checks.push_back("config");
  };
  // The structural check comes before anything is built or compared.
  if (const std::string problem = part.ownership_problem(); !problem.empty()) {
    c.verdict = Verdict::kConfigRejected;
    c.message = fmt::format("partition {}: {}", c.layout, problem);
    if (selected("partition")) c.failed_checks.push_back("partition");
    return;
  }
  Result<std::unique_ptr<PartitionedEngine>> engine = PartitionedEngine::create(
      s.model, part, run.engine_options, run.faults, source, run.transport);
  if (!engine.is_ok()) return refused(engine.status());
  c.stages = (*engine)->holdings();
  RunRecord rec;
  const int last = part.stages() - 1;
  const DrafterHost host{(*engine)->last_stage_weights(), last, last == 0};
  Result<GenerationSummary> g = run_generation(s, **engine, host, source, run.workload, &rec);
  c.computed = (*engine)->computed();
  if (!g.is_ok()) return refused(g.status());
  c.computed.drafter = g->drafter_calls;
  c.acceptance = acceptance_figures(*g);
  c.drafter = g->drafter;
  JudgeInput in;
  in.pp1 = &run.ref_record;
  in.candidate = &rec;
  for (const std::string& check : s.checks)
    if (check != "embedding" && check != "memory" && check != "config")
      in.dataset_checks.push_back(check);
  in.stage_failures = check_stages(s, part, source, c, selected);
  in.stages_judged = !c.stages.empty() && (selected("memory") || selected("embedding"));
  judge_case(in, c);
}

}  // namespace

// Every case, options.threads at a time (one per core by default; one for a transport of
// processes, which serves one partition at a time).
void run_cases(const SweepRun& run, const std::vector<Partition>& parts,
               const SweepOptions& options, Clock::time_point t0, SweepResult& result) {
  result.cases.resize(parts.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  auto worker = [&] {
    for (size_t i = next++; i < parts.size(); i = next++) {
      const auto tc = Clock::now();
      CaseResult& c = result.cases[i];
      c.key = parts[i].key();
      c.layout = parts[i].layout();
      c.cuts = parts[i].cuts();
      // An exception (a hostile weight source, a bug) fails this case, never the process.
      try {
        if (options.transport != nullptr && !options.transport->lost().empty()) {
          c.verdict = Verdict::kSkipped;
          c.message = "not run: " + options.transport->lost();
        } else {
          run_case(run, parts[i], c);
        }
      } catch (const std::exception& e) {
        c.verdict = Verdict::kError;
        c.message = fmt::format("{} ({}): exception: {}", c.key, c.layout, e.what());
      } catch (...) {
        c.verdict = Verdict::kError;
        c.message = fmt::format("{} ({}): unknown exception", c.key, c.layout);
      }
      c.seconds = seconds_since(tc);
      const size_t n = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        const double elapsed = seconds_since(t0);
        const double eta = elapsed / static_cast<double>(n) * static_cast<double>(parts.size() - n);
        fmt::print(stderr, "\r[{}/{}] split points done, ETA {:.0f} s   ", n, parts.size(), eta);
        if (n == parts.size()) fmt::print(stderr, "\n");
      }
    }
  };
  // A transport of processes serves one partition at a time.
  int threads = options.transport != nullptr ? 1
                : options.threads > 0
                    ? options.threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(parts.size())));
  result.threads = threads;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
}

Result<SweepResult> run_sweep(const Scenario& s, const SweepOptions& options) {
  const auto t0 = Clock::now();
  // Nothing runs on a backend or transport this build cannot provide (load_scenario
  // refuses it too; this covers scenarios built in code).
  RETURN_IF_ERROR(check_capabilities(s, s.source_path.empty() ? s.name : s.source_path));
  if (s.external)
    return invalid_input(fmt::format(
        "{}: /engine/command: an external engine is swept by the runner (splitcheck sweep, "
        "harness/runner/external_sweep.h), not by the built-in sweep",
        s.source_path.empty() ? s.name : s.source_path));
  SweepResult result;
  result.scenario_name = s.name;
  result.scenario = resolved_scenario_json(s);
  for (const CheckInfo& check : check_registry())
    if (std::find(s.checks.begin(), s.checks.end(), check.name) != s.checks.end())
      result.checks.emplace_back(check.name);
  ASSIGN_OR_RETURN(result.scenario_sha256, scenario_identity_sha256(s));
  ASSIGN_OR_RETURN(result.model_sha256, model_identity_sha256(s));
  ASSIGN_OR_RETURN(
      std::vector<Partition> all,
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults}));
  const std::vector<Partition> parts =
      select_partitions(all, options.shard_index, options.shard_count, options.filter);
  RETURN_IF_ERROR(check_not_empty(s, options, all.size(), parts.size()));
  RETURN_IF_ERROR(check_transport(s, options, parts));
  // Where the stages run: known before anything runs, so a refused sweep reports it too.
  int most_stages = 1;
  for (const Partition& p : parts) most_stages = std::max(most_stages, p.stages());
  result.placement.transport = options.transport != nullptr ? s.transport : "inproc";
  result.placement.stages = options.transport != nullptr
                                ? options.transport->placement(most_stages, s.backend)
                                : InprocFactory().placement(most_stages, s.backend);

  // PP=1, once, over the weight source every split point shares. Nothing of its outcomes
  // stands in for a stage's work: every partition computes every call it is judged on.
  const auto t_ref = Clock::now();
  std::unique_ptr<WeightSource> own_source;
  if (options.weights == nullptr) own_source = scenario_weight_source(s);
  WeightSource& source = options.weights != nullptr ? *options.weights : *own_source;
  if (options.reference != nullptr && options.weights == nullptr)
    return internal_error("a PP=1 run given to the sweep without the weights it ran over");
  ReferenceRun own_ref;
  if (options.reference == nullptr) {
    Result<ReferenceRun> ref_run = internal_error("PP=1 run did not start");
    try {
      ref_run = run_reference(s, source);
    } catch (const std::exception& e) {
      return internal_error(fmt::format("PP=1 run: exception: {}", e.what()));
    }
    ASSIGN_OR_RETURN(own_ref, std::move(ref_run), "PP=1 run");
  }
  const ReferenceRun& ref = options.reference != nullptr ? *options.reference : own_ref;
  const PreparedWorkload& workload = ref.workload;
  const RunRecord& ref_record = ref.record;
  result.pp1_acceptance = acceptance_figures(ref.summary);
  result.pp1_drafter = ref.summary.drafter;
  result.pp1_seconds = seconds_since(t_ref);
  result.pp1_computed = ref.computed;
  if (options.self_check) {
    // A PP=1 that differs from itself is never reported as a PP divergence: refuse.
    ASSIGN_OR_RETURN(result.self_check, check_pp1_reproduces(s, source, ref_record));
    if (result.refused_to_judge()) {
      result.total_seconds = seconds_since(t0);
      return result;
    }
  }
  const EngineOptions engine_options{s.capture_ids, s.dump_level, s.speculative.method,
                                     s.speculative.context_only_producer};
  if (s.serving.enabled) {
    if (options.requests_alone) {
      ASSIGN_OR_RETURN(result.batch_invariance, check_requests_alone(s, source, ref),
                       "serving each request alone at PP=1");
    }
    for (size_t r = 0; r < workload.prompts.size(); ++r)
      result.requests.push_back(static_cast<int32_t>(r));
  }

  const SweepRun run{s,        engine_options, FaultSet{s.faults}, source, options.transport,
                     workload, ref_record};
  run_cases(run, parts, options, t0, result);
  result.total_seconds = seconds_since(t0);
  // `expect` speaks of the whole sweep: a filtered or sharded run cannot meet or miss it
  // (splitcheck merge evaluates it once the shards are joined). Errors still count.
  const bool partial = !options.filter.empty() || options.shard_count > 1;
  result.expect_failures = evaluate_expect(partial ? nlohmann::json::object() : s.expect, result);
  return result;
}

}  // namespace splitcheck
