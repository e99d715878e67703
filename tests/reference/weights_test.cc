// Generated weights (SPEC 2.1) are a pure function of (seed, name, index), so any subset
// equals the same tensors of the whole model; checkpoints round-trip bit for bit, are
// byte-deterministic, and refuse a missing, mis-shaped or non-HDF5 input with a message
// that names the tensor and the file.
#include "reference/weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "reference/config.h"
#include "reference/weight_source.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

// k3-tiny cut to 4 layers: layers 0 (dense, KDA), 1-2 (MoE, KDA), 3 (MoE, MLA).
ModelConfig four_layer_tiny() {
  ModelConfig c = *model_preset("k3-tiny");
  c.num_hidden_layers = 4;
  return c;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Offset of the first differing byte, or -1 when equal (a size difference counts).
int64_t first_difference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

// A fresh directory under the system temp dir, removed with the fixture.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("splitcheck-weights-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The whole 4-layer model, generated once for the suite.
  static const WeightStore& whole_model() {
    static const WeightStore store = [] {
      Result<WeightStore> w = generate_weights(four_layer_tiny());
      if (!w.is_ok()) throw std::runtime_error(w.status().message());
      return std::move(w).value();
    }();
    return store;
  }

  // A copy of `whole_model()` without `skip`, and with `replace` put under its name.
  static WeightStore edited_model(const std::string& skip, const std::string& replace_name = "",
                                  Tensor replacement = {}) {
    WeightStore out;
    for (const auto& [name, t] : whole_model().tensors()) {
      if (name != skip) out.put(name, t);
    }
    if (!replace_name.empty()) out.put(replace_name, std::move(replacement));
    return out;
  }

  fs::path dir_;
};

const std::vector<std::string> kSampleNames = {
    "embed_tokens.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.self_attention_res_norm.weight",
    "layers.1.self_attn.a_proj.weight",
    "layers.1.self_attn.o_norm.weight",
    "layers.2.mlp.experts.5.down_proj.weight",
    "layers.2.mlp.gate.weight",
    "layers.3.self_attn.kv_a_proj.weight",
    "layers.3.mlp.shared_experts.0.up_proj.weight",
    "layers.3.mlp_res_proj.weight",
    "output_attn_res_proj.weight",
    "norm.weight",
    "lm_head.weight",
};

TEST(GeneratedWeightsTest, AnySubsetEqualsTheSameTensorsOfTheWholeModel) {
  const ModelConfig c = four_layer_tiny();
  Result<WeightStore> whole = generate_weights(c);
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  EXPECT_EQ(whole->tensors().size(), model_tensor_specs(c).size());
  // All sample names at once, and each one alone (a stage holding just that tensor).
  Result<WeightStore> subset = generate_weights(c, kSampleNames);
  ASSERT_TRUE(subset.is_ok()) << subset.status().message();
  EXPECT_EQ(subset->tensors().size(), kSampleNames.size());
  for (const std::string& name : kSampleNames) {
    const Tensor* full = whole->find(name);
    ASSERT_NE(full, nullptr) << name;
    EXPECT_TRUE(subset->get(name).bit_equal(*full)) << name;
    Result<WeightStore> alone = generate_weights(c, {name});
    ASSERT_TRUE(alone.is_ok()) << alone.status().message();
    EXPECT_TRUE(alone->get(name).bit_equal(*full)) << name << " generated alone";
  }
}

TEST(GeneratedWeightsTest, GeneratedValueIsAPureFunctionOfSeedNameAndIndex) {
  const ModelConfig c = four_layer_tiny();
  const TensorSpec spec = *find_tensor_spec(c, "layers.2.mlp.gate.weight");
  for (int64_t i : {0, 1, 17, 2047}) {
    EXPECT_EQ(generated_value(c.seed, spec, i), generated_value(c.seed, spec, i)) << i;
  }
  // Another index, another seed or another name gives other values.
  EXPECT_NE(generated_value(c.seed, spec, 0), generated_value(c.seed, spec, 1));
  EXPECT_NE(generated_value(c.seed, spec, 0), generated_value(c.seed + 1, spec, 0));
  TensorSpec renamed = spec;
  renamed.name = "layers.1.mlp.gate.weight";
  EXPECT_NE(generated_value(c.seed, spec, 0), generated_value(c.seed, renamed, 0));
  // generate_tensor stores exactly bf16(generated_value) at each index.
  const Tensor t = generate_tensor(c.seed, spec);
  for (int64_t i = 0; i < t.numel(); ++i) {
    ASSERT_EQ(t.data<bf16>()[i].bits, to_bf16(generated_value(c.seed, spec, i)).bits) << i;
  }
}

