"""TensorRecorder: tensors kept while a forward runs, joined and copied to the host in one
batch per flush, so that recording does not stall the forward it records.

`as_array` on a CUDA tensor converts it and waits for its copy to the host: one
synchronisation per tensor, dozens per forward. The recorder instead holds each CUDA
tensor as it is (no kernel, no copy); `flush()`, once per forward, joins everything kept
since the last flush into one device buffer per kind (one C++ call, no Python per tensor)
and starts one asynchronous copy per kind into pinned host memory; `take()`, once per run,
waits for the copies and converts on the host what was asked to become bf16 bits, a whole
batch at a time, with the writer's own conversion (`to_bf16_bits`, at memory speed).
By default (dtype None) a tensor is kept in the dtype the engine computed it in: float32
stays float32, bfloat16 and float16 keep their bits. A dtype narrower than the tensor's
(float32 kept as "bfloat16") is narrowing on request: its record names the source dtype,
and the writer stores it as the dataset's `source_dtype`. A decode step
is bound by the launches Python makes, so the flush makes as few as it can: no conversion
kernels on the device, one join, one copy and one event per forward. CPU tensors, numpy
arrays and lists go through `as_array` when kept. The values are the ones `as_array`
gives, bit for bit (`to_bf16_bits` is `torch_bf16_bits`'s formula, value for value).

A tensor updated in place between `keep` and the flush would be recorded with its new
values: the flush compares each tensor's version counter with the one it had when kept
and refuses (ValueError naming the path) rather than record what was not there. Work
queued on the tensor's stream after the flush cannot change the record (the flush's own
copies come first).
"""

import numpy as np

from . import _encoding
from .writer import _DTYPES, as_array, source_dtype

# The kinds a kept CUDA tensor joins, each one device buffer per flush:
#   "f32>bf16"  a float tensor kept as bfloat16: float32 on the device, bf16 bits made on
#               the host at take() (float16 and float64 become float32 first, at the flush,
#               as torch_bf16_bits would make them)
#   "f32"       a float32 tensor kept as float32
#   "f16"       a float16 tensor kept as float16
#   "i32"       an int32 tensor kept as int32
#   "bf16"      a bfloat16 tensor kept as bfloat16: its bits as they are
# Anything else (a wider integer kept as int32, float64 kept as float32) goes through
# as_array when kept, which checks or converts it.
_KINDS = None


def _kinds():
    global _KINDS
    if _KINDS is None:
        import torch
        _KINDS = {("bfloat16", torch.float32): "f32>bf16", ("bfloat16", torch.float16): "f32>bf16",
                  ("bfloat16", torch.float64): "f32>bf16", ("float32", torch.float32): "f32",
                  ("float16", torch.float16): "f16", ("int32", torch.int32): "i32",
                  ("bfloat16", torch.bfloat16): "bf16"}
    return _KINDS


