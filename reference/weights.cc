#include "reference/weights.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <utility>

#include "reference/dspark.h"
#include "reference/eagle3.h"
#include "reference/splitmix.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Gain of the projections that write into the residual stream (attention o_proj, MLP
// down_proj). Small enough that the embedding row (bank row 0) dominates the output
// mixture; with the successor-tied lm_head (successor_permutation) the target then
// mostly continues t with succ[t], which the drafters' derived heads follow (SPEC 3.3),
// while every layer still moves the logits and the context overrides it about one
// token in four on k3-tiny.
constexpr float kResidualWriteGain = 0.05f;

float linear_scale(int64_t fan_in, float gain) {
  return gain * std::sqrt(3.0f / static_cast<float>(fan_in));
}

TensorSpec vec(const std::string& name, int64_t n, WeightInit init, float scale) {
  return TensorSpec{name, {n}, init, scale};
}

TensorSpec mat(const std::string& name, int64_t in, int64_t out, float gain) {
  return TensorSpec{name, {in, out}, WeightInit::kUniform, linear_scale(in, gain)};
}

void append_swiglu(std::vector<TensorSpec>& s, const std::string& p, int64_t h, int64_t inter) {
  s.push_back(mat(p + ".gate_proj.weight", h, inter, 1.0f));
  s.push_back(mat(p + ".up_proj.weight", h, inter, 1.0f));
  s.push_back(mat(p + ".down_proj.weight", inter, h, kResidualWriteGain));
}

}  // namespace

std::vector<TensorSpec> layer_tensor_specs(const ModelConfig& c, int l) {
  const int64_t h = c.hidden_size;
  const int64_t qd = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const std::string p = "layers." + std::to_string(l) + ".";
  // AttnRes score vectors: the score is a dot over H channels of a unit-RMS source, so
  // proj ~ 2/sqrt(H) keeps scores of order one and the mixture neither uniform nor one-hot.
  const float proj_scale = 2.0f / std::sqrt(static_cast<float>(h));
  std::vector<TensorSpec> s;
  s.push_back(vec(p + "self_attention_res_norm.weight", h, WeightInit::kOnePlus, 0.1f));
  s.push_back(vec(p + "self_attention_res_proj.weight", h, WeightInit::kUniform, proj_scale));
  s.push_back(vec(p + "input_layernorm.weight", h, WeightInit::kOnePlus, 0.1f));
  s.push_back(vec(p + "mlp_res_norm.weight", h, WeightInit::kOnePlus, 0.1f));
  s.push_back(vec(p + "mlp_res_proj.weight", h, WeightInit::kUniform, proj_scale));
  s.push_back(vec(p + "post_attention_layernorm.weight", h, WeightInit::kOnePlus, 0.1f));
  const std::string a = p + "self_attn.";
  if (c.is_mla_layer(l)) {
    s.push_back(mat(a + "q_proj.weight", h, qd, 1.0f));
    s.push_back(mat(a + "kv_a_proj.weight", h, c.kv_lora_rank, 1.0f));
    s.push_back(vec(a + "kv_a_layernorm.weight", c.kv_lora_rank, WeightInit::kOnePlus, 0.1f));
    s.push_back(mat(a + "k_b_proj.weight", c.kv_lora_rank, qd, 1.0f));
    s.push_back(mat(a + "v_b_proj.weight", c.kv_lora_rank, qd, 1.0f));
    s.push_back(mat(a + "g_proj.weight", h, qd, 1.0f));
    s.push_back(mat(a + "o_proj.weight", qd, h, kResidualWriteGain));
  } else {
    s.push_back(mat(a + "q_proj.weight", h, qd, 1.0f));
    s.push_back(mat(a + "k_proj.weight", h, qd, 1.0f));
    s.push_back(mat(a + "v_proj.weight", h, qd, 1.0f));
    s.push_back(mat(a + "b_proj.weight", h, c.num_attention_heads, 1.0f));
    s.push_back(mat(a + "a_proj.weight", h, qd, 1.0f));
    s.push_back(mat(a + "g_proj.weight", h, qd, 1.0f));
    s.push_back(vec(a + "o_norm.weight", c.head_dim, WeightInit::kOnePlus, 0.1f));
    s.push_back(mat(a + "o_proj.weight", qd, h, kResidualWriteGain));
  }
  const std::string m = p + "mlp.";
  if (!c.is_moe_layer(l)) {
    append_swiglu(s, p + "mlp", h, c.intermediate_size);
  } else {
    s.push_back(mat(m + "gate.weight", h, c.n_routed_experts, 1.0f));
    for (int e = 0; e < c.n_routed_experts; ++e) {
      append_swiglu(s, m + "experts." + std::to_string(e), h, c.moe_intermediate_size);
    }
    for (int e = 0; e < c.n_shared_experts; ++e) {
      append_swiglu(s, m + "shared_experts." + std::to_string(e), h, c.moe_intermediate_size);
    }
  }
  return s;
}

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<TensorSpec> s;
  s.push_back(TensorSpec{"embed_tokens.weight", {c.vocab_size, h}, WeightInit::kUniform, 1.0f});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (TensorSpec& t : layer_tensor_specs(c, l)) s.push_back(std::move(t));
  }
  s.push_back(vec("norm.weight", h, WeightInit::kOnePlus, 0.1f));
  s.push_back(vec("output_attn_res_norm.weight", h, WeightInit::kOnePlus, 0.1f));
  s.push_back(vec("output_attn_res_proj.weight", h, WeightInit::kUniform,
                  2.0f / std::sqrt(static_cast<float>(h))));
  // lm_head = R + tie: R uniform with scale linear_scale(H, 4), the tie adds the same
  // scale times the embedding row of each token's predecessor (successor_permutation).
  s.push_back(TensorSpec{
      "lm_head.weight", {c.vocab_size, h}, WeightInit::kSuccessorTied, linear_scale(h, 4.0f)});
  return s;
}

