"""PyTorch helpers: forward hooks that record a pipeline stage's layers in the dtype they ran
in (`record_stage`), and tensors as bf16 bits.

    rec = record_stage(model, writer, layers="model.layers.*", first_layer=start_layer,
                       final_norm="model.norm", lm_head="lm_head")
    with rec.forward(0, kind="prefill", first_position=0, tokens=len(ids)):
        logits = model(input_ids)
    rec.remove()

Each held decoder layer l writes /forward/<f>/layers/<l>/{pre_attn, attn_out, pre_mlp,
mlp_out, prefix} as its modules run (splitcheck_dump.sites says which module output each
is), numbered globally; the last stage adds `output` (the final norm's input) and `logits`.
"""

import contextlib
import dataclasses
import re
import warnings

import numpy as np

from . import _encoding
from .sites import (FINAL_NORM_SITE, LAYER_SITES, LOGITS_SITE, OUTPUT_SITE,
                    STANDARD_LAYER_SITES)


def bf16_bits(tensor):
    """A torch tensor as bf16 bit patterns (uint16) [rows, last axis], leading axes flattened.

    float32 and float16 are rounded as kernels/bf16.h does (`to_bf16_bits`: to nearest even,
    NaN keeps its sign and payload), on the tensor's device, and cross to the host once as
    2-byte patterns; bfloat16 tensors give their bits; other dtypes go through torch's cast.
    """
    import torch

    t = tensor.detach()
    if t.dtype == torch.bfloat16:
        bits = _encoding.tensor_to_host(t.view(torch.int16))
    elif t.dtype in (torch.float32, torch.float16):
        bits = _encoding.to_bf16_bits(t)
    else:
        bits = _encoding.tensor_to_host(t.to(torch.bfloat16).view(torch.int16))
    bits = np.ascontiguousarray(bits).view(np.uint16)
    if bits.ndim > 2:
        bits = bits.reshape(-1, bits.shape[-1])
    return bits


def rows(tensor):
    """A torch tensor [rows, last axis], leading axes flattened, in its own dtype."""
    t = tensor.detach()
    return t.reshape(-1, t.shape[-1]) if t.dim() > 2 else t


# -- record_stage ---------------------------------------------------------------------------


def first_tensor(value):
    """A module's output (or input) as the site's tensor: the first element of a tuple or
    list (transformers layers return (hidden, ...), vLLM norms (normed, residual)), else
    the value itself."""
    while isinstance(value, (tuple, list)):
        value = value[0]
    return value


@dataclasses.dataclass(frozen=True)
class Site:
    """Where one layer site is read: the output of the layer's submodule `module` (a
    dotted path relative to the layer; "" is the layer itself), passed through `select`
    (default `first_tensor`). A vLLM layer returns (hidden, residual) with the residual add
    left to the next layer's norm; its prefix is Site("", lambda out: out[0] + out[1])."""

    module: str
    select: object = None


def is_placeholder(module):
    """True for a module that stands in for a layer another stage holds: vLLM's
    `PPMissingLayer` (a torch.nn.Identity subclass) or any torch.nn.Identity."""
    import torch

    return isinstance(module, torch.nn.Identity) or type(module).__name__ == "PPMissingLayer"


def _site_table(sites):
    """{site: Site} in LAYER_SITES order: the standard table updated by `sites` (a mapping
    of site -> module path, Site, (path, select) or None to leave the site out)."""
    table = {s: Site(path) for s, path in STANDARD_LAYER_SITES}
    for site, spec in dict(sites or {}).items():
        if site not in LAYER_SITES:
            raise ValueError(f"record_stage: unknown layer site {site!r}; known: "
                             f"{', '.join(LAYER_SITES)}")
        if spec is None:
            table.pop(site)
        elif isinstance(spec, Site):
            table[site] = spec
        elif isinstance(spec, str):
            table[site] = Site(spec)
        elif isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
            table[site] = Site(*spec)
        else:
            raise ValueError(f"record_stage: site {site!r}: {spec!r} is not a module path, "
                             "a (path, select) pair, a Site or None")
    return {s: table[s] for s in LAYER_SITES if s in table}


