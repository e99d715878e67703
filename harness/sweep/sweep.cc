#include "harness/sweep/sweep.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "harness/engine/inproc.h"
#include "harness/engine/partitioned_engine.h"
#include "harness/engine/stage_evidence.h"
#include "harness/judge/expect.h"
#include "harness/judge/judge.h"
#include "harness/judge/stage_checks.h"
#include "harness/scenario/checks.h"
#include "harness/sweep/cases.h"
#include "harness/sweep/reproduce.h"
#include "harness/sweep/serving_checks.h"
#include "harness/sweep/worker_pool.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

namespace {

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
  StageEvidence pp1_stages;  // PP=1's stage facts, read back as a dump's are
};

// SPEC 5.4 on one case: the facts of its stages (what each holds against its placement,
// the drafter's binding, the refusal probe when embedding is selected) recorded in its
// record as `splitcheck run` writes them to a dump, read back through the one reader, and
// judged by the one rule set (judge_stage_checks) the runner also applies.
void judge_stages(const SweepRun& run, const Partition& part, const DrafterPlacement& drafter,
                  RunRecord& rec, CaseResult& c, JudgeInput& in) {
  const Scenario& s = run.s;
  std::vector<StageFacts> facts = partition_stage_facts(s, part, c.stages, drafter);
  if (std::find(s.checks.begin(), s.checks.end(), "embedding") != s.checks.end())
    add_refusal_probe(s, part, run.source, facts);
  for (const StageFacts& f : facts) {
    record_stage_facts(f, rec);
    if (!f.refusal_status.empty()) c.refusal_probe = f.refusal_probe;
  }
  StageJudgement j = judge_stage_checks(s.checks, stage_evidence_of(rec), run.pp1_stages);
  in.stage_failures = std::move(j.failures);
  in.not_judged = std::move(j.not_judged);
  in.stages_judged = j.judged;
}

// One case: builds the partitioned engine at `part`, runs the workload, and has the judge
// compare its record with PP=1's, with the stage checks' findings.
void run_case(const SweepRun& run, const Partition& part, CaseResult& c) {
  const Scenario& s = run.s;
  WeightSource& source = run.source;
  // A refused configuration never ran: it is not a pass whatever `checks` says, and it
  // fails the config check when that check is selected.
  auto refused = [&](const Status& st) {
    if (st.code() == StatusCode::kConfigRejected)
      return judge_refusal(Refusal::kConfiguration, st.message(), s.checks, c);
    c.verdict = Verdict::kError;
    c.message = fmt::format("{} ({}): {}", c.key, c.layout, st.message());
  };
  // The structural check comes before anything is built or compared.
  if (const std::string problem = part.ownership_problem(); !problem.empty())
    return judge_refusal(Refusal::kOwnership, fmt::format("partition {}: {}", c.layout, problem),
                         s.checks, c);
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
  in.dataset_checks = checks_of_kind(s.checks, CheckKind::kDataset);
  judge_stages(run, part, g->drafter, rec, c, in);
  judge_case(in, c);
}

}  // namespace

// Every case, options.threads at a time (one per core by default; one for a transport of
// processes, which serves one partition at a time).
void run_cases(const SweepRun& run, const std::vector<Partition>& parts,
               const SweepOptions& options, Clock::time_point t0, SweepResult& result) {
  result.cases.resize(parts.size());
  auto run_one = [&](size_t i) {
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
  };
  auto progress = [&](size_t n) {
    if (!options.progress) return;
    const double elapsed = seconds_since(t0);
    const double eta = elapsed / static_cast<double>(n) * static_cast<double>(parts.size() - n);
    fmt::print(stderr, "\r[{}/{}] split points done, ETA {:.0f} s   ", n, parts.size(), eta);
    if (n == parts.size()) fmt::print(stderr, "\n");
  };
  // A transport of processes serves one partition at a time.
  const int threads = options.transport != nullptr ? 1 : options.threads;
  result.threads = run_worker_pool(parts.size(), threads, run_one, progress);
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
  // The built-in engine's evidence covers every selected check: nothing is known not judged
  // before its cases run (judged_checks below settles the stage checks once they have).
  std::vector<NotJudged> not_judged;
  result.checks = judged_checks(s.checks, {}, not_judged);
  ASSIGN_OR_RETURN(result.scenario_sha256, scenario_identity_sha256(s));
  ASSIGN_OR_RETURN(result.model_sha256, model_identity_sha256(s));
  ASSIGN_OR_RETURN(const SweepCases taken,
                   select_cases(s, options.shard_index, options.shard_count, options.filter));
  const std::vector<Partition>& parts = taken.partitions;
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
    ASSIGN_OR_RETURN(own_ref, run_pp1(s, source, "PP=1 run"));
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

  // PP=1's stage facts, through the record and reader a dump's go through.
  RunRecord pp1_facts;
  record_stage_facts(ref.pp1_stage, pp1_facts);
  StageEvidence pp1_stages = stage_evidence_of(pp1_facts);
  pp1_stages.drafter_ran = ref_record.find("spec/accepted_histogram") != nullptr;
  const SweepRun run{s,        engine_options, FaultSet{s.faults},   source, options.transport,
                     workload, ref_record,     std::move(pp1_stages)};
  run_cases(run, parts, options, t0, result);
  index_cases(taken, result.cases);
  not_judged.clear();
  result.checks = judged_checks(s.checks, result.cases, not_judged);
  result.total_seconds = seconds_since(t0);
  // `expect` speaks of the whole sweep: a filtered or sharded run says it was not evaluated.
  judge_expect(s.expect, options.filter, options.shard_index, options.shard_count, result);
  return result;
}

}  // namespace splitcheck