std::optional<TensorSpec> find_tensor_spec(const ModelConfig& c, const std::string& name) {
  if (name.rfind("layers.", 0) == 0) {
    const size_t dot = name.find('.', 7);
    if (dot == std::string::npos) return std::nullopt;
    int l = -1;
    try {
      l = std::stoi(name.substr(7, dot - 7));
    } catch (...) {
      return std::nullopt;
    }
    if (l < 0 || l >= c.num_hidden_layers) return std::nullopt;
    for (TensorSpec& t : layer_tensor_specs(c, l))
      if (t.name == name) return t;
    return std::nullopt;
  }
  // EAGLE-3-lite's own tensors.
  if (name.rfind("drafter.eagle3.", 0) == 0) {
    for (TensorSpec& t : eagle3_tensor_specs(c))
      if (t.name == name) return t;
    return std::nullopt;
  }
  // The drafter's own tensors (dspark, its default five taps).
  if (name.rfind("drafter.", 0) == 0) {
    for (TensorSpec& t : drafter_tensor_specs(c, "dspark", kMaxDrafterTaps))
      if (t.name == name) return t;
    return std::nullopt;
  }
  for (TensorSpec& t : model_tensor_specs(c)) {
    if (t.name.rfind("layers.", 0) == 0) continue;
    if (t.name == name) return t;
  }
  return std::nullopt;
}

float generated_value(uint64_t seed, const TensorSpec& spec, int64_t index) {
  const uint64_t key = splitmix64(seed ^ fnv1a(spec.name));
  const uint64_t r = splitmix64(key + static_cast<uint64_t>(index) * 0xd1b54a32d192ed03ull);
  // 24 random bits -> u in [-1, 1), exact in float32.
  const float u = static_cast<float>(static_cast<int32_t>(r >> 40) - (1 << 23)) / 8388608.0f;
  const float v = spec.scale * u;
  return spec.init == WeightInit::kOnePlus ? 1.0f + v : v;
}

Tensor generate_tensor(uint64_t seed, const TensorSpec& spec) {
  Tensor t = Tensor::zeros(DType::kBF16, spec.shape);
  bf16* d = t.data<bf16>();
  const int64_t n = t.numel();
  // generated_value(seed, spec, i) for every i, with the per-tensor key hoisted.
  const uint64_t key = splitmix64(seed ^ fnv1a(spec.name));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix64(key + static_cast<uint64_t>(i) * 0xd1b54a32d192ed03ull);
    const float u = static_cast<float>(static_cast<int32_t>(r >> 40) - (1 << 23)) / 8388608.0f;
    const float v = spec.scale * u;
    d[i] = to_bf16(spec.init == WeightInit::kOnePlus ? 1.0f + v : v);
  }
  return t;
}

std::vector<int32_t> successor_permutation(const ModelConfig& c) {
  const int64_t v = c.vocab_size;
  const uint64_t key = splitmix64(c.seed ^ fnv1a("successor_permutation"));
  std::vector<std::pair<uint64_t, int32_t>> order;
  for (int64_t t = 0; t < v; ++t)
    order.emplace_back(splitmix64(key + static_cast<uint64_t>(t)), static_cast<int32_t>(t));
  std::sort(order.begin(), order.end());
  // The token at rank i follows the token at rank i - 1 (cyclically): one cycle over the
  // whole vocabulary, so greedy text does not fall into a short loop.
  std::vector<int32_t> succ(static_cast<size_t>(v));
  for (int64_t i = 0; i < v; ++i) succ[order[i].second] = order[(i + 1) % v].second;
  return succ;
}

