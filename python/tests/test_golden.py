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
    ("/forward/0/input_ids", "int32", (3,), "xxh3:3b87cb675e2ef94c"),
    ("/forward/0/layers/0/pre_attn", "bfloat16", (3, 8), "xxh3:98f437c36a330be1"),
    ("/forward/0/layers/0/attn_out", "bfloat16", (3, 8), "xxh3:4d810eb6710d6c10"),
    ("/forward/0/layers/0/pre_mlp", "bfloat16", (3, 8), "xxh3:48f9052a6633b720"),
    ("/forward/0/layers/0/mlp_out", "bfloat16", (3, 8), "xxh3:8b461184d3b7b8ad"),
    ("/forward/0/layers/0/prefix", "bfloat16", (3, 8), "xxh3:67d9275279041642"),
    ("/forward/0/layers/1/pre_attn", "bfloat16", (3, 8), "xxh3:f76c5453fd9f344c"),
    ("/forward/0/layers/1/attn_out", "bfloat16", (3, 8), "xxh3:729a87839745d4c2"),
    ("/forward/0/layers/1/pre_mlp", "bfloat16", (3, 8), "xxh3:94e436a88ce37db0"),
    ("/forward/0/layers/1/mlp_out", "bfloat16", (3, 8), "xxh3:dc288b3db6729889"),
    ("/forward/0/layers/1/prefix", "bfloat16", (3, 8), "xxh3:66c346c55eebc832"),
    ("/forward/0/output", "bfloat16", (3, 8), "xxh3:11848beb964d75cd"),
    ("/forward/0/logits", "float32", (3, 5), "xxh3:08701e87112ff719"),
    ("/forward/0/taps/0", "bfloat16", (3, 8), "xxh3:375b0b4825393905"),
    ("/forward/0/taps/2", "bfloat16", (3, 8), "xxh3:886f9e28ca29372d"),
    ("/forward/0/next_tokens", "int32", (3,), "xxh3:fe6f96152d8c3067"),
    ("/forward/0/dispatch", "int32", (6, 4), "xxh3:725ab7135e8e6376"),
    ("/stage_trace/0", "int32", (6,), "xxh3:743df94ee4c78a2a"),
    ("/spec/0/proposals", "int32", (2, 2), "xxh3:6fc1ebd4f4d6ea31"),
    ("/spec/0/accepted", "int32", (2,), "xxh3:2086c65c91eee243"),
    ("/spec/0/emitted", "int32", (4,), "xxh3:bd6b2a326b300a2c"),
    ("/spec/accepted_histogram", "int32", (3,), "xxh3:bc51e9c7e72f4789"),
]

ROOT_ATTRIBUTES = {
    "format": "splitcheck.dump",
    "format_version": 2,
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
               "b9f5147677b2ec1031464010bad8ed16b9b1fc30981bef83ad49d29681ad5e2d"}


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
    assert sd.xxh3_64(b"") == 0x2D06800538D394C2


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
