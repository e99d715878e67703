"""Round trips with the C++ implementation: C++ judges Python's files (verify-dump,
compare) and Python reads C++'s (`splitcheck run --out`). Skipped, with the reason, only
where the splitcheck binary is not built."""

import json
import subprocess

import numpy as np
import pytest

import splitcheck_dump as sd
from conftest import REPO
from tiny_dump import write_tiny_dump


def run(*argv):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def test_cpp_verifies_and_compares_python_dumps(tmp_path, splitcheck):
    a, b, flipped = tmp_path / "a.h5", tmp_path / "b.h5", tmp_path / "flipped.h5"
    write_tiny_dump(a)
    write_tiny_dump(b)
    write_tiny_dump(flipped, flip_bit=True)
    rc, out = run(splitcheck, "verify-dump", a)
    assert rc == 0, out
    rc, out = run(splitcheck, "compare", a, b)
    assert rc == 0 and "equal" in out, out
    rc, out = run(splitcheck, "compare", a, flipped)
    assert rc == 1, out
    assert "layer 1 pre_mlp" in out, out


def test_cpp_finds_one_ulp_in_the_engines_own_dtype_and_names_narrowing(tmp_path, splitcheck):
    """float32 and float16 stored as computed: C++ names a 1-ULP difference at its element
    with the dtype's own bits. Narrowed to bf16 the same pair is equal, and C++ says the
    comparison was after rounding."""
    x = np.zeros((2, 4), np.float32)
    x[1, 2] = np.uint32(0x3D97CF8A).view(np.float32)
    h = np.full((2, 4), 0.5, np.float16)
    big = np.arange((5 << 20) // 4, dtype=np.float32)  # mapped by the C++ comparator

    def dump(path, ulp, dtype=None):
        y, g = x.copy(), h.copy()
        if ulp:
            y.view(np.uint32)[1, 2] += 1
            g.view(np.uint16)[0, 3] += 1
        with sd.DumpWriter(path) as w:
            w.write_layer(0, 3, "attn_out", y, dtype=dtype)
            w.write_layer(0, 3, "mlp_out", g)
            w.write("/forward/0/output", big)
        return path

    a, b = dump(tmp_path / "a.h5", False), dump(tmp_path / "b.h5", True)
    rc, out = run(splitcheck, "verify-dump", a)
    assert rc == 0, out
    rc, out = run(splitcheck, "compare", a, b)
    assert rc == 1, out
    assert "forward 0 layer 3 attn_out token 1 channel 2: 0x3d97cf8a != 0x3d97cf8b" in out, out
    rc, out = run(splitcheck, "compare", dump(tmp_path / "h.h5", False), dump(tmp_path / "i.h5",
                  False))
    assert rc == 0 and "ROUNDING" not in out, out
    na, nb = dump(tmp_path / "na.h5", False, "bfloat16"), dump(tmp_path / "nb.h5", False,
                                                               "bfloat16")
    rc, out = run(splitcheck, "compare", na, nb)
    assert rc == 0, out
    assert "compared AFTER ROUNDING: 1 datasets narrowed by their writer " \
           "(/forward/0/layers/3/attn_out: float32 stored as bfloat16)" in out, out
    # float16 differing by one ULP: named with its 4 hex digits
    rc, out = run(splitcheck, "compare", dump(tmp_path / "f.h5", False, "bfloat16"),
                  dump(tmp_path / "g.h5", True, "bfloat16"))
    assert rc == 1 and "layer 3 mlp_out token 0 channel 3: 0x3800 != 0x3801" in out, out
    assert "AFTER ROUNDING" in out, out


def test_cpp_refuses_a_python_dump_whose_digest_lies(tmp_path, splitcheck):
    import h5py
    path = tmp_path / "lie.h5"
    write_tiny_dump(path)
    with h5py.File(path, "r+") as f:
        f["/forward/0/logits"][0, 0] = np.float32(123.0)
    rc, out = run(splitcheck, "verify-dump", path)
    assert rc == 2 and "logits" in out, out


@pytest.fixture(scope="module")
def cpp_dump(tmp_path_factory):
    from conftest import splitcheck_binary
    binary = splitcheck_binary()
    if binary is None:
        pytest.skip("the splitcheck binary is not built: no C++ dump to read")
    d = tmp_path_factory.mktemp("cpp")
    scenario = json.loads((REPO / "scenarios" / "default.json").read_text())
    scenario["name"] = "python-roundtrip"
    scenario["workload"].update(prompts=1, max_new_tokens=8,
                                file=str(REPO / "scenarios" / scenario["workload"]["file"]))
    scenario.pop("expect", None)
    path = d / "scenario.json"
    path.write_text(json.dumps(scenario))
    out = d / "cpp.h5"
    rc, text = run(binary, "run", path, "--out", out, "--split", "12")
    assert rc == 0, text
    return out


def test_python_reads_cpp_dumps(cpp_dump):
    with sd.DumpReader(cpp_dump) as r:
        assert r.format_version == sd.FORMAT_VERSION  # what the binary writes today
        assert r.verify()  # every digest the C++ side wrote matches Python's XXH64
        assert r.attrs["partition"] == "0-12|12-32"
        trace = r.dispatch(0)
        variants = {(e.op, e.variant) for e in trace}
        assert {("attn_res", "native"), ("attn_res", "fallback")} <= variants
        assert {e.stage for e in trace} == {0, 1}
        first = [e for e in trace if e.layer == 12 and e.site == "pre_attn"]
        assert first and first[0].variant == "native"  # the zero delta at the cut
        stages = r.stages()
        assert stages[0]["layer_end"] == 12 and stages[1]["layer_begin"] == 12
        assert stages[0]["parameter_bytes"] > 0
        assert set(r.spec()) >= {"steps", "gamma", "acceptance_rate", "tokens_per_forward"}
        taps = [d.path for d in r.datasets if d.path.startswith("/forward/0/taps/")]
        assert taps and all(r.read(p).dtype == np.uint16 for p in taps)


def test_python_rewrites_a_cpp_dump_that_cpp_finds_equal(cpp_dump, tmp_path, splitcheck):
    """Python reads every dataset and attribute of C++'s dump and writes them again
    through DumpWriter: `splitcheck compare` finds the copy equal to the original."""
    import h5py
    copy = tmp_path / "copy.h5"
    with sd.DumpReader(cpp_dump) as r, h5py.File(cpp_dump, "r") as raw:
        attrs = r.attrs
        with sd.DumpWriter(copy, **{k: attrs.get(k, "") for k in (
                "scenario", "scenario_sha256", "model_sha256", "partition", "backend",
                "level", "created", "volatile")}) as w:
            for d in r.datasets:
                w.write(d.path, r.read(d.path), dtype=d.dtype)
            def copy_attrs(name, obj):
                for k, v in obj.attrs.items():
                    if k not in ("dtype", "order", "digest"):
                        w.set_attr("/" + name, k, v)
            raw.visititems(copy_attrs)
    rc, out = run(splitcheck, "compare", cpp_dump, copy)
    assert rc == 0, out
    rc, out = run(splitcheck, "verify-dump", copy)
    assert rc == 0, out
