// Batched serving throughput (SPEC 3.4) on the CPU (/0) and on the GPU (/1): the
// committed serving scenario's 16 requests served by the PP=1 engine with continuous
// batching (up to 8 in flight), against the same requests served one at a time
// (max_in_flight 1), alternated in one process. Counters: generated tokens per second of
// each (per CPU second on the CPU, the steadier measure on a shared machine; per wall
// second on the GPU), and the ratio of their CPU and wall times (medians over the
// iterations). AttnRes, the MLP, the taps and the head run once over the concatenated
// rows; attention per request (on the CPU a layer's segments at once on its cores, on the
// GPU one segmented call); a step's drafter calls at once on helper threads. Without a
// usable device the GPU row ends at once, saying why.
//
// The schedule bounds the ratio: `forwards_*` count the forwards (steps that carry a
// segment) of each run, and `bound` is their ratio, the speedup batching would give if a
// forward took as long whatever it carries. The committed scenario (shared_forward:0)
// keeps two micro-batches in flight, as PP=2 needs, so its 8 requests in flight share a
// forward 4 at most: bound about 3.0-3.5x. With shared_forward:1 the same requests run as
// one micro-batch of up to 64 tokens a step, so all 8 share each forward: about 5.3-6.2x
// (the accepted drafts, so the schedule, follow the backend's bits: 5.50x on the CPU,
// 5.27x on an H200 since 3dfc9bb).
//
// BM_ServingStepHostAndDevice splits a serving run's time per step (the engine's submit,
// then the wait for the device after it) in four, for both runs: the host's own work, its
// waits for the device inside the step (a forward reads its next tokens on the host, so
// its head waits for every kernel queued before it), the wait after the step, and the
// time outside the steps (the drafters' proposals and observations with their device
// work, the scheduler, the collection of results). The host
// bounds a step whose waits are near zero; a step that waits is bound by the device for
// that long (on the CPU the waits are zero: the host computes). Its extra waits perturb
// the timing a little, so it runs apart from the throughput benchmark.
// SPLITCHECK_SERVING_RUN=batched (or one_at_a_time) runs only that run, for a host
// profiler's view of one of them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness/engine/run.h"
#include "harness/engine/serving.h"
#include "kernels/tensor.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {
namespace {

Scenario serving_scenario() {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/serving.json");
  if (!s.is_ok()) std::abort();
  return *s;
}

struct Served {
  double seconds = 0, cpu_seconds = 0;
  int64_t tokens = 0;
  int64_t forwards = 0;  // steps that carried at least one segment
};

// Wall and process CPU seconds and generated tokens of one serving run, nothing recorded
// (on a shared machine the CPU time is the steadier of the two).
Served serve(const Scenario& s, Engine& engine, const WeightStore& weights, WeightSource& source,
             const PreparedWorkload& w) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  ServingResult serving;
  Result<GenerationSummary> g = run_serving_generation(s, engine, DrafterHost{weights}, source, w,
                                                       nullptr, nullptr, &serving);
  Served out;
  out.cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!g.is_ok()) std::abort();
  for (const SequenceResult& q : g->generation.sequences)
    out.tokens += static_cast<int64_t>(q.emitted.size());
  std::set<int32_t> steps;
  for (const ScheduleRow& row : serving.schedule) steps.insert(row.step);
  out.forwards = static_cast<int64_t>(steps.size());
  return out;
}

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// SPLITCHECK_SERVING_PROFILE=RUN:STEP (RUN batched or one_at_a_time): that run's step
// STEP (counting the steps that carry a segment from 0) inside a profiler region, as
// k3_forward_benchmark's K3_FORWARD_PROFILE (run under `ncu --profile-from-start off` for
// each kernel's device time in that step).
struct ProfiledStep {
  std::string run;
  int64_t step = -1;
};
ProfiledStep profiled_step() {
  ProfiledStep p;
  const char* v = std::getenv("SPLITCHECK_SERVING_PROFILE");
  if (v == nullptr) return p;
  const std::string s = v;
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return p;
  p.run = s.substr(0, colon);
  p.step = std::atoll(s.c_str() + colon + 1);
  return p;
}

// Marks the start (on) or the end of a profiler region where the build has a device.
void profile([[maybe_unused]] bool on) {
#ifdef SPLITCHECK_HAVE_CUDA
  cuda::profile_region(on);
#endif
}

