"""A transformers causal LM run pipeline-parallel, recorded as a splitcheck dump.

Optional: `import splitcheck_dump` never imports this module, and this module imports
transformers only when used; without it, `require_transformers()` (called by everything
that needs it) raises an ImportError that names transformers.

Any causal LM whose decoder is `model.model` with `embed_tokens`, `layers`, `norm` and
`rotary_emb`, and whose head is `lm_head` (Llama, DeepSeek-V3, Qwen2/3, Mistral, Mixtral)
runs as stages, one process per stage (`launch`):

  - stage s holds decoder layers [bounds[s], bounds[s+1]) of the model, plus the
    embedding on stage 0 and the final norm and lm_head on the last stage, and its own
    copy of the rotary embedding; the rest of the model is dropped before it runs;
  - each stage keeps its own KV cache (the model's DynamicCache), holding only its own
    layers: a held layer's attention is renumbered to its index inside the stage, as a
    pipeline runtime's stage-local cache does, so the model's mask code (which sizes the
    mask from the cache's first layer) sees the stage's own history;
  - the hidden states cross each cut through torch.distributed (gloo, CPU tensors; on a
    GPU the stage copies them to the host and back, which is exact), a wire header naming
    shape and dtype;
  - a seeded prompt is prefilled, then decoded greedily a token per forward; the last
    stage broadcasts each token to every stage.

What a dump holds, per forward f (docs/dump-format.md), in execution order:
`input_ids`; per layer l `layers/<l>/pre_attn` (input_layernorm's output), `attn_out`
(self_attn's output), `pre_mlp` (post_attention_layernorm's output), `mlp_out` (the MLP's
or MoE's output) and `prefix` (the layer's output: the residual stream the next layer
reads), each in the dtype the model computed it in (float32 for a float32 model: the
engine's own bits), or narrowed on request (`StageOptions.record_dtype`, recorded as each
dataset's `source_dtype`); `output`; `logits` (float32); `next_tokens`;
`dispatch` (the attention implementation each layer's attention ran with, read from its
config when it is called; the MLP kind; embedding, final norm, head, argmax). Then
`/generation/0/{prompt_ids,emitted}` and `/stages/<s>` (layer range, measured parameter
bytes, embedding storage identity).

Two things make PP=1 and a split bit-identical when nothing is wrong: every stage runs
exactly the layer code PP=1 runs on the same device, with the same shapes (so the same
kernels), and the handoff moves the residual stream exactly.
"""

import dataclasses
import functools
import importlib.util
import inspect
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist

from .dispatch import DispatchEvent, DispatchTrace
from .placement import StagePlacement
from .processes import run_stage_processes
from .recorder import TensorRecorder
from .sites import LAYER_OUTPUT_SITE, SUBLAYER_SITES
from .writer import DumpWriter


def _missing_transformers(why):
    return ImportError(f"splitcheck_dump.hf needs the transformers package, which "
                       f"{sys.executable} cannot import ({why}); install transformers (and "
                       f"PyTorch) for this interpreter")


def require_transformers():
    """The transformers module, or an ImportError that says this needs it."""
    try:
        import transformers
    except ImportError as e:
        raise _missing_transformers(e) from e
    return transformers


def check_transformers():
    """Raises require_transformers()'s ImportError when transformers is not installed,
    without importing it (a process about to fork CUDA stages stays clear of CUDA)."""
    if importlib.util.find_spec("transformers") is None:
        raise _missing_transformers("No module named 'transformers'")


# -- dispatch: the kernels an HF model's stage reports ------------------------------------

ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3",
                             "flex_attention")
EXPERTS_IMPLEMENTATIONS = ("eager", "grouped_mm", "batched_mm")
# Declared after splitcheck's registry (dispatch.KERNELS); a name outside this table (an
# attention implementation registered at run time) is appended, sorted, when written.
HF_KERNELS = ((("hf_embedding", "lookup"),)
              + tuple(("hf_attention", a) for a in ATTENTION_IMPLEMENTATIONS)
              + (("hf_mlp", "dense"),)
              + tuple(("hf_moe", e) for e in EXPERTS_IMPLEMENTATIONS)
              + (("hf_rms_norm", "final"), ("hf_lm_head", "linear"),
                 ("torch_argmax", "first_index")))


