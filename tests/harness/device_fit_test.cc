// The device-memory estimate that refuses a CUDA run before it allocates
// (harness/scenario/device_fit.h): its weight bytes are exactly the model's bf16 weights
// (the store a run loads, at k3-tiny; the 79.5 GiB the GPU sweep holds, at k3-shape), its
// activations grow with the forward's tokens, and an oversized model is refused with the
// bytes needed and free named.
#include "harness/scenario/device_fit.h"

#include <gtest/gtest.h>

#include <string>

#include "reference/config.h"
#include "reference/weight_source.h"
#include "reference/weights.h"

namespace splitcheck {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

Scenario scenario_of(const std::string& preset) {
  Scenario s;
  s.model = *model_preset(preset);
  s.workload.max_prompt_tokens = 24;
  return s;
}

TEST(DeviceFitTest, WeightBytesAreTheLoadedStoresBytes) {
  const Scenario s = scenario_of("k3-tiny");
  GeneratedWeights source(s.model);
  WeightStore store;
  for (const TensorSpec& spec : model_tensor_specs(s.model)) {
    Result<Tensor> t = source.load(spec.name);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    store.put(spec.name, *t);
  }
  EXPECT_EQ(estimate_device_footprint(s).weight_bytes, store.parameter_bytes());
}

TEST(DeviceFitTest, K3ShapeWeightsAreThe79GiBTheGpuSweepHolds) {
  const DeviceFootprint f = estimate_device_footprint(scenario_of("k3-shape"));
  EXPECT_NEAR(static_cast<double>(f.weight_bytes) / kGiB, 79.5, 0.1);
  EXPECT_EQ(f.forward_tokens, 24);
  EXPECT_LT(static_cast<double>(f.activation_bytes) / kGiB, 1.0);
  EXPECT_EQ(device_fit_problem(f, size_t{139} << 30), "");  // fits one H200
}

TEST(DeviceFitTest, ActivationsGrowWithTheForwardsTokens) {
  Scenario s = scenario_of("k3-shape");
  const DeviceFootprint short_prompt = estimate_device_footprint(s);
  s.workload.max_prompt_tokens = 0;  // whole prompts: the unbounded assumption
  const DeviceFootprint whole = estimate_device_footprint(s);
  EXPECT_EQ(whole.forward_tokens, kUnboundedPromptTokens);
  EXPECT_GT(whole.activation_bytes, 50 * short_prompt.activation_bytes);
  s.prefill_chunk = 16;
  EXPECT_EQ(estimate_device_footprint(s).forward_tokens, 16);
  s.serving.enabled = true;
  s.serving.token_budget = 64;
  EXPECT_EQ(estimate_device_footprint(s).forward_tokens, 64);
}

// The KDA states and MLA latents live in device memory: k3-shape's 69 KDA layers hold
// 56 x 128 x 128 float32 each per sequence, twice (a snapshot) in each of the runs in
// flight; serving multiplies them by the requests in flight, and they can tip a model that
// fits otherwise over the free memory.
TEST(DeviceFitTest, LayerCachesAreCountedPerSequenceAndSnapshot) {
  Scenario s = scenario_of("k3-shape");
  const size_t kda_layers = 69, state = size_t{56} * 128 * 128 * sizeof(float);
  const DeviceFootprint one = estimate_device_footprint(s);
  EXPECT_GE(one.cache_bytes, 2 * kda_layers * state * kForwardsInFlight);
  EXPECT_LT(one.cache_bytes, 2 * (kda_layers * state + (size_t{1} << 20)) * kForwardsInFlight);
  s.serving.enabled = true;
  s.serving.max_in_flight = 8;
  const DeviceFootprint served = estimate_device_footprint(s);
  EXPECT_EQ(served.cache_bytes, 8 * one.cache_bytes);
  const size_t without_caches = served.total() - served.cache_bytes;
  EXPECT_EQ(device_fit_problem(served, without_caches + served.cache_bytes / 2).find("needs "), 0u);
}

TEST(DeviceFitTest, AnOversizedModelIsRefusedNamingNeededAndFree) {
  Scenario s = scenario_of("k3-shape");
  s.model.num_hidden_layers = 186;  // twice k3-shape's 93 layers
  const DeviceFootprint f = estimate_device_footprint(s);
  EXPECT_GT(static_cast<double>(f.weight_bytes) / kGiB, 150.0);
  const size_t free_bytes = size_t{139} << 30;
  const std::string why = device_fit_problem(f, free_bytes);
  EXPECT_NE(why.find("needs " + std::to_string(f.total()) + " bytes"), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(free_bytes) + " bytes"), std::string::npos) << why;
  EXPECT_EQ(device_fit_problem(f, f.total()), "");
  EXPECT_NE(device_fit_problem(f, f.total() - 1), "");
}

}  // namespace
}  // namespace splitcheck
