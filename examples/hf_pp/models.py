"""The two tiny transformers models the example runs, from seeded configs (no hub access).

`llama`: a dense Llama (GQA attention, SwiGLU MLP). `deepseek_v3`: DeepSeek-V3's
structure (MLA attention with LoRA-compressed q and kv, a dense first layer, then MoE
layers of 8 routed experts in 2 groups and a shared expert, sigmoid routing with the
`e_score_correction_bias` buffer). Both float32, 8 layers, H 64, untied head.

The model a stage loads is a pure function of (family, seed): torch.manual_seed(seed),
then the model class's own initialisation. A trained checkpoint also carries buffers that
random initialisation leaves at zeros (DeepSeek-V3's `e_score_correction_bias`, which
biases expert choice); `checkpoint_buffers` gives them seeded nonzero values, and
`build_model` restores them unless told not to (the example's buffer bug).
"""

import hashlib
import json

import torch

FAMILIES = ("llama", "deepseek_v3")
NUM_LAYERS = 8

_CONFIGS = {
    "llama": dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  tie_word_embeddings=False),
    "deepseek_v3": dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                        moe_intermediate_size=32, num_attention_heads=4, num_key_value_heads=4,
                        n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
                        kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, v_head_dim=16,
                        qk_nope_head_dim=16, n_group=2, topk_group=1, num_experts_per_tok=2,
                        first_k_dense_replace=1, max_position_embeddings=128,
                        tie_word_embeddings=False),
}
RESTORED_BUFFERS = ("e_score_correction_bias",)  # what a checkpoint restores beyond init


def config_kwargs(family, num_layers=NUM_LAYERS):
    return dict(_CONFIGS[family], num_hidden_layers=num_layers)


def make_config(family, num_layers=NUM_LAYERS):
    """The family's config (LlamaConfig / DeepseekV3Config), built directly."""
    import transformers
    cls = {"llama": transformers.LlamaConfig, "deepseek_v3": transformers.DeepseekV3Config}
    return cls[family](**config_kwargs(family, num_layers))


def identity(family, seed, num_layers=NUM_LAYERS):
    """sha256 of what determines the weights: family, config, seed, restored buffers."""
    text = json.dumps({"family": family, "config": config_kwargs(family, num_layers),
                       "seed": seed, "restored_buffers": RESTORED_BUFFERS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def checkpoint_buffers(model, seed):
    """{buffer name: seeded value} for the buffers a checkpoint restores (N(0, 0.1^2),
    seeded by name: a stage's value equals PP=1's)."""
    values = {}
    for name, buf in model.named_buffers():
        if name.rsplit(".", 1)[-1] in RESTORED_BUFFERS:
            key = hashlib.sha256(f"{seed}:{name}".encode()).digest()
            g = torch.Generator().manual_seed(int.from_bytes(key[:8], "little") & (2**63 - 1))
            values[name] = 0.1 * torch.randn(buf.shape, generator=g, dtype=torch.float32)
    return values


def build_model(family, seed, attn_implementation="sdpa", restore_buffers=True,
                num_layers=NUM_LAYERS):
    """The seeded float32 model on the CPU, in eval mode, as a stage loads it."""
    from transformers import AutoModelForCausalLM
    config = make_config(family, num_layers)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    model = model.float().eval()
    if restore_buffers:
        held = dict(model.named_buffers())
        with torch.no_grad():
            for name, value in checkpoint_buffers(model, seed).items():
                held[name].copy_(value)
    return model


def prompt_ids(family, seed, tokens):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, _CONFIGS[family]["vocab_size"], (tokens,), generator=g).tolist()
