"""The writer refuses values a dataset's dtype cannot hold, naming the dataset, the first
offending value and its index, instead of storing 2**40 as 0 or narrowing float64 quietly."""

import numpy as np
import pytest

import splitcheck_dump as sd


@pytest.fixture
def writer(tmp_path):
    with sd.DumpWriter(tmp_path / "r.h5") as w:
        yield w


@pytest.mark.parametrize("value, shown, index", [
    (np.array([1, 2 ** 40, 3], np.int64), "1099511627776", "[1]"),
    ([1, 2, -2 ** 31 - 1], "-2147483649", "[2]"),                   # Python ints
    (np.array([[0, 1], [2 ** 31, 0]], np.int64), "2147483648", "[1, 0]"),
    (np.array([2 ** 63], np.uint64), "9223372036854775808", "[0]"),
    (np.array([7, 2 ** 32], np.uint64), "4294967296", "[1]"),
    ([5, 2 ** 70], "1180591620717411303424", "[1]"),                # beyond int64: object
    (2 ** 40, "1099511627776", "[]"),                                # a scalar
])
def test_int32_overflow_is_refused_naming_path_value_and_index(writer, value, shown, index):
    for dtype in (None, "int32"):
        with pytest.raises(ValueError) as e:
            writer.write("/forward/0/input_ids", value, dtype=dtype)
        text = str(e.value)
        assert text.startswith("/forward/0/input_ids: value " + shown), text
        assert f"at index {index} " in text and "does not truncate" in text
    assert "/forward/0/input_ids" not in writer._file  # nothing half-written


def test_uint32_beyond_int32_and_fractional_floats_are_refused(writer):
    with pytest.raises(ValueError, match=r"/ids: value 3000000000 at index \[2\] does not fit"):
        writer.write("/ids", np.array([0, 1, 3_000_000_000], np.uint32))
    with pytest.raises(ValueError, match=r"/ids: value 2.5 at index \[1\] is not a whole number"):
        writer.write("/ids", np.array([1.0, 2.5, 3.5], np.float32), dtype="int32")
    with pytest.raises(ValueError, match=r"value 2147483648.0 at index \[0\]"):
        writer.write("/ids", np.array([2.0 ** 31], np.float32), dtype="int32")  # not 2**31 - 1
    with pytest.raises(ValueError, match=r"value nan at index \[0\]"):
        writer.write("/ids", np.array([np.nan]), dtype="int32")
    with pytest.raises(ValueError, match="2 of 3 values are refused"):
        writer.write("/ids", np.array([2 ** 31, 0, -2 ** 40]), dtype="int32")


def test_values_that_fit_are_converted_as_before(writer):
    edge = [-2 ** 31, -1, 0, 2 ** 31 - 1]
    for i, value in enumerate((np.array(edge, np.int64), edge, np.array(edge, np.float64),
                               np.array([0, 2 ** 31 - 1], np.uint64), np.array([True, False]))):
        ds = writer.write(f"/ok/{i}", value, dtype="int32" if i == 2 else None)
        assert ds.dtype == np.dtype("<i4")
        assert ds[()].tolist() == np.asarray(value).astype(np.int64).tolist()
    data, dtype = sd.as_array(np.int64(7))
    assert dtype == "int32" and data.dtype == np.dtype("<i4") and data.tolist() == [7]


def test_float64_needs_an_explicit_dtype(writer):
    for value in (np.linspace(0, 1, 5), [0.5, 1.5], 0.25, np.float64(1.0),
                  np.ones(3, np.longdouble)):
        with pytest.raises(ValueError) as e:
            writer.write("/forward/0/logits", value)
        text = str(e.value)
        assert text.startswith("/forward/0/logits: float")
        assert 'dtype="float32"' in text and 'dtype="bfloat16"' in text
    x = np.array([1 + 2 ** -30, 1e-50, 3.0])
    assert writer.write("/a", x, dtype="float32")[()].tolist() == x.astype(np.float32).tolist()
    assert np.array_equal(writer.write("/b", x, dtype="bfloat16")[()],
                          sd.to_bf16_bits(x.astype(np.float32)))
    assert writer.write("/c", np.ones(2, np.float16))[()].dtype == np.dtype("<f2")  # its own


def test_unknown_dtypes_and_inputs_are_refused(writer):
    with pytest.raises(ValueError, match="unsupported dtype 'float64'; known: bfloat16"):
        writer.write("/x", np.zeros(2, np.float32), dtype="float64")
    with pytest.raises(ValueError, match="/x: cannot store complex128"):
        writer.write("/x", np.zeros(2, complex))
    with pytest.raises(ValueError, match="/x: value 'a' at index"):
        writer.write("/x", np.array(["a", 1], dtype=object))


def test_torch_tensors_are_refused_alike():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this Python")
    with pytest.raises(ValueError, match=r"/t: value 1099511627776 at index \[0, 1\]"):
        sd.as_array(torch.tensor([[0, 2 ** 40]]), path="/t")
    with pytest.raises(ValueError, match='/t: float64 input needs its dtype spelled out'):
        sd.as_array(torch.zeros(3, dtype=torch.float64), path="/t")
    ids = torch.tensor([4, 0, 2])  # int64, as torch makes them: fits, so stored as int32
    data, dtype = sd.as_array(ids)
    assert dtype == "int32" and data.dtype == np.dtype("<i4") and data.tolist() == [4, 0, 2]
    bf = torch.tensor([1.5, -2.0]).to(torch.bfloat16)
    assert sd.as_array(bf, "float32")[0].tolist() == [1.5, -2.0]  # exact widening
    with pytest.raises(ValueError, match=r"value 1.5 at index \[0\]"):
        sd.as_array(bf, "int32")