Tensor generate_model_tensor(const ModelConfig& config, const TensorSpec& spec) {
  if (spec.init == WeightInit::kMarkovW1 || spec.init == WeightInit::kMarkovW2)
    return generate_markov_factor(config, spec);
  if (spec.init == WeightInit::kSuccessorTied) {
    // lm_head[succ[t]] = bf16(R[succ[t]] + scale * embed_tokens[t]), element by element.
    TensorSpec free = spec;
    free.init = WeightInit::kUniform;
    Tensor out = generate_tensor(config.seed, free);
    const TensorSpec embed = *find_tensor_spec(config, "embed_tokens.weight");
    const std::vector<int32_t> succ = successor_permutation(config);
    const int64_t h = spec.shape[1];
    bf16* d = out.data<bf16>();
    for (int64_t t = 0; t < spec.shape[0]; ++t) {
      const int64_t row = succ[static_cast<size_t>(t)];
      for (int64_t i = 0; i < h; ++i) {
        const float e = round_bf16(generated_value(config.seed, embed, t * h + i));
        d[row * h + i] = to_bf16(generated_value(config.seed, free, row * h + i) + spec.scale * e);
      }
    }
    return out;
  }
  return generate_tensor(config.seed, spec);
}

Tensor generate_model_tensor(const ModelConfig& config, const TensorSpec& spec, Device device) {
  if (device == Device::kCpu) return generate_model_tensor(config, spec);
#ifdef SPLITCHECK_HAVE_CUDA
  if (spec.init == WeightInit::kUniform || spec.init == WeightInit::kOnePlus) {
    Tensor t = Tensor::zeros(DType::kBF16, spec.shape, device);
    cuda::fill_uniform_bf16(splitmix64(config.seed ^ fnv1a(spec.name)), spec.scale,
                            spec.init == WeightInit::kOnePlus, t.numel(), t.address());
    return t;
  }
  if (spec.init == WeightInit::kSuccessorTied) {
    const TensorSpec embed = *find_tensor_spec(config, "embed_tokens.weight");
    const std::vector<int32_t> succ = successor_permutation(config);
    Tensor t = Tensor::zeros(DType::kBF16, spec.shape, device);
    cuda::fill_successor_tied_bf16(splitmix64(config.seed ^ fnv1a(spec.name)), spec.scale,
                                   splitmix64(config.seed ^ fnv1a(embed.name)), embed.scale,
                                   succ.data(), spec.shape[0], spec.shape[1], t.address());
    return t;
  }
#endif
  return generate_model_tensor(config, spec).to(device);
}

const Tensor* WeightStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor& WeightStore::get(const std::string& name) const {
  const Tensor* t = find(name);
  if (t == nullptr) throw std::out_of_range("weight not held: " + name);
  return *t;
}

void WeightStore::put(const std::string& name, Tensor t) {
  tensors_[name] = t.is_owned() ? std::move(t) : t.clone();
}

size_t WeightStore::parameter_bytes() const {
  std::set<const void*> seen;
  size_t n = 0;
  for (const auto& [name, t] : tensors_)
    if (!t.empty() && seen.insert(t.address()).second) n += t.nbytes();
  return n;
}

size_t distinct_storage_bytes(const std::vector<const WeightStore*>& stores) {
  std::set<const void*> seen;
  size_t n = 0;
  for (const WeightStore* store : stores)
    for (const auto& [name, t] : store->tensors())
      if (!t.empty() && seen.insert(t.address()).second) n += t.nbytes();
  return n;
}

bool same_storage(const Tensor& a, const Tensor& b) {
  return !a.empty() && a.address() == b.address() && a.nbytes() == b.nbytes();
}

Result<WeightStore> generate_weights(const ModelConfig& config,
                                     const std::vector<std::string>& names) {
  WeightStore store;
  if (names.empty()) {
    for (const TensorSpec& s : model_tensor_specs(config))
      store.put(s.name, generate_model_tensor(config, s));
    return store;
  }
  for (const std::string& name : names) {
    std::optional<TensorSpec> s = find_tensor_spec(config, name);
    if (!s) return invalid_input("no tensor named '" + name + "' in model " + config.preset);
    store.put(name, generate_model_tensor(config, *s));
  }
  return store;
}

}  // namespace splitcheck
