#include "harness/scenario/device_fit.h"

#include <fmt/format.h>

#include <algorithm>

#include "reference/weights.h"

namespace splitcheck {
namespace {

double gib(size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(1ull << 30); }

int64_t forward_tokens(const Scenario& s) {
  if (s.serving.enabled) return std::max(1, s.serving.token_budget);
  int64_t t =
      s.workload.max_prompt_tokens > 0 ? s.workload.max_prompt_tokens : kUnboundedPromptTokens;
  if (s.prefill_chunk > 0) t = std::min<int64_t>(t, s.prefill_chunk);
  if (s.speculative.method != "none") t = std::max<int64_t>(t, s.speculative.gamma + 1);
  return std::max<int64_t>(t, 1);
}

}  // namespace

DeviceFootprint estimate_device_footprint(const Scenario& s) {
  const ModelConfig& c = s.model;
  DeviceFootprint f;
  for (const TensorSpec& spec : model_tensor_specs(c)) {
    size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    f.weight_bytes += n * sizeof(bf16);
  }
  // One forward of T tokens holds, at its widest: float32 logits [T, V]; the bank
  // [T, blocks, H] three times (the state, a payload, a tap read); a dozen [T, H] bf16
  // rows (prefix, delta, taps, outputs); and the widest layer's float32 scratch (the
  // MLP or the routed and shared experts' SwiGLU: three [T, I] products; attention: six
  // [T, heads * head_dim] products).
  const auto t = static_cast<size_t>(forward_tokens(s));
  const auto h = static_cast<size_t>(c.hidden_size);
  const size_t mlp =
      std::max<size_t>(static_cast<size_t>(c.intermediate_size),
                       static_cast<size_t>(c.num_experts_per_tok + c.n_shared_experts) *
                           static_cast<size_t>(c.moe_intermediate_size));
  const size_t attn = static_cast<size_t>(c.num_attention_heads) * static_cast<size_t>(c.head_dim);
  const size_t per_forward = t * static_cast<size_t>(c.vocab_size) * sizeof(float) +
                             3 * t * static_cast<size_t>(c.num_blocks()) * h * sizeof(bf16) +
                             12 * t * h * sizeof(bf16) +
                             std::max(3 * t * mlp, 6 * t * attn) * sizeof(float);
  f.forward_tokens = static_cast<int64_t>(t);
  f.activation_bytes = per_forward * kForwardsInFlight;
  // The longest sequence: its prompt, its new tokens and a verify block past them.
  const int64_t prompt = s.workload.max_prompt_tokens > 0 ? s.workload.max_prompt_tokens
                                                          : kUnboundedPromptTokens;
  const auto positions =
      static_cast<size_t>(prompt + s.workload.max_new_tokens + s.speculative.gamma + 1);
  size_t per_sequence = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    per_sequence += c.is_mla_layer(l)
                        ? positions * static_cast<size_t>(c.kv_lora_rank) * sizeof(bf16)
                        : attn * static_cast<size_t>(c.head_dim) * sizeof(float);
  }
  const auto sequences = static_cast<size_t>(s.serving.enabled ? s.serving.max_in_flight : 1);
  f.cache_bytes = 2 * per_sequence * sequences * kForwardsInFlight;
  f.reserve_bytes = kDeviceReserveBytes;
  return f;
}

std::string device_fit_problem(const DeviceFootprint& f, size_t free_bytes) {
  if (f.total() <= free_bytes) return "";
  return fmt::format(
      "needs {} bytes ({:.1f} GiB) of GPU memory: weights {:.1f} GiB, activations {:.1f} GiB "
      "({} forwards of {} tokens), layer caches {:.1f} GiB, reserve {:.1f} GiB; {} bytes "
      "({:.1f} GiB) are free",
      f.total(), gib(f.total()), gib(f.weight_bytes), gib(f.activation_bytes), kForwardsInFlight,
      f.forward_tokens, gib(f.cache_bytes), gib(f.reserve_bytes), free_bytes, gib(free_bytes));
}

}  // namespace splitcheck
