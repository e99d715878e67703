#!/usr/bin/env python3
"""A vLLM-shaped decoder recorded through splitcheck_dump.record_stage: an engine for the
runner protocol (docs/external-engines.md) that the hooks tests sweep.

    /usr/bin/python3 python/tests/vllm_shaped.py --pp 2 --cuts 3 --out run.h5 \
        [--bug-restart-positions]

Shaped as vLLM shapes a pipeline stage: every stage builds the whole `layers` list, real
layers in [start_layer, end_layer) and `PPMissingLayer` (a torch.nn.Identity) elsewhere,
as are the embedding off the first stage and the final norm and head off the last; a
layer returns (hidden, residual) and leaves the residual add to the next norm (fused
add + RMSNorm); the stages hand (hidden, residual) over as IntermediateTensors do. Here
the stages run one after another in one process, each with its own KV cache and its own
part file (PartWriter), joined by `assemble`. Float32 on the CPU, one thread; weights are
a function of (seed, layer), so a stage builds exactly the layers it holds.

--bug-restart-positions: a stage after the first numbers each forward's tokens from 0
instead of from its cache's length (the prefill is unaffected; the first decode forward
diverges at the second stage's first layer, `attn_out`, where RoPE reads positions).
Exit 0 with the dump written, 2 for bad arguments.
"""

import argparse
import hashlib
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir))

import torch  # noqa: E402

import splitcheck_dump as sd  # noqa: E402

LAYERS, HIDDEN, HEADS, FFN, VOCAB = 6, 32, 4, 48, 64
PROMPT, DECODE_STEPS, SEED = 7, 3, 11


class PPMissingLayer(torch.nn.Identity):
    """vLLM's placeholder for what another pipeline rank holds."""


def _weight(shape, *key):
    """A parameter generated from (SEED, key) alone: every stage builds the same one."""
    text = ":".join(str(k) for k in (SEED, *key))
    g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(text.encode()).digest()[:7],
                                                     "little"))
    return torch.nn.Parameter(torch.randn(shape, generator=g) / shape[-1] ** 0.5,
                              requires_grad=False)


class RMSNorm(torch.nn.Module):
    """vLLM's RMSNorm: with a residual, adds it first and returns (normed, new residual)."""

    def __init__(self, *key):
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * _weight((HIDDEN,), *key).data,
                                         requires_grad=False)

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        out = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.weight
        return out if residual is None else (out, residual)


def rope(x, positions):
    """Rotates channel pairs of x [T, heads, d] by position * 10000^(-2i/d)."""
    d = x.shape[-1]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = positions[:, None].float() * freq[None]
    cos, sin = angle.cos()[:, None], angle.sin()[:, None]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


