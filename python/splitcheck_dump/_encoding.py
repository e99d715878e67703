"""How values are laid down in a dump: digests, bf16 bit patterns, string attributes."""

import h5py
import numpy as np
import xxhash


def xxh64(data, seed=0):
    """XXH64 of `data` (bytes-like) through libxxhash; xxh64(b"") == 0xEF46DB3751D8E999."""
    view = memoryview(data)
    return xxhash.xxh64_intdigest(view.tobytes() if view.nbytes == 0 else view.cast("B"),
                                  seed=seed)


def xxh3_64(data):
    """XXH3-64 of `data` (bytes-like) through libxxhash; xxh3_64(b"") == 0x2D06800538D394C2."""
    view = memoryview(data)
    return xxhash.xxh3_64_intdigest(view.tobytes() if view.nbytes == 0 else view.cast("B"))


def digest_text(array, format_version=2):
    """The `digest` attribute of a dataset holding `array`, as format `format_version` writes
    it: "xxh3:%016x" of its bytes (version 2), "xxh64:%016x" (version 1)."""
    data = np.ascontiguousarray(array)
    if format_version == 1:
        return "xxh64:%016x" % xxh64(data)
    return "xxh3:%016x" % xxh3_64(data)


def to_bf16_bits(array):
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even, NaN kept quiet."""
    f = np.ascontiguousarray(array, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def from_bf16_bits(bits):
    """bfloat16 bit patterns (uint16) -> the float32 values they denote, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def string_attr(value):
    """A fixed-length UTF-8 string attribute, as the C++ writer stores them."""
    raw = str(value).encode("utf-8")
    return np.array(raw, dtype=h5py.string_dtype("utf-8", max(len(raw), 1)))


def attr_value(value):
    """An attribute read by h5py as a plain Python value (str, int, float or list)."""
    if isinstance(value, bytes):
        return value.decode("utf-8").rstrip(" ")
    if isinstance(value, np.ndarray):
        if value.shape == ():
            return attr_value(value[()])
        return [attr_value(v) for v in value.tolist()]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, str):
        return value.rstrip(" ")
    return value