// The engine it wraps, with each step's submit split into the host's work and its waits
// for the device, timed apart from the wait after it (see the file comment). The wait
// before the submit keeps earlier work (the drafters') out of the step's figures.
class StepClock : public Engine {
 public:
  StepClock(Engine& inner, const std::string& run) : inner_(inner) {
    const ProfiledStep p = profiled_step();
    if (p.run == run) profiled_ = p.step;
  }
  Status submit(const BatchRequest& batch, bool record) override {
    const bool profiled = !batch.segments.empty() && steps == profiled_;
    if (profiled) {
      int64_t rows = 0;
      for (const Segment& seg : batch.segments) rows += static_cast<int64_t>(seg.ids.size());
      std::fprintf(stderr, "profiled step %lld: %zu segments, %lld rows\n",
                   static_cast<long long>(steps), batch.segments.size(), static_cast<long long>(rows));
      profile(true);
    }
    finish_thread_device_work();
    const double waited0 = thread_device_wait_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    Status st = inner_.submit(batch, record);
    const auto t1 = std::chrono::steady_clock::now();
    const double inside = thread_device_wait_seconds() - waited0;
    finish_thread_device_work();
    if (!batch.segments.empty()) {
      host_seconds += seconds_between(t0, t1) - inside;
      wait_inside_seconds += inside;
      wait_after_seconds += seconds_between(t1, std::chrono::steady_clock::now());
      ++steps;
    }
    if (profiled) profile(false);
    return st;
  }
  Result<BatchResult> collect(RunRecord* record) override { return inner_.collect(record); }
  Result<ForwardResult> forward(const ForwardRequest& request, RunRecord* record) override {
    return inner_.forward(request, record);
  }
  void reset_sequence() override { inner_.reset_sequence(); }
  ComputedCalls computed() override { return inner_.computed(); }
  void save_state() override { inner_.save_state(); }
  void restore_state() override { inner_.restore_state(); }

  double host_seconds = 0, wait_inside_seconds = 0, wait_after_seconds = 0;
  int64_t steps = 0;

 private:
  Engine& inner_;
  int64_t profiled_ = -1;
};

// The committed serving scenario on the CPU or the GPU (state.range(0)), as committed or
// as one micro-batch (state.range(1)), with the PP=1 engine and its weights; false (and
// the benchmark skipped, saying why) where the GPU row cannot run.
struct ServingSetup {
  Scenario batched;
  std::unique_ptr<WeightSource> source;
  PreparedWorkload workload;
  std::unique_ptr<ReferenceEngine> engine;
};
bool set_up(benchmark::State& state, ServingSetup& out) {
  Scenario batched = serving_scenario();
  const bool gpu = state.range(0) == 1;
  if (state.range(1) == 1) {  // every request in flight in every forward
    batched.serving.depth = 1;
    batched.serving.token_budget = 64;
  }
  if (gpu) {
#ifdef SPLITCHECK_HAVE_CUDA
    if (const std::string why = cuda::unavailable_reason(); !why.empty()) {
      state.SkipWithError(("the GPU row: " + why).c_str());
      return false;
    }
    batched.backend = "cuda";
#else
    state.SkipWithError("the GPU row: this build has no CUDA backend");
    return false;
#endif
  }
  out.source = scenario_weight_source(batched);
  Result<PreparedWorkload> w = prepare_workload(batched);
  if (!w.is_ok()) std::abort();
  std::vector<std::string> names;
  for (const TensorSpec& t : model_tensor_specs(batched.model)) names.push_back(t.name);
  Result<WeightStore> weights = load_weights(*out.source, names);
  if (!weights.is_ok()) std::abort();
  Result<std::unique_ptr<ReferenceEngine>> engine = ReferenceEngine::create(
      batched.model, std::move(*weights),
      EngineOptions{batched.capture_ids, DumpLevel::kSummary, batched.speculative.method, false});
  if (!engine.is_ok()) std::abort();
  out.batched = std::move(batched);
  out.workload = std::move(*w);
  out.engine = std::move(*engine);
  return true;
}

