#include "harness/sweep/sweep.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "harness/engine/inproc.h"
#include "harness/engine/partitioned_engine.h"
#include "harness/engine/stage_evidence.h"
#include "harness/judge/judge.h"
#include "harness/judge/stage_checks.h"
#include "harness/scenario/checks.h"
#include "harness/sweep/driver.h"
#include "harness/sweep/reproduce.h"
#include "harness/sweep/serving_checks.h"

namespace splitcheck {
namespace {

// The scenario's transport must be the one the sweep was given (nothing runs in-process
// in its place), with room for the partition with the most stages that would run. A
// partition that owns some layer twice or never is rejected at configuration before any
// stage is built (the driver's ownership verdict, harness/sweep/driver.h), so it needs no
// rank: an MPI job with fewer ranks than its stages still gives its verdict.
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

// The built-in engine's cases: PP=1 over the scenario's weights (or the ones given), then
// each partition built over the same weights on the transport.
class BuiltinCases : public CaseSource {
 public:
  BuiltinCases(const Scenario& s, const SweepOptions& options) : s_(s), options_(options) {}

  Status begin(const SweepCases& taken, SweepResult& result) override {
    ASSIGN_OR_RETURN(result.model_sha256, model_identity_sha256(s_));
    RETURN_IF_ERROR(check_transport(s_, options_, taken.partitions));
    // Where the stages run: known before anything runs, so a refused sweep reports it too.
    int most_stages = 1;
    for (const Partition& p : taken.partitions) most_stages = std::max(most_stages, p.stages());
    result.placement.transport = options_.transport != nullptr ? s_.transport : "inproc";
    result.placement.stages = options_.transport != nullptr
                                  ? options_.transport->placement(most_stages, s_.backend)
                                  : InprocFactory().placement(most_stages, s_.backend);
    return Status::ok();
  }

  // PP=1, once, over the weight source every split point shares. Nothing of its outcomes
  // stands in for a stage's work: every partition computes every call it is judged on.
  Status reference(SweepResult& result) override {
    if (options_.reference != nullptr && options_.weights == nullptr)
      return internal_error("a PP=1 run given to the sweep without the weights it ran over");
    if (options_.weights == nullptr) own_source_ = scenario_weight_source(s_);
    source_ = options_.weights != nullptr ? options_.weights : own_source_.get();
    if (options_.reference == nullptr) {
      ASSIGN_OR_RETURN(own_ref_, run_pp1(s_, *source_, "PP=1 run"));
    }
    ref_ = options_.reference != nullptr ? options_.reference : &own_ref_;
    result.pp1_acceptance = acceptance_figures(ref_->summary);
    result.pp1_drafter = ref_->summary.drafter;
    result.pp1_computed = ref_->computed;
    return Status::ok();
  }

  Status reproduce(SweepResult& result) override {
    ASSIGN_OR_RETURN(result.self_check, check_pp1_reproduces(s_, *source_, ref_->record));
    return Status::ok();
  }

  Status take_reference(SweepResult& result) override {
    if (s_.serving.enabled) {
      if (options_.requests_alone) {
        ASSIGN_OR_RETURN(result.batch_invariance, check_requests_alone(s_, *source_, *ref_),
                         "serving each request alone at PP=1");
      }
      for (size_t r = 0; r < ref_->workload.prompts.size(); ++r)
        result.requests.push_back(static_cast<int32_t>(r));
    }
    // PP=1's stage facts, through the record and reader a dump's go through.
    RunRecord pp1_facts;
    record_stage_facts(ref_->pp1_stage, pp1_facts);
    StageEvidence pp1_stages = stage_evidence_of(pp1_facts);
    pp1_stages.drafter_ran = ref_->record.find("spec/accepted_histogram") != nullptr;
    const EngineOptions engine_options{s_.capture_ids, s_.dump_level, s_.speculative.method,
                                       s_.speculative.context_only_producer};
    run_.emplace(SweepRun{s_, engine_options, FaultSet{s_.faults}, *source_, options_.transport,
                          ref_->workload, ref_->record, std::move(pp1_stages)});
    return Status::ok();
  }

  // A transport of processes serves one partition at a time.
  int jobs(int requested) const override { return options_.transport != nullptr ? 1 : requested; }

  void run_case(const Partition& part, CaseResult& c) override {
    if (options_.transport != nullptr && !options_.transport->lost().empty()) {
      c.verdict = Verdict::kSkipped;
      c.message = "not run: " + options_.transport->lost();
      return;
    }
    splitcheck::run_case(*run_, part, c);
  }

 private:
  const Scenario& s_;
  const SweepOptions& options_;
  std::unique_ptr<WeightSource> own_source_;
  WeightSource* source_ = nullptr;
  ReferenceRun own_ref_;
  const ReferenceRun* ref_ = nullptr;
  std::optional<SweepRun> run_;
};

}  // namespace

Result<SweepResult> run_sweep(const Scenario& s, const SweepOptions& options) {
  // Nothing runs on a backend or transport this build cannot provide (load_scenario
  // refuses it too; this covers scenarios built in code).
  RETURN_IF_ERROR(check_capabilities(s, s.source_path.empty() ? s.name : s.source_path));
  if (s.external)
    return invalid_input(
        fmt::format("{}: /engine/command: an external engine is swept through its command template "
                    "(harness/sweep/external_sweep.h), not by the built-in engine",
                    s.source_path.empty() ? s.name : s.source_path));
  BuiltinCases source(s, options);
  const DriveOptions drive{options.threads, options.shard_index, options.shard_count,
                           options.filter,  options.progress,    options.self_check};
  return drive_sweep(s, drive, source);
}

}  // namespace splitcheck
