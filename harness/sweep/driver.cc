#include "harness/sweep/driver.h"

#include <fmt/format.h>

#include <chrono>
#include <exception>

#include "harness/engine/run.h"
#include "harness/judge/expect.h"
#include "harness/judge/judge.h"
#include "harness/sweep/worker_pool.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One case: its name, then the ownership judgement (which needs no engine), else the
// source's run. An exception (a hostile engine or weight source, a bug) fails this case,
// never the process.
void run_one_case(const Scenario& s, const Partition& part, CaseSource& source, CaseResult& c) {
  const auto t0 = Clock::now();
  c.key = part.key();
  c.layout = part.layout();
  c.cuts = part.cuts();
  try {
    if (const std::string problem = part.ownership_problem(); !problem.empty())
      judge_refusal(Refusal::kOwnership, fmt::format("partition {}: {}", c.layout, problem),
                    s.checks, c);
    else
      source.run_case(part, c);
  } catch (const std::exception& e) {
    c.verdict = Verdict::kError;
    c.message = fmt::format("{} ({}): exception: {}", c.key, c.layout, e.what());
  } catch (...) {
    c.verdict = Verdict::kError;
    c.message = fmt::format("{} ({}): unknown exception", c.key, c.layout);
  }
  c.seconds = seconds_since(t0);
}

// Every case, source.jobs() at a time, with the progress line.
void run_cases(const Scenario& s, const DriveOptions& options, const SweepCases& taken,
               CaseSource& source, SweepResult& result) {
  const std::vector<Partition>& parts = taken.partitions;
  result.cases.resize(parts.size());
  const auto t0 = Clock::now();
  auto progress = [&](size_t n) {
    if (!options.progress) return;
    const double elapsed = seconds_since(t0);
    const double eta = elapsed / static_cast<double>(n) * static_cast<double>(parts.size() - n);
    fmt::print(stderr, "\r[{}/{}] split points done, ETA {:.0f} s   ", n, parts.size(), eta);
    if (n == parts.size()) fmt::print(stderr, "\n");
  };
  result.threads = run_worker_pool(
      parts.size(), source.jobs(options.jobs),
      [&](size_t i) { run_one_case(s, parts[i], source, result.cases[i]); }, progress);
  index_cases(taken, result.cases);
}

}  // namespace

Result<SweepResult> drive_sweep(const Scenario& s, const DriveOptions& options,
                                CaseSource& source) {
  const auto t0 = Clock::now();
  SweepResult result;
  result.scenario_name = s.name;
  result.scenario = resolved_scenario_json(s);
  ASSIGN_OR_RETURN(result.scenario_sha256, scenario_identity_sha256(s));
  ASSIGN_OR_RETURN(const SweepCases taken,
                   select_cases(s, options.shard_index, options.shard_count, options.filter));
  RETURN_IF_ERROR(source.begin(taken, result));

  const auto t_ref = Clock::now();
  RETURN_IF_ERROR(source.reference(result));
  result.pp1_seconds = seconds_since(t_ref);
  // A PP=1 that differs from itself is never reported as a PP divergence: nothing is judged.
  if (options.self_check && source.reference_failure().empty()) {
    RETURN_IF_ERROR(source.reproduce(result));
    if (result.refused_to_judge()) {
      source.end(result);
      result.total_seconds = seconds_since(t0);
      return result;
    }
  }
  RETURN_IF_ERROR(source.take_reference(result));
  result.reference_failure = source.reference_failure();

  run_cases(s, options, taken, source, result);
  result.not_judged = source.sweep_not_judged();
  result.checks = judged_checks(s.checks, result.cases, result.not_judged);
  source.end(result);
  result.total_seconds = seconds_since(t0);
  // `expect` speaks of the whole sweep: a filtered or sharded run says it was not evaluated
  // (splitcheck merge evaluates it once the shards are joined). Errors still count.
  judge_expect(s.expect, options.filter, options.shard_index, options.shard_count, result);
  return result;
}

}  // namespace splitcheck
