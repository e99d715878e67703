"""The example against its PP=1 run: the fixed protocol is bit-identical at any cut; with
--bug-no-zero-delta only the block-aligned cuts stay identical, the cause visible as a
dispatch change at the second stage's first layer; with --bug-prefix-tap the tap differs
exactly at a cut equal to a capture id; with --per-stage-write (each stage writes a part,
the parent assembles them) the dump is the one the gathering writer writes. `splitcheck
compare` judges too where it is built.

Run: /usr/bin/python3 -m pytest examples/torch_pp (about 10 runs of ~1-2 s). The layers are
recorded through splitcheck_dump.record_stage; the runner sweeps of the three scenarios
(tests/runner/external_sweep_test.cc) sweep it at every split point."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "python"))

import splitcheck_dump as sd  # noqa: E402

RUN = [sys.executable, str(HERE / "run.py")]


def engine(tmp, name, pp, cuts, *flags):
    out = tmp / f"{name}.h5"
    r = subprocess.run(RUN + ["--pp", str(pp), "--cuts", cuts, "--out", str(out), "--seed", "7",
                              "--scenario", str(REPO / "scenarios" / "default.json"), *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def splitcheck_binary():
    for c in (os.environ.get("SPLITCHECK_BINARY"), str(REPO / "build" / "splitcheck"),
              shutil.which("splitcheck")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def judged_equal(golden, candidate):
    """Python's diff, and `splitcheck compare` where built: True when both say equal."""
    diff = sd.differing_datasets(golden, candidate)
    binary = splitcheck_binary()
    if binary is not None:
        rc = subprocess.run([binary, "compare", str(golden), str(candidate)],
                            capture_output=True, text=True).returncode
        assert rc in (0, 1), f"splitcheck compare exit {rc}"
        assert (rc == 0) == (not diff), f"splitcheck compare exit {rc}, Python diff {diff[:3]}"
    return not diff, diff


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("torch_pp")


@pytest.fixture(scope="module")
def golden(tmp):
    return engine(tmp, "pp1", 1, "")


def attn_res_variant(path, forward, layer, site):
    with sd.DumpReader(path) as r:
        return [e.variant for e in r.dispatch(forward)
                if e.op == "attn_res" and e.layer == layer and e.site == site]


def test_runs_are_deterministic_and_sound(tmp, golden):
    again = engine(tmp, "pp1-again", 1, "")
    assert golden.read_bytes() == again.read_bytes()
    with sd.DumpReader(golden) as r:
        assert r.verify()
        assert r.stages()[0]["drafter_embedding"] == "target"
        assert r.spec()["steps"] == 4


@pytest.mark.parametrize("pp,cuts", [(2, "5"), (3, "4,9")])
def test_fixed_protocol_is_bit_identical(tmp, golden, pp, cuts):
    split = engine(tmp, f"fixed-{cuts}", pp, cuts)
    equal, diff = judged_equal(golden, split)
    assert equal, diff[:5]
    with sd.DumpReader(split) as r:
        stages = r.stages()
        assert len(stages) == pp
        assert stages[pp - 1]["embedding"] == "copy-for-drafter"
        assert stages[pp - 1]["drafter_embedding"] == "target"
        assert stages[pp - 1]["drafter_embedding_storage"] == stages[pp - 1]["embedding_storage"]


def test_no_zero_delta_is_identical_at_a_block_aligned_cut(tmp, golden):
    equal, diff = judged_equal(golden, engine(tmp, "nozero-8", 2, "8", "--bug-no-zero-delta"))
    assert equal, diff[:5]


def test_no_zero_delta_takes_the_fallback_at_the_second_stage(tmp, golden):
    split = engine(tmp, "nozero-5", 2, "5", "--bug-no-zero-delta")
    assert attn_res_variant(golden, 0, 5, "pre_attn") == ["native"]
    assert attn_res_variant(split, 0, 5, "pre_attn") == ["fallback"]
    equal, diff = judged_equal(golden, split)
    assert not equal
    first = diff[0]
    assert first.startswith("/forward/0/layers/") and int(first.split("/")[4]) >= 5, diff[:3]


def test_prefix_tap_differs_exactly_at_a_capture_id_cut(tmp, golden):
    split = engine(tmp, "prefixtap-8", 2, "8", "--bug-prefix-tap")
    equal, diff = judged_equal(golden, split)
    assert not equal
    tensors = [p for p in diff if not p.endswith("/dispatch")]
    assert tensors and all(p.endswith("/taps/8") for p in tensors), diff
    equal, diff = judged_equal(golden, engine(tmp, "prefixtap-9", 2, "9", "--bug-prefix-tap"))
    assert equal, diff[:5]


def test_invalid_cuts_exit_2(tmp):
    r = subprocess.run(RUN + ["--pp", "2", "--cuts", "16", "--out", str(tmp / "x.h5")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "cuts" in r.stderr
    assert not (tmp / "x.h5").exists()


def dump_content(path):
    """Every dataset (dtype, shape, order, digest, bytes, attributes) and every group's
    attributes: what a dump says, whatever the HDF5 layout of its file."""
    out = {}
    with sd.DumpReader(path) as r:
        assert r.verify()
        out["/"] = r.attrs
        for d in r.datasets:
            out[d.path] = (d.dtype, d.shape, d.order, d.digest, r.read(d.path).tobytes(),
                           r.object_attrs(d.path))
        groups = []
        r._file.visititems(lambda n, o: groups.append("/" + n) if not hasattr(o, "dtype")
                           else None)
        out.update({g: r.object_attrs(g) for g in groups})
    return out


@pytest.mark.parametrize("pp,cuts", [(1, ""), (3, "4,9")])
def test_per_stage_write_gives_the_single_writer_dump(tmp, pp, cuts):
    gathered = engine(tmp, f"gathered-{pp}", pp, cuts)
    assembled = engine(tmp, f"assembled-{pp}", pp, cuts, "--per-stage-write")
    assert dump_content(assembled) == dump_content(gathered)
    if shutil.which("h5diff"):
        r = subprocess.run(["h5diff", str(gathered), str(assembled)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    equal, diff = judged_equal(gathered, assembled)
    assert equal, diff[:5]
    assert not [p for p in tmp.iterdir() if p.name.startswith(".parts-")]  # parts removed


def test_a_stage_records_its_layers_through_record_stage_from_its_first_layer():
    sys.path.insert(0, str(HERE))
    import model as k3
    import run
    stage = run.Stage(k3.Config(), 7, 1, [0, 3, 16],
                      {"bug_no_zero_delta": False, "bug_prefix_tap": False})
    assert isinstance(stage.recording, sd.StageRecording)
    assert sorted(stage.recording.layers) == list(range(3, 16))
    assert [m.index for m in stage.recording.layers.values()] == list(range(3, 16))
