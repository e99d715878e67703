"""DumpReader: opens a dump (from C++ or Python), refusing formats it does not know.

    with DumpReader("run.h5") as r:
        r.attrs["partition"]                 # root attributes as Python values
        for d in r.datasets: ...             # DatasetInfo in execution order
        x = r.read_float("/forward/0/layers/3/pre_attn")   # bf16 -> float32
        trace = r.dispatch(0)                # DispatchTrace with op/variant names
        r.stages()                           # {0: {"layer_begin": 0, ...}, ...}
        r.verify()                           # every digest, order 0..n-1 once each

Every read checks the dataset's stored digest against its bytes (a mismatch raises
CorruptDump), as the C++ reader does.
"""

import dataclasses

import h5py
import numpy as np

from . import _encoding
from .dispatch import DispatchTrace
from .version import FORMAT, SUPPORTED_FORMAT_VERSIONS

_STORED = {"bfloat16": np.dtype("<u2"), "float16": np.dtype("float16"),
           "float32": np.dtype("float32"), "int32": np.dtype("int32")}


class FormatError(ValueError):
    """The file is not a dump this package understands (names the file and the place)."""


class UnsupportedFormatVersion(FormatError):
    """The file's format_version is one this package does not know."""


class CorruptDump(FormatError):
    """A dataset's bytes do not hash to its stored digest."""


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    path: str
    dtype: str
    shape: tuple
    order: int
    digest: str
    # The dtype the engine computed the values in, when the writer narrowed them (its
    # `source_dtype` attribute: "float32" for float32 stored as bf16); "" when stored as
    # computed.
    source_dtype: str = ""


class DumpReader:
    """A dump opened for reading; refuses wrong `format` or unknown `format_version`."""

    def __init__(self, path):
        self.path = str(path)
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as e:
            raise FormatError(f"{self.path}: not an HDF5 file ({e})") from None
        try:
            self.attrs = {k: _encoding.attr_value(v) for k, v in self._file.attrs.items()}
            if self.attrs.get("format") != FORMAT:
                raise FormatError(f"{self.path}: root attribute format is "
                                  f"{self.attrs.get('format')!r}, not {FORMAT!r}")
            version = self.attrs.get("format_version")
            if not isinstance(version, int):
                raise FormatError(f"{self.path}: root attribute format_version missing or "
                                  "not an integer")
            if version not in SUPPORTED_FORMAT_VERSIONS:
                raise UnsupportedFormatVersion(
                    f"{self.path}: unsupported format_version {version} (this reader knows "
                    f"{', '.join(map(str, SUPPORTED_FORMAT_VERSIONS))})")
            self.format_version = version
            self.datasets = self._scan()
        except BaseException:
            self._file.close()
            raise
        self._by_path = {d.path: d for d in self.datasets}

    def _scan(self):
        found = []

        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            path = "/" + name
            attrs = obj.attrs
            dtype = _encoding.attr_value(attrs["dtype"]) if "dtype" in attrs else None
            stored = obj.dtype
            if dtype is None:
                dtype = {("f", 4): "float32", ("f", 2): "float16",
                         ("i", 4): "int32"}.get((stored.kind, stored.itemsize))
            if dtype not in _STORED or stored.itemsize != _STORED[dtype].itemsize or \
                    stored.kind != _STORED[dtype].kind:
                raise FormatError(f"{self.path}: {path}: stored type {stored} with dtype "
                                  f"{dtype!r} is not one of bfloat16 (uint16), float16, float32, "
                                  f"int32")
            if "order" not in attrs:
                raise FormatError(f"{self.path}: {path}: no order attribute")
            digest = _encoding.attr_value(attrs["digest"]) if "digest" in attrs else ""
            source = _encoding.attr_value(attrs["source_dtype"]) \
                if "source_dtype" in attrs else ""
            found.append(DatasetInfo(path, dtype, tuple(obj.shape),
                                     int(_encoding.attr_value(attrs["order"])), digest, source))

        self._file.visititems(visit)
        found.sort(key=lambda d: (d.order, d.path))
        return found

    def __contains__(self, path):
        return path in self._by_path

    def info(self, path):
        return self._by_path[path]

    def read(self, path, verify=True):
        """The dataset's stored values (bf16 as uint16 bit patterns), digest-checked."""
        info = self._by_path.get(path)
        if info is None:
            raise KeyError(f"{self.path}: no dataset {path}")
        data = np.ascontiguousarray(self._file[path][()]).astype(
            _STORED[info.dtype].newbyteorder("<"), copy=False)
        if verify and info.digest and _encoding.digest_text(data, self.format_version) != info.digest:
            raise CorruptDump(f"{self.path}: {path}: bytes hash to "
                              f"{_encoding.digest_text(data, self.format_version)}, stored digest {info.digest}")
        return data

    def read_float(self, path):
        """The dataset as float32 (bf16 and float16 widened exactly)."""
        data = self.read(path)
        return _encoding.from_bf16_bits(data) if self._by_path[path].dtype == "bfloat16" \
            else data.astype(np.float32)

    def object_attrs(self, object_path):
        """A group's or dataset's attributes as Python values."""
        return {k: _encoding.attr_value(v) for k, v in self._file[object_path].attrs.items()}

    def forwards(self):
        """Forward indices present, ascending."""
        return sorted(int(k) for k in self._file["forward"].keys()) \
            if "forward" in self._file else []

    def dispatch(self, forward):
        """Forward f's dispatch trace with op/variant names and each event's stage."""
        path = f"/forward/{int(forward)}/dispatch"
        table = self.read(path)
        stage_path = f"/stage_trace/{int(forward)}"
        stages = self.read(stage_path) if stage_path in self else None
        kernels = None
        names = self.object_attrs(path).get("kernels")
        if names:
            kernels = [tuple(n.split(".", 1)) for n in names.split(",")]
        return DispatchTrace.from_table(table, stages, kernels)

    def stages(self):
        """{stage index: attributes of /stages/<s>}."""
        if "stages" not in self._file:
            return {}
        return {int(s): self.object_attrs(f"/stages/{s}") for s in self._file["stages"]}

    def spec(self):
        """/spec's attributes, or {} when the dump has no /spec."""
        return self.object_attrs("/spec") if "spec" in self._file else {}

    def verify(self):
        """Checks what `splitcheck verify-dump` checks of the datasets: every dataset has a
        digest its bytes hash to, and `order` numbers them 0..n-1 once each."""
        orders = sorted(d.order for d in self.datasets)
        if orders != list(range(len(orders))):
            raise FormatError(f"{self.path}: dataset orders are not 0..{len(orders) - 1} "
                              "once each")
        for d in self.datasets:
            if not d.digest:
                raise FormatError(f"{self.path}: {d.path}: no digest")
            self.read(d.path)
        return True

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
