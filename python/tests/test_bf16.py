"""The bf16 conversion, bit for bit against the one it replaced (bench_writer's
_to_bf16_bits_reference, itself kernels/bf16.h's to_bf16): every sign and exponent, every
tie, Inf, zeros, subnormals, NaNs with their payloads, millions of random patterns, block
edges; the torch path on the tensor's device; digests that do not copy."""

import tracemalloc

import numpy as np
import pytest

import splitcheck_dump as sd
from bench_writer import _to_bf16_bits_reference
from splitcheck_dump import _encoding

RNG = np.random.default_rng(53)


def floats(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def patterns():
    """About 5.5 million uint32 patterns that cover every class of input."""
    sign_exp = np.arange(512, dtype=np.uint32) << 23  # every sign and exponent
    mantissa = RNG.integers(0, 1 << 23, size=(512, 2048), dtype=np.uint32)
    special = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x17FFF, 0x18000,
                        0x18001, 0x400000, 0x7F8000, 0x7FFFFF, 0x7F7FFF, 0x7FFFFE],
                       dtype=np.uint32)
    hi7 = np.arange(128, dtype=np.uint32) << 16  # the mantissa bits bf16 keeps
    ties = np.concatenate([hi7 | 0x8000, (hi7 | 0x8000) - 1, (hi7 | 0x8000) + 1, hi7])
    return np.concatenate([
        (sign_exp[:, None] | mantissa).ravel(),
        (sign_exp[:, None] | special).ravel(),
        (sign_exp[:, None] | ties).ravel(),  # 65,536 exact ties and their neighbours
        RNG.integers(0, 1 << 32, size=4_000_000, dtype=np.uint32),
    ])


ALL = floats(patterns())


def test_bit_identical_to_the_reference_on_millions_of_patterns():
    assert ALL.size > 5_000_000
    got = sd.to_bf16_bits(ALL)
    want = _to_bf16_bits_reference(ALL)
    assert got.dtype == want.dtype == np.uint16
    mismatch = np.flatnonzero(got != want)
    assert mismatch.size == 0, [(hex(ALL.view(np.uint32)[i]), hex(got[i]), hex(want[i]))
                                for i in mismatch[:5]]


def test_pinned_values():
    cases = {
        0x3F808000: 0x3F80,  # 1 + 2^-8, a tie: to even (down)
        0x3F818000: 0x3F82,  # a tie with an odd kept bit: to even (up)
        0x3F808001: 0x3F81,  # just above a tie: up
        0x00000000: 0x0000, 0x80000000: 0x8000,  # +-0
        0x7F800000: 0x7F80, 0xFF800000: 0xFF80,  # +-Inf
        0x7F7FFFFF: 0x7F80,  # the largest float32 rounds to Inf, as RNE says
        0x00000001: 0x0000, 0x00008000: 0x0000, 0x00018000: 0x0002,  # subnormals
        0x807FFFFF: 0x8080,  # the largest negative subnormal rounds up into the normals
        0x7FC00000: 0x7FC0, 0xFFC00000: 0xFFC0,  # quiet NaNs keep their sign
        0x7F800001: 0x7FC0,  # a payload only in the low half: quieted, never Inf
        0x7F81FFFF: 0x7FC1, 0xFF80FFFF: 0xFFC0, 0x7FFFFFFF: 0x7FFF, 0xFFFFFFFF: 0xFFFF,
        0xFFA50000: 0xFFE5,  # a signalling NaN's payload top bits stay, quieted
    }
    got = sd.to_bf16_bits(floats(list(cases)))
    assert [hex(v) for v in got] == [hex(v) for v in cases.values()]


