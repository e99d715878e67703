"""DumpWriter: one dump file, datasets in execution order, digests, atomic publish."""

import json
import os

import h5py
import numpy as np

from . import _encoding
from .version import FORMAT, FORMAT_VERSION, __version__

DEFAULT_VOLATILE = "created,partition,producer,env"
LAYER_SITES = ("pre_attn", "attn_out", "pre_mlp", "mlp_out", "prefix")
_DTYPES = ("bfloat16", "float16", "float32", "int32")
# Float dtypes by what they hold: a value of a dtype is exact in every dtype listed after
# it as "holds", so storing it there is not narrowing (float16 and bfloat16 in float32).
_HOLDS = {"float64": ("float64",), "float32": ("float32", "float64"),
          "float16": ("float16", "float32", "float64"),
          "bfloat16": ("bfloat16", "float32", "float64")}
_INT32_MIN, _INT32_MAX = -2 ** 31, 2 ** 31 - 1


def as_array(value, dtype=None, path=None):
    """(numpy array, dtype name) for a numpy array, a list, a Python number or a CPU/GPU
    torch tensor, refusing values the dtype cannot hold (ValueError naming `path`).

    dtype "bfloat16": float input is rounded to nearest even (`to_bf16_bits`), uint16 input
    and torch bfloat16 tensors are taken as bf16 bits. "float16": float input is rounded by
    numpy's cast (nearest even). "float32": float input is rounded to float32. "int32":
    integer input, and float input that holds whole numbers, as long as every value fits
    int32. By default every float keeps its own dtype (float32 -> float32, float16 ->
    float16, a torch bfloat16 tensor -> bfloat16), integer -> int32; float64 needs
    dtype="float32" (or narrower) spelled out. `source_dtype` tells whether a call narrows.

    A torch tensor off the CPU is converted to bf16 bits on its device and copied to the
    host once (pinned memory, non_blocking, on CUDA).
    """
    where = path or "as_array"
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"{where}: unsupported dtype {dtype!r}; known: {', '.join(_DTYPES)}")
    if _encoding._is_tensor(value):
        value, dtype = _tensor_input(value, dtype)
    a = np.asarray(value)
    if dtype is None:
        dtype = _default_dtype(a, where)
    if dtype == "bfloat16":
        if a.dtype == np.uint16:
            return np.ascontiguousarray(a, dtype="<u2"), dtype
        _refuse_unconvertible(a, where, dtype)
        return np.ascontiguousarray(_encoding.to_bf16_bits(a), dtype="<u2"), dtype
    if dtype == "float32":
        _refuse_unconvertible(a, where, dtype)
        return np.ascontiguousarray(a, dtype="<f4"), dtype
    if dtype == "float16":
        _refuse_unconvertible(a, where, dtype)
        return np.ascontiguousarray(a, dtype="<f2"), dtype
    return np.ascontiguousarray(_checked_int32(a, where), dtype="<i4"), dtype


def source_dtype(value, dtype):
    """The float dtype `value` holds ("float32", "float64", "float16", "bfloat16") when
    storing it as `dtype` rounds it (narrowing: float32 -> bfloat16, say), else None.
    uint16 input stored as bfloat16 is the caller's bits: None."""
    name = _float_dtype_name(value)
    if name is None or dtype is None or dtype == "int32" or dtype in _HOLDS[name]:
        return None
    return name


def _narrowing_of(value, dtype):
    """source_dtype(value, dtype), or None for values that are no array or tensor."""
    return source_dtype(value, dtype) if hasattr(value, "dtype") else None


def _float_dtype_name(value):
    """The float dtype of a numpy array or torch tensor as a name, or None."""
    dt = getattr(value, "dtype", None)
    if dt is None:
        return None
    text = str(dt).replace("torch.", "")
    return text if text in _HOLDS else None


def _activation_dtype(value, dtype):
    """An activation's dtype for `write`: `dtype` when given; bf16 bits for a uint16 array
    (the format's bf16, never an integer activation); else None (its own dtype)."""
    if dtype is None and isinstance(value, np.ndarray) and value.dtype == np.uint16:
        return "bfloat16"
    return dtype


def _tensor_input(t, dtype):
    """A torch tensor -> (numpy array or bf16 bits, dtype), crossing to the host once."""
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        if dtype in (None, "bfloat16"):
            return _encoding.tensor_to_host(t.view(torch.int16)).view(np.uint16), "bfloat16"
        t = t.to(torch.float32)  # exact; then as float32 input
    if t.device.type != "cpu" and t.is_floating_point():
        if dtype == "bfloat16":  # 2 bytes a value cross, not 4
            return _encoding.tensor_to_host(_encoding.torch_bf16_bits(t)).view(np.uint16), dtype
        if dtype == "float32" and t.dtype == torch.float64:
            t = t.to(torch.float32)
        if dtype == "float16" and t.dtype != torch.float16:
            t = t.to(torch.float16)
    return _encoding.tensor_to_host(t), dtype


def _default_dtype(a, where):
    if a.dtype.kind == "f":
        if a.dtype.itemsize > 4:
            raise ValueError(
                f"{where}: {a.dtype} input needs its dtype spelled out: pass dtype=\"float32\" "
                f"or dtype=\"bfloat16\" (a dump holds no {a.dtype}, and rounding it is the "
                f"caller's call)")
        return "float16" if a.dtype.itemsize == 2 else "float32"
    if a.dtype.kind in "iub" or a.dtype == object:
        return "int32"
    raise ValueError(f"{where}: cannot store {a.dtype} input; known dtypes: {', '.join(_DTYPES)}")


