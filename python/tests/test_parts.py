"""Per-stage writers: a known three-stage run written by one writer and by one PartWriter
per stage; the assembled parts equal the one-writer dump (reader, h5diff, and `splitcheck
compare` where built), and every refusal names the file and what, leaving nothing
written."""

import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

import pp_run
import splitcheck_dump as sd
from conftest import REPO, splitcheck_binary


def content(path):
    """Everything a dump says: every dataset (dtype, shape, order, digest, bytes, other
    attributes) and every group's attributes, as plain values."""
    out = {}
    with sd.DumpReader(path) as r:
        assert r.verify()
        out["/"] = r.attrs
        for d in r.datasets:
            out[d.path] = (d.dtype, d.shape, d.order, d.digest, r.read(d.path).tobytes(),
                           r.object_attrs(d.path))
        groups = []
        r._file.visititems(lambda n, o: groups.append("/" + n)
                           if isinstance(o, h5py.Group) else None)
        for g in groups:
            out[g] = r.object_attrs(g)
    return out


def h5diff(a, b):
    if shutil.which("h5diff") is None:
        pytest.skip("h5diff (hdf5-tools) is not installed")
    r = subprocess.run(["h5diff", str(a), str(b)], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("interleaved", [False, True], ids=["stage-order", "interleaved-taps"])
def test_assembled_parts_equal_the_one_writer_dump(tmp_path, interleaved):
    one, parts = pp_run.write_all(tmp_path, interleaved)
    out = tmp_path / "assembled.h5"
    summary = sd.assemble(list(reversed(parts)), out)  # any order of the arguments
    with sd.DumpReader(one) as r:
        assert summary == {"datasets": len(r.datasets), "stages": 3, "run": pp_run.RUN_ID}
    assert content(out) == content(one)
    rc, text = h5diff(one, out)
    assert rc == 0, text
    with sd.DumpReader(out) as r:
        assert "part_run" not in r.attrs and "part_segment" not in r.object_attrs(
            "/forward/0/logits")
        trace = r.dispatch(1)
        assert [e.stage for e in trace] == sorted(e.stage for e in trace)
        assert {e.stage for e in trace} == {0, 1, 2}
        assert r.stages()[2]["drafter_embedding"] == "target"
    binary = splitcheck_binary()
    if binary is not None:
        rc = subprocess.run([binary, "compare", str(one), str(out)], capture_output=True,
                            text=True)
        assert rc.returncode == 0, rc.stdout + rc.stderr


def test_parts_are_sound_dumps_restricted_to_their_stage(tmp_path):
    _, parts = pp_run.write_all(tmp_path)
    with sd.DumpReader(parts[1]) as r:
        assert r.verify()
        assert (r.attrs["part_stage"], r.attrs["part_stages"]) == (1, 3)
        assert (r.attrs["part_layer_begin"], r.attrs["part_layer_end"]) == (2, 4)
        layers = {int(d.path.split("/")[4]) for d in r.datasets if "/layers/" in d.path}
        assert layers == {2, 3}
        assert set(r.stages()) == {1}
        assert {e.stage for e in r.dispatch(0)} == {1}


def test_the_command_line_assembles_and_refuses(tmp_path):
    one, parts = pp_run.write_all(tmp_path)
    out = tmp_path / "cli.h5"
    cmd = [sys.executable, "-m", "splitcheck_dump", "assemble"]
    env = {"PYTHONPATH": str(REPO / "python")}
    r = subprocess.run(cmd + parts + ["--out", str(out)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "3 stages" in r.stdout and content(out) == content(one)
    missing = tmp_path / "missing.h5"
    r = subprocess.run(cmd + parts[:2] + ["--out", str(missing)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 2 and "missing stage 2 of 3" in r.stderr, r.stderr
    assert not missing.exists()


def refused(tmp_path, parts, *needles):
    out = tmp_path / "refused.h5"
    with pytest.raises(sd.AssembleError) as e:
        sd.assemble(parts, out)
    for n in needles:
        assert str(n) in str(e.value), str(e.value)
    assert not out.exists() and not (tmp_path / "refused.h5.partial").exists()
    return str(e.value)


def test_refuses_a_missing_or_repeated_stage(tmp_path):
    _, parts = pp_run.write_all(tmp_path)
    refused(tmp_path, parts[::2], "missing stage 1 of 3")
    again = tmp_path / "again.h5"
    shutil.copy(parts[1], again)
    refused(tmp_path, parts + [str(again)], "stage 1 given twice", "again.h5", "part-1.h5")


def test_refuses_parts_of_another_run(tmp_path):
    _, parts = pp_run.write_all(tmp_path)
    other = tmp_path / "other.h5"
    pp_run.write_part(other, 1, run_id="pp-run-2")
    refused(tmp_path, [parts[0], str(other), parts[2]], "other.h5", "pp-run-2", "pp-run-1")
    moved = tmp_path / "moved.h5"  # same run id, another partition: not one run
    pp_run.write_part(moved, 1, partition="0-2|2-4|4-7")
    refused(tmp_path, [parts[0], str(moved), parts[2]], "moved.h5", "partition",
            "not one run")


def test_refuses_overlapping_layers_and_datasets(tmp_path):
    _, parts = pp_run.write_all(tmp_path)
    wide = tmp_path / "wide.h5"
    with sd.PartWriter(wide, run_id=pp_run.RUN_ID, stage=1, stages=3, layer_begin=1,
                       layer_end=4, **pp_run.HEADER):
        pass
    refused(tmp_path, [parts[0], str(wide), parts[2]], "wide.h5", "layers 1-4", "overlap")
    dup = tmp_path / "dup.h5"
    with sd.PartWriter(dup, run_id=pp_run.RUN_ID, stage=1, stages=3, layer_begin=2,
                       layer_end=4, **pp_run.HEADER) as w:
        w.write("/forward/0/logits", np.zeros((3, 5), np.float32))
    refused(tmp_path, [parts[2], str(dup), parts[0]], "/forward/0/logits", "dup.h5",
            "part-2.h5", "overlap")
    with pytest.raises(ValueError, match="layer 5 is not stage 1's"):
        with sd.PartWriter(tmp_path / "x.h5", run_id="r", stage=1, stages=3, layer_begin=2,
                           layer_end=4) as w:
            w.write_layer(0, 5, "pre_attn", np.zeros((1, 2), np.float32))
    assert not (tmp_path / "x.h5").exists()


def test_refuses_files_that_are_not_parts_of_this_format(tmp_path):
    one, parts = pp_run.write_all(tmp_path)
    refused(tmp_path, [one] + parts[1:], "one.h5", "not a part file")
    with h5py.File(parts[1], "r+") as f:
        f.attrs["part_format_version"] = np.int64(2)
    refused(tmp_path, parts, "part-1.h5", "part_format_version 2")
    with h5py.File(parts[1], "r+") as f:
        f.attrs["part_format_version"] = np.int64(1)
        f.attrs["format_version"] = np.int64(1)
    refused(tmp_path, parts, "part-1.h5", "format_version 1")
    text = tmp_path / "text.h5"
    text.write_text("not hdf5")
    refused(tmp_path, parts[:2] + [str(text)], "text.h5", "not an HDF5 file")


def test_refuses_a_part_whose_bytes_do_not_match_its_digest(tmp_path):
    _, parts = pp_run.write_all(tmp_path)
    with h5py.File(parts[2], "r+") as f:
        f["/forward/1/logits"][0, 0] = np.float32(123.0)
    (tmp_path / "refused.h5").write_bytes(b"stale")  # an older output stays as it was
    with pytest.raises(sd.AssembleError, match="part-2.h5: /forward/1/logits"):
        sd.assemble(parts, tmp_path / "refused.h5")
    assert (tmp_path / "refused.h5").read_bytes() == b"stale"
    assert not (tmp_path / "refused.h5.partial").exists()


def test_refuses_disagreeing_attributes(tmp_path):
    _, parts = pp_run.write_all(tmp_path)
    with h5py.File(parts[1], "r+") as f:
        f["/forward/1"].attrs["kind"] = sd._encoding.string_attr("decode")
    refused(tmp_path, parts, "attribute kind of /forward/1", "part-1.h5", "part-0.h5")