def test_nan_anywhere_in_a_block_and_across_block_edges(monkeypatch):
    # One NaN at every position of short arrays (SIMD lanes, tails), with -Inf beside it
    # (the per-block NaN check is a min reduction, which must still see the NaN).
    for n in range(1, 70):
        base = RNG.standard_normal(n).astype(np.float32)
        base[0] = -np.inf
        for k in range(n):
            x = base.copy()
            x.view(np.uint32)[k] = 0xFF812345
            assert np.array_equal(sd.to_bf16_bits(x), _to_bf16_bits_reference(x)), (n, k)
    monkeypatch.setattr(_encoding, "_BF16_BLOCK", 1000)
    for n in (999, 1000, 1001, 2999, 3001):
        x = RNG.standard_normal(n).astype(np.float32)
        x.view(np.uint32)[[0, 999 % n, n - 1]] = [0x7F800001, 0xFFC0ABCD, 0x7FBFFFFF]
        assert np.array_equal(sd.to_bf16_bits(x), _to_bf16_bits_reference(x)), n
    y = floats(RNG.integers(0x7F800001, 0x7FFFFFFF, size=5000, dtype=np.uint32))  # all NaN
    assert np.array_equal(sd.to_bf16_bits(y), _to_bf16_bits_reference(y))


@pytest.mark.parametrize("make", [
    lambda: np.float32(1.5),                                        # 0-d: shape (1,), as before
    lambda: np.zeros((0, 4), np.float32),                           # empty
    lambda: ALL[:3 * 4 * 50].reshape(3, 4, 50),                     # n-d
    lambda: ALL[:20000].reshape(100, 200)[:, ::3],                  # not contiguous
    lambda: ALL[:4000].astype(">f4"),                               # big-endian
    lambda: np.linspace(-3, 3, 1001),                               # float64: via float32
    lambda: [1.0, 2.5, float("nan"), -0.0],                         # a list
    lambda: np.arange(-50, 50, dtype=np.int64) * 99991,             # integers
])
def test_shapes_and_input_types_as_before(make):
    got, want = sd.to_bf16_bits(make()), _to_bf16_bits_reference(make())
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want)


