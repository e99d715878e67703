"""A tiny dump that exercises every writer call, from fixed values (no randomness)."""

import numpy as np

import splitcheck_dump as sd

T, H, V = 3, 8, 5


def values(n, scale, shift=0.0):
    """n float32 values that need rounding to bf16, including a tie and negative zero."""
    x = (np.arange(n, dtype=np.float32) - n / 2 + shift) * np.float32(scale)
    x[0] = np.float32(1.0 + 2.0 ** -8)  # exactly between two bf16 values: rounds to even
    x[1] = np.float32(-0.0)
    return x


def write_tiny_dump(path, flip_bit=False):
    trace = sd.DispatchTrace(stage=0)
    trace.record("embed", "gather", layer=-1, site="embed")
    for layer in range(2):
        trace.record("attn_res", "fallback" if layer == 0 else "native", layer=layer,
                     site="pre_attn")
        trace.record("attn_res", "native", layer=layer, site="pre_mlp")
    trace.record("attn_res", "fallback", layer=-1, site="tap", aux=2)
    placement = sd.StagePlacement(0, 0, 2, owned_taps=[0, 2])
    embed = values(V * H, 0.25).reshape(V, H)
    placement.hold("layers.0.w", values(H, 0.5)).set_embedding(embed)
    placement.set_drafter_embedding(embed)
    spec = sd.SpecRecord(gamma=2)
    spec.add_step(0, [1, 2], 2)
    spec.add_step(0, [3, 4], 0)
    spec.set_emitted(0, [1, 2, 0, 4])
    with sd.DumpWriter(path, scenario='{"name": "tiny"}', scenario_sha256="0" * 64,
                       model_sha256="1" * 64, partition="0-2", backend="numpy",
                       producer={"name": "tiny", "version": "0"}, env={"device": "cpu"}) as w:
        w.begin_forward(0, kind="prefill", first_position=0, tokens=T)
        w.write("/forward/0/input_ids", np.array([4, 0, 2], dtype=np.int32))
        for layer in range(2):
            for i, site in enumerate(sd.LAYER_SITES):
                x = values(T * H, 0.125 * (i + 1), shift=layer).reshape(T, H)
                bits = sd.to_bf16_bits(x)
                if flip_bit and layer == 1 and site == "pre_mlp":
                    bits[2, 5] ^= 1
                w.write_layer(0, layer, site, bits, dtype="bfloat16")
        # K3-mini's sites are bf16 (SPEC's dtype): bf16 bits, stored as they are.
        w.write("/forward/0/output", sd.to_bf16_bits(values(T * H, 0.3).reshape(T, H)),
                dtype="bfloat16")
        w.write("/forward/0/logits", values(T * V, 0.7).reshape(T, V))
        w.write_taps(0, {2: sd.to_bf16_bits(values(T * H, 0.2).reshape(T, H)),
                         0: sd.to_bf16_bits(values(T * H, 0.1).reshape(T, H))},
                     dtype="bfloat16")
        w.write("/forward/0/next_tokens", np.array([1, 1, 3], dtype=np.int32))
        w.write_dispatch(0, trace)
        w.write_spec(spec)
        w.write_stage(placement)
