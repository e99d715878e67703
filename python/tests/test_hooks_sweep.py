"""A vLLM-shaped engine recorded through record_stage (vllm_shaped.py: a `layers` list with
PPMissingLayer outside [start_layer, end_layer), stages writing part files), swept by the
runner at every split point of 6 layers: conformant when correct; with a stage that
restarts its positions, every split point diverges at the first decode forward, at the
second stage's first layer, `attn_out`, and nowhere earlier.

Run: /usr/bin/python3 -m pytest python/tests/test_hooks_sweep.py (12 engine runs of ~1 s)."""

import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the engine is a PyTorch model")

HERE = pathlib.Path(__file__).resolve().parent
LAYERS = 6


def scenario(tmp_path, name, flags, expect):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({
        "description": f"python/tests/vllm_shaped.py {' '.join(flags)}".strip(),
        "engine": {"command": [sys.executable, str(HERE / "vllm_shaped.py"), "--pp", "{pp}",
                               "--cuts", "{cuts}", "--out", "{out}", *flags],
                   "cwd": ".", "env": {"OMP_NUM_THREADS": "1"}, "timeout_s": 120,
                   "num_hidden_layers": LAYERS},
        "partitions": {"pp": 2, "splits": "all"},
        "expect": expect,
    }, indent=1))
    return path


def sweep(splitcheck, path, report):
    r = subprocess.run([splitcheck, "sweep", str(path), "--jobs", "2", "--report", str(report)],
                       capture_output=True, text=True, timeout=300)
    print(r.stdout, r.stderr)
    return r, json.loads((report / "report.json").read_text())


def test_every_split_point_is_identical_to_pp1(splitcheck, tmp_path):
    path = scenario(tmp_path, "vllm-shaped", [],
                    {"verdict": "conformant", "identical_splits": LAYERS - 1})
    r, rep = sweep(splitcheck, path, tmp_path / "rep")
    assert r.returncode == 0, r.stdout + r.stderr
    assert rep["expect"]["met"], rep["expect"]
    assert rep["counts"]["total"] == LAYERS - 1
    assert [c["verdict"] for c in rep["cases"]] == ["pass"] * (LAYERS - 1)


def test_restarted_positions_are_caught_at_the_second_stages_first_layer(splitcheck, tmp_path):
    path = scenario(tmp_path, "vllm-shaped-restart-positions", ["--bug-restart-positions"],
                    {"verdict": "divergent", "identical_splits": 0, "caught_by": "tensors"})
    r, rep = sweep(splitcheck, path, tmp_path / "rep")
    assert r.returncode == 1, r.stdout + r.stderr
    assert rep["expect"]["met"], rep["expect"]
    for case in rep["cases"]:
        cut = case["cuts"][0]
        first = case["first_divergence"]
        assert case["verdict"] == "diverged", case["message"]
        assert (first["forward"], first["layer"], first["site"]) == (1, cut, "attn_out"), case
        assert first["path"] == f"/forward/1/layers/{cut}/attn_out"
