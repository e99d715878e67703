"""A transformers causal LM run pipeline-parallel, recorded as a splitcheck dump.

Optional: `import splitcheck_dump` never imports this module, and this module imports
transformers only when used; without it, `require_transformers()` (called by everything
that needs it) raises an ImportError that names transformers.

A decoder-only causal LM whose base model holds its decoder layers as a `layers` list
(Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE, Gemma2, Gemma3 text, Phi3, GPT-NeoX, OLMo2,
DeepSeek-V3: examples/hf_pp/models.py) runs as stages, one process per stage (`launch`);
`staged_model` refuses any other, naming what it lacks (GPT-2's blocks are
`transformer.h`; a layer that needs state from its neighbours; linear-attention or
state-space layer types):

  - every stage runs the model's own forward (the LM's: its final norm, head and logit
    soft-cap on the last stage), so the masks of each layer type, the per-type rotary
    tables, the embedding and its scale and each layer's dense or MoE MLP are what the
    model's own code makes of the global layer index; stage s holds only layers
    [bounds[s], bounds[s+1]) (the others are stand-ins that hold nothing), the embedding
    on stage 0 and the final norm and head on the last; a non-first stage's first layer
    takes the hidden states received, and a non-last stage stops after its last layer;
  - each stage keeps its own KV cache (the model's DynamicCache), holding only its own
    layers: a held layer's attention is renumbered to its index inside the stage, as a
    pipeline runtime's stage-local cache does, so the model's mask and position code
    (which size themselves from the cache's first layer) see the stage's own history;
  - the hidden states cross each cut through torch.distributed (gloo, CPU tensors; on a
    GPU the stage copies them to the host and back, which is exact), a wire header naming
    shape and dtype;
  - a seeded prompt is prefilled, then decoded greedily a token per forward; the last
    stage broadcasts each token to every stage.

What a dump holds, per forward f (docs/dump-format.md), in execution order: `input_ids`;
per layer l `layers/<l>/pre_attn` (input_layernorm's output), `attn_out` (the
attention's output: self_attn, or GPT-NeoX's attention), `pre_mlp`
(post_attention_layernorm's output, whatever the family applies it to), `mlp_out` (the
MLP's or MoE's output) and `prefix` (the layer's output: the residual stream the next
layer reads; a site whose module the family lacks is not recorded), each in the dtype
the model computed it in (float32 for a float32 model: the engine's own bits), or
narrowed on request (`StageOptions.record_dtype`, recorded as each dataset's
`source_dtype`); `output` (the final norm's input); `final_norm` (its output, what the
head reads: logits that differ are told apart as the norm's fault or the head's);
`logits` (float32); `next_tokens`; `dispatch` (the attention
implementation each layer's attention ran with, read from its config when it is called;
the MLP kind; embedding, final norm, head, argmax). Then
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
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from .dispatch import DispatchEvent, DispatchTrace
from .placement import StagePlacement
from .processes import run_stage_processes
from .recorder import TensorRecorder
from .sites import FINAL_NORM_SITE, LAYER_OUTPUT_SITE, SUBLAYER_SITES
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


# -- what a stage takes from a model, and the models it refuses ---------------------------

# Layer types whose caches a stage-local DynamicCache holds (attention with a full or
# windowed history); a family with others (linear attention, state-space layers) is refused.
_ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
# What a decoder layer may be called with: the hidden states, and what the model's forward
# computes the same way on every stage (masks, positions, rotary tables, the cache). A layer
# that requires anything else is handed state by its neighbours and is refused.
_LAYER_ARGUMENTS = frozenset({
    "hidden_states", "attention_mask", "position_ids", "past_key_values", "past_key_value",
    "layer_past", "use_cache", "cache_position", "position_embeddings", "output_attentions",
    "output_router_logits", "head_mask", "layer_head_mask"})
_ATTENTION_NAMES = ("self_attn", "attention", "attn")
_MLP_NAMES = ("mlp", "block_sparse_moe", "feed_forward")


class NotStageable(ValueError):
    """A model that cannot be run as stages faithfully; the message names what is missing."""


@dataclasses.dataclass(frozen=True)
class StagedModel:
    """Where a causal LM keeps what its stages split: the base model (the decoder), its
    `layers` list, and the attribute names of the embedding and the final norm under the
    base and of the head under the LM."""

    base: object
    layers: object
    embedding: str
    final_norm: str
    head: str


def _child(module, names):
    return next((getattr(module, n) for n in names if getattr(module, n, None) is not None), None)


def _base_of(model):
    base = getattr(model, "base_model", None)
    if base is not None and base is not model and hasattr(base, "layers"):
        return base
    return next((m for _, m in model.named_children() if hasattr(m, "layers")), base)


def staged_model(model):
    """The StagedModel of a transformers causal LM, or NotStageable naming what is missing.

    A model runs as stages when the model's own forward can run every stage: a base model
    holding the embedding, a `layers` list of num_hidden_layers decoder layers and one
    final norm, a head on the LM, a base forward that takes `inputs_embeds`,
    `past_key_values` and `position_ids`, attention-only layer types, and layers that take
    nothing from their neighbours but the hidden states."""
    name, config = type(model).__name__, model.config
    if getattr(config, "is_encoder_decoder", False):
        raise NotStageable(f"{name}: an encoder-decoder model (stages here split decoder-only "
                           f"causal LMs)")
    base = _base_of(model)
    if base is None or base is model:
        raise NotStageable(f"{name}: no base model under its head (model.base_model)")
    layers = getattr(base, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        lists = [n for n, m in base.named_children() if isinstance(m, torch.nn.ModuleList)]
        raise NotStageable(f"{name} cannot be run as pipeline stages: its base model "
                           f"{type(base).__name__} has no `layers` list of decoder layers"
                           + (f" (its lists: {', '.join(lists)})" if lists else ""))
    missing = []
    if getattr(config, "num_hidden_layers", None) != len(layers):
        missing.append(f"config.num_hidden_layers equal to its {len(layers)} layers")
    children = dict(base.named_children())
    embed = model.get_input_embeddings()
    embedding = next((k for k, m in children.items() if m is embed), None)
    if embedding is None:
        missing.append("an input embedding held by the base model itself")
    head_module = model.get_output_embeddings()
    head = next((k for k, m in model.named_children()
                 if head_module is not None and m is head_module), None)
    if head is None:
        missing.append("an output head (get_output_embeddings) held by the LM")
    rest = [k for k, m in children.items()
            if k not in (embedding, "layers") and next(m.parameters(), None) is not None]
    if len(rest) != 1:
        missing.append(f"one final norm beside the embedding and layers (found: "
                       f"{', '.join(rest) or 'none'})")
    forward = inspect.signature(type(base).forward).parameters.values()
    if not any(p.kind == p.VAR_KEYWORD for p in forward):  # else it may take them all
        missing += [f"`{p}` in {type(base).__name__}.forward"
                    for p in ("inputs_embeds", "past_key_values", "position_ids")
                    if p not in {q.name for q in forward}]
    other_types = sorted(set(getattr(config, "layer_types", None) or ()) -
                         set(_ATTENTION_LAYER_TYPES))
    if other_types:
        missing.append(f"attention-only layer types (it has {', '.join(other_types)}, whose "
                       f"caches a stage-local DynamicCache does not hold)")
    for l, layer in enumerate(layers):
        attention = _child(layer, _ATTENTION_NAMES)
        if attention is None or not hasattr(attention, "layer_idx"):
            missing.append(f"layer {l}: an attention module ({', '.join(_ATTENTION_NAMES)}) "
                           f"with a layer_idx")
            break
        if _child(layer, _MLP_NAMES) is None:
            missing.append(f"layer {l}: an MLP ({', '.join(_MLP_NAMES)})")
            break
        signature = inspect.signature(type(layer).forward).parameters.values()
        extra = [p.name for p in signature if p.name != "self" and p.name not in _LAYER_ARGUMENTS
                 and p.default is inspect.Parameter.empty
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if extra:
            missing.append(f"layer {l}: {type(layer).__name__}.forward requires "
                           f"{', '.join(extra)} (state handed between layers besides the "
                           f"hidden states)")
            break
    if missing:
        raise NotStageable(f"{name} cannot be run as pipeline stages faithfully; missing: "
                           + "; ".join(missing))
    return StagedModel(base, layers, embedding, rest[0], head)


# -- one stage ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StageOptions:
    """How a stage deviates from the reference protocol (the example's bug flags). Each
    applies to the stage it is given to; the example gives them to stages after the first
    (drop_final_softcap: to a last stage that is not the first), so PP=1 stays clean.

    restart_positions: the stage numbers its tokens from 0 in every forward instead of
    from the tokens its cache holds (position_ids and cache_position).
    handoff_dtype: the dtype the stage sends its hidden states in (None: their own); the
    receiver widens them back to its own dtype.
    record_dtype: the dtype layer sites and `output` are recorded in (None: the model's
    own, bit for bit; "bfloat16": narrowed, each dataset's source dtype recorded).
    local_layer_types: the stage looks its layers' types (sliding or full attention, so
    their masks and per-type rotary tables) up by their index inside the stage.
    scale_received: the stage multiplies the hidden states it receives by the model's
    embedding scale (the embedding module's own `embed_scale`, Gemma's sqrt(hidden)), as
    if they were token embeddings: the scale applied again on a non-first stage.
    rotary_of_first_layer: the stage gives every layer the rotary table of its first
    layer's type (one rotary embedding a stage, built for the type of its first layer).
    drop_final_softcap: the stage's head leaves out the model's final logit soft-cap.
    """

    restart_positions: bool = False
    handoff_dtype: object = None
    record_dtype: object = None
    local_layer_types: bool = False
    scale_received: bool = False
    rotary_of_first_layer: bool = False
    drop_final_softcap: bool = False


# (site, the names of the layer's submodule whose output it is: splitcheck_dump.sites's
# name, then other families' spellings of the attention and the MLP; the first the layer has).
_OTHER_NAMES = {_ATTENTION_NAMES[0]: _ATTENTION_NAMES[1:], _MLP_NAMES[0]: _MLP_NAMES[1:]}
_LAYER_SITES = tuple((site, (name,) + _OTHER_NAMES.get(name, ()))
                     for site, name in SUBLAYER_SITES)


class _StageDone(Exception):
    """Raised by a non-last stage's last layer: the model's forward stops there."""

    def __init__(self, hidden):
        super().__init__("stage done")
        self.hidden = hidden


class _HeldElsewhere(torch.nn.Module):
    """A layer another stage holds. The model's loop still calls it (a stage runs the
    model's own forward); it holds nothing and passes its input on, and the stage's first
    layer takes the hidden states received instead. It keeps the plain attributes of the
    layer it stands for (`attention_type`, ...), which a model's loop may read."""

    def __init__(self, layer):
        super().__init__()
        for k, v in vars(layer).items():
            if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None))):
                setattr(self, k, v)

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