class TensorRecorder:
    """keep(path, value, dtype) while a forward runs; flush() at its end; take() at the
    end of the run: [(path, numpy array, dtype, source dtype or None)] in the order kept
    (the source dtype where the record was narrowed, see `source_dtype`)."""

    def __init__(self):
        self._entries = []  # [path, dtype, shape, array | (batch, kind, offset, count), source]
        self._pending_entries = []  # (entry, kind, tensor, its version when kept)
        self._batches = []  # [(event, {kind: pinned host tensor})]
        self._arena, self._arena_used = None, 0  # pinned host memory the copies land in

    # Pinned memory is allocated a chunk at a time (at least _ARENA_BYTES) and handed out
    # in slices: a page-locked allocation costs far more than a decode step's copies, and
    # none is freed before take().
    _ARENA_BYTES = 16 << 20

    def _pinned(self, like):
        """A pinned 1-D host tensor of like's dtype and length, sliced from the arena."""
        import torch

        nbytes = like.numel() * like.element_size()
        start = (self._arena_used + 63) // 64 * 64
        if self._arena is None or start + nbytes > self._arena.numel():
            self._arena = torch.empty(max(self._ARENA_BYTES, nbytes), dtype=torch.uint8,
                                      pin_memory=True)
            start = 0
        self._arena_used = start + nbytes
        return self._arena[start:start + nbytes].view(like.dtype)

    def keep(self, path, value, dtype=None):
        """Records `value` under `path` in its own dtype (dtype None), or as `dtype`
        ("bfloat16", "float16", "float32" or "int32"; narrower than the value's: narrowing,
        its source dtype recorded). A CUDA tensor is only held, with its version: what it
        becomes is decided at the flush, once per forward, off the forward's path (an
        unsupported dtype is refused there, naming the path); anything else is converted
        now."""
        entry = [path, dtype, None, None, None]  # path, dtype, shape, array or place, source
        self._entries.append(entry)
        if _deferred(value):
            self._pending_entries.append((entry, value, value._version))
        else:
            _convert(entry, value)

    def flush(self):
        """Starts copying to the host what was kept since the last flush; does not wait
        for it."""
        if not self._pending_entries:
            return
        import torch
        from torch._utils import _flatten_dense_tensors

        pending, placed = {}, []  # kind -> [tensors] in the order kept; (entry, kind, n)
        for entry, value, version in self._pending_entries:
            if value._version != version:
                raise ValueError(
                    f"{entry[0]}: the tensor was updated in place after it was kept and before "
                    f"the flush; keep a copy (tensor.clone()) of a tensor the engine updates")
            dtype, kind, source = _classified(value, entry[1])
            if kind is None:  # a wider integer kept as int32, say: as_array checks it
                _convert(entry, value)
                continue
            entry[1], entry[2], entry[4] = dtype, value.shape, source
            if kind == "f32>bf16" and value.dtype != torch.float32:
                value = value.to(torch.float32)
            pending.setdefault(kind, []).append(value)
            placed.append((entry, kind, value.numel()))
        self._pending_entries = []
        if not pending:
            return
        hosts = {}
        with torch.no_grad():
            for kind, values in pending.items():
                flat = _flatten_dense_tensors(values)  # one join, in C++
                hosts[kind] = host = self._pinned(flat)
                host.copy_(flat, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(flat.device))
        batch = len(self._batches)
        self._batches.append((event, hosts))
        offsets = dict.fromkeys(hosts, 0)
        for entry, kind, n in placed:
            entry[3] = (batch, kind, offsets[kind], n)
            offsets[kind] += n

    def take(self):
        """Waits for every copy; returns [(path, numpy array, dtype, source dtype or None)]
        in the order kept and forgets them."""
        self.flush()
        views = []
        for event, hosts in self._batches:
            event.synchronize()
            views.append({k: _host_array(k, h) for k, h in hosts.items()})
        out = []
        for path, dtype, shape, where, source in self._entries:
            if isinstance(where, tuple):
                batch, kind, offset, n = where
                where = views[batch][kind][offset:offset + n].reshape(shape)
            out.append((path, where, dtype, source))
        self._entries, self._batches = [], []
        self._arena, self._arena_used = None, 0
        return out

    def take_by_forward(self):
        """take(), grouped by the forward of each path (/forward/<f>/...):
        {f: [(path, array, dtype, source dtype or None)]}, each list in the order kept."""
        out = {}
        for record in self.take():
            out.setdefault(int(record[0].split("/")[2]), []).append(record)
        return out


def _own_dtype(value):
    """The dtype a value is kept in by default: its own (torch or numpy float16, float32,
    bfloat16; integers as int32); None (as_array decides) for anything else."""
    name = str(getattr(value, "dtype", "")).replace("torch.", "")
    if name in ("float32", "float16", "bfloat16"):
        return name
    return None


def _deferred(value):
    """Whether keep only holds the value until the flush: a CUDA tensor."""
    return getattr(value, "is_cuda", False)


_CLASSIFIED = {}


def _classified(value, dtype):
    """(the dtype kept, the kind it joins or None, its source dtype or None) of a tensor
    kept as `dtype` (None: its own), remembered per (tensor dtype, dtype asked): the
    flush decides each kept tensor with one lookup."""
    key = (value.dtype, dtype)
    got = _CLASSIFIED.get(key)
    if got is None:
        kept = dtype if dtype is not None else _own_dtype(value)
        got = _CLASSIFIED[key] = (kept, _device_kind(value, kept), source_dtype(value, kept))
    return got


def _convert(entry, value):
    """Fills a record's entry from `value` now, through as_array (which checks the dtype)."""
    path, dtype = entry[0], entry[1]
    if dtype is None:
        dtype = _own_dtype(value)
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"{path}: unsupported dtype {dtype!r}; known: {', '.join(_DTYPES)}")
    entry[4] = source_dtype(value, dtype)
    entry[3], entry[1] = as_array(value, dtype, path)


def _device_kind(value, dtype):
    """The kind a CUDA tensor joins (see _KINDS), or None: converted by as_array when kept."""
    if not getattr(value, "is_cuda", False):
        return None
    return (_KINDS or _kinds()).get((dtype, value.dtype))


def _kind_of(value, dtype):
    if not _encoding._is_tensor(value):
        return None
    return _kinds().get((dtype, value.dtype))


def _host_array(kind, host):
    """A batch's pinned copy of one kind -> the numpy array its records are sliced from."""
    if kind == "bf16":
        import torch
        return host.view(torch.int16).numpy().view(np.uint16)
    a = host.numpy()
    return _encoding.to_bf16_bits(a) if kind == "f32>bf16" else a
