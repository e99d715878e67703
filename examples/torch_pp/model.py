"""A K3-style AttnRes decoder in PyTorch (SPEC 2's structure, small and dense).

What follows SPEC 2 to the letter: the AttnRes kernel (2.2) with its two variants and
their eligibility rule, one decoder layer (2.3), the head, taps (2.6), the stage's side
of the handoff (2.7). What is simplified: attention is causal softmax attention over the
forward's own tokens (4 heads of 16 on a 64-wide projection, no cache: a verify forward
recomputes its context) and the MLP is a narrow dense SwiGLU on every layer. H is 256
so that `attn_res` sees enough elements for its two float orders to disagree on some
(65 of 1,622,016 elements, 0.004%, over every native-eligible call of a run; the real
pair: 0.008%) while the matrix products stay cheap. Numerics: float32 inside a kernel, one bf16
rounding on every activation it writes (`bf16`), logits float32. One thread, fixed
shapes: two runs are bit-identical, and so is a layer run on any stage. Every function
computes on the device of its inputs (the CPU, or a GPU with run.py --device cuda).

Weights are a pure function of (seed, tensor name), so a stage generates exactly the
tensors it holds and they equal the same tensors at PP=1.
"""

import dataclasses
import hashlib
import json

import torch

from splitcheck_dump import dispatch


@dataclasses.dataclass(frozen=True)
class Config:
    num_hidden_layers: int = 16
    attn_res_block_size: int = 4
    hidden_size: int = 256
    intermediate_size: int = 64
    attention_size: int = 64  # heads x head_dim: q, k, v project H down to it, o back up
    num_attention_heads: int = 4
    vocab_size: int = 128
    rms_norm_eps: float = 1e-6
    native_attn_res_hidden_sizes: tuple = (256,)

    @property
    def num_blocks(self):
        return cdiv(self.num_hidden_layers, self.attn_res_block_size)

    def is_block_write(self, layer):
        return layer % self.attn_res_block_size == 0

    def identity(self, seed):
        """sha256 of the model: this config and the weight seed (weights are a function
        of both and the tensor names)."""
        text = json.dumps({"config": dataclasses.asdict(self), "seed": seed}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def cdiv(a, b):
    return (a + b - 1) // b


def bf16(x):
    """float32 -> the nearest bfloat16 (ties to even), kept as float32."""
    return x.to(torch.bfloat16).to(torch.float32)


# -- weights -----------------------------------------------------------------------------

LAYER_VECTORS = ("self_attention_res_norm", "self_attention_res_proj", "input_layernorm",
                 "mlp_res_norm", "mlp_res_proj", "post_attention_layernorm")


def weight_shape(cfg, name):
    H, F, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    A = cfg.attention_size
    leaf = name.split(".")[-2]
    if name in ("embed_tokens.weight", "lm_head.weight"):
        return (V, H)
    if leaf in ("q_proj", "k_proj", "v_proj"):
        return (H, A)
    if leaf == "o_proj":
        return (A, H)
    if leaf in ("gate_proj", "up_proj"):
        return (H, F)
    if leaf == "down_proj":
        return (F, H)
    return (H,)


def make_weight(cfg, seed, name):
    """The tensor `name`, generated from (seed, name) alone, bf16-valued float32."""
    key = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(key[:8], "little") & (2**63 - 1))
    shape = weight_shape(cfg, name)
    z = torch.randn(shape, generator=g, dtype=torch.float32)
    leaf = name.split(".")[-2]
    if name == "embed_tokens.weight":
        w = z
    elif len(shape) == 2:
        w = z / shape[0] ** 0.5
    elif leaf.endswith("_proj"):  # AttnRes score projections: scores of order one
        w = z * (2.0 / cfg.hidden_size ** 0.5)
    else:  # norm weights around one
        w = 1.0 + 0.1 * z
    return bf16(w)


def layer_weight_names(layer):
    p = f"layers.{layer}."
    return ([p + v + ".weight" for v in LAYER_VECTORS] +
            [p + f"self_attn.{m}.weight" for m in ("q_proj", "k_proj", "v_proj", "o_proj")] +
            [p + f"mlp.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")])


HEAD_NAMES = ("norm.weight", "lm_head.weight", "output_attn_res_norm.weight",
              "output_attn_res_proj.weight")


# -- the AttnRes kernel (SPEC 2.2) ------------------------------------------------------