class Attention(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.qkv_proj = _weight((HIDDEN, 3 * HIDDEN), layer, "qkv")
        self.o_proj = _weight((HIDDEN, HIDDEN), layer, "o")
        self.k_cache, self.v_cache = None, None

    def forward(self, positions, x):
        T, d = x.shape[0], HIDDEN // HEADS
        q, k, v = (x @ self.qkv_proj).view(T, 3, HEADS, d).unbind(1)
        q, k = rope(q, positions), rope(k, positions)
        if self.k_cache is not None:
            k, v = torch.cat((self.k_cache, k)), torch.cat((self.v_cache, v))
        self.k_cache, self.v_cache = k, v
        S = k.shape[0]
        scores = torch.einsum("thd,shd->hts", q, k) / d ** 0.5
        future = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
        a = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
        return torch.einsum("hts,shd->thd", a, v).reshape(T, HIDDEN) @ self.o_proj


class MLP(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.gate_up = _weight((HIDDEN, 2 * FFN), layer, "gate_up")
        self.down = _weight((FFN, HIDDEN), layer, "down")

    def forward(self, x):
        g, u = (x @ self.gate_up).chunk(2, -1)
        return (torch.nn.functional.silu(g) * u) @ self.down


class DecoderLayer(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.input_layernorm = RMSNorm(layer, "in")
        self.self_attn = Attention(layer)
        self.post_attention_layernorm = RMSNorm(layer, "post")
        self.mlp = MLP(layer)

    def forward(self, positions, hidden, residual):
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class Model(torch.nn.Module):
    """vLLM's LlamaModel on one pipeline rank: layers [start_layer, end_layer) real."""

    def __init__(self, start_layer, end_layer):
        super().__init__()
        self.start_layer, self.end_layer = start_layer, end_layer
        first, last = start_layer == 0, end_layer == LAYERS
        self.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN) if first else PPMissingLayer()
        if first:
            self.embed_tokens.weight = _weight((VOCAB, HIDDEN), "embed")
        self.layers = torch.nn.ModuleList(
            DecoderLayer(i) if start_layer <= i < end_layer else PPMissingLayer()
            for i in range(LAYERS))
        self.norm = RMSNorm("final") if last else PPMissingLayer()

    def forward(self, input_ids, positions, intermediate):
        if intermediate is None:
            hidden, residual = self.embed_tokens(input_ids), None
        else:
            hidden, residual = intermediate["hidden_states"], intermediate["residual"]
        for layer in self.layers[self.start_layer:self.end_layer]:
            hidden, residual = layer(positions, hidden, residual)
        if self.end_layer < LAYERS:
            return {"hidden_states": hidden, "residual": residual}
        hidden, _ = self.norm(hidden, residual)
        return hidden


class ForCausalLM(torch.nn.Module):
    def __init__(self, start_layer, end_layer):
        super().__init__()
        self.model = Model(start_layer, end_layer)
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False) \
            if end_layer == LAYERS else PPMissingLayer()
        if end_layer == LAYERS:
            self.lm_head.weight = _weight((VOCAB, HIDDEN), "lm_head")

    def forward(self, input_ids, positions, intermediate=None):
        out = self.model(input_ids, positions, intermediate)
        return out if isinstance(out, dict) else self.lm_head(out)


# The layer's stream is hidden + residual: vLLM adds them in the next layer's norm.
VLLM_SITES = {"prefix": sd.Site("", lambda out: out[0] + out[1])}
VLLM_OUTPUT = sd.Site("model.norm", lambda inputs: inputs[0] + inputs[1])


def run(bounds, out, bug_restart_positions=False):
    pp = len(bounds) - 1
    part_dir = tempfile.mkdtemp(prefix=".parts-", dir=os.path.dirname(os.path.abspath(out)))
    header = dict(partition="|".join(f"{b}-{e}" for b, e in zip(bounds, bounds[1:])),
                  backend="torch-cpu", model_sha256=f"vllm-shaped-{SEED}", level="layer",
                  producer={"name": "python/tests/vllm_shaped.py",
                            "flags": ["bug_restart_positions"] if bug_restart_positions
                            else []})
    stages = []
    for s in range(pp):
        model = ForCausalLM(bounds[s], bounds[s + 1]).eval()
        w = sd.PartWriter(os.path.join(part_dir, f"stage-{s}.h5"), run_id="run", stage=s,
                          stages=pp, layer_begin=bounds[s], layer_end=bounds[s + 1], **header)
        rec = sd.record_stage(model, w, layers="model.layers", first_layer=0,
                              sites=VLLM_SITES, final_norm=VLLM_OUTPUT, lm_head="lm_head")
        stages.append((model, w, rec))
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, VOCAB, (PROMPT,), generator=g)
    seen = 0
    with torch.no_grad():
        for f in range(1 + DECODE_STEPS):
            T = len(ids)
            positions = torch.arange(seen, seen + T)
            carried = None
            for s, (model, w, rec) in enumerate(stages):
                mine = positions - seen if (bug_restart_positions and s > 0) else positions
                with rec.forward(f, kind="prefill" if f == 0 else "decode",
                                 first_position=seen, tokens=T):
                    if s == 0:
                        w.write(f"/forward/{f}/input_ids", ids.to(torch.int32))
                    carried = model(ids, mine, carried)
                    if s == pp - 1:
                        next_tokens = carried.argmax(-1)
                        w.write(f"/forward/{f}/next_tokens", next_tokens.to(torch.int32))
            seen += T
            ids = next_tokens[-1:]
    parts = []
    for s, (model, w, rec) in enumerate(stages):
        rec.remove()
        placement = sd.StagePlacement(s, bounds[s], bounds[s + 1]).hold_module(model)
        embed = model.model.embed_tokens
        placement.set_embedding(None if sd.hooks.is_placeholder(embed) else embed.weight)
        w.write_stage(placement)
        w.close()
        parts.append(w.path)
    try:
        sd.assemble(parts, out)
    finally:
        for p in parts:
            os.remove(p)
        os.rmdir(part_dir)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--cuts", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bug-restart-positions", action="store_true")
    args = ap.parse_args(argv)
    cuts = [int(c) for c in args.cuts.split(",") if c.strip()]
    bounds = [0] + cuts + [LAYERS]
    if len(cuts) != args.pp - 1 or any(a >= b for a, b in zip(bounds, bounds[1:])):
        print(f"vllm_shaped.py: --pp {args.pp} --cuts {args.cuts!r}: not a partition of "
              f"{LAYERS} layers", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    run(bounds, args.out, args.bug_restart_positions)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
