// K3-mini model configuration and its presets (SPEC 2).
//
// Field names follow the Hugging Face config of the real model where one exists, so a
// scenario's `model.overrides` reads like that config. Every field can be overridden.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace splitcheck {

struct ModelConfig {
  std::string preset;
  int num_hidden_layers = 0;    // L
  int attn_res_block_size = 0;  // S
  int hidden_size = 0;          // H
  int num_attention_heads = 0;  // MLA query heads and KDA heads
  int head_dim = 0;             // per-head q/k/v width (MLA and KDA)
  int vocab_size = 0;           // V
  int n_routed_experts = 0;
  int num_experts_per_tok = 0;  // top-k
  int n_shared_experts = 0;
  int moe_intermediate_size = 0;  // per routed/shared expert
  int intermediate_size = 0;      // dense SwiGLU layers
  int first_k_dense_replace = 1;
  int kv_lora_rank = 0;  // MLA latent width r
  float rms_norm_eps = 1e-6f;
  // Hidden sizes the native attn_res kernel supports; empty means {hidden_size}.
  std::vector<int> native_attn_res_hidden_sizes;
  uint64_t seed = 0x4b334d494e49ull;  // "K3MINI"

  // Derived helpers.
  int num_blocks() const {
    return (num_hidden_layers + attn_res_block_size - 1) / attn_res_block_size;
  }
  bool is_block_write_layer(int l) const { return l % attn_res_block_size == 0; }
  bool is_mla_layer(int l) const { return (l + 1) % 4 == 0 || l == num_hidden_layers - 1; }
  bool is_moe_layer(int l) const { return l >= first_k_dense_replace; }
  bool native_supports(int hidden) const;
};

// The presets of SPEC 2: "k3-tiny", "k3-small", "k3-shape". nullopt for an unknown name.
std::optional<ModelConfig> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace splitcheck