def kernel_table(event_lists):
    """HF_KERNELS plus any other (op, variant) the events name, sorted."""
    known = set(HF_KERNELS)
    extra = sorted({(e[0], e[1]) for events in event_lists for e in events} - known)
    return list(HF_KERNELS) + extra


# -- the model's pieces and calls, across transformers versions ---------------------------

def decoder_of(model):
    """The decoder module (`model.model`), checked for what a stage takes from it."""
    decoder = getattr(model, "model", None)
    missing = [n for n in ("embed_tokens", "layers", "norm", "rotary_emb")
               if decoder is None or getattr(decoder, n, None) is None]
    if missing or getattr(model, "lm_head", None) is None:
        raise ValueError(f"{type(model).__name__}: a pipeline stage needs model.model."
                         f"{{embed_tokens, layers, norm, rotary_emb}} and model.lm_head; "
                         f"missing: {', '.join(missing or ['lm_head'])}")
    return decoder


@functools.lru_cache(maxsize=None)
def _parameters(fn):
    return frozenset(inspect.signature(fn).parameters)


def new_cache(config):
    """An empty DynamicCache (layers created as the stage's layers first write)."""
    from transformers import DynamicCache
    try:
        return DynamicCache()
    except TypeError:  # a version that wants the config
        return DynamicCache(config=config)


def causal_mask(config, hidden, cache, position_ids, cache_position):
    """The model's own causal mask for this forward (None where the attention
    implementation needs none), sized from the stage's cache."""
    from transformers.masking_utils import create_causal_mask
    names = _parameters(create_causal_mask)
    kw = {"config": config, "attention_mask": None, "past_key_values": cache,
          "position_ids": position_ids}
    kw["inputs_embeds" if "inputs_embeds" in names else "input_embeds"] = hidden
    if "cache_position" in names:
        kw["cache_position"] = cache_position
    return create_causal_mask(**{k: v for k, v in kw.items() if k in names})


def call_layer(layer, hidden, mask, position_ids, cache_position, position_embeddings, cache):
    """One decoder layer, called as the model's forward calls it; returns its output."""
    names = _parameters(type(layer).forward)
    kw = {"attention_mask": mask, "position_ids": position_ids,
          "position_embeddings": position_embeddings}
    kw["past_key_value" if "past_key_value" in names and "past_key_values" not in names
       else "past_key_values"] = cache
    if "cache_position" in names:
        kw["cache_position"] = cache_position
    if "use_cache" in names:
        kw["use_cache"] = True
    out = layer(hidden, **kw)
    return out[0] if isinstance(out, tuple) else out


# -- one stage ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StageOptions:
    """How a stage deviates from the reference protocol (the example's bug flags).

    restart_positions: the stage numbers its tokens from 0 in every forward instead of
    from the tokens its cache holds (position_ids and cache_position).
    handoff_dtype: the dtype the stage sends its hidden states in (None: their own); the
    receiver widens them back to its own dtype.
    record_dtype: the dtype layer sites and `output` are recorded in (None: the model's
    own, bit for bit; "bfloat16": narrowed, each dataset's source dtype recorded).
    """

    restart_positions: bool = False
    handoff_dtype: object = None
    record_dtype: object = None


_LAYER_SITES = SUBLAYER_SITES  # (site, the layer's submodule), splitcheck_dump.sites