def _pattern_regex(pattern):
    """A module-name glob as a regex: `*` is one name component (no dots)."""
    return re.compile("^" + re.escape(pattern).replace(r"\*", "[^.]+") + "$")


def _find_layers(stage_module, layers):
    """[(name, module)] of the stage's layer slots, placeholders included, in order."""
    import torch

    if not isinstance(layers, str):
        return [(f"layers[{i}]", m) for i, m in enumerate(layers)]
    named = dict(stage_module.named_modules())
    container = named.get(layers)
    if isinstance(container, (torch.nn.ModuleList, torch.nn.Sequential)):
        # Every slot, a placeholder instance repeated included (named_children drops
        # repeats, which would renumber the layers after it).
        return [(f"{layers}.{n}", m) for n, m in container._modules.items()]
    regex = _pattern_regex(layers)
    found = [(n, m) for n, m in stage_module.named_modules(remove_duplicate=False)
             if n and regex.match(n)]
    if not found:
        lists = [n for n, m in named.items()
                 if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) and n]
        hint = (f"; its module lists: {', '.join(lists[:8])} (pass one of them, or "
                f"'<list>.*')" if lists else "")
        raise ValueError(f"record_stage: layers pattern {layers!r} matches no module of "
                         f"{type(stage_module).__name__}{hint}")
    return found


def _module_at(root, path, what):
    if not isinstance(path, str):
        return path
    try:
        return root.get_submodule(path) if path else root
    except AttributeError:
        children = ", ".join(n for n, _ in root.named_children()) or "none"
        raise ValueError(f"record_stage: {what}: {type(root).__name__} has no submodule "
                         f"{path!r} (its children: {children})") from None


class StageRecording:
    """The hooks record_stage installed on one stage. Layers record only inside
    `with recording.forward(f)`; a hooked module that runs outside one and outside
    `paused()` raises, so a forward is never silently left out of the dump.

    layers: {global layer index: module} of the layers hooked (placeholders left out)."""

    def __init__(self, sink, flush, begin, layers):
        self._sink, self._flush, self._begin = sink, flush, begin
        self.layers = layers
        self.handles = []
        self._forward = None
        self._paused = False
        self._next = 0
        self._written = {}  # path -> what wrote it, in the forward being recorded

    @contextlib.contextmanager
    def forward(self, index=None, **begin):
        """Records the stage's tensors under /forward/<index>/ (default: one past the last
        forward recorded, from 0). With `begin` keywords (kind, first_position, tokens or
        last_position) the writer's begin_forward(index, **begin) is called first."""
        if self._forward is not None:
            raise RuntimeError(f"record_stage: forward {index} begun inside forward "
                               f"{self._forward}")
        index = self._next if index is None else int(index)
        if begin:
            if self._begin is None:
                raise TypeError(f"record_stage: forward({index}, {', '.join(begin)}=...) "
                                "needs a writer with begin_forward (a DumpWriter or PartWriter)")
            self._begin(index, **begin)
        self._forward, self._next = index, index + 1
        try:
            yield index
        finally:
            self._forward = None
            self._written = {}
            if self._flush is not None:
                self._flush()

    @contextlib.contextmanager
    def paused(self):
        """Hooked modules run without recording (a warm-up forward, a drafter pass)."""
        was, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = was

    def remove(self):
        """Removes every hook."""
        for h in self.handles:
            h.remove()
        self.handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def _keep(self, what, name, tensor, dtype, first_call_only=False):
        if self._forward is None:
            if self._paused:
                return
            raise RuntimeError(f"record_stage: {what} ran outside `with recording.forward(f)`; "
                               "wrap each recorded forward in it, and a forward not to record "
                               "in `with recording.paused()`")
        if self._paused:
            return
        if name in self._written:
            if first_call_only:
                return
            raise RuntimeError(f"record_stage: forward {self._forward}: {name} recorded twice "
                               f"({what} ran twice in one forward: a module called twice, or "
                               "shared by two sites; give the site another module with sites=)")
        self._written[name] = what
        self._sink(f"/forward/{self._forward}/{name}", tensor, dtype)