def _refuse_unconvertible(a, where, dtype):
    if a.dtype.kind not in "iufb":
        raise ValueError(f"{where}: cannot store {a.dtype} input as {dtype}")


def _checked_int32(a, where):
    """`a` as int32, or ValueError naming the first value int32 cannot hold and its index."""
    kind = a.dtype.kind
    if kind == "b" or (kind in "iu" and np.can_cast(a.dtype, np.int32)):
        return a
    if kind in "iu":
        if a.size == 0 or (a.min() >= _INT32_MIN and a.max() <= _INT32_MAX):
            return a
        bad = (a < _INT32_MIN) | (a > _INT32_MAX)
        what = "does not fit int32 (-2147483648..2147483647)"
    elif kind == "f":
        # Bounds as powers of two, exact in every float type (2**31 - 1 is not in float32).
        ok = np.isfinite(a) & (a == np.trunc(a)) & (a >= -2.0 ** 31) & (a < 2.0 ** 31)
        if ok.all():
            return a
        bad = ~ok
        what = "is not a whole number within int32"
    elif a.dtype == object:  # Python ints too large for int64 or uint64
        flat = a.reshape(-1)
        bad = np.array([not (isinstance(v, int) and _INT32_MIN <= v <= _INT32_MAX)
                        for v in flat.tolist()],
                       dtype=bool).reshape(a.shape)
        if not bad.any():
            return np.array(flat.tolist(), dtype=np.int32).reshape(a.shape)
        what = "is not an integer within int32"
    else:
        raise ValueError(f"{where}: cannot store {a.dtype} input as int32")
    first = int(np.flatnonzero(bad)[0])
    index = [int(i) for i in np.unravel_index(first, a.shape)]
    value = a.reshape(-1)[first]
    value = value.item() if hasattr(value, "item") else value
    raise ValueError(f"{where}: value {value!r} at index {index} {what}; "
                     f"{int(np.count_nonzero(bad))} of {a.size} values are refused: the writer "
                     f"does not truncate; narrow or clip them yourself")


class DumpWriter:
    """Writes one dump at `path`: built at `path + ".partial"`, renamed by close().

    Datasets get `order` in the order they are written, so write in execution order (the
    order the reference engine uses: input_ids, layers/<l>/{pre_attn, attn_out, pre_mlp,
    mlp_out, prefix}, output, bank, logits, taps/<k>, next_tokens, dispatch).

        with DumpWriter("run.h5", partition="0-16", backend="torch") as w:
            w.begin_forward(0, kind="prefill", first_position=0, tokens=len(ids))
            w.write("/forward/0/input_ids", np.array(ids, np.int32))
            w.write_layer(0, 3, "pre_attn", x)          # x's own dtype (float32 stays)
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

    def write(self, dataset_path, array, dtype=None, source_dtype=None):
        """Writes `array` at `dataset_path` ("/forward/0/logits"); returns the dataset.

        dtype: None (the default) stores the array in its own dtype: float32, float16, a
        torch bfloat16 tensor as bfloat16, integers as int32. "bfloat16", "float16",
        "float32" or "int32" convert: a float stored in a narrower float is rounded
        (narrowing, only when asked), and the dataset gets attribute `source_dtype` (the
        dtype it held, "float32" say), so every report says it was compared after
        rounding. `source_dtype` names that dtype for input already narrowed (bf16 bits
        made from float32). uint16 input as "bfloat16" is taken as bf16 bits. Values the
        dtype cannot hold are refused with ValueError (int64 beyond int32, fractions as
        int32), as is float64 without a dtype.
        """
        source = source_dtype or _narrowing_of(array, dtype)
        data, dtype = as_array(array, dtype, path=dataset_path)
        if dataset_path in self._file:
            raise ValueError(f"{dataset_path}: written twice")
        ds = self._file.create_dataset(dataset_path, data=data)
        ds.attrs["dtype"] = _encoding.string_attr(dtype)
        ds.attrs["order"] = np.int64(self._order)
        self._order += 1
        if self._digest:
            ds.attrs["digest"] = _encoding.string_attr(_encoding.digest_text(data))
        if source is not None:
            ds.attrs["source_dtype"] = _encoding.string_attr(source)
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

    def write_layer(self, forward, layer, site, tensor, dtype=None):
        """One per-layer tensor [T, H] in the engine's dtype (`write`'s dtype: None keeps
        it, and takes a uint16 array as bf16 bits; "bfloat16" to narrow): site is one of
        LAYER_SITES."""
        if site not in LAYER_SITES:
            raise ValueError(f"unknown layer site {site!r}; known: {', '.join(LAYER_SITES)}")
        return self.write(f"/forward/{int(forward)}/layers/{int(layer)}/{site}", tensor,
                          dtype=_activation_dtype(tensor, dtype))

    def write_taps(self, forward, taps, dtype=None):
        """Taps {capture id: [T, H]} at /forward/<f>/taps/<k>, ascending id, each in the
        engine's dtype (or `dtype`, as `write`)."""
        for k in sorted(taps):
            self.write(f"/forward/{int(forward)}/taps/{int(k)}", taps[k],
                       dtype=_activation_dtype(taps[k], dtype))

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