class PipelineStage:
    """Layers [begin, end) of a causal LM on one device, with their own cache, recording
    each forward's tensors and kernel choices while it runs."""

    def __init__(self, model, index, bounds, device, options=StageOptions()):
        decoder = decoder_of(model)
        self.index, self.begin, self.end = index, bounds[index], bounds[index + 1]
        self.first, self.last = index == 0, index == len(bounds) - 2
        self.device, self.options, self.config = torch.device(device), options, model.config
        if not 0 <= self.begin < self.end <= len(decoder.layers):
            raise ValueError(f"stage {index}: layers [{self.begin}, {self.end}) outside the "
                             f"model's {len(decoder.layers)}")
        self.embed = decoder.embed_tokens if self.first else None
        self.layers = [decoder.layers[i] for i in range(self.begin, self.end)]
        self.rotary = decoder.rotary_emb
        self.norm = decoder.norm if self.last else None
        self.lm_head = model.lm_head if self.last else None
        for local, layer in enumerate(self.layers):
            layer.self_attn.layer_idx = local  # the stage-local cache's numbering
        for m in self.modules():
            m.to(self.device).eval()
        self.dtype = next(self.layers[0].parameters()).dtype
        self.cache = new_cache(self.config)
        self.seen = 0  # tokens the stage's cache holds
        # Tensors stay on the device until the run ends (one conversion and one
        # asynchronous copy to the host per forward): recording never waits for the GPU.
        self.recorder = TensorRecorder()
        self._forward, self._events = None, None
        self._install_hooks()

    def modules(self):
        return [m for m in (self.embed, *self.layers, self.rotary, self.norm, self.lm_head)
                if m is not None]

    def placement(self):
        """/stages/<index>: what this stage holds, measured from its modules."""
        p = StagePlacement(self.index, self.begin, self.end)
        for i, m in enumerate(self.modules()):
            p.hold_module(m, prefix=f"{i}.")
        p.set_embedding(self.embed.weight if self.embed is not None else None)
        return p

    # -- recording ------------------------------------------------------------------------

    def _keep(self, path, value, dtype):
        if self._forward is not None:
            self.recorder.keep(f"/forward/{self._forward}/{path}", value, dtype)

    def records(self):
        """{forward: [(path, numpy array, dtype, source dtype or None)]} of every recorded
        forward, in the order recorded; waits for the copies to the host and forgets them."""
        return self.recorder.take_by_forward()

    def _event(self, op, variant, layer, site):
        if self._events is not None:
            self._events.append((op, str(variant), int(layer), site))

    def _install_hooks(self):
        for local, layer in enumerate(self.layers):
            l = self.begin + local
            for site, name in _LAYER_SITES:
                sub = getattr(layer, name, None)
                if sub is not None:
                    sub.register_forward_hook(functools.partial(self._on_output, l, site))
            layer.register_forward_hook(functools.partial(self._on_output, l, LAYER_OUTPUT_SITE))
            layer.self_attn.register_forward_pre_hook(functools.partial(self._on_attention, l))
            layer.mlp.register_forward_pre_hook(functools.partial(self._on_mlp, l))

    def _on_output(self, layer, site, module, inputs, output):
        y = output[0] if isinstance(output, tuple) else output
        self._keep(f"layers/{layer}/{site}", y[0], self.options.record_dtype)

    def _on_attention(self, layer, module, inputs):
        self._event("hf_attention", module.config._attn_implementation, layer, "attn")

    def _on_mlp(self, layer, module, inputs):
        if hasattr(module, "experts"):
            impl = getattr(self.config, "_experts_implementation", None) or "eager"
            self._event("hf_moe", impl, layer, "mlp")
        else:
            self._event("hf_mlp", "dense", layer, "mlp")

    # -- one forward ----------------------------------------------------------------------

    @torch.no_grad()
    def forward(self, f, x, record=True):
        """Forward f on this stage. x: the token ids (first stage) or the hidden states
        [1, T, H] received. Returns (hidden states, or the next tokens on the last stage;
        the dispatch events [(op, variant, layer, site)]). Its tensors are recorded (see
        `records()`) unless `record` is false."""
        self._forward, self._events = (f if record else None), []
        try:
            if self.first:
                self._keep("input_ids", np.asarray(x, np.int32), "int32")
                self._event("hf_embedding", "lookup", -1, "embed")
                h = self.embed(torch.tensor([list(x)], dtype=torch.long, device=self.device))
            else:
                h = x.to(self.device)
            T = h.shape[1]
            start = 0 if self.options.restart_positions else self.seen
            cache_position = torch.arange(start, start + T, device=self.device)
            position_ids = cache_position.unsqueeze(0)
            mask = causal_mask(self.config, h, self.cache, position_ids, cache_position)
            position_embeddings = self.rotary(h, position_ids)
            for layer in self.layers:
                h = call_layer(layer, h, mask, position_ids, cache_position,
                               position_embeddings, self.cache)
            self.seen += T
            out = h
            if self.last:
                self._keep("output", h[0], self.options.record_dtype)
                self._event("hf_rms_norm", "final", -1, "final_norm")
                hn = self.norm(h)
                self._event("hf_lm_head", "linear", -1, "lm_head")
                logits = self.lm_head(hn)[0].float()
                self._keep("logits", logits, "float32")
                self._event("torch_argmax", "first_index", -1, "sample")
                next_tokens = logits.argmax(-1)  # the first index among equal maxima
                self._keep("next_tokens", next_tokens.to(torch.int32), "int32")
                out = [int(t) for t in next_tokens.cpu().tolist()]
            return out, self._events
        finally:
            self.recorder.flush()
            self._forward, self._events = None, None


