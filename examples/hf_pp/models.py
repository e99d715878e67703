"""The tiny transformers models the example runs, from seeded configs (no hub access).

One config per decoder family, each small (H 64, vocab 256, 8 layers unless asked for
another count) and keeping what sets the family apart where a pipeline cut can break it:

- llama: dense, GQA, SwiGLU;
- mistral: sliding-window attention on every layer (window 4 < the 16-token prompt);
- mixtral: MoE (4 experts, top-2);
- qwen2: full attention on the first half of the layers, sliding on the rest
  (`layer_types`);
- qwen3: q/k norms;
- qwen3_moe: MoE (8 experts, top-2) after a dense first layer (`mlp_only_layers`);
- gemma2: sliding/full alternating by layer, the sqrt(H) embedding scale, attention and
  final logit soft-capping, tied head, eager attention (the one that soft-caps);
- gemma3: 5 sliding : 1 full, a rotary table per layer type (local and global base), the
  scaled embedding, q/k norms, tied head;
- phi3: partial rotary (half of each head);
- gpt_neox: parallel attention + MLP residual, partial rotary (a quarter), LayerNorm, its
  own names (`gpt_neox`, `embed_in`, `embed_out`);
- olmo2: norms after attention and MLP (none before), q/k norms;
- deepseek_v3: MLA with LoRA-compressed q and kv, a dense first layer
  (`first_k_dense_replace`), then MoE of 8 routed experts in 2 groups, a shared expert,
  sigmoid routing biased by `e_score_correction_bias`;
- gpt2: none: its blocks are `transformer.h`, so the adapter refuses it (what a refusal
  says).

The model a stage loads is a pure function of (family, seed, layers, dtype):
torch.manual_seed(seed), then the model class's own initialisation in that dtype. A
trained checkpoint also carries buffers that random initialisation leaves at zeros
(DeepSeek-V3's `e_score_correction_bias`, which biases expert choice);
`checkpoint_buffers` gives them seeded nonzero values, and `build_model` restores them
unless told not to (the example's buffer bug).
"""

import hashlib
import json

import torch

NUM_LAYERS = 8
_SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)


def _qwen2_types(n):
    return ["full_attention" if i < n // 2 else "sliding_attention" for i in range(n)]


def _gemma2_types(n):
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


def _gemma3_types(n):
    """5 sliding : 1 full; under 6 layers the last is full, so the pattern keeps one."""
    return ["full_attention" if (i + 1) % 6 == 0 or (n < 6 and i == n - 1)
            else "sliding_attention" for i in range(n)]


# family: (config class name, its kwargs, a function of the layer count giving more of them,
# attention implementation).
_FAMILIES = {
    "llama": ("LlamaConfig", dict(_SMALL), None, "sdpa"),
    "mistral": ("MistralConfig", dict(_SMALL, head_dim=16, sliding_window=4), None, "sdpa"),
    "mixtral": ("MixtralConfig", dict(_SMALL, num_local_experts=4, num_experts_per_tok=2,
                                      router_jitter_noise=0.0), None, "sdpa"),
    "qwen2": ("Qwen2Config", dict(_SMALL, use_sliding_window=True, sliding_window=4),
              lambda n: dict(max_window_layers=n // 2, layer_types=_qwen2_types(n)), "sdpa"),
    "qwen3": ("Qwen3Config", dict(_SMALL, head_dim=16), None, "sdpa"),
    "qwen3_moe": ("Qwen3MoeConfig", dict(_SMALL, head_dim=16, num_experts=8,
                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                         decoder_sparse_step=1, mlp_only_layers=[0],
                                         norm_topk_prob=True), None, "sdpa"),
    "gemma2": ("Gemma2Config", dict(_SMALL, head_dim=16, sliding_window=4,
                                    query_pre_attn_scalar=16, final_logit_softcapping=30.0,
                                    attn_logit_softcapping=50.0, tie_word_embeddings=True,
                                    pad_token_id=0, bos_token_id=1, eos_token_id=2),
               lambda n: dict(layer_types=_gemma2_types(n)), "eager"),
    "gemma3": ("Gemma3TextConfig", dict(_SMALL, head_dim=16, sliding_window=4,
                                        query_pre_attn_scalar=16, tie_word_embeddings=True,
                                        pad_token_id=0, bos_token_id=1, eos_token_id=2),
               lambda n: dict(layer_types=_gemma3_types(n)), "sdpa"),
    "phi3": ("Phi3Config", dict(_SMALL, partial_rotary_factor=0.5, pad_token_id=0,
                                bos_token_id=1, eos_token_id=2), None, "sdpa"),
    "gpt_neox": ("GPTNeoXConfig", dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                                       num_attention_heads=4, max_position_embeddings=128,
                                       rotary_pct=0.25, partial_rotary_factor=0.25,
                                       use_parallel_residual=True, tie_word_embeddings=False),
                 None, "sdpa"),
    "olmo2": ("Olmo2Config", dict(_SMALL, pad_token_id=0, bos_token_id=1, eos_token_id=2),
              None, "sdpa"),
    "deepseek_v3": ("DeepseekV3Config", dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
        routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8,
        v_head_dim=16, qk_nope_head_dim=16, n_group=2, topk_group=1, num_experts_per_tok=2,
        first_k_dense_replace=1, max_position_embeddings=128, tie_word_embeddings=False),
        None, "sdpa"),
    "gpt2": ("GPT2Config", dict(vocab_size=256, n_embd=64, n_head=4, n_positions=128,
                                tie_word_embeddings=True), None, "sdpa"),
}
FAMILIES = tuple(_FAMILIES)
MATRIX_FAMILIES = tuple(f for f in FAMILIES if f != "gpt2")
REFUSED_FAMILIES = ("gpt2",)
RESTORED_BUFFERS = ("e_score_correction_bias",)  # what a checkpoint restores beyond init
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def config_kwargs(family, num_layers=NUM_LAYERS):
    _, kwargs, more, _ = _FAMILIES[family]
    layers = {"n_layer": num_layers} if family == "gpt2" else {"num_hidden_layers": num_layers}
    return dict(kwargs, **layers, **(more(num_layers) if more else {}))


def attention_implementation(family):
    return _FAMILIES[family][3]


def make_config(family, num_layers=NUM_LAYERS, **overrides):
    """The family's config (LlamaConfig, Gemma2Config, ...), built directly."""
    import transformers
    cls = getattr(transformers, _FAMILIES[family][0])
    return cls(**dict(config_kwargs(family, num_layers), **overrides))


def identity(family, seed, num_layers=NUM_LAYERS, dtype="float32"):
    """sha256 of what determines the weights: family, config, seed, dtype, restored buffers."""
    text = json.dumps({"family": family, "config": config_kwargs(family, num_layers),
                       "seed": seed, "dtype": dtype, "restored_buffers": RESTORED_BUFFERS},
                      sort_keys=True)
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


def _from_config(config, seed, attn_implementation, dtype):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation,
                                                 dtype=DTYPES[dtype])
    except TypeError:  # a version that spells it torch_dtype
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation,
                                                 torch_dtype=DTYPES[dtype])
    if next(model.parameters()).dtype != DTYPES[dtype]:
        model = model.to(DTYPES[dtype])
    return model.eval()


