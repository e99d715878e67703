"""TensorRecorder: tensors kept while a forward runs, converted and copied to the host in
one batch per flush, so that recording does not stall the forward it records.

`as_array` on a CUDA tensor converts it and waits for its copy to the host: one
synchronisation per tensor, dozens per forward. The recorder instead holds each CUDA
tensor as it is (no kernel, no copy); `flush()`, once per forward, joins everything kept
since the last flush into one buffer per dtype, converts it once and starts one
asynchronous copy per dtype into pinned host memory; `take()`, once per run, waits for the
copies and returns the arrays. CPU tensors, numpy arrays and lists go through `as_array`
when kept. The values are the ones `as_array` gives, bit for bit (the same conversion,
`torch_bf16_bits`).

A tensor updated in place between `keep` and the flush would be recorded with its new
values: the flush compares each tensor's version counter with the one it had when kept
and refuses (ValueError naming the path) rather than record what was not there. Work
queued on the tensor's stream after the flush cannot change the record (the flush's own
kernels come first).
"""

from . import _encoding
from .writer import _DTYPES, as_array


class TensorRecorder:
    """keep(path, value, dtype) while a forward runs; flush() at its end; take() at the
    end of the run: [(path, numpy array, dtype)] in the order kept."""

    def __init__(self):
        self._entries = []  # [path, dtype, shape, array | (batch, group, offset, count)]
        self._pending_entries = []  # (entry, group, tensor, its version when kept)
        self._batches = []  # [(event or None, {group: host numpy array})]
        self._arena, self._arena_used = None, 0  # pinned host memory the copies land in

    # Pinned memory is allocated a chunk at a time (at least _ARENA_BYTES) and handed out
    # in slices: a page-locked allocation costs far more than a decode step's copies, and
    # none is freed before take().
    _ARENA_BYTES = 16 << 20

    def _pinned(self, like):
        """A pinned host tensor of like's shape and dtype, sliced from the arena."""
        import torch

        nbytes = like.numel() * like.element_size()
        start = (self._arena_used + 63) // 64 * 64
        if self._arena is None or start + nbytes > self._arena.numel():
            self._arena = torch.empty(max(self._ARENA_BYTES, nbytes), dtype=torch.uint8,
                                      pin_memory=True)
            start = 0
        self._arena_used = start + nbytes
        return self._arena[start:start + nbytes].view(like.dtype).view(like.shape)

    def keep(self, path, value, dtype):
        """Records `value` under `path` as `dtype` ("bfloat16", "float32" or "int32")."""
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: unsupported dtype {dtype!r}; known: {', '.join(_DTYPES)}")
        group = _device_group(value, dtype)
        if group is None:
            self._entries.append([path, dtype, None, as_array(value, dtype, path)[0]])
            return
        entry = [path, dtype, tuple(value.shape), None]
        self._entries.append(entry)
        self._pending_entries.append((entry, group, value, value._version))

    def flush(self):
        """Starts converting and copying to the host what was kept since the last flush;
        does not wait for it."""
        if not self._pending_entries:
            return
        import torch

        for entry, _, value, version in self._pending_entries:
            if value._version != version:
                raise ValueError(
                    f"{entry[0]}: the tensor was updated in place after it was kept and before "
                    f"the flush; keep a copy (tensor.clone()) of a tensor the engine updates")
        pending = {}  # group -> [tensors], in the order kept
        for _, group, value, _ in self._pending_entries:
            pending.setdefault(group, []).append(value)
        hosts, offsets, event = {}, {}, None
        for group, values in pending.items():
            with torch.no_grad():
                # One dtype per buffer: the bf16 group's other float inputs become float32
                # first, as torch_bf16_bits would make them one by one.
                flats = [v.detach().reshape(-1) if v.dtype in (torch.float32, torch.int32)
                         else v.detach().reshape(-1).to(torch.float32) for v in values]
                device_flat = torch.cat(flats) if len(flats) > 1 else flats[0]
                if group == "bf16":
                    device_flat = _encoding.torch_bf16_bits(device_flat)
            host = self._pinned(device_flat)
            host.copy_(device_flat, non_blocking=True)
            hosts[group] = host
            offsets[group] = 0
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device_flat.device))
        batch = len(self._batches)
        self._batches.append((event, hosts))
        for entry, group, value, _ in self._pending_entries:
            n = value.numel()
            entry[3] = (batch, group, offsets[group], n)
            offsets[group] += n
        self._pending_entries = []

    def take(self):
        """Waits for every copy; returns [(path, numpy array, dtype)] in the order kept and
        forgets them."""
        self.flush()
        views = {}
        for i, (event, hosts) in enumerate(self._batches):
            if event is not None:
                event.synchronize()
            views[i] = {g: _host_view(g, h) for g, h in hosts.items()}
        out = []
        for path, dtype, shape, where in self._entries:
            if isinstance(where, tuple):
                batch, group, offset, n = where
                where = views[batch][group][offset:offset + n].reshape(shape)
            out.append((path, where, dtype))
        self._entries, self._batches = [], []
        self._arena, self._arena_used = None, 0
        return out

    def take_by_forward(self):
        """take(), grouped by the forward of each path (/forward/<f>/...):
        {f: [(path, array, dtype)]}, each list in the order kept."""
        out = {}
        for path, array, dtype in self.take():
            out.setdefault(int(path.split("/")[2]), []).append((path, array, dtype))
        return out


def _device_group(value, dtype):
    """The batch a CUDA tensor joins, or None: see _group_of."""
    if not _encoding._is_tensor(value) or value.device.type != "cuda":
        return None
    return _group_of(value, dtype)


def _group_of(value, dtype):
    """The batch a CUDA tensor joins ("bf16": converted to bf16 bits at the flush; "f32";
    "i32"), or None: converted by as_array when kept (bf16 tensors, whose bits are taken
    as they are, and values as_array must check or convert)."""
    import torch

    if not _encoding._is_tensor(value):
        return None
    if dtype == "bfloat16" and value.dtype == torch.bfloat16:
        return None  # as_array takes its bits as they are: no conversion to batch
    if dtype == "bfloat16" and value.is_floating_point():
        return "bf16"
    if dtype == "float32" and value.dtype == torch.float32:
        return "f32"
    if dtype == "int32" and value.dtype == torch.int32:
        return "i32"
    return None  # converted (and checked) by as_array


def _host_view(group, host):
    import numpy as np

    a = host.numpy()
    return a.view(np.uint16) if group == "bf16" else a