void BM_BatchedServingVsOneAtATime(benchmark::State& state) {
  ServingSetup setup;
  if (!set_up(state, setup)) return;
  const Scenario& batched = setup.batched;
  const bool gpu = state.range(0) == 1;
  Scenario alone = batched;
  alone.serving.max_in_flight = 1;
  ReferenceEngine& engine = *setup.engine;
  std::vector<double> ratios, cpu_ratios, batched_tps, alone_tps, batched_wall_tps,
      alone_wall_tps;
  int64_t batched_forwards = 0, alone_forwards = 0;
  // Each run once, unmeasured, before the timed iterations: a process's first serve loads
  // its kernels' modules, grows the device pool and pins a cuBLASLt algorithm at each
  // product shape's first call. The run that went first in a cold first iteration (the
  // batched one, with the most row counts) was charged those one-off costs, which pulled
  // the median of the ratios low.
  const auto serve_as = [&](const Scenario& s) {
    return serve(s, engine, engine.weights(), *setup.source, setup.workload);
  };
  serve_as(batched);
  serve_as(alone);
  bool batched_first = true;  // the order alternates, so neither run always follows the other
  for (auto _ : state) {
    Served b, a;
    if (batched_first) b = serve_as(batched);
    a = serve_as(alone);
    if (!batched_first) b = serve_as(batched);
    batched_first = !batched_first;
    if (b.tokens != a.tokens) std::abort();
    batched_forwards = b.forwards;  // the same every iteration: the schedule is fixed
    alone_forwards = a.forwards;
    batched_tps.push_back(static_cast<double>(b.tokens) / b.cpu_seconds);
    alone_tps.push_back(static_cast<double>(a.tokens) / a.cpu_seconds);
    batched_wall_tps.push_back(static_cast<double>(b.tokens) / b.seconds);
    alone_wall_tps.push_back(static_cast<double>(a.tokens) / a.seconds);
    ratios.push_back(a.seconds / b.seconds);
    cpu_ratios.push_back(a.cpu_seconds / b.cpu_seconds);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (gpu) {
    state.counters["batched_tokens_per_s"] = median(batched_wall_tps);
    state.counters["one_at_a_time_tokens_per_s"] = median(alone_wall_tps);
  } else {
    state.counters["batched_tokens_per_cpu_s"] = median(batched_tps);
    state.counters["one_at_a_time_tokens_per_cpu_s"] = median(alone_tps);
  }
  state.counters["speedup_cpu"] = median(cpu_ratios);
  state.counters["speedup_wall"] = median(ratios);
  // The spread of the iterations' wall ratios (a shared machine's noise beside the median).
  state.counters["speedup_wall_min"] = *std::min_element(ratios.begin(), ratios.end());
  state.counters["speedup_wall_max"] = *std::max_element(ratios.begin(), ratios.end());
  state.counters["forwards_batched"] = static_cast<double>(batched_forwards);
  state.counters["forwards_one_at_a_time"] = static_cast<double>(alone_forwards);
  state.counters["bound"] =
      static_cast<double>(alone_forwards) / static_cast<double>(std::max<int64_t>(1, batched_forwards));
}
BENCHMARK(BM_BatchedServingVsOneAtATime)
    ->ArgNames({"gpu", "shared_forward"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kSecond)
    ->Iterations(5);

void BM_ServingStepHostAndDevice(benchmark::State& state) {
  ServingSetup setup;
  if (!set_up(state, setup)) return;
  Scenario alone = setup.batched;
  alone.serving.max_in_flight = 1;
  ReferenceEngine& engine = *setup.engine;
  for (auto _ : state) {
    for (const auto& [s, name] :
         {std::pair{&setup.batched, "batched"}, {&alone, "one_at_a_time"}}) {
      if (const char* only = std::getenv("SPLITCHECK_SERVING_RUN");
          only != nullptr && only != std::string(name))
        continue;
      // Once unmeasured first, as the throughput benchmark's later iterations: a product
      // shape's first call pins its cuBLASLt algorithm (a heuristic query), which the
      // batched run's many row counts would otherwise charge to its steps.
      serve(*s, engine, engine.weights(), *setup.source, setup.workload);
      StepClock clock(engine, name);
      const Served run = serve(*s, clock, engine.weights(), *setup.source, setup.workload);
      const double steps = static_cast<double>(std::max<int64_t>(1, clock.steps));
      const std::string n = name;
      state.counters[n + "_outside_ms_per_step"] =
          (run.seconds - clock.host_seconds - clock.wait_inside_seconds - clock.wait_after_seconds) *
          1e3 / steps;
      state.counters[n + "_host_ms_per_step"] = clock.host_seconds * 1e3 / steps;
      state.counters[n + "_wait_inside_ms_per_step"] = clock.wait_inside_seconds * 1e3 / steps;
      state.counters[n + "_wait_after_ms_per_step"] = clock.wait_after_seconds * 1e3 / steps;
      state.counters[n + "_steps"] = steps;
    }
  }
}
BENCHMARK(BM_ServingStepHostAndDevice)
    ->ArgNames({"gpu", "shared_forward"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
}  // namespace splitcheck

BENCHMARK_MAIN();
