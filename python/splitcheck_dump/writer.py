"""DumpWriter: one dump file, datasets in execution order, digests, atomic publish."""

import json
import os

import h5py
import numpy as np

from . import _encoding
from .version import FORMAT, FORMAT_VERSION, __version__

DEFAULT_VOLATILE = "created,partition,producer,env"
LAYER_SITES = ("pre_attn", "attn_out", "pre_mlp", "mlp_out", "prefix")


def as_array(value, dtype=None):
    """(numpy array, dtype name) for a numpy array, a list or a CPU/GPU torch tensor.

    A torch bfloat16 tensor becomes its bit patterns (uint16); dtype "bfloat16" on float
    input rounds to nearest even; by default float -> float32 and integer -> int32.
    """
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        t = value.detach().to("cpu").contiguous()
        if str(t.dtype) == "torch.bfloat16":
            import torch
            value = t.view(torch.int16).numpy().view(np.uint16)
            dtype = dtype or "bfloat16"
        else:
            value = t.numpy()
    a = np.asarray(value)
    if dtype is None:
        dtype = "float32" if np.issubdtype(a.dtype, np.floating) else "int32"
    if dtype == "bfloat16":
        data = a if a.dtype == np.uint16 else _encoding.to_bf16_bits(a)
        return np.ascontiguousarray(data, dtype="<u2"), dtype
    if dtype == "float32":
        return np.ascontiguousarray(a, dtype="<f4"), dtype
    if dtype == "int32":
        return np.ascontiguousarray(a, dtype="<i4"), dtype
    raise ValueError(f"unsupported dtype {dtype!r}; known: bfloat16, float32, int32")


class DumpWriter:
    """Writes one dump at `path`: built at `path + ".partial"`, renamed by close().

    Datasets get `order` in the order they are written, so write in execution order (the
    order the reference engine uses: input_ids, layers/<l>/{pre_attn, attn_out, pre_mlp,
    mlp_out, prefix}, output, bank, logits, taps/<k>, next_tokens, dispatch).

        with DumpWriter("run.h5", partition="0-16", backend="torch") as w:
            w.begin_forward(0, kind="prefill", first_position=0, tokens=len(ids))
            w.write("/forward/0/input_ids", np.array(ids, np.int32))
            w.write_layer(0, 3, "pre_attn", x)          # bf16
            w.write("/forward/0/logits", logits)        # float32
            w.write_taps(0, {0: t0, 8: t8})
            w.write_dispatch(0, trace)
    """

    def __init__(self, path, scenario="", scenario_sha256="", model_sha256="",
                 partition="", backend="python", producer=None, env=None, level="layer",
                 created="", digest=True, volatile=DEFAULT_VOLATILE):
        self.path = os.fspath(path)
        self._partial = self.path + ".partial"
        self._digest = digest
        self._order = 0
        self._file = h5py.File(self._partial, "w")
        attrs = self._file.attrs
        attrs["format"] = _encoding.string_attr(FORMAT)
        attrs["format_version"] = np.int64(FORMAT_VERSION)
        producer = producer or {"name": "splitcheck_dump", "version": __version__}
        for name, value in (("scenario", scenario), ("scenario_sha256", scenario_sha256),
                            ("model_sha256", model_sha256), ("partition", partition),
                            ("backend", backend), ("producer", json.dumps(producer)),
                            ("env", json.dumps(env or {})), ("level", level),
                            ("created", created), ("volatile", volatile)):
            attrs[name] = _encoding.string_attr(value)

    # -- datasets ---------------------------------------------------------------------

    def write(self, dataset_path, array, dtype=None):
        """Writes `array` at `dataset_path` ("/forward/0/logits"); returns the dataset.

        dtype: "bfloat16" (float input is rounded; uint16 input is taken as bf16 bits),
        "float32" or "int32"; by default float -> float32, integer -> int32.
        """
        data, dtype = as_array(array, dtype)
        if dataset_path in self._file:
            raise ValueError(f"{dataset_path}: written twice")
        ds = self._file.create_dataset(dataset_path, data=data)
        ds.attrs["dtype"] = _encoding.string_attr(dtype)
        ds.attrs["order"] = np.int64(self._order)
        self._order += 1
        if self._digest:
            ds.attrs["digest"] = _encoding.string_attr(_encoding.digest_text(data))
        return ds

    def begin_forward(self, forward, kind="prefill", first_position=0, tokens=None,
                      last_position=None):
        """Sets /forward/<f>'s attributes: kind, first_position, last_position."""
        if last_position is None:
            if tokens is None:
                raise ValueError("begin_forward needs tokens or last_position")
            last_position = first_position + int(tokens) - 1
        g = f"/forward/{int(forward)}"
        self.set_attr(g, "kind", kind)
        self.set_attr(g, "first_position", np.int64(first_position))
        self.set_attr(g, "last_position", np.int64(last_position))

    def write_layer(self, forward, layer, site, tensor):
        """One per-layer tensor [T, H] as bf16: site is one of LAYER_SITES."""
        if site not in LAYER_SITES:
            raise ValueError(f"unknown layer site {site!r}; known: {', '.join(LAYER_SITES)}")
        return self.write(f"/forward/{int(forward)}/layers/{int(layer)}/{site}", tensor,
                          dtype="bfloat16")

    def write_taps(self, forward, taps):
        """Taps {capture id: [T, H]} as bf16 at /forward/<f>/taps/<k>, ascending id."""
        for k in sorted(taps):
            self.write(f"/forward/{int(forward)}/taps/{int(k)}", taps[k], dtype="bfloat16")

    def write_dispatch(self, forward, trace):
        """A forward's dispatch trace: /forward/<f>/dispatch and /stage_trace/<f>."""
        ds = self.write(f"/forward/{int(forward)}/dispatch", trace.table(), dtype="int32")
        if trace.extra_kernels:
            ds.attrs["kernels"] = _encoding.string_attr(
                ",".join(f"{o}.{v}" for o, v in trace.kernels))
        self.write(f"/stage_trace/{int(forward)}", trace.stage_table(), dtype="int32")
        return ds

    def write_stage(self, placement):
        """/stages/<s>: a StagePlacement's attributes (layer range, bytes, embedding)."""
        for name, value in placement.attributes().items():
            self.set_attr(f"/stages/{placement.index}", name, value)

    def write_spec(self, spec):
        """/spec: a SpecRecord's datasets and figures."""
        for path, data in spec.datasets():
            self.write("/" + path, data, dtype="int32")
        for name, value in spec.figures().items():
            self.set_attr("/spec", name, value)

    # -- attributes and life cycle ----------------------------------------------------

    def set_attr(self, object_path, name, value):
        """Sets an attribute on a group or dataset, creating the group if needed."""
        obj = self._file.require_group(object_path) if object_path not in self._file \
            else self._file[object_path]
        obj.attrs[name] = _encoding.string_attr(value) if isinstance(value, str) else value

    def close(self):
        """Finishes the file and renames it into place."""
        if self._file is not None:
            self._file.close()
            self._file = None
            os.replace(self._partial, self.path)

    def abandon(self):
        """Drops the partial file without publishing it."""
        if self._file is not None:
            self._file.close()
            self._file = None
            os.remove(self._partial)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abandon()
        return False
