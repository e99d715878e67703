"""Write splitcheck dumps (docs/dump-format.md) from Python.

A dump is one HDF5 file: root attributes that identify the run, and datasets under
/forward/<f>/... each carrying `dtype`, `order` (its place in execution order) and
`digest` ("xxh64:%016x" of its raw little-endian bytes). `splitcheck compare A B`
compares two such files bit for bit.

    with DumpWriter("run.h5", partition="0-32", backend="torch") as w:
        w.write("/forward/0/input_ids", np.array([1, 2, 3], dtype=np.int32))
        w.write("/forward/0/logits", logits_f32)
        w.write("/forward/0/layers/0/pre_attn", x, dtype="bfloat16")

Needs numpy, h5py and xxhash (Debian: python3-xxhash); PyTorch only for
record_forward_hooks().
"""

import json
import os

import h5py
import numpy as np
import xxhash

FORMAT = "splitcheck.dump"
FORMAT_VERSION = 1
DEFAULT_VOLATILE = "created,partition,producer,env"


def xxh64(data, seed=0):
    """XXH64 of `data` (bytes-like) through libxxhash; xxh64(b"") == 0xEF46DB3751D8E999."""
    view = memoryview(data)
    return xxhash.xxh64_intdigest(view.tobytes() if view.nbytes == 0 else view.cast("B"), seed=seed)


def to_bf16_bits(array):
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even, NaN kept quiet."""
    f = np.ascontiguousarray(array, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


class DumpWriter:
    """Writes one dump at `path`: built at `path + ".partial"`, renamed by close().

    Datasets get `order` in the order write() is called, so call it in execution order
    (the order the reference engine uses: input_ids, layers/<l>/{pre_attn, attn_out,
    pre_mlp, mlp_out, prefix}, output, bank, logits, taps/<k>, next_tokens, dispatch).
    """

    def __init__(self, path, scenario="", scenario_sha256="", model_sha256="",
                 partition="", backend="python", producer=None, env=None, level="layer",
                 created="", digest=True):
        self.path = os.fspath(path)
        self._partial = self.path + ".partial"
        self._digest = digest
        self._order = 0
        self._file = h5py.File(self._partial, "w")
        attrs = self._file.attrs
        attrs["format"] = _string(FORMAT)
        attrs["format_version"] = np.int64(FORMAT_VERSION)
        producer = producer or {"name": "splitcheck_dump.py", "version": "1"}
        for name, value in (("scenario", scenario), ("scenario_sha256", scenario_sha256),
                            ("model_sha256", model_sha256), ("partition", partition),
                            ("backend", backend), ("producer", json.dumps(producer)),
                            ("env", json.dumps(env or {})), ("level", level),
                            ("created", created), ("volatile", DEFAULT_VOLATILE)):
            attrs[name] = _string(value)

    def write(self, dataset_path, array, dtype=None):
        """Writes `array` at `dataset_path` ("/forward/0/logits").

        dtype: "bfloat16" (float input is rounded; uint16 input is taken as bf16 bits),
        "float32" or "int32"; by default float -> float32, integer -> int32.
        """
        a = np.asarray(array)
        if dtype is None:
            dtype = "float32" if np.issubdtype(a.dtype, np.floating) else "int32"
        if dtype == "bfloat16":
            data = a if a.dtype == np.uint16 else to_bf16_bits(a)
            data = np.ascontiguousarray(data, dtype="<u2")
        elif dtype == "float32":
            data = np.ascontiguousarray(a, dtype="<f4")
        elif dtype == "int32":
            data = np.ascontiguousarray(a, dtype="<i4")
        else:
            raise ValueError(f"{dataset_path}: unsupported dtype {dtype!r}")
        if dataset_path in self._file:
            raise ValueError(f"{dataset_path}: written twice")
        ds = self._file.create_dataset(dataset_path, data=data)
        ds.attrs["dtype"] = _string(dtype)
        ds.attrs["order"] = np.int64(self._order)
        self._order += 1
        if self._digest:
            ds.attrs["digest"] = _string("xxh64:%016x" % xxh64(data))
        return ds

    def set_attr(self, object_path, name, value):
        """Sets an attribute on a group or dataset, creating the group if needed."""
        obj = self._file.require_group(object_path) if object_path not in self._file \
            else self._file[object_path]
        obj.attrs[name] = _string(value) if isinstance(value, str) else value

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


def _string(value):
    """A fixed-length UTF-8 string attribute, as the C++ writer stores them."""
    raw = str(value).encode("utf-8")
    return np.array(raw, dtype=h5py.string_dtype("utf-8", max(len(raw), 1)))


def record_forward_hooks(model, writer, forward_index, modules=None):
    """Registers forward hooks that record each submodule's input and output as bf16.

    `modules` is a list of (name, module) pairs (default: model.named_children() that
    have parameters, i.e. the layers). Each call of a hooked module writes
    /forward/<forward_index>/layers/<i>/pre_attn (its first input) and .../mlp_out (its
    output) in call order. Returns the hook handles; call .remove() on each when done.
    """
    import torch  # noqa: F401  (optional dependency)

    if modules is None:
        modules = [(n, m) for n, m in model.named_children()
                   if any(True for _ in m.parameters())]
    handles = []
    for i, (_, module) in enumerate(modules):
        def hook(mod, inputs, output, i=i):
            prefix = f"/forward/{forward_index}/layers/{i}/"
            x = inputs[0] if isinstance(inputs, tuple) else inputs
            y = output[0] if isinstance(output, tuple) else output
            writer.write(prefix + "pre_attn", _bf16_bits(x), dtype="bfloat16")
            writer.write(prefix + "mlp_out", _bf16_bits(y), dtype="bfloat16")
        handles.append(module.register_forward_hook(hook))
    return handles


def _bf16_bits(tensor):
    """A torch tensor as bf16 bit patterns [T, H] (uint16), flattening leading axes."""
    import torch

    t = tensor.detach().to("cpu").to(torch.bfloat16).contiguous()
    if t.dim() > 2:
        t = t.reshape(-1, t.shape[-1])
    return t.view(torch.int16).numpy().view(np.uint16)