def _with_argument(module, args, kwargs, name, value=None, take=False):
    """(args, kwargs) of a call to module with argument `name` set to value; take=True
    returns the argument's value instead. KeyError when the call does not pass it."""
    signature = inspect.signature(module.forward)
    bound = signature.bind_partial(*args, **kwargs)
    rest = next((p.name for p in signature.parameters.values() if p.kind == p.VAR_KEYWORD), None)
    if name in bound.arguments:
        where = bound.arguments
    elif rest is not None and name in bound.arguments.get(rest, {}):
        where = bound.arguments[rest]
    else:
        raise KeyError(f"{type(module).__name__} is not called with {name}")
    if take:
        return where[name]
    where[name] = value
    return bound.args, bound.kwargs


class PipelineStage:
    """Layers [begin, end) of a causal LM on one device, with their own cache, recording
    each forward's tensors and kernel choices while it runs.

    Every stage runs the model's own forward (the LM's, so its final norm, head and logit
    soft-cap on the last stage): the masks of each layer type, the rotary tables, the
    embedding and its scale, the dense or MoE MLP of each layer are what the model's code
    makes of the global layer index. The stage holds only its own part: the layers of other
    stages are stand-ins that hold nothing, the embedding stays on the first stage, the
    final norm and head on the last. A non-first stage's first layer takes the hidden
    states received (whatever the model computed before it from the `inputs_embeds` it was
    given is dropped); a non-last stage stops the forward after its last layer. The cache
    is a DynamicCache of the stage's own layers, numbered inside the stage (each held
    attention's layer_idx), so the model sizes its masks and positions from the stage's
    own history; nothing else reads the renumbered index."""

    def __init__(self, model, index, bounds, device, options=StageOptions()):
        staged = staged_model(model)
        self.index, self.begin, self.end = index, bounds[index], bounds[index + 1]
        self.first, self.last = index == 0, index == len(bounds) - 2
        self.device, self.options, self.config = torch.device(device), options, model.config
        if not 0 <= self.begin < self.end <= len(staged.layers):
            raise ValueError(f"stage {index}: layers [{self.begin}, {self.end}) outside the "
                             f"model's {len(staged.layers)}")
        self.model, self.staged = model, staged
        self.layers = [staged.layers[i] for i in range(self.begin, self.end)]
        # What the stage holds besides its layers (None where another stage holds it).
        self.embed = getattr(staged.base, staged.embedding) if self.first else None
        self.norm = getattr(staged.base, staged.final_norm) if self.last else None
        self.lm_head = getattr(model, staged.head) if self.last else None
        for i, layer in enumerate(staged.layers):
            if not self.begin <= i < self.end:
                staged.layers[i] = _HeldElsewhere(layer)
        self._embed_scale = None
        if options.scale_received:
            scale = getattr(getattr(staged.base, staged.embedding), "embed_scale", None)
            if scale is None:
                raise ValueError(f"{type(model).__name__}: scale_received needs an embedding "
                                 f"with an embed_scale")
            self._embed_scale = scale.detach().clone()
        if not self.first:
            setattr(staged.base, staged.embedding, None)
        if not self.last:
            setattr(staged.base, staged.final_norm, None)
            setattr(model, staged.head, None)
        for local, layer in enumerate(self.layers):
            _child(layer, _ATTENTION_NAMES).layer_idx = local  # the stage-local cache's numbering
        self._apply_bug_options()
        model.to(self.device).eval()
        self.dtype = next(self.layers[0].parameters()).dtype
        self.cache = new_cache(self.config)
        self.seen = 0  # tokens the stage's cache holds
        # Tensors stay on the device until the run ends (one conversion and one
        # asynchronous copy to the host per forward): recording never waits for the GPU.
        self.recorder = TensorRecorder()
        self._forward, self._events, self._received, self._rotary = None, None, None, None
        self._install_hooks()

    def _apply_bug_options(self):
        o, config = self.options, self.config
        if o.local_layer_types:
            types = list(getattr(config, "layer_types", None) or ())
            if not types:
                raise ValueError(f"{type(self.model).__name__}: local_layer_types needs "
                                 f"config.layer_types")
            seen = list(types)
            for local, layer in enumerate(self.layers):
                seen[self.begin + local] = types[local]
                if hasattr(layer, "attention_type"):
                    layer.attention_type = types[local]
            config.layer_types = seen
        if o.drop_final_softcap:
            if getattr(config, "final_logit_softcapping", None) is None:
                raise ValueError(f"{type(self.model).__name__}: drop_final_softcap needs a "
                                 f"model with config.final_logit_softcapping")
            if self.last:
                config.final_logit_softcapping = None

    def modules(self):
        return [self.model]

    def placement(self):
        """/stages/<index>: what this stage holds, measured from its modules."""
        p = StagePlacement(self.index, self.begin, self.end)
        p.hold_module(self.model)
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
            if local == 0 and not self.first:
                layer.register_forward_pre_hook(self._take_received, with_kwargs=True)
            if self.options.rotary_of_first_layer:
                layer.register_forward_pre_hook(functools.partial(self._rotary_of_first, local),
                                                with_kwargs=True)
            for site, names in _LAYER_SITES:
                sub = _child(layer, names)
                if sub is not None:
                    sub.register_forward_hook(functools.partial(self._on_output, l, site))
            layer.register_forward_hook(functools.partial(self._on_output, l, LAYER_OUTPUT_SITE))
            _child(layer, _ATTENTION_NAMES).register_forward_pre_hook(
                functools.partial(self._on_attention, l))
            _child(layer, _MLP_NAMES).register_forward_pre_hook(functools.partial(self._on_mlp, l))
        if not self.last:
            self.layers[-1].register_forward_hook(self._stop)  # after the recording hooks
        else:
            self.norm.register_forward_pre_hook(self._on_final_norm)
            self.lm_head.register_forward_pre_hook(self._on_head)

    def _take_received(self, module, args, kwargs):
        return _with_argument(module, args, kwargs, "hidden_states", self._received)

    def _rotary_of_first(self, local, module, args, kwargs):
        if local == 0:
            self._rotary = _with_argument(module, args, kwargs, "position_embeddings", take=True)
            return None
        return _with_argument(module, args, kwargs, "position_embeddings", self._rotary)

    def _stop(self, module, inputs, output):
        raise _StageDone(output[0] if isinstance(output, tuple) else output)

    def _on_output(self, layer, site, module, inputs, output):
        y = output[0] if isinstance(output, tuple) else output
        self._keep(f"layers/{layer}/{site}", y[0], self.options.record_dtype)

    def _on_attention(self, layer, module, inputs):
        config = getattr(module, "config", None) or self.config
        self._event("hf_attention", config._attn_implementation, layer, "attn")

    def _on_mlp(self, layer, module, inputs):
        if hasattr(module, "experts"):
            impl = getattr(self.config, "_experts_implementation", None) or "eager"
            self._event("hf_moe", impl, layer, "mlp")
        else:
            self._event("hf_mlp", "dense", layer, "mlp")

    def _on_final_norm(self, module, inputs):
        self._keep("output", inputs[0][0], self.options.record_dtype)
        self._event("hf_rms_norm", "final", -1, "final_norm")

    def _on_head(self, module, inputs):
        self._keep(FINAL_NORM_SITE, inputs[0][0], self.options.record_dtype)
        self._event("hf_lm_head", "linear", -1, "lm_head")

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
                kw = {"input_ids": torch.tensor([list(x)], dtype=torch.long, device=self.device)}
                T = len(x)
            else:
                self._received = x.to(self.device)
                if self._embed_scale is not None:
                    scale = self._embed_scale.to(self.device, self._received.dtype)
                    self._received = self._received * scale
                kw = {"inputs_embeds": self._received}
                T = self._received.shape[1]
            start = 0 if self.options.restart_positions else self.seen
            position_ids = torch.arange(start, start + T, device=self.device).unsqueeze(0)
            kw.update(past_key_values=self.cache, use_cache=True, position_ids=position_ids)
            if "cache_position" in _parameters(type(self.model).forward):
                kw["cache_position"] = position_ids[0]
            try:
                out = self.model(**kw)
            except _StageDone as done:
                self.seen += T
                return done.hidden, self._events
            self.seen += T
            logits = out.logits[0].float()
            self._keep("logits", logits, "float32")
            self._event("torch_argmax", "first_index", -1, "sample")
            next_tokens = logits.argmax(-1)  # the first index among equal maxima
            self._keep("next_tokens", next_tokens.to(torch.int32), "int32")
            return [int(t) for t in next_tokens.cpu().tolist()], self._events
        finally:
            self.recorder.flush()
            self._forward, self._events, self._received = None, None, None


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


