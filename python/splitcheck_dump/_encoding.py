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


# float32 values per block of to_bf16_bits: 1 MiB in, 512 KiB out and a 1 MiB scratch
# buffer, so every pass over a block after the first reads it from cache.
_BF16_BLOCK = 1 << 18


def to_bf16_bits(array):
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even; a NaN keeps
    its sign and the top bits of its payload and is made quiet (bit 6 set), so it never
    becomes Inf: kernels/bf16.h's to_bf16, value for value. Other input is first converted
    to float32 (numpy's rounding); a torch tensor is converted on its own device and
    copied to the host once (`torch_bf16_bits`, `tensor_to_host`).

    Runs at memory speed: u + 0x7FFF + ((u >> 16) & 1) in uint32, in place, one cache-sized
    block at a time, NaNs handled only in blocks that hold one.
    """
    if _is_tensor(array) and array.device.type != "cpu":
        return tensor_to_host(torch_bf16_bits(array)).view(np.uint16)
    if _is_tensor(array):
        array = array.detach().numpy()
    f = np.ascontiguousarray(array, dtype=np.float32)
    out = np.empty(f.shape, dtype=np.uint16)
    values = f.reshape(-1)
    u = values.view(np.uint32)
    bits = out.reshape(-1)
    scratch = np.empty(min(_BF16_BLOCK, u.size), dtype=np.uint32)
    for i in range(0, u.size, _BF16_BLOCK):
        j = min(i + _BF16_BLOCK, u.size)
        ub, t = u[i:j], scratch[:j - i]
        np.right_shift(ub, 16, out=t)
        np.bitwise_and(t, 1, out=t)
        np.add(t, 0x7FFF, out=t)
        np.add(t, ub, out=t)  # no overflow below 0xFF808000: only NaNs wrap, fixed below
        np.right_shift(t, 16, out=t)
        np.copyto(bits[i:j], t, casting="unsafe")
        if np.isnan(np.minimum.reduce(values[i:j])):  # min propagates NaN: one cheap pass
            nan = np.isnan(values[i:j])
            bits[i:j][nan] = ((ub[nan] >> 16) | 0x40).astype(np.uint16)
    return out


# float32 values per chunk of torch_bf16_bits: bounds its scratch on the device (about
# 13 bytes a value) to about 200 MiB.
_TORCH_BF16_CHUNK = 1 << 24


def torch_bf16_bits(tensor):
    """A torch tensor -> its bf16 bit patterns as an int16 tensor of the same shape on the
    same device, by to_bf16_bits's integer formula in int32 (bit-identical on any device).

    Not torch's `.to(torch.bfloat16)`: that rounds to nearest even too, but makes every NaN
    one canonical pattern (0x7FC0 or 0xFFFF on the CPU depending on the code path, 0x7FFF
    on CUDA), dropping the sign and payload that kernels/bf16.h keeps.
    """
    import torch

    t = tensor.detach()
    if t.dtype != torch.float32:
        t = t.to(torch.float32)  # what to_bf16_bits does to other input
    t = t.contiguous().reshape(-1)
    u = t.view(torch.int32)
    out = torch.empty(t.shape, dtype=torch.int16, device=t.device)
    for i in range(0, t.numel(), _TORCH_BF16_CHUNK):
        ub, fb = u[i:i + _TORCH_BF16_CHUNK], t[i:i + _TORCH_BF16_CHUNK]
        nan = torch.isnan(fb)
        r = ub.masked_fill(nan, 0)  # NaN lanes would overflow int32; they are set below
        lsb = torch.bitwise_and(r >> 16, 1)
        r += lsb
        r += 0x7FFF
        r >>= 16
        quiet = torch.bitwise_or(ub >> 16, 0x40, out=lsb)
        out[i:i + _TORCH_BF16_CHUNK] = torch.where(nan, quiet, r)  # keeps the low 16 bits
    return out.view(tensor.shape)


def tensor_to_host(tensor):
    """A torch tensor's values as a numpy array, copied off its device once: a CUDA tensor
    into pinned host memory with non_blocking (then waited for), a CPU tensor viewed where
    it is contiguous."""
    import torch

    t = tensor.detach()
    if t.device.type == "cpu":
        return t.contiguous().numpy()
    if t.device.type != "cuda":
        return t.to("cpu").numpy()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    torch.cuda.current_stream(t.device).synchronize()
    return host.numpy()


def _is_tensor(value):
    """A torch tensor, told without importing torch."""
    return hasattr(value, "detach") and hasattr(value, "device")


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
