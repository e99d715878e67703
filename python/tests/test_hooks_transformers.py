"""record_stage on transformers models agrees with splitcheck_dump.hf, which records the same
sites its own way: a whole Llama run by its own forward and cache, and a stage holding
layers 3-7 of a split 0-3|3-8 (first_layer 3), bit for bit at every site, `output` and
`logits`, over a prefill and two decode forwards.

Needs transformers (skipped here otherwise; the GPU machine has it): /usr/bin/python3 -m
pytest python/tests/test_hooks_transformers.py, a few seconds on the CPU."""

import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the hooks record PyTorch modules")
pytest.importorskip("transformers", reason="transformers is not installed for this "
                    "interpreter (the GPU machine has it)")

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "hf_pp"))

import models  # noqa: E402

import splitcheck_dump as sd  # noqa: E402
from splitcheck_dump import hf  # noqa: E402

SEED, FORWARDS, BOUNDS = 7, 3, [0, 3, 8]


def keeper():
    got = {}

    def sink(path, tensor, dtype):
        got[path] = sd.as_array(tensor, dtype, path=path)
    return sink, got


def assert_same(hooks, adapter, paths):
    """hooks {path: (array, dtype)} equals the adapter's records on every path of `paths`."""
    theirs = {p: (a, d) for f in adapter.values() for p, a, d, _ in f}
    assert sorted(paths) == sorted(hooks), sorted(set(paths) ^ set(hooks))
    for p in paths:
        (mine, my_dtype), (their, their_dtype) = hooks[p], theirs[p]
        assert my_dtype == their_dtype, p
        assert mine.shape == their.shape and mine.tobytes() == their.tobytes(), p


def adapter_paths(records):
    return [p for f in records.values() for p, *_ in f
            if "/layers/" in p or p.endswith(("/output", "/final_norm", "/logits"))]


def test_a_whole_model_records_what_the_adapter_records():
    from transformers import DynamicCache

    model = models.build_model("llama", SEED)
    sink, got = keeper()
    rec = sd.record_stage(model, sink, layers="model.layers", final_norm="model.norm",
                          lm_head="lm_head")
    ids, cache = models.prompt_ids("llama", SEED, 6), DynamicCache()
    with torch.no_grad():
        for f in range(FORWARDS):
            with rec.forward(f):
                out = model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
            ids = [int(out.logits[0, -1].argmax())]
    stage = hf.PipelineStage(models.build_model("llama", SEED), 0, [0, 8], "cpu")
    ids = models.prompt_ids("llama", SEED, 6)
    for f in range(FORWARDS):
        tokens, _ = stage.forward(f, ids)
        ids = tokens[-1:]
    records = stage.records()
    assert_same(got, records, adapter_paths(records))


def test_a_stage_at_offset_3_records_what_the_adapter_records():
    first = hf.PipelineStage(models.build_model("llama", SEED), 0, BOUNDS, "cpu")
    second = hf.PipelineStage(models.build_model("llama", SEED), 1, BOUNDS, "cpu")
    sink, got = keeper()
    rec = sd.record_stage(torch.nn.Module(), sink, layers=second.layers, first_layer=3,
                          final_norm=second.norm, lm_head=second.lm_head)
    assert sorted(rec.layers) == [3, 4, 5, 6, 7]
    ids = models.prompt_ids("llama", SEED, 6)
    for f in range(FORWARDS):
        hidden, _ = first.forward(f, ids)
        with rec.forward(f):
            tokens, _ = second.forward(f, hidden)
        ids = tokens[-1:]
    records = second.records()
    paths = adapter_paths(records)
    assert {int(p.split("/")[4]) for p in paths if "/layers/" in p} == {3, 4, 5, 6, 7}
    assert_same(got, records, paths)
    assert np.asarray(got["/forward/0/logits"][0]).dtype == np.float32
