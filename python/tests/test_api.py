"""The recording API: dispatch events, placement (storage identity, measured bytes),
speculative figures, torch tensors, the tools/ shim."""

import os
import subprocess
import sys

import numpy as np
import pytest

import splitcheck_dump as sd
from conftest import REPO


def test_dispatch_recording_and_round_trip(tmp_path):
    assert sd.dispatch("attn_res", "native") is None  # nothing active: nothing recorded
    with sd.recording(sd.DispatchTrace(stage=1)) as trace:
        sd.dispatch("attn_res", "native", layer=5, site="pre_attn")
        sd.dispatch("attn_res", "fallback", layer=8, site="tap", aux=8)
        with sd.recording(sd.DispatchTrace(stage=2)) as inner:
            sd.dispatch("lm_head", "matmul_nt", site="lm_head")
    assert len(trace) == 2 and len(inner) == 1
    assert trace.table().tolist() == [[5, 1, 0, -1], [8, 9, 1, 8]]
    path = tmp_path / "d.h5"
    with sd.DumpWriter(path) as w:
        w.write_dispatch(0, trace)
    with sd.DumpReader(path) as r:
        events = list(r.dispatch(0))
    assert events == list(trace)
    assert events[0].kernel == "attn_res.native" and events[0].stage == 1


def test_unknown_kernels_and_sites_are_refused_naming_the_known_ones():
    trace = sd.DispatchTrace()
    with pytest.raises(ValueError, match="unknown kernel attn_res.fast; known: attn_res.native"):
        trace.record("attn_res", "fast")
    with pytest.raises(ValueError, match="unknown dispatch site 'middle'; known: embed"):
        trace.record("attn_res", "native", site="middle")


def test_extra_kernels_travel_with_the_trace(tmp_path):
    trace = sd.DispatchTrace(extra_kernels=[("flash_attn", "v2")])
    trace.record("flash_attn", "v2", layer=0, site="attn")
    path = tmp_path / "x.h5"
    with sd.DumpWriter(path) as w:
        w.write_dispatch(0, trace)
    with sd.DumpReader(path) as r:
        assert r.object_attrs("/forward/0/dispatch")["kernels"].endswith(",flash_attn.v2")
        assert r.dispatch(0).events[0].kernel == "flash_attn.v2"
    assert trace.table()[0, 2] == len(sd.KERNELS)


def test_placement_measures_distinct_storages_once():
    a = np.zeros((4, 8), np.float32)
    p = sd.StagePlacement(0, 0, 4).hold("a", a).hold("a_view", a[1:]).hold("b", np.ones(3))
    assert p.parameter_bytes == a.nbytes + 3 * 8
    assert p.attributes()["held_tensors"] == 3 and p.attributes()["held_storages"] == 2


def test_placed_bytes_are_written_only_when_given():
    p = sd.StagePlacement(1, 4, 8).hold("w", np.zeros(6, np.float32))
    assert "placed_parameter_bytes" not in p.attributes()  # memory then not judged
    attrs = p.set_placed(24, "missing").attributes()
    assert attrs["placed_parameter_bytes"] == 24 and attrs["placed_embedding"] == "missing"


def test_drafter_embedding_identity_is_storage_not_values():
    embed = np.arange(12, dtype=np.float32).reshape(3, 4)
    shared = sd.StagePlacement(1, 8, 16).set_embedding(embed).set_drafter_embedding(embed)
    assert shared.embedding == "copy-for-drafter" and shared.drafter_embedding == "target"
    copy = sd.StagePlacement(1, 8, 16).set_embedding(embed).set_drafter_embedding(embed.copy())
    assert copy.drafter_embedding == "own"  # equal values, another object
    assert copy.attributes()["drafter_embedding_storage"] == "unheld"
    missing = sd.StagePlacement(1, 8, 16).set_embedding(None).set_drafter_embedding(embed)
    assert missing.embedding == "missing" and missing.drafter_embedding == "own"
    assert sd.StagePlacement(0, 0, 8).set_drafter_embedding(None).drafter_embedding == "missing"


def test_head_tied_is_the_embeddings_storage_not_its_values():
    embed = np.arange(12, dtype=np.float32).reshape(3, 4)
    tied = sd.StagePlacement(0, 0, 8).set_embedding(embed).set_head(embed).attributes()
    assert tied["head_tied"] == 1 and tied["head_storage"] == tied["embedding_storage"]
    last = sd.StagePlacement(1, 4, 8).set_head(embed, tied_to=embed).attributes()
    assert last["head_tied"] == 1 and last["embedding_storage"] == ""  # holds no embedding
    untied = sd.StagePlacement(1, 4, 8).set_head(embed.copy(), tied_to=embed).attributes()
    assert untied["head_tied"] == 0  # equal values, another object
    assert "head_tied" not in sd.StagePlacement(0, 0, 4).attributes()  # no head: not recorded


def test_torch_tensors_storage_and_bf16():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this Python")
    w = torch.randn(4, 8)
    p = sd.StagePlacement(1, 4, 8).hold("w", w).hold("w_t", w.t()).hold("row", w[2])
    assert p.parameter_bytes == 4 * 8 * 4
    emb = torch.nn.Embedding(5, 8)
    tied = torch.nn.Linear(8, 5, bias=False)
    tied.weight = emb.weight  # tied, as a drafter sharing the target's embedding
    p.set_embedding(emb.weight).set_drafter_embedding(tied.weight)
    assert p.drafter_embedding == "target"
    p.set_drafter_embedding(emb.weight.detach().clone())
    assert p.drafter_embedding == "own"
    x = torch.tensor([1.0 + 2 ** -8, 3.0]).to(torch.bfloat16)
    data, dtype = sd.as_array(x)
    assert dtype == "bfloat16" and data.tolist() == [0x3F80, 0x4040]


def test_spec_figures():
    spec = sd.SpecRecord(gamma=3)
    for a in (0, 3, 1, 2):
        spec.add_step(0, [1, 2, 3], a)
    f = spec.figures()
    assert f["steps"] == 4 and f["acceptance_rate"] == 6 / 12
    assert f["tokens_per_forward"] == 2.5 and f["mean_accepted"] == 1.5
    assert spec.histogram().tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError):
        spec.add_step(0, [1, 2], 1)


def test_writer_publishes_only_on_success(tmp_path):
    path = tmp_path / "p.h5"
    with pytest.raises(RuntimeError):
        with sd.DumpWriter(path) as w:
            w.write("/forward/0/input_ids", np.arange(2, dtype=np.int32))
            raise RuntimeError("engine crashed")
    assert not path.exists() and not (tmp_path / "p.h5.partial").exists()


def test_corrupt_bytes_are_refused_on_read(tmp_path):
    import h5py
    path = tmp_path / "c.h5"
    with sd.DumpWriter(path) as w:
        w.write("/forward/0/input_ids", np.arange(4, dtype=np.int32))
    with h5py.File(path, "r+") as f:
        f["/forward/0/input_ids"][1] = 7
    with sd.DumpReader(path) as r, pytest.raises(sd.CorruptDump, match="input_ids"):
        r.read("/forward/0/input_ids")


def test_tools_shim_hands_over_to_the_package():
    code = ("import splitcheck_dump as s; import splitcheck_dump.writer; "
            "print(s.__version__, s.DumpWriter.__module__)")
    env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [sd.__version__, "splitcheck_dump.writer"]