class Residual:
    """The residual state entering a layer: prefix P [T, H], pending delta D or None,
    bank [T, rows, H] (all bf16-valued float32)."""

    def __init__(self, P, D, bank):
        self.P, self.D, self.bank = P, D, bank

    def hidden(self):
        """bf16(P + D), or P without a pending delta (the handoff's `hidden`)."""
        return self.P if self.D is None else bf16(self.P + self.D)


def native_eligible(cfg, D, out_w, nb, write_idx):
    return (D is not None and out_w is not None and nb > 0 and write_idx < 0 and
            cfg.hidden_size in cfg.native_attn_res_hidden_sizes)


def _scores_native(V, norm_w, proj_w, eps):
    return (V * (norm_w * proj_w)).sum(-1) * torch.rsqrt((V * V).mean(-1) + eps)


def _mix_native(V, s):
    """Weights normalised first, then the sources summed in ascending order."""
    a = torch.softmax(s, dim=-1)
    m = torch.zeros_like(V[:, 0])
    for i in range(V.shape[1]):
        m = m + a[:, i:i + 1] * V[:, i]
    return m


def _scores_fallback(V, norm_w, proj_w, eps):
    return ((V * norm_w) * proj_w).sum(-1) * torch.rsqrt((V * V).mean(-1) + eps)


def _mix_fallback(V, s, block_l):
    """An online softmax over tiles of block_l sources, divided once at the end."""
    T, n, _ = V.shape
    mx = torch.full((T,), float("-inf"), device=V.device)
    denom = torch.zeros(T, device=V.device)
    acc = torch.zeros_like(V[:, 0])
    for t0 in range(0, n, block_l):
        st = s[:, t0:t0 + block_l]
        new = torch.maximum(mx, st.max(-1).values)
        scale = torch.exp(mx - new)
        e = torch.exp(st - new[:, None])
        acc = acc * scale[:, None] + (e[..., None] * V[:, t0:t0 + block_l]).sum(1)
        denom = denom * scale + e.sum(-1)
        mx = new
    return acc / denom[:, None]


def attn_res(cfg, state, norm_w, proj_w, out_w, nb, write_idx, layer, site, aux=-1,
             update=True):
    """attn_res(P, D, bank, ...) of SPEC 2.2 on `state`; returns the bf16 output.

    With `update`, P absorbs D and the bank row is written, as the kernel does; a tap
    read passes a state it does not keep.
    """
    eps = cfg.rms_norm_eps
    native = native_eligible(cfg, state.D, out_w, nb, write_idx)
    dispatch("attn_res", "native" if native else "fallback", layer=layer, site=site, aux=aux)
    p = state.P
    if state.D is not None:
        p = bf16(p + state.D)
        if update:
            state.P = p
    if write_idx >= 0:
        state.bank[:, write_idx] = p
    if nb == 0:
        m = p
    else:
        V = torch.cat([state.bank[:, :nb], p[:, None]], dim=1)
        if native:
            m = _mix_native(V, _scores_native(V, norm_w, proj_w, eps))
        else:
            T = p.shape[0]
            block_l = 1 if (T >= 256 or nb <= 1) else 4
            m = _mix_fallback(V, _scores_fallback(V, norm_w, proj_w, eps), block_l)
    if out_w is not None:
        m = m * torch.rsqrt((m * m).mean(-1, keepdim=True) + eps) * out_w
    return bf16(m)


# -- attention, MLP, head -----------------------------------------------------------------

def attention(cfg, w, x, layer):
    dispatch("dense_attention", "softmax", layer=layer, site="attn")
    T = x.shape[0]
    A, nh = cfg.attention_size, cfg.num_attention_heads
    hd = A // nh
    q = bf16(x @ w["q_proj"]).view(T, nh, hd).transpose(0, 1)
    k = bf16(x @ w["k_proj"]).view(T, nh, hd).transpose(0, 1)
    v = bf16(x @ w["v_proj"]).view(T, nh, hd).transpose(0, 1)
    scores = (q @ k.transpose(1, 2)) / hd ** 0.5
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    o = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, A)
    return bf16(bf16(o) @ w["o_proj"])


def mlp(cfg, w, y, layer):
    dispatch("dense_mlp", "swiglu", layer=layer, site="mlp")
    g = bf16(y @ w["gate_proj"])
    u = bf16(y @ w["up_proj"])
    h = bf16(torch.nn.functional.silu(g) * u)
    return bf16(h @ w["down_proj"])