def test_torch_conversion_on_the_tensors_device_is_bit_identical(monkeypatch):
    """The device-side path, run on CPU tensors (CUDA tensors take the same torch ops)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this Python")
    bits = _encoding.torch_bf16_bits(torch.from_numpy(ALL))
    assert bits.dtype == torch.int16 and bits.shape == ALL.shape
    assert np.array_equal(bits.numpy().view(np.uint16), _to_bf16_bits_reference(ALL))
    monkeypatch.setattr(_encoding, "_TORCH_BF16_CHUNK", 1000)  # chunk edges, odd last chunk
    x = ALL[:12345].reshape(5, 2469)
    got = _encoding.torch_bf16_bits(torch.from_numpy(x)).numpy().view(np.uint16)
    assert got.shape == (5, 2469)
    assert np.array_equal(got, _to_bf16_bits_reference(x))
    t64 = torch.linspace(-3, 3, 1001, dtype=torch.float64)  # via float32, as to_bf16_bits
    assert np.array_equal(_encoding.torch_bf16_bits(t64).numpy().view(np.uint16),
                          _to_bf16_bits_reference(t64.numpy()))


def test_tensors_through_the_writer_and_the_hooks():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this Python")
    x = torch.from_numpy(ALL[:6000].reshape(2, 3, 1000).copy())
    want = _to_bf16_bits_reference(x.numpy())
    data, dtype = sd.as_array(x, "bfloat16")
    assert dtype == "bfloat16" and np.array_equal(data, want)
    # hooks.bf16_bits: the same bits (NaN payloads included), leading axes flattened
    assert np.array_equal(sd.bf16_bits(x), want.reshape(6, 1000))
    assert np.array_equal(sd.bf16_bits(x.to(torch.bfloat16)),
                          x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
                          .reshape(6, 1000))
    # a CPU tensor crosses to numpy without a copy
    host = _encoding.tensor_to_host(x)
    assert np.shares_memory(host, x.numpy())
    assert sd.as_array(x.requires_grad_(), "float32")[0].tobytes() == x.detach().numpy().tobytes()


def test_cuda_tensors_convert_on_the_device_and_cross_once():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this Python")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the on-device conversion and the pinned, non_blocking "
                    "copy are checked on CPU tensors only")
    x = torch.from_numpy(ALL[:1_000_000].copy())
    want = _to_bf16_bits_reference(x.numpy())
    data, dtype = sd.as_array(x.cuda(), "bfloat16")
    assert dtype == "bfloat16" and np.array_equal(data, want)
    assert np.array_equal(sd.to_bf16_bits(x.cuda()), want)
    assert np.array_equal(sd.bf16_bits(x.cuda().view(1000, 1000)), want.reshape(1000, 1000))
    host = _encoding.tensor_to_host(x.cuda())
    assert np.array_equal(host.view(np.uint32), x.numpy().view(np.uint32))  # NaNs too
    assert torch.from_numpy(host).is_pinned()
    with pytest.raises(ValueError, match="float64 input needs its dtype"):
        sd.as_array(x.double().cuda())


def test_digests_do_not_copy_large_arrays(tmp_path):
    a = np.arange(8 << 20, dtype=np.uint32)  # 32 MiB
    tracemalloc.start()
    try:
        text = _encoding.digest_text(a)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"digest_text allocated {peak} bytes for a 32 MiB array"
    assert text == "xxh3:%016x" % sd.xxh3_64(a.tobytes())
    # a non-contiguous array is hashed as its contiguous copy, as written
    assert _encoding.digest_text(a[::2]) == "xxh3:%016x" % sd.xxh3_64(a[::2].tobytes())


def test_written_bf16_reads_back_as_the_reference(tmp_path):
    x = ALL[:30000].reshape(30, 1000)
    path = tmp_path / "b.h5"
    with sd.DumpWriter(path) as w:
        w.write_layer(0, 0, "pre_attn", x, dtype="bfloat16")
    with sd.DumpReader(path) as r:
        assert np.array_equal(r.read("/forward/0/layers/0/pre_attn"),
                              _to_bf16_bits_reference(x))
        assert r.info("/forward/0/layers/0/pre_attn").source_dtype == "float32"


def test_every_float_dtype_is_stored_as_computed_and_narrowing_is_named(tmp_path):
    """float32 keeps its bits (a 1-ULP pair stays 1 ULP apart), float16 and bf16 theirs;
    only a narrower dtype asked for records source_dtype; a 5 MiB float32 dataset reads back
    bit for bit with its digest checked."""
    torch = pytest.importorskip("torch")
    f32 = np.array([[1.0, np.nextafter(np.float32(1.0), np.float32(2.0))]], np.float32)
    f16 = np.array([[0.1, -65504.0, 6e-8]], np.float16)
    bf = torch.tensor([[1.5, -3.0e4]], dtype=torch.bfloat16)
    big = ALL[: (5 << 20) // 4].copy()
    path = tmp_path / "d.h5"
    with sd.DumpWriter(path) as w:
        w.write_layer(0, 0, "pre_attn", f32)
        w.write_layer(0, 0, "attn_out", f16)
        w.write_layer(0, 0, "pre_mlp", bf)
        w.write_layer(0, 0, "mlp_out", f32, dtype="bfloat16")
        w.write_layer(0, 0, "prefix", bf, dtype="float16")
        w.write("/forward/0/output", big)
    with sd.DumpReader(path) as r:
        got = {d.path.rsplit("/", 1)[1]: (d.dtype, d.source_dtype) for d in r.datasets}
        assert got == {"pre_attn": ("float32", ""), "attn_out": ("float16", ""),
                       "pre_mlp": ("bfloat16", ""), "mlp_out": ("bfloat16", "float32"),
                       "prefix": ("float16", "bfloat16"), "output": ("float32", "")}
        assert r.read("/forward/0/layers/0/pre_attn").view(np.uint32).tolist() == \
            [[0x3F800000, 0x3F800001]]
        assert r.read("/forward/0/layers/0/attn_out").view(np.uint16).tolist() == \
            f16.view(np.uint16).tolist()
        assert r.read("/forward/0/layers/0/pre_mlp").tolist() == \
            bf.view(torch.int16).numpy().view(np.uint16).tolist()
        assert np.array_equal(r.read("/forward/0/output").view(np.uint32), big.view(np.uint32))