# -- the handoff at a cut ------------------------------------------------------------------

_WIRE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def send_hidden(hidden, dst, wire_dtype=None):
    """Sends [1, T, H] to rank dst: a header (shape, dtype code), then the bytes."""
    t = hidden.detach()
    if wire_dtype is not None and t.dtype != wire_dtype:
        t = t.to(wire_dtype)
    t = t.contiguous().cpu()
    header = torch.tensor([*t.shape, _WIRE_DTYPES.index(t.dtype)], dtype=torch.int64)
    dist.send(header, dst=dst)
    dist.send(t.reshape(-1).view(torch.uint8), dst=dst)


def recv_hidden(src, dtype):
    """Receives what send_hidden sent and widens it to `dtype` (exact for float32)."""
    header = torch.zeros(4, dtype=torch.int64)
    dist.recv(header, src=src)
    b, t, h, code = header.tolist()
    wire = _WIRE_DTYPES[code]
    body = torch.empty(b * t * h * torch.empty(0, dtype=wire).element_size(), dtype=torch.uint8)
    dist.recv(body, src=src)
    return body.view(wire).view(b, t, h).to(dtype)


# -- the run: one process per stage ---------------------------------------------------------

@dataclasses.dataclass
class Plan:
    """One pipeline-parallel run and the dump it writes.

    build_model(stage) returns the model that stage loads (float32, on the CPU; the stage
    keeps its part and moves it to `device`); stage_options(stage) its StageOptions.
    identity / model_identity: the scenario's and the model's identities (sha256 text);
    producer, scenario_text: recorded as the dump's root attributes.
    """

    bounds: list
    out: str
    build_model: object
    prompt: list
    new_tokens: int
    scenario_sha256: str
    model_sha256: str
    stage_options: object = lambda stage: StageOptions()
    device: str = "auto"
    producer: dict = dataclasses.field(default_factory=dict)
    scenario_text: str = ""
    threads: int = 1
    port: int = 0