TEST(GeneratedWeightsTest, ValuesStayInTheirDocumentedRange) {
  const ModelConfig c = four_layer_tiny();
  for (const char* name : {"layers.0.input_layernorm.weight", "layers.1.self_attn.q_proj.weight"}) {
    const TensorSpec spec = *find_tensor_spec(c, name);
    const float centre = spec.init == WeightInit::kOnePlus ? 1.0f : 0.0f;
    for (int64_t i = 0; i < 4096; ++i) {
      const float v = generated_value(c.seed, spec, i);
      ASSERT_GE(v, centre - spec.scale) << name << " " << i;
      ASSERT_LT(v, centre + spec.scale) << name << " " << i;
    }
  }
}

TEST(GeneratedWeightsTest, UnknownNameIsAnErrorNamingIt) {
  Result<WeightStore> w = generate_weights(four_layer_tiny(), {"layers.9.input_layernorm.weight"});
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("layers.9.input_layernorm.weight"), std::string::npos)
      << w.status().message();
}

TEST(WeightSourceTest, EveryLoadOwnsItsStorageEvenFromTheMemo) {
  // Two stages loading one tensor from one memoising source hold two buffers: a copy
  // occupies memory (SPEC 5.4), and neither is the memo's.
  GeneratedWeights source(four_layer_tiny());
  Result<Tensor> a = source.load("embed_tokens.weight");
  Result<Tensor> b = source.load("embed_tokens.weight");  // from the memo
  Result<Tensor> c = source.load("embed_tokens.weight");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_TRUE(a->bit_equal(*b));
  EXPECT_FALSE(same_storage(*a, *b));
  EXPECT_FALSE(same_storage(*b, *c));
  EXPECT_TRUE(same_storage(*a, Tensor(*a)));  // a handle copy is the same object
  EXPECT_FALSE(same_storage(*a, a->clone()));
}

TEST(WeightSourceTest, ViewsShareTheSourcesOneCopy) {
  // Holders that only read (PP=1, the stages of a sweep on one device) view one copy; a
  // load beside them is still storage of its own.
  const ModelConfig c = four_layer_tiny();
  GeneratedWeights source(c);
  Result<Tensor> a = source.view("layers.1.input_layernorm.weight");
  Result<Tensor> b = source.view("layers.1.input_layernorm.weight");
  Result<Tensor> own = source.load("layers.1.input_layernorm.weight");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && own.is_ok());
  EXPECT_TRUE(same_storage(*a, *b));
  EXPECT_FALSE(same_storage(*a, *own));
  EXPECT_TRUE(a->bit_equal(*own));
  Result<WeightStore> one = load_weights(source, {"embed_tokens.weight", "norm.weight"});
  Result<WeightStore> two = load_weights(source, {"embed_tokens.weight"});
  ASSERT_TRUE(one.is_ok() && two.is_ok());
  EXPECT_EQ(distinct_storage_bytes({&*one, &*two}), one->parameter_bytes());
  EXPECT_FALSE(source.view("no.such.tensor").is_ok());
}

TEST(WeightStoreTest, ParameterBytesAreTheDistinctStoragesHeld) {
  const ModelConfig c = four_layer_tiny();
  GeneratedWeights source(c);
  Result<WeightStore> w = load_weights(source, {"embed_tokens.weight", "norm.weight"});
  ASSERT_TRUE(w.is_ok());
  const size_t embed = static_cast<size_t>(c.vocab_size * c.hidden_size) * 2;
  const size_t norm = static_cast<size_t>(c.hidden_size) * 2;
  EXPECT_EQ(w->parameter_bytes(), embed + norm);
  WeightStore more = *w;
  // A second name over the same buffer holds no more memory; a copy of it does.
  more.put("alias", w->get("embed_tokens.weight"));
  EXPECT_EQ(more.parameter_bytes(), embed + norm);
  more.put("copy", w->get("embed_tokens.weight").clone());
  EXPECT_EQ(more.parameter_bytes(), 2 * embed + norm);
  // A borrowed tensor is copied into storage the store owns.
  std::vector<bf16> outside(static_cast<size_t>(c.hidden_size));
  Tensor view = Tensor::borrow(DType::kBF16, {c.hidden_size}, outside.data());
  more.put("borrowed", view);
  EXPECT_TRUE(more.get("borrowed").is_owned());
  EXPECT_FALSE(same_storage(more.get("borrowed"), view));
}

TEST_F(CheckpointTest, ViewsOfACheckpointShareOneReadCopy) {
  const ModelConfig c = four_layer_tiny();
  ASSERT_TRUE(write_checkpoint(path("ckpt.h5"), c, whole_model()).is_ok());
  CheckpointWeights source(path("ckpt.h5"), c);
  Result<Tensor> a = source.view("norm.weight");
  Result<Tensor> b = source.view("norm.weight");
  Result<Tensor> own = source.load("norm.weight");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && own.is_ok());
  EXPECT_TRUE(same_storage(*a, *b));
  EXPECT_FALSE(same_storage(*a, *own));
  EXPECT_TRUE(a->bit_equal(whole_model().get("norm.weight")));
}