def _sink_of(writer):
    """(keep(path, tensor, dtype), flush or None, begin_forward or None) for a DumpWriter
    or PartWriter, a TensorRecorder, or a callable(path, tensor, dtype)."""
    if callable(getattr(writer, "keep", None)):  # TensorRecorder: one flush per forward
        return writer.keep, writer.flush, None
    if callable(getattr(writer, "write", None)):
        return (lambda p, t, d: writer.write(p, t, dtype=d),
                None, getattr(writer, "begin_forward", None))
    if callable(writer):
        return writer, None, None
    raise TypeError(f"record_stage: writer {type(writer).__name__} is no DumpWriter, "
                    "TensorRecorder or callable(path, tensor, dtype)")


def record_stage(stage_module, writer, layers="layers", first_layer=0, sites=None,
                 final_norm=None, lm_head=None, dtype=None, placeholder=is_placeholder):
    """Hooks one pipeline stage of a PyTorch model so each recorded forward writes its
    layer sites, numbered globally, and on the last stage `output` and `logits`.

    stage_module: the stage's root module (paths below are relative to it).
    writer: a DumpWriter or PartWriter (written at once), a TensorRecorder (kept; flushed
      when each `forward()` ends) or a callable(path, tensor, dtype).
    layers: the stage's layer slots, a list of modules or a module path: a ModuleList or
      Sequential ("model.layers": its children) or a glob where `*` is one name component
      ("model.layers.*", "blocks.*.layer"). Slot i is global layer first_layer + i. A
      pattern that matches nothing is a ValueError naming it.
    first_layer: the global index of slot 0: the stage's first layer when the list holds
      only its own layers (a sliced model), 0 when it holds every layer with placeholders
      for the others (vLLM's `layers` with `PPMissingLayer` outside [start_layer,
      end_layer)).
    sites: changes to the standard sites (splitcheck_dump.sites.STANDARD_LAYER_SITES):
      {site: module path relative to the layer, Site(path, select), (path, select), or
      None to leave the site out}; e.g. {"mlp_out": "block_sparse_moe"}.
    final_norm, lm_head: a module or path; `output` is the final norm's input,
      `final_norm` the head's input (the norm's output, as the head reads it), `logits` the
      head's output (float32, exact for bf16 and float16 heads). A placeholder or None
      records nothing (give the same paths on every stage). Each records its module's
      first call in a forward: a norm applied twice shows in the logits, not as a
      recording error. final_norm may be a
      Site(path, select) whose select reads the norm's positional inputs (vLLM's fused
      add + norm: Site("model.norm", lambda inputs: inputs[0] + inputs[1])).
    dtype: None records every layer site and `output` in the dtype the engine computed it
      in (float32 stays float32); "bfloat16" narrows, and the writer records the source.
    placeholder: module -> True for a slot another stage holds (default `is_placeholder`);
      such slots are not hooked.

    Returns a StageRecording: `with rec.forward(f): model(...)` records forward f;
    `rec.remove()` (or `with record_stage(...) as rec`) removes the hooks. Tensors are
    recorded [rows, last axis] (leading axes flattened) as the hooks fire, so datasets are
    in execution order. Raises ValueError when no slot is a real layer, a site's module is
    missing from a layer, or the writer is a PartWriter whose range does not hold the
    hooked layers.
    """
    sink, flush, begin = _sink_of(writer)
    slots = _find_layers(stage_module, layers)
    held = {first_layer + i: (name, m) for i, (name, m) in enumerate(slots)
            if not placeholder(m)}
    if not held:
        given = repr(layers) if isinstance(layers, str) else f"a list of {len(slots)} modules"
        raise ValueError(f"record_stage: every one of the {len(slots)} layer slots ({given}) "
                         "is a placeholder: this stage holds no layer")
    own = getattr(writer, "layer_begin", None), getattr(writer, "layer_end", None)
    if own[0] is not None and not all(own[0] <= l < own[1] for l in held):
        raise ValueError(f"record_stage: hooked layers {min(held)}-{max(held) + 1} "
                         f"(first_layer {first_layer}) are not all stage {writer.stage}'s "
                         f"layers {own[0]}-{own[1]}: check first_layer")
    table = _site_table(sites)
    rec = StageRecording(sink, flush, begin, {l: m for l, (_, m) in held.items()})
    for l, (name, layer) in sorted(held.items()):
        for site, spec in table.items():
            module = _module_at(layer, spec.module, f"layer {l} ({name}), site {site}")
            select = spec.select or first_tensor

            def hook(mod, inputs, output, l=l, site=site, select=select):
                rec._keep(f"layer {l}'s {site} module", f"layers/{l}/{site}",
                          rows(select(output)), dtype)
            rec.handles.append(module.register_forward_hook(hook))
    norm_site = final_norm if isinstance(final_norm, Site) else Site(final_norm)
    norm = _module_at(stage_module, norm_site.module, "final_norm") \
        if final_norm is not None else None
    if norm is not None and not placeholder(norm):
        def norm_hook(mod, inputs, select=norm_site.select or first_tensor):
            rec._keep("the final norm", OUTPUT_SITE, rows(select(inputs)), dtype,
                      first_call_only=True)
        rec.handles.append(norm.register_forward_pre_hook(norm_hook))
    head = _module_at(stage_module, lm_head, "lm_head") if lm_head is not None else None
    if head is not None and not placeholder(head):
        def head_hook(mod, inputs, output):
            rec._keep("the lm_head", LOGITS_SITE, rows(first_tensor(output)), "float32",
                      first_call_only=True)
        rec.handles.append(head.register_forward_hook(head_hook))

        # `final_norm` is what the head reads: a norm applied twice shows there, before
        # the logits, and logits that differ from an equal final_norm are the head's.
        def head_input_hook(mod, inputs):
            rec._keep("the lm_head", FINAL_NORM_SITE, rows(first_tensor(inputs)), dtype,
                      first_call_only=True)
        rec.handles.append(head.register_forward_pre_hook(head_input_hook))
    return rec