def phase(who, what):
    """With SPLITCHECK_PHASES=1 in the environment, prints to stderr the seconds since the
    engine started (SPLITCHECK_PHASES_T0, set by the engine's first line, else this
    module's import) at which `who` finished `what`: where an engine run's time goes."""
    if os.environ.get("SPLITCHECK_PHASES") == "1":
        t0 = float(os.environ.get("SPLITCHECK_PHASES_T0", _IMPORTED))
        print(f"phase {time.time() - t0:7.2f} s  {who}: {what}", file=sys.stderr, flush=True)


_IMPORTED = time.time()


def stage_main(rank, plan):
    """What the process of stage `rank` runs: its part of every forward, then (last
    stage) the dump."""
    who = f"stage {rank}"
    phase(who, "forked")
    torch.set_num_threads(plan.threads)
    pp = len(plan.bounds) - 1
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{plan.port}", rank=rank,
                            world_size=pp)
    phase(who, "process group")
    device = resolve_device(plan.device)
    model = plan.build_model(rank)
    phase(who, "model built on the CPU")
    stage = PipelineStage(model, rank, plan.bounds, device, plan.stage_options(rank))
    del model  # the stage keeps only its own modules
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    phase(who, f"stage placed on {device}")
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
    phase(who, f"{plan.new_tokens} forwards")
    mine = {"records": stage.records(), "events": events,
            "placement": stage.placement().attributes(), "env": environment(device)}
    gathered = [None] * pp if rank == pp - 1 else None
    dist.gather_object(mine, gathered, dst=pp - 1)
    phase(who, "records gathered")
    if rank == pp - 1:
        write_dump(plan, forwards, gathered, emitted)
        phase(who, "dump written")
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
    forking is safe with CUDA; what the parent imported (transformers, the model's
    module) the stages inherit instead of importing it again."""
    check_transformers()
    if torch.cuda.is_initialized():  # forked stages could not use it
        raise RuntimeError("splitcheck_dump.hf.launch: CUDA was started before the stages "
                           "were forked; start it only inside the stages")
    plan.port = plan.port or _free_port()
    phase("launcher", "forking the stages")
    return run_stage_processes(stage_main, plan, len(plan.bounds) - 1, "splitcheck_dump.hf")
