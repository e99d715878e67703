// The sweep's cost as a multiple of one PP=1 run, measured in one process: a plain PP=1
// run (no memo), then the full sweep with layer reuse by content off and on, on one
// thread and on every core (default scenario), and on one thread for the scenarios with
// more stage boundaries (pp3-pairwise, every-layer). BM_ReuseRatio alternates off and on
// runs and reports the median of their ratios, which a noisy machine moves less than
// either time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "harness/verdict/sweep.h"

namespace splitcheck {
namespace {

Scenario committed_scenario(const std::string& name) {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + name + ".json");
  if (!s.is_ok()) std::abort();
  return *s;
}

Scenario default_scenario() { return committed_scenario("default"); }

double seconds_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double plain_pp1_seconds(const Scenario& s) {
  return seconds_of([&] {
    Result<ReferenceRun> r = run_reference(s);
    if (!r.is_ok()) std::abort();
  });
}

double sweep_seconds(const Scenario& s, int threads, ReuseMode reuse) {
  SweepOptions opts;
  opts.threads = threads;
  opts.reuse = reuse;
  return seconds_of([&] {
    Result<SweepResult> r = run_sweep(s, opts);
    if (!r.is_ok() || !r->conformant()) std::abort();
  });
}

void BM_Pp1Run(benchmark::State& state) {
  const Scenario s = default_scenario();
  for (auto _ : state) benchmark::DoNotOptimize(plain_pp1_seconds(s));
}
BENCHMARK(BM_Pp1Run)->Unit(benchmark::kSecond)->Iterations(3);

// Args: threads (0: one per core), reuse (0 off, 1 on).
void BM_Sweep(benchmark::State& state) {
  const Scenario s = default_scenario();
  const ReuseMode reuse = state.range(1) != 0 ? ReuseMode::kOn : ReuseMode::kOff;
  double ratio = 0;
  for (auto _ : state) {
    const double pp1 = plain_pp1_seconds(s);
    ratio = sweep_seconds(s, static_cast<int>(state.range(0)), reuse) / pp1;
  }
  state.counters["cost_in_pp1_runs"] = ratio;
}
BENCHMARK(BM_Sweep)
    ->ArgNames({"threads", "reuse"})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({0, 0})
    ->Args({0, 1})
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

// One thread, reuse off (0) or on (1), on the scenarios whose partitions have more stage
// boundaries than PP=2.
void BM_SweepDeeper(benchmark::State& state, const char* name) {
  const Scenario s = committed_scenario(name);
  const ReuseMode reuse = state.range(0) != 0 ? ReuseMode::kOn : ReuseMode::kOff;
  double ratio = 0;
  for (auto _ : state) {
    const double pp1 = plain_pp1_seconds(s);
    ratio = sweep_seconds(s, 1, reuse) / pp1;
  }
  state.counters["cost_in_pp1_runs"] = ratio;
}
BENCHMARK_CAPTURE(BM_SweepDeeper, pp3_pairwise, "pp3-pairwise")
    ->ArgName("reuse")
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_SweepDeeper, every_layer, "every-layer")
    ->ArgName("reuse")
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

void BM_ReuseRatio(benchmark::State& state) {
  const Scenario s = default_scenario();
  const int threads = static_cast<int>(state.range(0));
  std::vector<double> ratios;
  for (auto _ : state) {
    const double off = sweep_seconds(s, threads, ReuseMode::kOff);
    const double on = sweep_seconds(s, threads, ReuseMode::kOn);
    ratios.push_back(off / on);
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["off_over_on_median"] = ratios[ratios.size() / 2];
}
BENCHMARK(BM_ReuseRatio)->ArgName("threads")->Arg(0)->Unit(benchmark::kSecond)->Iterations(3);

}  // namespace
}  // namespace splitcheck

BENCHMARK_MAIN();
