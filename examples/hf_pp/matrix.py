#!/usr/bin/env python3
"""Every decoder family of examples/hf_pp swept at every split point, in one command.

    python3 examples/hf_pp/matrix.py --splitcheck build/splitcheck [--jobs 4] [--sweeps 4]
        [--layers 4] [--families llama,gemma2] [--dtypes float32,bfloat16] [--out DIR]
        [--deadline S] [--scenarios scenarios/external-hf-pp-*.json]

For each family (models.MATRIX_FAMILIES) and dtype, two sweeps through splitcheck's
runner (`splitcheck sweep SCENARIO --jobs N`, the product's own comparison): PP=2 at
every split point and PP=3 at every pair of cuts (`"splits": "all"`: over L layers the
pairwise cover of C(L-1, 2) partitions is every pair), each against the family's own
PP=1 run (made once, by the PP=2 sweep; the PP=3 sweep takes it as its `engine.golden`)
(prefill of 16 tokens, 4 greedy decode steps with the model's cache), bit for bit in
every recorded tensor, in the model's own dtype. `--sweeps` family sweeps run side by
side, each with `--jobs` engine runs at once. Each family whose model the adapter
refuses (models.REFUSED_FAMILIES) is run once at PP=1 to show the refusal.

Prints a line of the features each family's model has, then one row per family and
dtype: split points identical (PP=2, PP=3), datasets compared per case, the sweeps'
seconds, the verdict and whether each sweep met its expect block (every split point
identical). Writes the scenarios, each sweep's reports (no dumps) and matrix.json under
--out. Exit 0 when every sweep met its expect block and every refused family was refused,
else 1.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "python"))
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import models  # noqa: E402

SEED = 7
ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}


def scenario(family, dtype, layers, pp, expected, golden=None):
    """The runner scenario of one family sweep (every split point identical to PP=1; its
    PP=1 dump taken from `golden` when given)."""
    s = {
        "description": f"examples/hf_pp matrix: {family} ({dtype}, {layers} layers) at PP={pp}, "
                       f"every split point against PP=1 (examples/hf_pp/matrix.py)",
        "engine": {
            "command": [sys.executable, str(HERE / "run.py"), "--family", family,
                        "--layers", str(layers), "--dtype", dtype, "--pp", "{pp}",
                        "--cuts", "{cuts}", "--out", "{out}", "--seed", "{seed}",
                        "--scenario", "{scenario}"],
            "seed": SEED, "cwd": str(REPO), "env": ENV, "timeout_s": 300,
            "num_hidden_layers": layers},
        "partitions": {"pp": pp, "splits": "all"},
        "expect": {"verdict": "conformant", "identical_splits": expected},
    }
    if golden:
        s["engine"]["golden"] = str(golden)
    return s


def case_line(c):
    """Where a case that is not a pass diverged first, in a few words."""
    fd, dp = c.get("first_divergence") or {}, c.get("dispatch") or {}
    checks = ",".join(c.get("failed_checks", []))
    if fd:
        where = f"{fd.get('path')} ({fd.get('mismatches')} elements)"
    elif dp:
        where = (f"dispatch forward {dp.get('forward')} layer {dp.get('layer')}: "
                 f"{dp.get('expected')} at PP=1, {dp.get('actual')} here")
    else:
        where = (c.get("message") or "")[:300]
    cause = f" (cause: {c['cause']})" if c.get("cause") else ""
    return f"{c.get('key')}: {c.get('verdict')} [{checks}] {where}{cause}"


def run_sweep(args, name, path, lock, detail=False, keep_pp1=None):
    """One sweep of a scenario file: {cases, identical, datasets, seconds, verdict, expect,
    first, diverged}."""
    report = args.out / "reports" / name
    work = args.work / name
    shutil.rmtree(report, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.monotonic()
    left = args.deadline - (t0 - args.start) if args.deadline else args.timeout
    if left < 20:
        row = {"name": name, "cases": 0, "identical": 0, "datasets": [], "seconds": 0.0,
               "verdict": "not run", "expect": "NOT MET: not run (--deadline)", "first": "",
               "diverged": []}
        with lock:
            print(f"   {name}: not run (--deadline {args.deadline} s)", flush=True)
        return row
    try:
        r = subprocess.run([args.splitcheck, "sweep", str(path), "--jobs", str(args.jobs),
                            "--report", str(report), "--work-dir", str(work)],
                           capture_output=True, text=True, timeout=min(args.timeout, left))
        rc, log = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = "timeout", f"stopped after {min(args.timeout, left):.0f} s: {e}"
    seconds = time.monotonic() - t0
    (args.out / "reports" / f"{name}.log").write_text(log)
    row = {"name": name, "cases": 0, "identical": 0, "datasets": [], "seconds": seconds,
           "verdict": f"exit {rc}", "expect": "no report", "first": "", "diverged": []}
    try:
        rep = json.loads((report / "report.json").read_text())
    except (OSError, ValueError):
        row["first"] = log.strip().splitlines()[-1][:300] if log.strip() else ""
        with lock:
            print(f"   {name}: no report (exit {rc}); log tail:\n" +
                  "\n".join("      " + x[:300] for x in log.strip().splitlines()[-15:]),
                  flush=True)
        return row
    cases = [c for c in rep.get("cases", []) if c.get("key") != "pp1"]
    row["cases"] = len(cases)
    row["identical"] = sum(c.get("verdict") == "pass" for c in cases)
    row["datasets"] = sorted({int(c.get("datasets_compared", 0)) for c in cases})
    row["verdict"] = rep.get("verdict", "?")
    fails = rep.get("expect", {}).get("failures", [])
    row["expect"] = "met" if not fails and rc in (0, 1) else (
        "NOT MET: " + ("; ".join(fails) or f"exit {rc}"))[:400]
    row["diverged"] = [case_line(c) for c in cases if c.get("verdict") != "pass"]
    row["first"] = row["diverged"][0] if row["diverged"] else ""
    if keep_pp1 is not None and (work / "pp1.h5").is_file():
        shutil.copyfile(work / "pp1.h5", keep_pp1)
    shutil.rmtree(work, ignore_errors=True)
    with lock:
        print(f"   {name}: {row['identical']}/{row['cases']} identical, datasets "
              f"{row['datasets']}, {seconds:.0f} s, {row['verdict']}, expect {row['expect']}",
              flush=True)
        for line in row["diverged"][: (len(row["diverged"]) if detail else 2)]:
            print(f"      {line}", flush=True)
        if rc not in (0, 1):
            print("\n".join("      | " + x[:300] for x in log.strip().splitlines()[-12:]),
                  flush=True)
    return row


def sweep(args, family, dtype, pp, lock, golden=None, keep_pp1=None):
    """One family sweep at PP=pp, every split point expected identical."""
    from math import comb
    n = comb(args.layers - 1, pp - 1)
    name = f"{family}-{dtype}-pp{pp}"
    path = args.out / "scenarios" / f"{name}.json"
    path.write_text(json.dumps(scenario(family, dtype, args.layers, pp, n, golden), indent=2))
    return dict(run_sweep(args, name, path, lock, keep_pp1=keep_pp1), pp=pp)


def family_rows(args, family, dtype, lock):
    """The family's PP=2 sweep, then its PP=3 sweep judged against the PP=1 dump the PP=2
    sweep made (one PP=1 run a family and dtype)."""
    pp1 = args.work / f"{family}-{dtype}-pp1.h5"
    rows = [sweep(args, family, dtype, 2, lock, keep_pp1=pp1)]
    rows.append(sweep(args, family, dtype, 3, lock, golden=pp1 if pp1.is_file() else None))
    return {"family": family, "dtype": dtype, "sweeps": rows}


def refused(family, layers):
    """(refused as it should be, the message) of a PP=1 run of a family the adapter refuses."""
    out = f"/tmp/splitcheck-matrix-{family}.h5"
    r = subprocess.run([sys.executable, str(HERE / "run.py"), "--family", family, "--layers",
                        str(layers), "--pp", "1", "--cuts", "", "--out", out],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, **ENV))
    msg = (r.stderr.strip().splitlines() or [""])[-1]
    return r.returncode == 2 and not os.path.exists(out), f"exit {r.returncode}: {msg}"


def table(results):
    head = (f"{'family':<12} {'dtype':<9} {'PP=2 identical':<15} {'PP=3 identical':<15} "
            f"{'datasets/case':<14} {'seconds':>7}  verdict")
    lines = [head, "-" * len(head)]
    for r in results:
        pp2, pp3 = r["sweeps"]
        ds = sorted(set(pp2["datasets"]) | set(pp3["datasets"]))
        met = all(s["expect"] == "met" for s in r["sweeps"])
        verdicts = ",".join(sorted({s["verdict"] for s in r["sweeps"]}))
        lines.append(
            f"{r['family']:<12} {r['dtype']:<9} {pp2['identical']}/{pp2['cases']:<13} "
            f"{pp3['identical']}/{pp3['cases']:<13} "
            f"{'-'.join(str(d) for d in (ds[:1] + ds[-1:] if len(ds) > 1 else ds)) or '?':<14} "
            f"{pp2['seconds'] + pp3['seconds']:7.0f}  {verdicts}, expect "
            f"{'met' if met else 'NOT MET'}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--splitcheck", required=True, help="the splitcheck binary")
    ap.add_argument("--jobs", type=int, default=4, help="engine runs at once per sweep")
    ap.add_argument("--sweeps", type=int, default=4, help="family sweeps at once")
    ap.add_argument("--layers", type=int, default=4,
                    help="decoder layers of every family's model (default 4: PP=2 at 3 split "
                         "points, PP=3 at the 3 pairs of cuts)")
    ap.add_argument("--families", default=",".join(models.MATRIX_FAMILIES))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a sweep may take")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds from the start after which no sweep runs on (a sweep cut "
                         "short, or not started, is a row that did not meet its expect)")
    ap.add_argument("--out", default=str(REPO / "build" / "hf-matrix"))
    ap.add_argument("--scenarios", nargs="*", default=[],
                    help="committed scenario files swept in the same pool (their own expect "
                         "blocks; each diverged case's first divergence printed)")
    args = ap.parse_args(argv)
    args.out = pathlib.Path(args.out).resolve()
    args.work = args.out / "work"
    args.splitcheck = str(pathlib.Path(args.splitcheck).resolve())
    args.start = time.monotonic()
    for d in ("scenarios", "reports", "work"):
        (args.out / d).mkdir(parents=True, exist_ok=True)
    families = [f for f in args.families.split(",") if f]
    dtypes = [d for d in args.dtypes.split(",") if d]
    import torch
    import transformers
    print(f"examples/hf_pp matrix: torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {args.layers} layers, seed {SEED}, "
          f"{args.sweeps} sweeps x --jobs {args.jobs}", flush=True)
    print("== the models", flush=True)
    for family in families:
        try:
            model = models.build_model(family, SEED, num_layers=args.layers)
            print(f"   {family}: {models.describe(model)}", flush=True)
        except Exception as e:  # a family this transformers cannot build: its sweeps say so
            print(f"   {family}: cannot build: {type(e).__name__}: {e}", flush=True)
    print("== sweeps", flush=True)
    t0 = time.monotonic()
    lock = threading.Lock()
    items = [(f, d) for d in dtypes for f in families]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.sweeps) as pool:
        extra = [pool.submit(run_sweep, args, pathlib.Path(p).stem, pathlib.Path(p).resolve(),
                             lock, True) for p in args.scenarios]
        futures = [pool.submit(family_rows, args, f, d, lock) for f, d in items]
        results = [fu.result() for fu in futures]
        scenario_rows = [fu.result() for fu in extra]
    wall = time.monotonic() - t0
    print("== refused families", flush=True)
    refusals = []
    for family in models.REFUSED_FAMILIES:
        ok, msg = refused(family, args.layers)
        refusals.append({"family": family, "refused": ok, "message": msg})
        print(f"   {family}: {'refused' if ok else 'NOT REFUSED'}: {msg}", flush=True)
    print(f"== matrix ({len(items)} family sweeps x 2, {wall:.0f} s wall)", flush=True)
    text = table(results)
    print(text, flush=True)
    (args.out / "matrix.txt").write_text(text + "\n")
    if scenario_rows:
        print("== committed scenarios", flush=True)
        for r in scenario_rows:
            print(f"   {r['name']:<46} {r['verdict']:<11} {r['identical']}/{r['cases']} identical, "
                  f"{r['seconds']:.0f} s, expect {r['expect']}" +
                  (f"; first: {r['first']}" if r["first"] else ""), flush=True)
    (args.out / "matrix.json").write_text(json.dumps(
        {"layers": args.layers, "wall_s": wall, "results": results, "refused": refusals,
         "scenarios": scenario_rows}, indent=1))
    shutil.rmtree(args.work, ignore_errors=True)
    good = all(s["expect"] == "met" for r in results for s in r["sweeps"])
    good = good and all(r["expect"] == "met" for r in scenario_rows)
    return 0 if good and all(r["refused"] for r in refusals) else 1


if __name__ == "__main__":
    sys.exit(main())
