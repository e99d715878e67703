"""Dispatch events (SPEC 5.3): which kernel variant ran where.

An engine reports each kernel choice as it makes it, either on a trace it holds

    trace = DispatchTrace(stage=1)
    trace.record("attn_res", "native", layer=5, site="pre_attn")

or through the module-level call while a trace is being recorded, so that kernels deep
inside a model need no handle:

    with recording(DispatchTrace(stage=1)) as trace:
        ...
        dispatch("attn_res", "fallback", layer=5, site="pre_attn")

In a dump the trace of forward f is `/forward/<f>/dispatch`, int32 [N, 4] (layer, site
code, kernel code, aux) and `/stage_trace/<f>`, int32 [N] (the stage of each event).
Kernel codes index the C++ kernel registry (kernels/dispatch.cc, `KERNELS` below in the
same order), so a Python trace and a C++ trace use one numbering. An engine with kernels
the registry lacks declares them (`extra_kernels`); they take the codes after the
registry's, and the dispatch dataset then carries the attribute `kernels` (the
comma-separated `op.variant` names, by code).
"""

import contextlib
import dataclasses

import numpy as np

# Site codes, stable: stored in dumps (kernels/dispatch.h, enum Site).
SITES = ("embed", "pre_attn", "attn", "pre_mlp", "mlp", "output", "final_norm", "lm_head",
         "sample", "tap", "draft")

# The C++ kernel registry's rows, in its order: a row's index is its kernel code.
KERNELS = (
    ("attn_res", "native"),
    ("attn_res", "fallback"),
    ("embed", "gather"),
    ("rms_norm", "rows"),
    ("lm_head", "matmul_nt"),
    ("argmax", "lowest_index"),
    ("mla", "latent_cache"),
    ("kda", "recurrent"),
    ("dense_mlp", "swiglu"),
    ("moe", "grouped"),
    ("linear", "matmul"),
    ("dense_attention", "softmax"),
    ("markov_chain", "greedy"),
    ("rms_norm", "nondeterministic_for_test"),
)


@dataclasses.dataclass(frozen=True)
class DispatchEvent:
    """One kernel call: what ran (op, variant), where (layer, site, aux) and on which stage."""

    op: str
    variant: str
    layer: int = -1
    site: str = "embed"
    aux: int = -1
    stage: int = 0

    @property
    def kernel(self):
        return f"{self.op}.{self.variant}"


def site_code(site):
    """The code of a site given by name ("pre_attn") or code (1)."""
    if isinstance(site, (int, np.integer)):
        if not 0 <= int(site) < len(SITES):
            raise ValueError(f"unknown dispatch site code {site}; known: 0..{len(SITES) - 1}")
        return int(site)
    try:
        return SITES.index(site)
    except ValueError:
        raise ValueError(f"unknown dispatch site {site!r}; known: {', '.join(SITES)}") from None


class DispatchTrace:
    """The kernel choices of one forward on one stage (or, merged, on all stages)."""

    def __init__(self, stage=0, extra_kernels=()):
        self.stage = int(stage)
        self.kernels = list(KERNELS) + [tuple(k) for k in extra_kernels]
        if len(set(self.kernels)) != len(self.kernels):
            raise ValueError("extra_kernels repeats a kernel of the registry or itself")
        self.extra_kernels = tuple(tuple(k) for k in extra_kernels)
        self.events = []

    def record(self, op, variant, layer=-1, site="embed", aux=-1):
        """Appends one event and returns it. Unknown (op, variant) pairs are refused."""
        if (op, variant) not in self.kernels:
            known = ", ".join(f"{o}.{v}" for o, v in self.kernels)
            raise ValueError(f"unknown kernel {op}.{variant}; known: {known} "
                             "(declare others with extra_kernels)")
        event = DispatchEvent(op, variant, int(layer), SITES[site_code(site)], int(aux),
                              self.stage)
        self.events.append(event)
        return event

    def extend(self, events):
        """Appends events recorded elsewhere (another stage's), keeping their stage."""
        for e in events:
            if (e.op, e.variant) not in self.kernels:
                raise ValueError(f"unknown kernel {e.kernel}")
            self.events.append(e)

    def kernel_code(self, op, variant):
        return self.kernels.index((op, variant))

    def table(self):
        """The `dispatch` dataset: int32 [N, 4] of layer, site code, kernel code, aux."""
        rows = [(e.layer, site_code(e.site), self.kernel_code(e.op, e.variant), e.aux)
                for e in self.events]
        return np.array(rows, dtype=np.int32).reshape(len(rows), 4)

    def stage_table(self):
        """The `/stage_trace/<f>` dataset: int32 [N], the stage of each event."""
        return np.array([e.stage for e in self.events], dtype=np.int32)

    @classmethod
    def from_table(cls, table, stages=None, kernels=None):
        """Decodes a `dispatch` dataset (and its stage trace) back into events."""
        kernels = list(kernels) if kernels is not None else list(KERNELS)
        extra = kernels[len(KERNELS):]
        if kernels[:len(KERNELS)] != list(KERNELS):
            raise ValueError("kernel table does not start with the registry's rows")
        trace = cls(extra_kernels=extra)
        table = np.asarray(table, dtype=np.int32).reshape(-1, 4)
        for i, (layer, site, kernel, aux) in enumerate(table.tolist()):
            if not 0 <= kernel < len(kernels):
                raise ValueError(f"dispatch event {i}: kernel code {kernel} out of range")
            op, variant = kernels[kernel]
            stage = int(stages[i]) if stages is not None else 0
            trace.events.append(DispatchEvent(op, variant, layer, SITES[site_code(site)], aux,
                                              stage))
        return trace

    def __len__(self):
        return len(self.events)

    def __iter__(self):
        return iter(self.events)


_active = []


@contextlib.contextmanager
def recording(trace):
    """Makes `trace` the one `dispatch()` appends to while the block runs (nestable)."""
    _active.append(trace)
    try:
        yield trace
    finally:
        _active.pop()


def dispatch(op, variant, layer=-1, site="embed", aux=-1):
    """Records a kernel choice on the innermost active trace; returns the event.

    Outside any `recording()` block there is nothing to record to: it returns None.
    """
    if not _active:
        return None
    return _active[-1].record(op, variant, layer=layer, site=site, aux=aux)
