"""splitcheck_dump.record_stage on tiny modules: which layers it hooks and how it numbers
them, which tensor each site is, the dtype it records in, and what it refuses.

Run: /usr/bin/python3 -m pytest python/tests/test_hooks.py (under a second of CPU)."""

import pathlib
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the hooks record PyTorch modules")

import splitcheck_dump as sd  # noqa: E402
from splitcheck_dump import sites  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import vllm_shaped  # noqa: E402

H, V = 8, 6


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, H))

    def forward(self, x):  # in float32, as transformers' LlamaRMSNorm
        f = x.float()
        return (f * torch.rsqrt((f * f).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


class Proj(torch.nn.Module):
    """x @ weight.T, accumulated in float32 (torch 1.13 has no float16 matmul on the CPU)."""

    def __init__(self, n_out, n_in, generator):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_out, n_in, generator=generator) / n_in)

    def forward(self, x):
        return (x.float() @ self.weight.float().t()).to(x.dtype)


class Layer(torch.nn.Module):
    """A standard pre-norm layer (transformers' names); returns (hidden,) as HF does."""

    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.input_layernorm, self.post_attention_layernorm = Norm(), Norm()
        self.self_attn, self.mlp = Proj(H, H, g), Proj(H, H, g)

    def forward(self, h):
        h = h + self.self_attn(self.input_layernorm(h))
        return (h + self.mlp(self.post_attention_layernorm(h)),)


class Stage(torch.nn.Module):
    """Layers [begin, end) of a model, held as a slice (first_layer = begin)."""

    def __init__(self, begin, end, last):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(i) for i in range(begin, end))
        self.norm = Norm() if last else None
        self.lm_head = Proj(V, H, torch.Generator().manual_seed(99)) if last else None

    def forward(self, h):
        for layer in self.layers:
            h = layer(h)[0]
        return self.lm_head(self.norm(h)) if self.norm is not None else h


def collect():
    """A callable sink and what it received: [(path, tensor, dtype)]."""
    got = []
    return (lambda path, t, dtype: got.append((path, t.clone(), dtype))), got


def test_sites_are_the_writers_layer_sites_in_execution_order():
    assert tuple(s for s, _ in sites.STANDARD_LAYER_SITES) == sd.LAYER_SITES
    assert dict(sites.SUBLAYER_SITES)["pre_attn"] == "input_layernorm"


def test_a_sliced_stage_is_numbered_from_its_first_layer():
    stage = Stage(3, 5, last=True)
    sink, got = collect()
    rec = sd.record_stage(stage, sink, layers="layers", first_layer=3, final_norm="norm",
                          lm_head="lm_head")
    assert sorted(rec.layers) == [3, 4]
    x = torch.randn(1, 4, H, generator=torch.Generator().manual_seed(0))
    with rec.forward(2):
        logits = stage(x)
    paths = [p for p, _, _ in got]
    assert paths == ([f"/forward/2/layers/{l}/{s}" for l in (3, 4) for s in sd.LAYER_SITES]
                     + ["/forward/2/output", "/forward/2/final_norm", "/forward/2/logits"])
    # Each site is the tensor the convention names, bit for bit, leading axes flattened.
    layer = stage.layers[0]
    with torch.no_grad(), rec.paused():
        pre_attn = layer.input_layernorm(x)
        after_attn = x + layer.self_attn(pre_attn)
        pre_mlp = layer.post_attention_layernorm(after_attn)
    by_path = {p: t for p, t, _ in got}
    assert torch.equal(by_path["/forward/2/layers/3/pre_attn"], pre_attn[0])
    assert torch.equal(by_path["/forward/2/layers/3/pre_mlp"], pre_mlp[0])
    assert torch.equal(by_path["/forward/2/layers/4/prefix"], by_path["/forward/2/output"])
    assert torch.equal(by_path["/forward/2/logits"], logits[0].detach())
    assert dict((p, d) for p, _, d in got)["/forward/2/logits"] == "float32"


def test_placeholders_are_skipped_and_slots_keep_their_global_index(tmp_path):
    model = vllm_shaped.ForCausalLM(2, 4)  # layers 2, 3 real; 0, 1, 4, 5 PPMissingLayer
    with sd.PartWriter(tmp_path / "p.h5", run_id="r", stage=1, stages=3, layer_begin=2,
                       layer_end=4) as w:
        rec = sd.record_stage(model, w, layers="model.layers", final_norm="model.norm",
                              lm_head="lm_head", sites=vllm_shaped.VLLM_SITES)
        assert sorted(rec.layers) == [2, 3]
        hidden = torch.randn(3, vllm_shaped.HIDDEN, generator=torch.Generator().manual_seed(1))
        with rec.forward(0, kind="prefill", first_position=0, tokens=3), torch.no_grad():
            out = model(None, torch.arange(3), {"hidden_states": hidden, "residual": hidden})
        assert set(out) == {"hidden_states", "residual"}  # not the last stage: no head
    with sd.DumpReader(tmp_path / "p.h5") as r:
        assert [d.path for d in r.datasets] == [f"/forward/0/layers/{l}/{s}" for l in (2, 3)
                                                for s in sd.LAYER_SITES]
        assert r.object_attrs("/forward/0")["kind"] == "prefill"


