#include "reference/config.h"

#include <algorithm>

namespace splitcheck {

bool ModelConfig::native_supports(int hidden) const {
  if (native_attn_res_hidden_sizes.empty()) return hidden == hidden_size;
  return std::find(native_attn_res_hidden_sizes.begin(), native_attn_res_hidden_sizes.end(),
                   hidden) != native_attn_res_hidden_sizes.end();
}

namespace {

struct PresetRow {
  const char* name;
  int L, S, H, heads, head_dim, V, experts, top_k, shared, moe_inter, dense_inter, kv_rank;
};

// SPEC 2's preset table plus the shapes SPEC leaves to us (expert widths, MLA rank).
constexpr PresetRow kPresets[] = {
    {"k3-tiny", 32, 8, 256, 4, 64, 512, 8, 2, 1, 64, 256, 64},
    {"k3-small", 61, 12, 1024, 8, 128, 4096, 16, 4, 1, 256, 1024, 128},
    {"k3-shape", 93, 12, 7168, 56, 128, 8192, 16, 2, 1, 512, 4096, 512},
};

}  // namespace

std::optional<ModelConfig> model_preset(const std::string& name) {
  for (const PresetRow& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig c;
    c.preset = p.name;
    c.num_hidden_layers = p.L;
    c.attn_res_block_size = p.S;
    c.hidden_size = p.H;
    c.num_attention_heads = p.heads;
    c.head_dim = p.head_dim;
    c.vocab_size = p.V;
    c.n_routed_experts = p.experts;
    c.num_experts_per_tok = p.top_k;
    c.n_shared_experts = p.shared;
    c.moe_intermediate_size = p.moe_inter;
    c.intermediate_size = p.dense_inter;
    c.kv_lora_rank = p.kv_rank;
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const PresetRow& p : kPresets) names.push_back(p.name);
  return names;
}

}  // namespace splitcheck