def build_model(family, seed, attn_implementation=None, restore_buffers=True,
                num_layers=NUM_LAYERS, dtype="float32", dense_prefix_offset=0):
    """The seeded model on the CPU, in eval mode, as a stage loads it.

    dense_prefix_offset > 0 (DeepSeek-V3): the model is built with first_k_dense_replace
    that much larger (a stage counting its dense prefix from its own first layer), then
    given every weight of the right model whose name and shape it shares, as a loader
    that skips what it does not find would: the layers made dense keep their initial
    dense MLP."""
    attn = attn_implementation or attention_implementation(family)
    model = _from_config(make_config(family, num_layers), seed, attn, dtype)
    if restore_buffers:
        held = dict(model.named_buffers())
        with torch.no_grad():
            for name, value in checkpoint_buffers(model, seed).items():
                held[name].copy_(value)
    if dense_prefix_offset:
        config = make_config(family, num_layers)
        if not hasattr(config, "first_k_dense_replace"):
            raise ValueError(f"{family}: no first_k_dense_replace to count per stage")
        config.first_k_dense_replace += dense_prefix_offset
        wrong = _from_config(config, seed, attn, dtype)
        mine = wrong.state_dict()
        right = {k: v for k, v in model.state_dict().items()
                 if k in mine and mine[k].shape == v.shape}
        wrong.load_state_dict(right, strict=False)
        model = wrong
    return model


def describe(model):
    """One line of what the built model has of the distinguishing features."""
    c = model.config
    parts = [type(model).__name__, str(next(model.parameters()).dtype).replace("torch.", ""),
             f"attention {c._attn_implementation}"]
    for key in ("layer_types", "sliding_window", "final_logit_softcapping",
                "attn_logit_softcapping", "partial_rotary_factor", "rotary_pct",
                "use_parallel_residual", "first_k_dense_replace", "mlp_only_layers",
                "num_local_experts", "num_experts", "n_routed_experts", "tie_word_embeddings"):
        v = getattr(c, key, None)
        if v is not None:
            if key == "layer_types":
                v = "".join("S" if t == "sliding_attention" else "F" for t in v)
            parts.append(f"{key}={v}")
    mlps = "".join("E" if hasattr(getattr(layer, "mlp", None), "experts") else "D"
                   for layer in getattr(getattr(model, "model", model), "layers", []))
    if mlps:
        parts.append(f"mlp={mlps}")
    return ", ".join(parts)


def prompt_ids(family, seed, tokens):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, _FAMILIES[family][1]["vocab_size"], (tokens,), generator=g).tolist()