def test_a_first_layer_outside_the_part_writers_range_is_refused(tmp_path):
    with sd.PartWriter(tmp_path / "p.h5", run_id="r", stage=1, stages=2, layer_begin=3,
                       layer_end=5) as w:
        with pytest.raises(ValueError, match=r"hooked layers 0-2 .*first_layer 0.* stage 1's "
                                             r"layers 3-5: check first_layer"):
            sd.record_stage(Stage(3, 5, last=False), w, layers="layers")
        w.abandon()


def test_one_placeholder_repeated_in_every_other_slot_keeps_the_numbering():
    model = vllm_shaped.ForCausalLM(4, 6)
    missing = vllm_shaped.PPMissingLayer()
    for i in range(4):
        model.model.layers[i] = missing  # one instance in slots 0-3
    for layers in ("model.layers", "model.layers.*"):
        assert sorted(sd.record_stage(model, collect()[0], layers=layers).layers) == [4, 5]


def test_a_glob_matches_one_name_component_per_star():
    model = vllm_shaped.ForCausalLM(0, 6)
    rec = sd.record_stage(model, collect()[0], layers="model.layers.*")
    assert sorted(rec.layers) == list(range(6))
    rec.remove()
    rec = sd.record_stage(model, collect()[0], layers=list(model.model.layers)[1:3],
                          first_layer=1)
    assert sorted(rec.layers) == [1, 2]


def test_a_pattern_that_matches_nothing_names_the_pattern_and_the_lists():
    with pytest.raises(ValueError, match=r"layers pattern 'decoder\.layers\.\*' matches no "
                                         r"module of ForCausalLM; its module lists: "
                                         r"model\.layers"):
        sd.record_stage(vllm_shaped.ForCausalLM(0, 2), collect()[0], layers="decoder.layers.*")


