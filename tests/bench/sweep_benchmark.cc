// What a sweep costs when the engine under test computes every call it is judged on, and
// how much running split points in parallel buys back, measured in one run per scenario:
// one PP=1 run, the sum of the cases' own times, the sweep's wall time on 1 and on 2
// threads, the ratio of the two walls (target on 2 cores: at most 0.55) and the parallel
// efficiency (1-thread wall / (2 x 2-thread wall)). Scenarios: the default (PP=2, every
// split point) and pp3-pairwise (PP=3, pairs of cuts). Every sweep must be conformant,
// or the benchmark aborts: a fast wrong answer is not a figure.
//
//   ./build/sweep_benchmark --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "harness/engine/run.h"
#include "harness/sweep/sweep.h"

namespace splitcheck {
namespace {

Scenario committed_scenario(const std::string& name) {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + name + ".json");
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s\n", s.status().message().c_str());
    std::abort();
  }
  return *s;
}

double seconds_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The sweep's wall time on `threads` threads; `cases_seconds` receives the sum of the
// cases' own times.
double sweep_wall(const Scenario& s, int threads, double* cases_seconds) {
  SweepOptions opts;
  opts.threads = threads;
  Result<SweepResult> r = internal_error("not run");
  const double wall = seconds_of([&] { r = run_sweep(s, opts); });
  if (!r.is_ok() || !r->conformant()) {
    std::fprintf(stderr, "sweep of %s is not conformant\n", s.name.c_str());
    std::abort();
  }
  if (cases_seconds != nullptr) {
    *cases_seconds = 0;
    for (const CaseResult& c : r->cases) *cases_seconds += c.seconds;
  }
  return wall;
}

void BM_SweepParallel(benchmark::State& state, const char* name) {
  const Scenario s = committed_scenario(name);
  for (auto _ : state) {
    const double pp1 = seconds_of([&] {
      if (!run_reference(s).is_ok()) std::abort();
    });
    double cases = 0;
    const double one = sweep_wall(s, 1, &cases);
    const double two = sweep_wall(s, 2, nullptr);
    state.counters["pp1_s"] = pp1;
    state.counters["cases_sum_s"] = cases;
    state.counters["wall_1t_s"] = one;
    state.counters["wall_2t_s"] = two;
    state.counters["2t_over_1t"] = two / one;
    state.counters["efficiency"] = one / (2 * two);
  }
}
BENCHMARK_CAPTURE(BM_SweepParallel, default, "default")
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_SweepParallel, pp3_pairwise, "pp3-pairwise")
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
}  // namespace splitcheck

BENCHMARK_MAIN();