def resolve_device(name):
    """"auto": the GPU when there is one, else the CPU."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def stage_main(rank, plan):
    """What the process of stage `rank` runs: its part of every forward, then (last
    stage) the dump."""
    torch.set_num_threads(plan.threads)
    pp = len(plan.bounds) - 1
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{plan.port}", rank=rank,
                            world_size=pp)
    device = resolve_device(plan.device)
    model = plan.build_model(rank)
    stage = PipelineStage(model, rank, plan.bounds, device, plan.stage_options(rank))
    del model  # the stage keeps only its own modules
    forwards, events, emitted = [], {}, []
    ids = list(plan.prompt)
    for f in range(plan.new_tokens):
        first_position = 0 if f == 0 else len(plan.prompt) + f - 1
        forwards.append((f, "prefill" if f == 0 else "decode", first_position, len(ids)))
        x = ids if stage.first else recv_hidden(rank - 1, stage.dtype)
        out, events[f] = stage.forward(f, x)
        if not stage.last:
            send_hidden(out, rank + 1, stage.options.handoff_dtype)
        token = torch.tensor([out[-1] if stage.last else 0], dtype=torch.int64)
        if pp > 1:
            dist.broadcast(token, src=pp - 1)
        emitted.append(int(token.item()))
        ids = [emitted[-1]]
    mine = {"records": stage.records(), "events": events,
            "placement": stage.placement().attributes(), "env": environment(device)}
    gathered = [None] * pp if rank == pp - 1 else None
    dist.gather_object(mine, gathered, dst=pp - 1)
    if rank == pp - 1:
        write_dump(plan, forwards, gathered, emitted)
    dist.destroy_process_group()


def environment(device):
    import transformers
    env = {"device": device, "torch": torch.__version__,
           "transformers": transformers.__version__}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


def write_dump(plan, forwards, stages, emitted):
    """The dump of the run: every forward's records, stage by stage (execution order)."""
    partition = "|".join(f"{b}-{e}" for b, e in zip(plan.bounds, plan.bounds[1:]))
    env = stages[-1]["env"]
    kernels = kernel_table(ev for s in stages for ev in s["events"].values())
    extra = kernels[len(HF_KERNELS):]
    with DumpWriter(plan.out, scenario=plan.scenario_text,
                    scenario_sha256=plan.scenario_sha256, model_sha256=plan.model_sha256,
                    partition=partition, backend=f"transformers-{env['device'].split(':')[0]}",
                    producer=plan.producer, env=env, level="layer") as w:
        for f, kind, first, tokens in forwards:
            w.begin_forward(f, kind=kind, first_position=first, tokens=tokens)
            for s in stages:
                for path, data, dtype, source in s["records"][f]:
                    w.write(path, data, dtype=dtype, source_dtype=source)
            trace = DispatchTrace(extra_kernels=list(HF_KERNELS) + extra)
            for i, s in enumerate(stages):
                trace.extend(DispatchEvent(op, variant, layer, site, -1, i)
                             for op, variant, layer, site in s["events"][f])
            w.write_dispatch(f, trace)
        w.write("/generation/0/prompt_ids", np.asarray(plan.prompt, np.int32), dtype="int32")
        w.write("/generation/0/emitted", np.asarray(emitted, np.int32), dtype="int32")
        for i, s in enumerate(stages):
            for name, value in s["placement"].items():
                w.set_attr(f"/stages/{i}", name, value)


def stage_bounds(num_layers, pp, cuts_text):
    """[0, cut_1, ..., L] from a stage count and "c1,c2,..." ("" at PP=1), or ValueError."""
    try:
        cuts = [int(c) for c in cuts_text.split(",") if c.strip()]
    except ValueError:
        raise ValueError(f"--cuts {cuts_text!r}: not comma-separated integers") from None
    if pp < 1 or len(cuts) != pp - 1:
        raise ValueError(f"--pp {pp} needs {max(pp - 1, 0)} cuts, got {len(cuts)}")
    bounds = [0] + cuts + [num_layers]
    if any(b >= c for b, c in zip(bounds, bounds[1:])):
        raise ValueError(f"--cuts {cuts_text!r}: cuts must increase strictly inside "
                         f"(0, {num_layers})")
    return bounds


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(plan):
    """Runs the plan's stages as forked processes; 0 when every stage finished (the dump
    is written), 1 when one failed (the others are stopped; no dump).

    The parent never touches the GPU (each stage picks its device after the fork), so
    forking is safe with CUDA: this process does not even import transformers."""
    check_transformers()
    plan.port = plan.port or _free_port()
    return run_stage_processes(stage_main, plan, len(plan.bounds) - 1, "splitcheck_dump.hf")
