// Weights on one device are held once: PP=1 and every stage of a partition view the
// source's copy (WeightSource::view) instead of holding a second one, while each stage
// still holds exactly its placed tensors under its own names, owns its boundary copies and
// its embedding copy for the drafter, and the weight faults still load what SPEC 6 says.
// one_device_weight_bytes predicts what a sweep keeps resident; at k3-shape it must fit
// one H200.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness/engine/partitioned_engine.h"
#include "harness/engine/stage.h"
#include "reference/config.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

struct Built {
  std::vector<StageConfig> configs;
  std::vector<std::unique_ptr<Stage>> stages;
};

// The stages of the partition at `cuts` of k3-tiny, capturing `taps`, with `faults`.
Built build_stages(WeightSource& source, const ModelConfig& model, std::vector<int> cuts,
                   std::vector<int> taps, std::vector<std::string> faults = {},
                   const std::string& method = "dspark") {
  Built b;
  Result<Partition> p = Partition::from_cuts(cuts, model.num_hidden_layers);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  for (int s = 0; s < p->stages(); ++s) {
    b.configs.push_back(
        StageConfig{model, *p, s, taps, DumpLevel::kSummary, FaultSet{faults}, method, false});
    Result<std::unique_ptr<Stage>> st = Stage::create(b.configs.back(), source);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    if (st.is_ok()) b.stages.push_back(std::move(*st));
  }
  return b;
}

std::vector<std::string> all_names(const ModelConfig& c) {
  std::vector<std::string> names;
  for (const TensorSpec& t : model_tensor_specs(c)) names.push_back(t.name);
  return names;
}

TEST(StageMemoryTest, StagesViewTheWeightsPp1HoldsAndTheEstimateIsWhatIsResident) {
  const ModelConfig c = committed_scenario("default").model;
  GeneratedWeights source(c);
  Result<WeightStore> pp1 = load_weights(source, all_names(c));
  ASSERT_TRUE(pp1.is_ok()) << pp1.status().message();
  // Cut at 12 with tap 12 captured: stage 0 keeps boundary copies of layer 12's vectors.
  Built b = build_stages(source, c, {12, 20}, {0, 12, 31});
  ASSERT_EQ(b.stages.size(), 3u);
  std::vector<const WeightStore*> stores{&*pp1};
  for (const auto& st : b.stages) {
    stores.push_back(&st->weights());
    for (const auto& [name, t] : st->weights().tensors()) {
      const bool own = name == kBoundaryAttnResNorm || name == kBoundaryAttnResProj ||
                       (st->index() != 0 && name == "embed_tokens.weight");
      if (own) {
        EXPECT_FALSE(pp1->has(name) && same_storage(t, pp1->get(name)))
            << "stage " << st->index() << ": " << name << " must be storage of its own";
      } else {
        EXPECT_TRUE(same_storage(t, pp1->get(name)))
            << "stage " << st->index() << ": " << name << " is a second copy of PP=1's";
      }
    }
  }
  // Each stage still measures exactly its placement (SPEC 5.4).
  for (size_t s = 0; s < b.stages.size(); ++s)
    EXPECT_EQ(b.stages[s]->holdings().parameter_bytes, placed_parameter_bytes(b.configs[s]));
  const size_t resident = distinct_storage_bytes(stores);
  EXPECT_EQ(resident, one_device_weight_bytes(b.configs));
  size_t model = 0;
  for (const auto& [name, t] : pp1->tensors()) model += t.nbytes();
  // The model once, plus 2 x H boundary copies and the last stage's V x H embedding copy.
  const size_t h = static_cast<size_t>(c.hidden_size), v = static_cast<size_t>(c.vocab_size);
  EXPECT_EQ(resident, model + 2 * h * 2 + v * h * 2);
}