def test_a_stage_of_placeholders_only_is_refused():
    model = vllm_shaped.ForCausalLM(0, 2)
    with pytest.raises(ValueError, match=r"every one of the 7 layer slots \(a list of 7 "
                                         r"modules\) is a placeholder"):
        sd.record_stage(model, collect()[0], layers=list(model.model.layers)[2:] + [
            torch.nn.Identity()] * 3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_sites_are_recorded_in_the_engines_dtype(tmp_path, dtype):
    stage = Stage(0, 2, last=True).to(getattr(torch, dtype))
    with sd.DumpWriter(tmp_path / "d.h5") as w:
        rec = sd.record_stage(stage, w, final_norm="norm", lm_head="lm_head")
        with rec.forward(), torch.no_grad():
            stage(torch.ones(1, 3, H, dtype=getattr(torch, dtype)))
    with sd.DumpReader(tmp_path / "d.h5") as r:
        kinds = {d.path.split("/")[-1]: d.dtype for d in r.datasets}
        assert {k for p, k in kinds.items() if p != "logits"} == {dtype}
        assert kinds["logits"] == "float32"  # widened exactly: no source_dtype
        assert not any("source_dtype" in r.object_attrs(d.path) for d in r.datasets)


def test_narrowing_on_request_records_the_source_dtype(tmp_path):
    stage = Stage(0, 1, last=False)
    with sd.DumpWriter(tmp_path / "d.h5") as w:
        rec = sd.record_stage(stage, w, dtype="bfloat16")
        with rec.forward(), torch.no_grad():
            stage(torch.ones(1, 3, H))
    with sd.DumpReader(tmp_path / "d.h5") as r:
        d = r.datasets[0]
        assert d.dtype == "bfloat16"
        assert r.object_attrs(d.path)["source_dtype"] == "float32"


def test_sites_can_be_renamed_or_left_out_and_a_missing_module_is_named():
    stage = Stage(0, 1, last=False)
    stage.layers[0].block_sparse_moe = stage.layers[0].mlp
    sink, got = collect()
    rec = sd.record_stage(stage, sink, sites={"mlp_out": "block_sparse_moe", "attn_out": None})
    with rec.forward(), torch.no_grad():
        stage(torch.ones(1, 2, H))
    assert [p.split("/")[-1] for p, _, _ in got] == ["pre_attn", "pre_mlp", "mlp_out", "prefix"]
    with pytest.raises(ValueError, match=r"layer 0 \(layers\.0\), site attn_out: Layer has no "
                                         r"submodule 'attn' \(its children: input_layernorm, "):
        sd.record_stage(stage, sink, sites={"attn_out": "attn"})
    with pytest.raises(ValueError, match="unknown layer site 'attn'; known: pre_attn"):
        sd.record_stage(stage, sink, sites={"attn": "self_attn"})


def test_forwards_are_counted_and_a_forward_outside_one_is_an_error():
    stage = Stage(0, 1, last=False)
    sink, got = collect()
    rec = sd.record_stage(stage, sink)
    x = torch.ones(1, 2, H)
    with torch.no_grad():
        for _ in range(2):
            with rec.forward():
                stage(x)
        with rec.paused():
            stage(x)  # a warm-up: nothing recorded
        with pytest.raises(RuntimeError, match=r"layer 0's pre_attn module ran outside "
                                               r"`with recording.forward\(f\)`"):
            stage(x)
        rec.remove()
        stage(x)  # no hooks left
    assert sorted({p.split("/")[2] for p, _, _ in got}) == ["0", "1"]
    assert len(got) == 2 * len(sd.LAYER_SITES)


def test_a_layer_module_that_runs_twice_in_a_forward_is_named():
    stage = Stage(0, 1, last=False)
    rec = sd.record_stage(stage, collect()[0])
    with rec.forward(), torch.no_grad(), pytest.raises(
            RuntimeError, match=r"forward 0: layers/0/pre_attn recorded twice \(layer 0's "
                                r"pre_attn module ran twice in one forward"):
        stage(torch.ones(1, 2, H))
        stage.layers[0].input_layernorm(torch.ones(1, 2, H))


def test_a_final_norm_applied_twice_shows_in_what_the_head_reads():
    """A doubled final norm is a bug for the comparison to find, not a recording error:
    `output` is the stream the norm's first call reads, and `final_norm` what the head
    reads, so the doubled norm differs there, before the logits (cause `head: final
    norm`)."""
    stage = Stage(0, 2, last=True)
    sink, got = collect()
    rec = sd.record_stage(stage, sink, final_norm="norm", lm_head="lm_head")
    x = torch.ones(1, 2, H)
    with rec.forward(), torch.no_grad():
        h = stage.layers[1](stage.layers[0](x)[0])[0]
        stage.lm_head(stage.norm(stage.norm(h)))
    by_path = {p: t for p, t, _ in got}
    assert torch.equal(by_path["/forward/0/output"], h[0])
    with rec.paused(), torch.no_grad():
        once, twice = stage.norm(h), stage.norm(stage.norm(h))
    assert torch.equal(by_path["/forward/0/final_norm"], twice[0])
    assert not torch.equal(by_path["/forward/0/final_norm"], once[0])
    assert [p.split("/")[-1] for p, _, _ in got][-3:] == ["output", "final_norm", "logits"]


def test_a_tensor_recorder_is_flushed_when_each_forward_ends():
    stage = Stage(0, 1, last=False)
    recorder = sd.TensorRecorder()
    rec = sd.record_stage(stage, recorder)
    with rec.forward(4), torch.no_grad():
        stage(torch.ones(1, 2, H))
    by_forward = recorder.take_by_forward()
    assert list(by_forward) == [4]
    assert [r[0] for r in by_forward[4]] == [f"/forward/4/layers/0/{s}" for s in sd.LAYER_SITES]
    assert all(r[2] == "float32" and r[3] is None for r in by_forward[4])


def test_record_forward_hooks_still_works_and_says_what_replaces_it(tmp_path):
    stage = Stage(0, 1, last=False)
    with sd.DumpWriter(tmp_path / "d.h5") as w:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            handles = sd.record_forward_hooks(stage, w, forward_index=0,
                                              modules=[("0", stage.layers[0])])
        assert any("record_stage" in str(c.message) and c.category is DeprecationWarning
                   for c in caught)
        with torch.no_grad():
            stage(torch.ones(1, 2, H))
        for h in handles:
            h.remove()
    with sd.DumpReader(tmp_path / "d.h5") as r:
        assert [d.path for d in r.datasets] == ["/forward/0/layers/0/pre_attn",
                                                "/forward/0/layers/0/mlp_out"]
        assert np.array_equal(r.read("/forward/0/layers/0/pre_attn"), np.ones((2, H), np.float32))