# -- the first hooks, kept for old callers -------------------------------------------------


def record_forward_hooks(model, writer, forward_index, modules=None, dtype=None):
    """Deprecated: use `record_stage`, which numbers a stage's layers globally, skips
    placeholders and records the standard sites (splitcheck_dump.sites). This records each
    module's input as `pre_attn` and its output as `mlp_out` only, numbered from 0.

    Registers forward hooks that record each submodule's input and output in the dtype
    the module computed them in (float32 stays float32); `dtype` ("bfloat16", say)
    narrows them, and the writer records their source dtype.

    `modules` is a list of (name, module) pairs (default: model.named_children() that
    have parameters). Each call of a hooked module writes
    /forward/<forward_index>/layers/<i>/pre_attn (its first input) and .../mlp_out (its
    output) in call order. Returns the hook handles; call .remove() on each when done.
    """
    warnings.warn("record_forward_hooks is deprecated: use splitcheck_dump.record_stage "
                  "(global layer numbers, placeholders skipped, the standard sites)",
                  DeprecationWarning, stacklevel=2)
    if modules is None:
        modules = [(n, m) for n, m in model.named_children()
                   if any(True for _ in m.parameters())]
    handles = []
    for i, (_, module) in enumerate(modules):
        def hook(mod, inputs, output, i=i):
            prefix = f"/forward/{forward_index}/layers/{i}/"
            x = inputs[0] if isinstance(inputs, tuple) else inputs
            y = output[0] if isinstance(output, tuple) else output
            writer.write(prefix + "pre_attn", rows(x), dtype=dtype)
            writer.write(prefix + "mlp_out", rows(y), dtype=dtype)
        handles.append(module.register_forward_hook(hook))
    return handles