def rms_norm(cfg, x, weight, site, layer=-1):
    dispatch("rms_norm", "rows", layer=layer, site=site)
    return bf16(x * torch.rsqrt((x * x).mean(-1, keepdim=True) + cfg.rms_norm_eps) * weight)


def embed(cfg, table, ids):
    dispatch("embed", "gather", layer=-1, site="embed")
    return table[ids].clone()


def lm_head(cfg, h, table):
    dispatch("lm_head", "matmul_nt", layer=-1, site="lm_head")
    return h @ table.t()


def argmax_lowest(logits):
    """Greedy next token per row, the lowest index on ties."""
    dispatch("argmax", "lowest_index", layer=-1, site="sample")
    best = logits.max(-1, keepdim=True).values
    idx = torch.arange(logits.shape[-1], device=logits.device).expand_as(logits)
    return torch.where(logits == best, idx, logits.shape[-1]).min(-1).values


# -- one layer (SPEC 2.3) -----------------------------------------------------------------

class AttnResRead(torch.nn.Module):
    """One attn_res call of a layer (SPEC 2.2, site pre_attn or pre_mlp): its output is the
    site's tensor. Holds references to the layer's weights, not copies."""

    def __init__(self, cfg, norm_w, proj_w, out_w, layer, site):
        super().__init__()
        self.cfg, self.layer, self.site = cfg, layer, site
        self.norm_w, self.proj_w, self.out_w = norm_w, proj_w, out_w

    def forward(self, state, nb, write_idx):
        return attn_res(self.cfg, state, self.norm_w, self.proj_w, self.out_w, nb, write_idx,
                        self.layer, self.site)


class Attention(torch.nn.Module):
    def __init__(self, cfg, lw, layer):
        super().__init__()
        self.cfg, self.lw, self.layer = cfg, lw, layer

    def forward(self, x):
        return attention(self.cfg, self.lw, x, self.layer)


class MLP(torch.nn.Module):
    def __init__(self, cfg, lw, layer):
        super().__init__()
        self.cfg, self.lw, self.layer = cfg, lw, layer

    def forward(self, y):
        return mlp(self.cfg, self.lw, y, self.layer)


class DecoderLayer(torch.nn.Module):
    """Layer `layer` (SPEC 2.3) as modules named as a standard pre-norm layer's, so that
    splitcheck_dump.record_stage reads its five sites with the standard table: the outputs
    of input_layernorm (the attn_res read at pre_attn), self_attn, post_attention_layernorm
    (the read at pre_mlp) and mlp (the new pending delta), then the layer's own output,
    the prefix P. forward(state) updates `state` (a Residual) as the kernels do."""

    def __init__(self, cfg, lw, layer):
        super().__init__()
        self.cfg, self.index = cfg, layer
        self.input_layernorm = AttnResRead(cfg, lw["self_attention_res_norm"],
                                           lw["self_attention_res_proj"], lw["input_layernorm"],
                                           layer, "pre_attn")
        self.self_attn = Attention(cfg, lw, layer)
        self.post_attention_layernorm = AttnResRead(cfg, lw["mlp_res_norm"], lw["mlp_res_proj"],
                                                    lw["post_attention_layernorm"], layer,
                                                    "pre_mlp")
        self.mlp = MLP(cfg, lw, layer)

    def forward(self, state):
        S, layer = self.cfg.attn_res_block_size, self.index
        w = self.cfg.is_block_write(layer)
        nb = cdiv(layer, S)
        x = self.input_layernorm(state, nb, layer // S if w else -1)
        a = self.self_attn(x)
        if w:
            state.P, state.D = a, None
        else:
            state.D = a
        y = self.post_attention_layernorm(state, nb + (1 if w else 0), -1)
        state.D = self.mlp(y)
        return state.P


def read_tap(cfg, state, k, norm_w, proj_w):
    """Tap k (0 < k <= L): the pure read attn_res(bf16(P + D), none, bank, ...)."""
    view = Residual(state.hidden(), None, state.bank)
    return attn_res(cfg, view, norm_w, proj_w, None, cdiv(k, cfg.attn_res_block_size), -1,
                    k if k < cfg.num_hidden_layers else -1, "tap", aux=k, update=False)