TEST(StageMemoryTest, ThePartitionedEngineAddsNoSecondCopy) {
  const ModelConfig c = committed_scenario("default").model;
  GeneratedWeights source(c);
  Result<WeightStore> pp1 = load_weights(source, all_names(c));
  ASSERT_TRUE(pp1.is_ok());
  Result<Partition> p = Partition::from_cuts({16}, c.num_hidden_layers);
  ASSERT_TRUE(p.is_ok());
  const EngineOptions options{{0, 16, 31}, DumpLevel::kSummary, "none", false};
  Result<std::unique_ptr<PartitionedEngine>> e =
      PartitionedEngine::create(c, *p, options, FaultSet{}, source);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  const WeightStore& last = (*e)->last_stage_weights();
  for (const char* name : {"lm_head.weight", "norm.weight", "layers.31.mlp_res_norm.weight"})
    EXPECT_TRUE(same_storage(last.get(name), pp1->get(name))) << name;
}

TEST(StageMemoryTest, WeightFaultsStillLoadWhatTheyRestore) {
  const ModelConfig c = committed_scenario("default").model;
  GeneratedWeights source(c);
  // weights.stage_layer_offset: stage 0 of a cut at 12 holds layer 12's tensors under
  // layer 11's names (views of layer 12's storage), not layer 11's.
  Built off = build_stages(source, c, {12}, {0, 31}, {"weights.stage_layer_offset"});
  ASSERT_EQ(off.stages.size(), 2u);
  const WeightStore& s0 = off.stages[0]->weights();
  ASSERT_TRUE(source.view("layers.12.input_layernorm.weight").is_ok());
  EXPECT_TRUE(same_storage(s0.get("layers.11.input_layernorm.weight"),
                           *source.view("layers.12.input_layernorm.weight")));
  EXPECT_FALSE(same_storage(s0.get("layers.11.input_layernorm.weight"),
                            *source.view("layers.11.input_layernorm.weight")));
  // weights.no_boundary_copy: still refused at configuration, no NaN tap exported.
  Result<Partition> p = Partition::from_cuts({12}, c.num_hidden_layers);
  ASSERT_TRUE(p.is_ok());
  const StageConfig cfg{
      c,        *p,   0, {0, 12, 31}, DumpLevel::kSummary, FaultSet{{"weights.no_boundary_copy"}},
      "dspark", false};
  Result<std::unique_ptr<Stage>> st = Stage::create(cfg, source);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.status().code(), StatusCode::kConfigRejected) << st.status().message();
  // ... and the view the fault did not load was not overwritten with NaN.
  EXPECT_FALSE(source.view("layers.12.self_attention_res_norm.weight")
                   ->bit_equal(Tensor::zeros(DType::kBF16, {c.hidden_size})));
}

TEST(StageMemoryTest, K3ShapeFitsOneH200) {
  // k3-shape (SPEC 2): 93 layers, H 7168. PP=1 and both stages of a PP=2 sweep on one
  // device: the model once (79.5 GiB of bf16) plus boundary copies, never a second copy.
  const std::optional<ModelConfig> c = model_preset("k3-shape");
  ASSERT_TRUE(c.has_value());
  size_t model = 0;
  for (const TensorSpec& t : model_tensor_specs(*c)) {
    size_t n = 2;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    model += n;
  }
  size_t worst = 0;
  for (int cut = 1; cut < c->num_hidden_layers; ++cut) {
    Result<Partition> p = Partition::from_cuts({cut}, c->num_hidden_layers);
    ASSERT_TRUE(p.is_ok());
    std::vector<StageConfig> stages;
    for (int s = 0; s < 2; ++s)
      stages.push_back(StageConfig{*c,
                                   *p,
                                   s,
                                   {0, cut, c->num_hidden_layers},
                                   DumpLevel::kSummary,
                                   FaultSet{},
                                   "none",
                                   false});
    worst = std::max(worst, one_device_weight_bytes(stages));
  }
  const double gib = 1024.0 * 1024.0 * 1024.0;
  fmt::print(
      "[ estimate ] k3-shape weights on one device: model {:.2f} GiB, PP=1 + PP=2 "
      "stages at the worst cut {:.2f} GiB (two copies would be {:.2f} GiB)\n",
      static_cast<double>(model) / gib, static_cast<double>(worst) / gib,
      2.0 * static_cast<double>(model) / gib);
  EXPECT_LT(static_cast<double>(worst), static_cast<double>(model) * 1.001);
  EXPECT_LT(static_cast<double>(worst) / gib, 100.0);  // an H200 has about 139 GiB
}

}  // namespace
}  // namespace splitcheck
