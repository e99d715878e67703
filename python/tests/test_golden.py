"""Golden bytes of a tiny dump: every dataset's digest, dtype, shape and order, the root
attributes, and (on the HDF5 version that recorded it) the whole file's SHA-256. A change
here is a change of the format's bytes: bump FORMAT_VERSION or explain why it is not."""

import hashlib

import h5py
import numpy as np
import pytest

import splitcheck_dump as sd
from tiny_dump import write_tiny_dump

DATASETS = [
    ("/forward/0/input_ids", "int32", (3,), "xxh64:250e960bc2864909"),
    ("/forward/0/layers/0/pre_attn", "bfloat16", (3, 8), "xxh64:9c8c0b889821c419"),
    ("/forward/0/layers/0/attn_out", "bfloat16", (3, 8), "xxh64:be19598c1ff9e7e1"),
    ("/forward/0/layers/0/pre_mlp", "bfloat16", (3, 8), "xxh64:d4d8fe9b477a0460"),
    ("/forward/0/layers/0/mlp_out", "bfloat16", (3, 8), "xxh64:3779dc95a09e9fa3"),
    ("/forward/0/layers/0/prefix", "bfloat16", (3, 8), "xxh64:83d2b768f73e9637"),
    ("/forward/0/layers/1/pre_attn", "bfloat16", (3, 8), "xxh64:0955eebc4a90f241"),
    ("/forward/0/layers/1/attn_out", "bfloat16", (3, 8), "xxh64:10a6ab82d4869c8a"),
    ("/forward/0/layers/1/pre_mlp", "bfloat16", (3, 8), "xxh64:5682157c8f2ee973"),
    ("/forward/0/layers/1/mlp_out", "bfloat16", (3, 8), "xxh64:980d1c5d2147dfc1"),
    ("/forward/0/layers/1/prefix", "bfloat16", (3, 8), "xxh64:4607d8c4fdeea20c"),
    ("/forward/0/output", "bfloat16", (3, 8), "xxh64:fd44e9c75d643c7c"),
    ("/forward/0/logits", "float32", (3, 5), "xxh64:5ec209aac480d7b1"),
    ("/forward/0/taps/0", "bfloat16", (3, 8), "xxh64:e5cdf485f797d94e"),
    ("/forward/0/taps/2", "bfloat16", (3, 8), "xxh64:bc0b7b5fb4a1e43c"),
    ("/forward/0/next_tokens", "int32", (3,), "xxh64:56879243d520a615"),
    ("/forward/0/dispatch", "int32", (6, 4), "xxh64:332ee0b466be55da"),
    ("/stage_trace/0", "int32", (6,), "xxh64:bb3302e8a9608868"),
    ("/spec/0/proposals", "int32", (2, 2), "xxh64:27f0147e6ec514a6"),
    ("/spec/0/accepted", "int32", (2,), "xxh64:eac73e4044e82db0"),
    ("/spec/0/emitted", "int32", (4,), "xxh64:89c25e2fe9005310"),
    ("/spec/accepted_histogram", "int32", (3,), "xxh64:2b81e9d67ad16f26"),
]

ROOT_ATTRIBUTES = {
    "format": "splitcheck.dump",
    "format_version": 1,
    "scenario": '{"name": "tiny"}',
    "scenario_sha256": "0" * 64,
    "model_sha256": "1" * 64,
    "partition": "0-2",
    "backend": "numpy",
    "producer": '{"name": "tiny", "version": "0"}',
    "env": '{"device": "cpu"}',
    "level": "layer",
    "created": "",
    "volatile": "created,partition,producer,env",
}

# The whole file, as h5py 3.7.0 on HDF5 1.10.8 (Debian 12) writes it.
FILE_SHA256 = {("3.7.0", "1.10.8"):
               "6f2b0ec07564b259e2005a60658ec3daf1b15705665472a799b98f3bb571f764"}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.h5"
    write_tiny_dump(path)
    return path


def test_datasets_are_pinned(tiny):
    with sd.DumpReader(tiny) as r:
        got = [(d.path, d.dtype, d.shape, d.digest) for d in r.datasets]
        assert [d.order for d in r.datasets] == list(range(len(DATASETS)))
        assert r.verify()
    assert got == DATASETS


def test_root_attributes_are_pinned_with_their_types(tiny):
    with h5py.File(tiny, "r") as f:
        assert list(f.attrs.keys()) == sorted(ROOT_ATTRIBUTES)  # HDF5 lists them by name
        assert f.attrs["format_version"].dtype == np.dtype("<i8")
        for name in ROOT_ATTRIBUTES:
            if name != "format_version":  # fixed-length UTF-8, as the C++ writer stores them
                assert h5py.check_string_dtype(f.attrs.get_id(name).dtype).encoding == "utf-8"
    with sd.DumpReader(tiny) as r:
        assert r.attrs == ROOT_ATTRIBUTES


def test_bf16_rounding_is_pinned(tiny):
    with sd.DumpReader(tiny) as r:
        bits = r.read("/forward/0/layers/0/pre_attn")
    assert bits.dtype == np.dtype("<u2")
    assert int(bits[0, 0]) == 0x3F80  # 1 + 2^-8 is a tie: to even
    assert int(bits[0, 1]) == 0x8000  # negative zero kept
    assert sd.to_bf16_bits(np.array([np.nan], np.float32))[0] & 0x7FC0 == 0x7FC0
    assert sd.xxh64(b"") == 0xEF46DB3751D8E999


def test_group_attributes_are_pinned(tiny):
    with sd.DumpReader(tiny) as r:
        assert r.object_attrs("/forward/0") == {"kind": "prefill", "first_position": 0,
                                                "last_position": 2}
        assert r.spec() == {"steps": 2, "gamma": 2, "acceptance_rate": 0.5,
                            "tokens_per_forward": 2.0, "mean_accepted": 1.0}
        assert r.stages() == {0: {
            "layer_begin": 0, "layer_end": 2, "embedding": "real", "parameter_bytes": 192,
            "owned_taps": "0,2", "held_tensors": 2, "held_storages": 2,
            "embedding_storage": "storage:1", "drafter_embedding": "target",
            "drafter_embedding_storage": "storage:1"}}


def test_two_writes_are_byte_identical(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    write_tiny_dump(a)
    write_tiny_dump(b)
    assert a.read_bytes() == b.read_bytes()


def test_whole_file_bytes_on_the_recording_hdf5(tiny):
    key = (h5py.version.version, h5py.version.hdf5_version)
    if key not in FILE_SHA256:
        pytest.skip(f"whole-file bytes were recorded on h5py/HDF5 {list(FILE_SHA256)}, "
                    f"this is {key}; the per-dataset digests above still hold")
    assert hashlib.sha256(tiny.read_bytes()).hexdigest() == FILE_SHA256[key]
