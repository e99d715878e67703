"""TensorRecorder: what it returns equals as_array's conversion of the same values bit
for bit, in the order kept, on the CPU and (where there is one) on a GPU, where a tensor
updated in place after its flush is recorded as it was, and one updated between keep and
the flush is refused."""

import numpy as np
import pytest

import splitcheck_dump as sd

torch = pytest.importorskip("torch")


def special_floats():
    """Random values and the awkward ones: ties, Inf, zeros, subnormals, NaNs with payloads
    and signs (one of each class, then 4096 random patterns)."""
    bits = np.array([0x3F808000, 0x3F818000, 0x7F800000, 0xFF800000, 0, 0x80000000, 1,
                     0x7FC00001, 0xFFA12345, 0x7F812345, 0x7F7FFFFF], dtype=np.uint32)
    rng = np.random.default_rng(53)
    return np.concatenate([bits, rng.integers(0, 1 << 32, 4096, dtype=np.uint32)]).view(
        np.float32)


def records(device):
    """(path, value, dtype asked, dtype stored, source dtype recorded) of every kind the
    recorder handles, on `device`; dtype None keeps the tensor's own."""
    x = torch.from_numpy(special_floats()).to(device)
    return [
        ("/forward/0/a", x, "bfloat16", "bfloat16", "float32"),
        ("/forward/0/ids", torch.arange(7, dtype=torch.int32, device=device), "int32", "int32",
         None),
        ("/forward/0/logits", x[:64].reshape(8, 8), "float32", "float32", None),
        ("/forward/0/h", x[:4096].to(torch.float16).reshape(-1, 2)[:5], "bfloat16", "bfloat16",
         "float16"),
        ("/forward/0/b", x.to(torch.bfloat16), "bfloat16", "bfloat16", None),
        ("/forward/0/list", [1, 2, 3], "int32", "int32", None),
        ("/forward/0/own32", x[:128].reshape(4, 32), None, "float32", None),
        ("/forward/0/own16", x[:128].to(torch.float16), None, "float16", None),
        ("/forward/0/ownbf", x[:128].to(torch.bfloat16), None, "bfloat16", None),
        ("/forward/1/wide", torch.arange(4, dtype=torch.int64, device=device), "int32", "int32",
         None),
        ("/forward/1/f64", x[:16].double(), "float32", "float32", "float64"),
    ]


def check_against_as_array(device):
    rec = sd.TensorRecorder()
    want = []
    for i, (path, value, dtype, stored, source) in enumerate(records(device)):
        want.append((path, sd.as_array(value, stored, path)[0], stored, source))
        rec.keep(path, value, dtype)
        if i == 4:
            rec.flush()  # two batches
    got = rec.take()
    assert [(p, d, s) for p, _, d, s in got] == [(p, d, s) for p, _, d, s in want]
    for (path, g, _, _), (_, w, _, _) in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, path
        assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), path
    assert rec.take() == []


def test_float32_is_kept_as_float32_bit_for_bit():
    """The engine's own bits: a float32 value one ULP from its neighbour keeps that ULP."""
    x = torch.tensor([1.0, 1.0 + 2.0 ** -23], dtype=torch.float32)
    rec = sd.TensorRecorder()
    rec.keep("/forward/0/layers/0/attn_out", x)
    [(_, got, dtype, source)] = rec.take()
    assert (dtype, source) == ("float32", None)
    assert got.view(np.uint32).tolist() == [0x3F800000, 0x3F800001]


def test_cpu_values_equal_as_array():
    check_against_as_array("cpu")


def test_unknown_dtype_and_unholdable_values_are_refused():
    rec = sd.TensorRecorder()
    with pytest.raises(ValueError, match="/x: unsupported dtype 'float8'"):
        rec.keep("/x", torch.zeros(2), "float8")
    with pytest.raises(ValueError, match="/y"):
        rec.keep("/y", torch.tensor([2 ** 40]), "int32")


def test_cuda_values_equal_as_array_and_are_kept_as_they_were():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the device batch is not exercised here")
    check_against_as_array("cuda")
    rec = sd.TensorRecorder()
    x = torch.ones(1000, device="cuda")
    rec.keep("/forward/0/x", x, "bfloat16")
    rec.flush()
    x.mul_(3)  # after the flush: the record holds the ones
    [(_, got, _, _)] = rec.take()
    assert np.array_equal(got, sd.to_bf16_bits(np.ones(1000, np.float32)))
    rec.keep("/forward/1/x", x[:10], "bfloat16")
    x.add_(1)  # after keep, before the flush: refused, never recorded as 4s
    with pytest.raises(ValueError, match="/forward/1/x: the tensor was updated in place"):
        rec.flush()


class _DoneEvent:
    """A CUDA event that is done as soon as recorded (the CPU's copies are synchronous)."""

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


def test_the_batch_path_on_the_cpu_with_only_the_device_parts_stood_in(monkeypatch):
    """Where there is no GPU: CPU tensors take the device batch (join, one conversion per
    dtype, slices of the arena, offsets back to each record), with plain memory for pinned
    memory and an event that is done at once; everything else is the recorder's own code."""
    from splitcheck_dump import recorder

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the real batch path runs in the test above")
    real_empty = torch.empty
    monkeypatch.setattr(recorder, "_deferred", lambda v: isinstance(v, torch.Tensor))
    monkeypatch.setattr(recorder, "_CLASSIFIED", {})  # decided by the stand-in below
    monkeypatch.setattr(recorder, "_device_kind", lambda v, d: recorder._kind_of(v, d))
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    monkeypatch.setattr(torch.cuda, "Event", _DoneEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(sd.TensorRecorder, "_ARENA_BYTES", 1024)  # several chunks
    check_against_as_array("cpu")
    rec = sd.TensorRecorder()
    x = torch.ones(8)
    rec.keep("/forward/2/x", x, "bfloat16")
    x.add_(1)
    with pytest.raises(ValueError, match="/forward/2/x: the tensor was updated in place"):
        rec.flush()
    rec = sd.TensorRecorder()
    rec.keep("/forward/3/z", torch.zeros(2), "float8")  # a device tensor is decided at the flush
    with pytest.raises(ValueError, match="/forward/3/z: unsupported dtype 'float8'"):
        rec.flush()


def test_take_by_forward_groups_in_the_order_kept():
    rec = sd.TensorRecorder()
    for path, value, dtype, _, _ in records("cpu"):
        rec.keep(path, value, dtype)
    got = rec.take_by_forward()
    assert sorted(got) == [0, 1]
    assert [r[0] for r in got[0]] == [r[0] for r in records("cpu") if "/0/" in r[0]]
    assert [r[0] for r in got[1]] == ["/forward/1/wide", "/forward/1/f64"]
