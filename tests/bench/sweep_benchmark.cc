// The sweep's cost as a multiple of one PP=1 run, measured in one process: the default
// scenario's PP=1 run, then its full sweep on one thread and on every core.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>

#include "harness/sweep.h"

namespace splitcheck {
namespace {

Scenario default_scenario() {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json");
  if (!s.is_ok()) std::abort();
  return *s;
}

void BM_Pp1Run(benchmark::State& state) {
  const Scenario s = default_scenario();
  for (auto _ : state) {
    Result<ReferenceRun> r = run_reference(s);
    benchmark::DoNotOptimize(r.is_ok());
  }
}
BENCHMARK(BM_Pp1Run)->Unit(benchmark::kSecond)->Iterations(3);

void BM_Sweep(benchmark::State& state) {
  const Scenario s = default_scenario();
  SweepOptions opts;
  opts.threads = static_cast<int>(state.range(0));
  double ratio = 0;
  for (auto _ : state) {
    Result<SweepResult> r = run_sweep(s, opts);
    if (!r.is_ok() || !r->conformant()) state.SkipWithError("sweep failed");
    ratio = r->total_seconds / r->pp1_seconds;
  }
  state.counters["cost_in_pp1_runs"] = ratio;
}
BENCHMARK(BM_Sweep)->Arg(1)->Arg(0)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace
}  // namespace splitcheck

BENCHMARK_MAIN();