TEST_F(CheckpointTest, RoundTripIsBitIdentical) {
  const ModelConfig c = four_layer_tiny();
  ASSERT_TRUE(write_checkpoint(path("ckpt.h5"), c, whole_model()).is_ok());
  EXPECT_FALSE(fs::exists(path("ckpt.h5.partial")));
  Result<WeightStore> loaded = load_checkpoint(path("ckpt.h5"), c, {});
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ASSERT_EQ(loaded->tensors().size(), whole_model().tensors().size());
  for (const auto& [name, t] : whole_model().tensors()) {
    const Tensor* got = loaded->find(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_TRUE(got->bit_equal(t)) << name;
  }
  // A stage loads only what it holds.
  Result<WeightStore> part = load_checkpoint(path("ckpt.h5"), c, kSampleNames);
  ASSERT_TRUE(part.is_ok()) << part.status().message();
  EXPECT_EQ(part->tensors().size(), kSampleNames.size());
  Tensor one;
  ASSERT_TRUE(
      load_checkpoint_tensor(path("ckpt.h5"), "layers.3.mlp_res_proj.weight", {c.hidden_size}, one)
          .is_ok());
  EXPECT_TRUE(one.bit_equal(whole_model().get("layers.3.mlp_res_proj.weight")));
}

TEST_F(CheckpointTest, WritingTwiceGivesIdenticalBytes) {
  const ModelConfig c = four_layer_tiny();
  ASSERT_TRUE(write_checkpoint(path("a.h5"), c, whole_model()).is_ok());
  // HDF5 object timestamps have one-second resolution: let a second pass so that any
  // time recorded in the file shows up as a byte difference.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(write_checkpoint(path("b.h5"), c, whole_model()).is_ok());
  const std::string a = read_bytes(path("a.h5"));
  EXPECT_GT(a.size(), whole_model().parameter_bytes());
  const std::string b = read_bytes(path("b.h5"));
  EXPECT_EQ(first_difference(a, b), -1) << "checkpoint bytes differ between two writes";
  // Overwriting in place gives the same bytes again.
  ASSERT_TRUE(write_checkpoint(path("a.h5"), c, whole_model()).is_ok());
  EXPECT_EQ(first_difference(a, read_bytes(path("a.h5"))), -1) << "after overwriting in place";
}

TEST_F(CheckpointTest, MissingTensorIsALoadErrorNamingTensorAndFile) {
  const ModelConfig c = four_layer_tiny();
  const std::string missing = "layers.2.mlp.experts.3.up_proj.weight";
  ASSERT_TRUE(write_checkpoint(path("lacking.h5"), c, edited_model(missing)).is_ok());
  Result<WeightStore> all = load_checkpoint(path("lacking.h5"), c, {});
  ASSERT_FALSE(all.is_ok());
  EXPECT_EQ(all.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(all.status().message().find(missing), std::string::npos) << all.status().message();
  EXPECT_NE(all.status().message().find(path("lacking.h5")), std::string::npos)
      << all.status().message();
  // A stage that does not need the tensor loads fine.
  EXPECT_TRUE(load_checkpoint(path("lacking.h5"), c, kSampleNames).is_ok());
}

TEST_F(CheckpointTest, WrongShapeIsALoadErrorNamingTensorAndShapes) {
  const ModelConfig c = four_layer_tiny();
  const std::string name = "layers.1.post_attention_layernorm.weight";
  Tensor wrong = Tensor::zeros(DType::kBF16, {c.hidden_size / 2});
  ASSERT_TRUE(write_checkpoint(path("shape.h5"), c, edited_model(name, name, wrong)).is_ok());
  Result<WeightStore> loaded = load_checkpoint(path("shape.h5"), c, {name});
  ASSERT_FALSE(loaded.is_ok());
  const std::string& msg = loaded.status().message();
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find(path("shape.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("[128]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[256]"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, NonHdf5FileIsAnErrorNamingTheFile) {
  {
    std::ofstream out(path("notes.txt"));
    out << "this is not an HDF5 file\n";
  }
  Result<WeightStore> loaded = load_checkpoint(path("notes.txt"), four_layer_tiny(), {});
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(loaded.status().message().find(path("notes.txt")), std::string::npos)
      << loaded.status().message();

  Result<WeightStore> absent = load_checkpoint(path("absent.h5"), four_layer_tiny(), {});
  ASSERT_FALSE(absent.is_ok());
  EXPECT_NE(absent.status().message().find(path("absent.h5")), std::string::npos)
      << absent.status().message();
}

}  // namespace
}  // namespace splitcheck
