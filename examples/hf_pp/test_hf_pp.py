"""examples/hf_pp against its PP=1 runs: with no bug every split is bit-identical (tensors,
logits, tokens, dispatch); each bug flag diverges exactly where its cause is (the second
stage's first layer, or the first decode forward for restarted positions); PP=1 equals
the model's own forward. `splitcheck compare` judges too where it is built.

Needs transformers (and PyTorch): without it every test but the first is SKIPPED with the
reason (Debian's /usr/bin/python3 has none; examples/hf_pp/device-check.sh runs them on
the GPU machine). Run: python3 -m pytest -rs examples/hf_pp (about 14 runs of a few s)."""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

import splitcheck_dump as sd  # noqa: E402

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAVE_TRANSFORMERS,
    reason=f"transformers is not installed for {sys.executable}: examples/hf_pp runs where "
           "it is (examples/hf_pp/device-check.sh on the GPU machine)")
RUN = [sys.executable, str(HERE / "run.py")]
SEED = 7


def engine(tmp, family, pp, cuts, *flags, tag=""):
    """The dump of one run (made once per module: runs are named by their arguments)."""
    name = "-".join([family, f"pp{pp}", cuts.replace(",", "_") or "all",
                     *[f.lstrip("-") for f in flags]]) + tag
    out = tmp / f"{name}.h5"
    if out.exists():
        return out
    r = subprocess.run(RUN + ["--family", family, "--pp", str(pp), "--cuts", cuts,
                              "--out", str(out), "--seed", str(SEED), *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def splitcheck_binary():
    for c in (os.environ.get("SPLITCHECK_BINARY"), str(REPO / "build" / "splitcheck"),
              shutil.which("splitcheck")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def judged_equal(golden, candidate):
    """Python's diff, and `splitcheck compare` where built: (equal, differing paths)."""
    diff = sd.differing_datasets(golden, candidate)
    binary = splitcheck_binary()
    if binary is not None:
        rc = subprocess.run([binary, "compare", str(golden), str(candidate)],
                            capture_output=True, text=True).returncode
        assert rc in (0, 1), f"splitcheck compare exit {rc}"
        assert (rc == 0) == (not diff), f"splitcheck compare exit {rc}, Python diff {diff[:3]}"
    return not diff, diff


def attention_variants(path, forward):
    with sd.DumpReader(path) as r:
        return {e.layer: e.variant for e in r.dispatch(forward) if e.op == "hf_attention"}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_pp")


def test_the_adapter_import_is_optional():
    """`import splitcheck_dump` never needs transformers; hf names it when it is missing."""
    pytest.importorskip("torch")
    from splitcheck_dump import hf
    assert "hf" not in sd.__all__
    if HAVE_TRANSFORMERS:
        assert hf.require_transformers().__name__ == "transformers"
    else:
        with pytest.raises(ImportError, match="transformers"):
            hf.require_transformers()


@needs_transformers
def test_pp1_is_deterministic_sound_and_one_stage(tmp):
    golden = engine(tmp, "llama", 1, "")
    again = engine(tmp, "llama", 1, "", tag="-again")
    assert judged_equal(golden, again)[0]
    with sd.DumpReader(golden) as r:
        assert r.verify()
        stages = r.stages()
        assert list(stages) == [0]
        assert (stages[0]["layer_begin"], stages[0]["layer_end"]) == (0, 8)
        assert stages[0]["embedding"] == "real"
        assert r.forwards() == [0, 1, 2, 3, 4]
        assert set(attention_variants(golden, 0).values()) == {"sdpa"}
        assert len(r.read("/generation/0/emitted")) == 5


@needs_transformers
@pytest.mark.parametrize("family", ["llama", "deepseek_v3"])
def test_pp1_equals_the_models_own_forward(tmp, family):
    """The stage loop at PP=1 reproduces model(...) with its own cache, bit for bit."""
    import torch
    from transformers import DynamicCache

    import models
    from splitcheck_dump import hf
    golden = engine(tmp, family, 1, "")
    with sd.DumpReader(golden) as r:
        device = r.object_attrs("/").get("backend", "").split("-")[-1]
        logits = [r.read(f"/forward/{f}/logits") for f in r.forwards()]
        prompt = r.read("/generation/0/prompt_ids").tolist()
        emitted = r.read("/generation/0/emitted").tolist()
    model = models.build_model(family, SEED).to(device)
    cache, ids, mine = DynamicCache(), prompt, []
    with torch.no_grad():
        for f in range(len(logits)):
            out = model(input_ids=torch.tensor([ids], device=device), past_key_values=cache,
                        use_cache=True)
            step = out.logits[0].float()
            assert np.array_equal(step.cpu().numpy().view(np.uint32),
                                  logits[f].view(np.uint32)), f"forward {f}: logits differ"
            ids = [int(step[-1].argmax())]
            mine.append(ids[0])
    assert mine == emitted
    assert hf.staged_model(model).layers is model.base_model.layers


@needs_transformers
@pytest.mark.parametrize("family,pp,cuts", [("llama", 2, "3"), ("llama", 3, "2,5"),
                                             ("deepseek_v3", 2, "4"),
                                             ("deepseek_v3", 3, "1,7")])
def test_every_split_is_bit_identical(tmp, family, pp, cuts):
    golden = engine(tmp, family, 1, "")
    split = engine(tmp, family, pp, cuts)
    equal, diff = judged_equal(golden, split)
    assert equal, diff[:5]
    with sd.DumpReader(split) as r:
        stages = r.stages()
        bounds = [0] + [int(c) for c in cuts.split(",")] + [8]
        assert [(s["layer_begin"], s["layer_end"]) for s in stages.values()] == \
            list(zip(bounds, bounds[1:]))
        assert [s["embedding"] for s in stages.values()] == ["real"] + ["missing"] * (pp - 1)
    with sd.DumpReader(golden) as g, sd.DumpReader(split) as s:
        total = sum(st["parameter_bytes"] for st in s.stages().values())
        assert total >= g.stages()[0]["parameter_bytes"]


@needs_transformers
def test_attn_impl_bug_shows_in_dispatch_at_the_cut(tmp):
    golden = engine(tmp, "llama", 1, "", "--bug-attn-impl")
    split = engine(tmp, "llama", 2, "3", "--bug-attn-impl")
    assert set(attention_variants(golden, 0).values()) == {"sdpa"}
    variants = attention_variants(split, 0)
    assert [variants[l] for l in range(8)] == ["sdpa"] * 3 + ["eager"] * 5
    equal, diff = judged_equal(golden, split)
    assert not equal and "/forward/0/dispatch" in diff
    assert all(not p.startswith("/forward/0/layers/") or int(p.split("/")[4]) >= 3
               for p in diff), diff[:5]


@needs_transformers
def test_buffer_bug_diverges_at_the_cuts_moe(tmp):
    golden = engine(tmp, "deepseek_v3", 1, "", "--bug-buffer-not-restored")
    assert judged_equal(engine(tmp, "deepseek_v3", 1, ""), golden)[0]  # PP=1 restores
    split = engine(tmp, "deepseek_v3", 2, "4", "--bug-buffer-not-restored")
    equal, diff = judged_equal(golden, split)
    assert not equal
    assert diff[0] == "/forward/0/layers/4/mlp_out", diff[:5]


@needs_transformers
def test_restart_positions_bug_keeps_prefill_and_breaks_decode(tmp):
    golden = engine(tmp, "llama", 1, "", "--bug-restart-positions")
    split = engine(tmp, "llama", 2, "3", "--bug-restart-positions")
    equal, diff = judged_equal(golden, split)
    assert not equal
    assert not any(p.startswith("/forward/0/") for p in diff), diff[:5]
    assert diff[0] == "/forward/1/layers/3/attn_out", diff[:5]


@needs_transformers
def test_bf16_handoff_bug_diverges_at_the_cut(tmp):
    golden = engine(tmp, "llama", 1, "", "--bug-bf16-handoff")
    split = engine(tmp, "llama", 2, "3", "--bug-bf16-handoff")
    equal, diff = judged_equal(golden, split)
    assert not equal
    assert diff[0].startswith("/forward/0/layers/3/"), diff[:5]


@needs_transformers
@pytest.mark.parametrize("args", [["--family", "llama", "--pp", "2", "--cuts", "8"],
                                  ["--family", "llama", "--pp", "1", "--cuts", "",
                                   "--bug-buffer-not-restored"]])
def test_invalid_arguments_exit_2(tmp, args):
    out = tmp / "refused.h5"
    r = subprocess.run(RUN + args + ["--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert not out.exists()


# -- the families of the matrix, and the layer-index bugs they invite ----------------------

@needs_transformers
def test_every_family_is_stageable_and_gpt2_is_refused_by_name():
    import models
    from splitcheck_dump import hf
    for family in models.MATRIX_FAMILIES:
        staged = hf.staged_model(models.build_model(family, SEED, num_layers=4))
        assert len(staged.layers) == 4, family
    with pytest.raises(hf.NotStageable, match="no `layers` list.*its lists: h"):
        hf.staged_model(models.build_model("gpt2", SEED, num_layers=4))


@needs_transformers
@pytest.mark.parametrize("family", ["gemma2", "gemma3", "gpt_neox"])
def test_pp1_equals_the_models_own_forward_in_other_families(tmp, family):
    test_pp1_equals_the_models_own_forward(tmp, family)


@needs_transformers
@pytest.mark.parametrize("family,cuts", [("gemma2", "3"), ("gemma3", "5"), ("qwen3_moe", "1")])
def test_other_families_split_bit_identical(tmp, family, cuts):
    equal, diff = judged_equal(engine(tmp, family, 1, ""), engine(tmp, family, 2, cuts))
    assert equal, diff[:5]


@needs_transformers
def test_local_layer_types_bug_diverges_at_odd_cuts_only(tmp):
    golden = engine(tmp, "gemma2", 1, "", "--bug-local-layer-types")
    assert judged_equal(golden, engine(tmp, "gemma2", 2, "2", "--bug-local-layer-types"))[0]
    equal, diff = judged_equal(golden, engine(tmp, "gemma2", 2, "3", "--bug-local-layer-types"))
    assert not equal and diff[0] == "/forward/0/layers/3/attn_out", diff[:5]


@needs_transformers
def test_softcap_bug_changes_the_logits_only(tmp):
    golden = engine(tmp, "gemma2", 1, "", "--bug-softcap-dropped")
    equal, diff = judged_equal(golden, engine(tmp, "gemma2", 2, "4", "--bug-softcap-dropped"))
    assert not equal and all(p.endswith("/logits") for p in diff), diff[:5]


@needs_transformers
def test_dense_prefix_bug_builds_the_cut_layer_dense(tmp):
    golden = engine(tmp, "deepseek_v3", 1, "", "--bug-dense-prefix-per-stage")
    split = engine(tmp, "deepseek_v3", 2, "4", "--bug-dense-prefix-per-stage")
    equal, diff = judged_equal(golden, split)
    assert not equal and diff[0] == "/forward/0/layers/4/mlp_out", diff[:5]
    with sd.DumpReader(split) as r:
        mlp = {e.layer: e.variant for e in r.dispatch(0) if e.op in ("hf_mlp", "hf_moe")}
    assert mlp[3] != "dense" and mlp[4] == "dense"
