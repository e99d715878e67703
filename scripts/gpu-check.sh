#!/usr/bin/env bash
# The CUDA backend on a GPU machine, in one go (within 10 minutes on one H200):
# configure with CUDA, build, run the CUDA tests, sweep k3-tiny on the GPU (all 31 split
# points, every stage computing every call), run every fault scenario on the GPU,
# run compute-sanitizer (memcheck, racecheck, synccheck) on the kernel tests, check that no
# kernel reads device memory its maker left uncleared (uncleared-fill), measure the
# GPU properties (decode vs prefill, verify vs decode, chunked vs whole prefill of
# k3-tiny), run the approximate lane (CPU and CUDA against the float64 judge), write and
# verify the GPU golden of the default scenario (into $OUT/golden/ when OUT is set), run
# the benchmarks, sweep serving (scenarios/serving.json at 3 split points and the three
# serving fault scenarios) on the GPU, and print a results table last.
#   scripts/gpu-check.sh [--build-dir DIR] [--jobs N]   (GPU_CHECK_ONLY=REGEX: only those steps)
# k3-shape (its 92-split sweep, one PP=1 forward's speed, and the properties on a 16-token
# prompt) runs too, unless K3_SHAPE=0:
#   GPU_CHECK_ONLY=k3-shape scripts/gpu-check.sh   (build + the k3-shape steps only)
#   GPU_CHECK_ONLY=sweep-k3-shape / =k3-shape-forward / =properties-k3-shape   (one of them;
#   k3-shape-forward-no-side: the forward with SPLITCHECK_CUDA_SIDE_STREAM=0)
#   GPU_CHECK_ONLY=serving-cuda scripts/gpu-check.sh   (build + the serving tests and sweeps only)
# External engines on the GPU, through the runner protocol (needs python3 with torch and
# transformers; about 7 minutes on one H100, the build only the splitcheck binary):
#   GPU_CHECK_ONLY=external scripts/gpu-check.sh   (examples/torch_pp on CUDA, clean and its
#   two bugs; examples/hf_pp on Llama and DeepSeek-V3, clean, and its nine bugs; PyTorch's
#   pipelining, GPipe, 1F1B, full-batch PP=1; the family matrix of 12 decoder families,
#   GPU_CHECK_ONLY=external-hf-matrix alone; what recording costs a decode step)
# Libraries missing on the machine (xtensor, xtl, libxxhash) are taken from .xt/ when it
# holds Debian's packages unpacked (dpkg -x). Exit 0 when every step passed, else 1.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-gpu"
jobs="$(nproc)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    *) echo "gpu-check: unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$build"
log="$build/gpu-check"
mkdir -p "$log"
rows=()
failed=0

# step NAME BUDGET_S COMMAND...: runs it under a time limit, logs it, adds a table row.
step() {
  local name="$1" budget="$2"; shift 2
  # GPU_CHECK_ONLY (a regex): run only the steps it matches, besides configure and build.
  if [[ -n "${GPU_CHECK_ONLY:-}" && ! "$name" =~ ^(configure|build)$ && ! "$name" =~ $GPU_CHECK_ONLY ]]; then
    return 0
  fi
  local t0=$SECONDS rc
  echo "== gpu-check: $name"
  timeout "$budget" "$@" >"$log/$name.log" 2>&1
  rc=$?
  local dt=$((SECONDS - t0))
  local verdict="ok" shown=3
  # A failed row names its log instead of the step's detail (which says what success is),
  # and the log's last 40 lines are printed, not 3.
  [[ $rc -eq 0 ]] || { verdict="FAILED (exit $rc)"; failed=1; detail="see $log/$name.log"; shown=40; }
  [[ $rc -eq 124 ]] && verdict="FAILED (over ${budget}s)"
  rows+=("$(printf '%-34s %-20s %6ss  %s' "$name" "$verdict" "$dt" "${detail:-}")")
  detail=""
  tail -n "$shown" "$log/$name.log"
  return $rc
}

export CMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}${CMAKE_PREFIX_PATH:+:}$root/.xt/usr"
if ! pkg-config --exists libxxhash 2>/dev/null && [[ -d "$root/.xt/usr/include" ]]; then
  # Debian's libxxhash, unpacked: a .pc pointing at it.
  mkdir -p "$build/pc"
  sed "s|^prefix=.*|prefix=$root/.xt/usr|" "$root/.xt/usr/lib/x86_64-linux-gnu/pkgconfig/libxxhash.pc" \
    >"$build/pc/libxxhash.pc"
  export PKG_CONFIG_PATH="$build/pc${PKG_CONFIG_PATH:+:}${PKG_CONFIG_PATH:-}"
  export LD_LIBRARY_PATH="$root/.xt/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:}${LD_LIBRARY_PATH:-}"
fi
nvcc=/usr/local/cuda/bin/nvcc
[[ -x $nvcc ]] || nvcc="$(command -v nvcc || true)"

# (-Wno-dangling-reference: GCC 13's false positives in the existing tests; GCC 12 has no
# such warning.)
step configure 120 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSPLITCHECK_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CXX_FLAGS=-Wno-dangling-reference || { printf '%s\n' "${rows[@]}"; exit 1; }
# Only the external engines' steps (GPU_CHECK_ONLY=external...) need only the splitcheck binary.
targets=(splitcheck splitcheck_tests cuda_benchmark k3_forward_benchmark serving_benchmark)
if [[ -n "${GPU_CHECK_ONLY:-}" ]] && ! [[ "cuda-tests serving-cuda-tests sanitizer-memcheck
  benchmarks serving-throughput k3-shape-forward" =~ $GPU_CHECK_ONLY ]]; then
  targets=(splitcheck)
fi
step build 300 cmake --build "$build" -j"$jobs" --target "${targets[@]}" \
  || { printf '%s\n' "${rows[@]}"; exit 1; }

gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# (The serving tests on the GPU run below, as serving-cuda-tests.)
step cuda-tests 180 "$build/splitcheck_tests" \
  --gtest_filter='Cuda*:GateTest.BackendOr*-CudaServingTest.*' --gtest_brief=0
grep -h "\[ measured \]" "$log/cuda-tests.log" | sed 's/^/   /' >"$log/measured.txt"
grep -E "SKIPPED|FAILED" "$log/cuda-tests.log" | head -5

# The committed scenarios with backend "cuda" (workload paths made absolute). A serving
# scenario (SPEC 3.4) sweeping every split point keeps 3 of them (4, 13, 24: the fault
# scenarios' cuts), and expects no batch invariance: CUDA does not promise it (the sweep
# measures it and prints "N of M requests equal themselves served alone"). The external
# engines' scenarios (external-*, but the CLI's own) go to scenarios-external/ with their
# cwd made absolute; torch_pp's run every stage on the GPU (--device cuda).
mkdir -p "$build/scenarios-cuda" "$build/scenarios-external"
python3 - "$root" "$build/scenarios-cuda" "$build/scenarios-external" <<'PY'
import json, os, sys
root, cuda_out, external_out = sys.argv[1:4]
for name in sorted(os.listdir(os.path.join(root, "scenarios"))):
    if not name.endswith(".json") or name == "scenario.schema.json":
        continue
    with open(os.path.join(root, "scenarios", name)) as f:
        s = json.load(f)
    out = cuda_out
    if name.startswith("external-") and name != "external-self.json":
        out, e = external_out, s["engine"]
        e["cwd"] = os.path.normpath(os.path.join(root, "scenarios", e.get("cwd", ".")))
        if name.startswith("external-torch-pp"):
            e["command"] = ["python3"] + e["command"][1:] + ["--device", "cuda"]
            name = name.replace("external-torch-pp", "external-torch-pp-cuda")
    else:
        if "serving" in s:
            expect = s.get("expect", {})
            expect.pop("batch_invariant", None)
            parts = s.setdefault("partitions", {})
            if parts.get("splits", "all") == "all":
                parts["splits"] = [[4], [13], [24]]
                if "identical_splits" in expect:
                    expect["identical_splits"] = 3
        s["backend"] = "cuda"
        wl = s.get("workload", {})
        if "file" in wl and not os.path.isabs(wl["file"]):
            wl["file"] = os.path.join(root, "scenarios", wl["file"])
    with open(os.path.join(out, name), "w") as f:
        json.dump(s, f, indent=2)
PY

detail="all 31 split points, PP=2"
step sweep-k3-tiny-cuda 240 "$build/splitcheck" sweep "$build/scenarios-cuda/default.json" \
  --threads 4 --report "$log/report-default"
grep -E "identical|conformant|divergent|split points" "$log/sweep-k3-tiny-cuda.log" | tail -3

# A fault scenario passes when its sweep ran (exit 0 or 1: a fault is a divergence) and
# its expect block is met (report.json: expect.failures empty).
# (Further arguments replace --threads 4: the external engines' --jobs N.)
sweep_meets_expect() {
  local f="$1" report="$2" rc
  shift 2
  [[ $# -gt 0 ]] || set -- --threads 4
  "$build/splitcheck" sweep "$f" "$@" --report "$report"
  rc=$?
  [[ $rc -le 1 ]] || return $rc
  python3 - "$report/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fails = r.get("expect", {}).get("failures", [])
for f in fails:
    print("expect not met:", f)
sys.exit(1 if fails else 0)
PY
}

export -f sweep_meets_expect
export build
for f in "$build"/scenarios-cuda/fault-*.json; do
  grep -q '"serving"' "$f" && continue  # the serving faults: below
  n="$(basename "$f" .json)"
  detail="caught on the GPU as its expect block says"
  step "$n" 90 bash -c 'sweep_meets_expect "$@"' _ "$f" "$log/report-$n"
done

# Serving on the GPU (SPEC 3.4, inproc): scenarios/serving.json at 3 split points, then
# the three serving faults (SPEC 6), each swept as committed (16 requests, 3 split
# points) and judged by its expect block. One verdict line each goes to the final table.
serving_rows=()
# The serving tests on the GPU: a small serving sweep bit-identical on cuda as on cpu, and
# each serving fault caught on cuda by the check SPEC 6 names, where it names.
rm -f "$log/serving-cuda-tests.log"
step serving-cuda-tests 240 "$build/splitcheck_tests" --gtest_filter='CudaServingTest.*' \
  --gtest_brief=0
if [[ -f "$log/serving-cuda-tests.log" ]]; then
  grep -h "\[ measured \]" "$log/serving-cuda-tests.log" | sed 's/^/   /' >>"$log/measured.txt"
  if grep -q "SKIPPED" "$log/serving-cuda-tests.log"; then
    echo "   (serving tests skipped: no usable GPU, not a pass)"
    rows[-1]="${rows[-1]/"$(printf '%-20s' ok)"/"$(printf '%-20s' 'SKIPPED (no GPU)')"}"
    failed=1
  fi
fi
for n in serving fault-spec-rollback-last-stage-only fault-batch-stale-microbatch-state \
  fault-prefill-chunk-token-dropped; do
  f="$build/scenarios-cuda/$n.json"
  detail="$n on cuda, judged by its expect block"
  rm -rf "$log/report-serving-cuda-$n"
  step "serving-cuda-$n" 300 bash -c 'sweep_meets_expect "$@"' _ "$f" \
    "$log/report-serving-cuda-$n"
  [[ -f "$log/report-serving-cuda-$n/report.json" ]] || continue
  serving_rows+=("$(python3 - "$log/report-serving-cuda-$n/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
name = r.get("scenario", {}).get("name", "?")
cases = r.get("cases", [])
faults = r.get("scenario", {}).get("resolved", {}).get("faults", [])
same = [c["key"] for c in cases if c.get("verdict") == "pass"]
diverged = [c for c in cases if c.get("verdict") == "diverged"]
other = [f"{c['key']} {c.get('verdict')}" for c in cases if c.get("verdict") not in ("pass", "diverged")]
line = f"{name:<38} {r.get('verdict', '?'):<10} {len(same)}/{len(cases)} identical"
if diverged:
    checks = sorted({x for c in diverged for x in c.get("failed_checks", [])})
    d = diverged[0].get("first_divergence", {})
    line += (f", diverged {','.join(c['key'] for c in diverged)} (checks: {','.join(checks)};"
             f" first at {diverged[0]['key']} forward {d.get('forward')} request"
             f" {d.get('request')} layer {d.get('layer')})")
if other:
    line += ", " + ", ".join(other)
bi = r.get("serving", {}).get("batch_invariance", {})
line += (f"; alone {bi.get('identical')}/{bi.get('requests')}"
         f"{' (measured)' if bi.get('required') is False else ''}")
fails = r.get("expect", {}).get("failures", [])
line += "; expect " + ("met" if not fails else "NOT MET: " + "; ".join(fails))
if faults:
    line += f"  [fault {','.join(faults)}]"
print(line)
PY
)")
done

# Serving throughput on the GPU: scenarios/serving.json's 16 requests by the PP=1 engine,
# 8 in flight against one at a time, generated tokens per wall second of each (medians of
# 5 runs, each side served once unmeasured first; target: batched at least 4x) and the
# spread of the 5 ratios; then a step's time split into the host's
# own work and its waits for the device, inside the step and after it.
detail="16 requests, 8 in flight vs one at a time"
rm -f "$log/serving-throughput.json"
step serving-throughput 240 "$build/serving_benchmark" --benchmark_filter='/gpu:1' \
  --benchmark_out="$log/serving-throughput.json" --benchmark_out_format=json
serving_tp=""
if [[ -s "$log/serving-throughput.json" ]]; then
  serving_tp="$(python3 - "$log/serving-throughput.json" <<'PY'
import json, sys
for b in json.load(open(sys.argv[1])).get("benchmarks", []):
    shape = ("one micro-batch of up to 64 tokens a step" if "shared_forward:1" in b["name"]
             else "the committed scenario: two micro-batches of up to 40 tokens")
    if b.get("run_type", "iteration") != "iteration":
        continue
    if "batched_host_ms_per_step" in b:  # BM_ServingStepHostAndDevice
        print(f"   {shape}, a step's time (the host's work + its waits for the device inside the step + after it"
              " + outside the steps: drafters, scheduler):")
        print("   " + ", ".join(
            f"{label} {b[k + '_host_ms_per_step']:.2f} + {b[k + '_wait_inside_ms_per_step']:.2f} + "
            f"{b[k + '_wait_after_ms_per_step']:.2f} + {b.get(k + '_outside_ms_per_step', float('nan')):.2f} ms"
            for label, k in (("batched", "batched"), ("one at a time", "one_at_a_time")))
              + " (waits near 0: the host bounds the step; else the device, for that long)")
        continue
    if "batched_tokens_per_s" not in b:
        continue
    x = b["speedup_wall"]
    print(f"   {shape}:")
    print(f"   batched (8 in flight) {b['batched_tokens_per_s']:.1f} tokens/s, one at a time "
          f"{b['one_at_a_time_tokens_per_s']:.1f} tokens/s: {x:.2f}x (target 4x: "
          f"{'met' if x >= 4 else 'NOT met'})"
          + (f"; the iterations' ratios {b['speedup_wall_min']:.2f}x to {b['speedup_wall_max']:.2f}x"
             if "speedup_wall_min" in b else ""))
    if "bound" in b:
        print(f"   the schedule's bound: {b['forwards_one_at_a_time']:.0f} forwards one at a time, "
              f"{b['forwards_batched']:.0f} batched: at most {b['bound']:.2f}x if a forward took as "
              f"long whatever it carries ({x / b['bound']:.0%} of it reached)")
PY
)"
fi

# compute-sanitizer on the CUDA kernel tests (the largest, 1100 tokens a call, left out):
# memcheck, racecheck (shared memory), synccheck (barriers). Absent: "not installed",
# never a pass.
sanitizer=/usr/local/cuda/bin/compute-sanitizer
[[ -x $sanitizer ]] || sanitizer="$(command -v compute-sanitizer || true)"
kernel_tests='CudaAttnResTest.*:CudaOpsTest.*:CudaSegmentedAttentionTest.*:CudaAddBf16Test.*:CudaAddF32Test.*:CudaTcGemmTest.*:CudaMarkovTest.*:CudaGroupOpsTest.*-CudaAttnResTest.ATokensBits*'
for tool in memcheck racecheck synccheck; do
  if [[ -z $sanitizer ]]; then
    [[ -n "${GPU_CHECK_ONLY:-}" && ! "sanitizer-$tool" =~ $GPU_CHECK_ONLY ]] && continue
    rows+=("$(printf '%-34s %-20s %6ss  %s' "sanitizer-$tool" "not installed" 0 \
      "no compute-sanitizer at /usr/local/cuda/bin or on PATH")")
    continue
  fi
  detail="$tool on $kernel_tests"
  rm -f "$log/sanitizer-$tool.log"  # a log below is this run's (the step may be filtered out)
  step "sanitizer-$tool" 240 "$sanitizer" --tool "$tool" --error-exitcode 1 \
    "$build/splitcheck_tests" --gtest_filter="$kernel_tests"
  if [[ -f "$log/sanitizer-$tool.log" ]]; then
    grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$log/sanitizer-$tool.log" | tail -1
    if grep -q "SKIPPED" "$log/sanitizer-$tool.log"; then
      echo "   (tests skipped: no usable GPU, not a pass)"
      rows[-1]="${rows[-1]/"$(printf '%-20s' ok)"/"$(printf '%-20s' 'SKIPPED (no GPU)')"}"
      failed=1
    fi
  fi
done

# Device tensors made for overwriting (Tensor::for_overwrite) are not cleared: a kernel
# that read a byte its maker did not write would read whatever the pool held. Each of
# k3-tiny's PP=1 runs below (the default scenario with every tensor, the serving scenario's
# batched steps with layers) runs twice, that memory filled with 0x00 and then with 0xff
# (SPLITCHECK_CUDA_UNCLEARED_FILL), and the two dumps must be equal bit for bit.
# (compute-sanitizer's initcheck cannot judge this: it does not see cuBLASLt's stores on
# this GPU and reports every read of a cuBLASLt product. Its negative control here is
# CudaRuntimeTest.TwoFillsOfUnclearedMemoryShowAReadOfBytesNobodyWrote, among cuda-tests.)
uncleared_fill() {
  local name level fill rc=0
  for name in default serving; do
    level=full
    [[ $name == serving ]] && level=layer
    python3 - "$build/scenarios-cuda/$name.json" "$log/uncleared-$name.json" "$level" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("engine", {})["dump_level"] = sys.argv[3]
json.dump(s, open(sys.argv[2], "w"), indent=2)
PY
    for fill in 0x00 0xff; do
      SPLITCHECK_CUDA_UNCLEARED_FILL=$fill "$build/splitcheck" run "$log/uncleared-$name.json" \
        --out "$log/uncleared-$name-$fill.h5" >/dev/null || return 1
    done
    local said
    said="$("$build/splitcheck" compare "$log/uncleared-$name-0x00.h5" "$log/uncleared-$name-0xff.h5")" ||
      rc=1
    echo "$name ($level dumps), fill 0x00 against 0xff: ${said%%$'\n'*}"
    rm -f "$log/uncleared-$name-0x00.h5" "$log/uncleared-$name-0xff.h5"
  done
  return $rc
}
detail="k3-tiny default (full) and serving (layer) dumps equal under fills 0x00 and 0xff"
export -f uncleared_fill
export build log
step uncleared-fill 240 bash -c uncleared_fill

# Properties (not PP faults): a token's logits vs its forward's row count, on the GPU.
detail="see properties: below"
rm -f "$log/properties.json"
step properties-k3-tiny-cuda 120 "$build/splitcheck" properties \
  "$build/scenarios-cuda/default.json" --json "$log/properties.json"
# format_props FILE: the properties report FILE as lines of the final table.
format_props() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"   {r['scenario']} on {r['backend']}: {r['prompt_tokens']} prompt tokens, "
      f"h {r['split_at']}, gamma {r['gamma']}, chunk {r['chunk']}")
for p in r["properties"]:
    print(f"   {p['name']:<18} rows {p['rows_differing']}/{p['rows']} differ "
          f"({100 * p['fraction_rows_differing']:.1f}%), elements "
          f"{p['elements_differing']}/{p['elements']} "
          f"({100 * p['fraction_elements_differing']:.4f}%), argmax changed in "
          f"{p['argmax_changed']} rows, max |diff| {p['max_abs_diff']:.3g}"
          f"{'  IDENTICAL' if p['identical'] else ''}")
PY
}
props=""
[[ -s "$log/properties.json" ]] && props="$(format_props "$log/properties.json")"
# The approximate lane: every op of the default scenario on the inputs the PP=1 engine
# feeds it, CPU and CUDA each against the float64 judge, and CPU against CUDA bit for bit
# (the exact lane, expected to differ). Per-op figures go to the final table.
detail="CPU and CUDA vs float64, default scenario"
step approx-lane 240 "$build/splitcheck" approx "$root/scenarios/default.json" --backend both \
  --json "$log/approx.json"
python3 - "$log/approx.json" >"$log/approx.txt" 2>/dev/null <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
for d, t in r["thresholds"].items():
    print(f"   threshold {d}: max_rel {t['max_rel_error']:.4g}, beyond-rounding <= {100 * t['max_beyond_rounding_fraction']:.0f}%")
print(f"   {'row':<26} {'cpu max_rel':>11} {'cpu beyond':>10} {'cuda max_rel':>12} {'cuda beyond':>11} {'exact differ':>16}  closer")
for row in r["rows"]:
    c, g, x = row.get("cpu", {}), row.get("cuda", {}), row.get("exact_lane", {})
    mark = "" if c.get("within_lane", True) and g.get("within_lane", True) else "  OUTSIDE"
    print(f"   {row['row']:<26} {c.get('max_rel_error', float('nan')):>11.3g} "
          f"{100 * c.get('beyond_rounding_fraction', float('nan')):>9.2f}% "
          f"{g.get('max_rel_error', float('nan')):>12.3g} "
          f"{100 * g.get('beyond_rounding_fraction', float('nan')):>10.2f}% "
          f"{x.get('differing', -1):>7}/{x.get('elements', -1):<8}  {row.get('closer', '')}{mark}")
print(f"   within the lane: {r['within']}")
PY

# GPU goldens: the default scenario (k3-tiny, PP=1) on cuda, written with the GPU's
# fingerprint into $OUT/golden/ (or the log dir) for the lead to commit under
# golden/cuda/, then verified on the spot (a second run, compared bit for bit).
# GOLDEN_REASON: the reason recorded with it (why the GPU's bits changed).
golden_out="${OUT:-$log}/golden"
detail="default on cuda, PP=1 -> $golden_out"
step golden-cuda-update 240 "$build/splitcheck" golden --dir "$golden_out" update --backend cuda \
  --reason "${GOLDEN_REASON:-GPU golden of the default scenario (k3-tiny, PP=1) on ${gpu:-the GPU}}" \
  "$root/scenarios/default.json"
detail="recomputed on this GPU, bit for bit"
step golden-cuda-verify 240 "$build/splitcheck" golden --dir "$golden_out" verify
# The committed GPU golden (golden/cuda/): bit for bit on its own GPU and libraries; on
# another fingerprint, not judged (exit 2) with the differences named, never a FAIL.
detail="golden/cuda, committed"
step golden-cuda-committed 240 "$build/splitcheck" golden --dir "$root/golden/cuda" verify

rm -f "$log/benchmarks.json"
step benchmarks 150 "$build/cuda_benchmark" --benchmark_min_time=0.2s \
  --benchmark_out="$log/benchmarks.json" --benchmark_out_format=json
bench="$(grep -E "^BM_" "$log/benchmarks.log" || true)"
# attn_res, both variants: time and fraction of the copy per token count, against the
# targets (75% of copy at the largest token count, under 20 us at the smallest).
attn_rows=""
if [[ -s "$log/benchmarks.json" ]]; then
  attn_rows="$(python3 - "$log/benchmarks.json" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
rows = {}
for b in r.get("benchmarks", []):
    m = re.match(r"BM_CudaAttnRes/(\w+)/(\d+)", b.get("name", ""))
    if not m or b.get("run_type", "iteration") != "iteration":
        continue
    us = b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "us")]
    rows.setdefault(m.group(1), {})[int(m.group(2))] = (us, b.get("fraction_of_copy", 0.0))
tokens = sorted({t for v in rows.values() for t in v})
for name, v in rows.items():
    cells = "  ".join(f"{t}: {v[t][0]:8.1f} us {100 * v[t][1]:5.1f}% of copy" for t in tokens if t in v)
    big, small = max(v), min(v)
    met = v[big][1] >= 0.75 and v[small][0] < 20.0
    print(f"   attn_res {name:<9} {cells}  targets (75% at {big}, <20 us at {small}): "
          f"{'met' if met else 'NOT met'}")
PY
)"
fi

# External engines on the GPU, swept through the runner protocol (docs/external-engines.md):
# examples/torch_pp with --device cuda (clean and its two bugs), examples/hf_pp on a dense
# Llama and on DeepSeek-V3 (MLA + MoE), clean and with each of its four bugs, and PyTorch's
# own pipelining (GPipe, 1F1B, and the full-batch PP=1). Each sweep must meet its expect
# block; one line each goes to the final table. Then what recording costs a decode step.
external_rows=()
ext_jobs="${EXTERNAL_JOBS:-8}"
for f in "$build"/scenarios-external/external-*.json; do
  n="$(basename "$f" .json)"
  detail="every split point against its PP=1, judged by its expect block"
  rm -rf "$log/report-$n"
  step "$n" 300 bash -c 'sweep_meets_expect "$@"' _ "$f" "$log/report-$n" --jobs "$ext_jobs"
  [[ -f "$log/report-$n/report.json" ]] || continue
  external_rows+=("$(python3 - "$log/report-$n/report.json" "$n" "${rows[-1]}" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
cases = [c for c in r.get("cases", []) if c.get("key") != "pp1"]
same = [c for c in cases if c.get("verdict") == "pass"]
diverged = [c for c in cases if c.get("verdict") == "diverged"]
wall = re.search(r"\s(\d+)s\s", sys.argv[3])
line = (f"{sys.argv[2]:<46} {r.get('verdict', '?'):<11} {len(same)}/{len(cases)} split points "
        f"identical, {wall.group(1) if wall else '?'} s")
other = sorted({c.get("verdict") for c in cases} - {"pass", "diverged"})
if other:
    line += "; also " + ", ".join(f"{sum(c.get('verdict') == v for c in cases)} {v}" for v in other)
if diverged:
    checks = sorted({x for c in diverged for x in c.get("failed_checks", [])})
    c0 = diverged[0]
    fd, dp = c0.get("first_divergence"), c0.get("dispatch")
    if fd:
        where = f"{fd.get('path')}, {fd.get('mismatches')} elements differ"
    elif dp:
        where = (f"dispatch, forward {dp.get('forward')} layer {dp.get('layer')}: "
                 f"{dp.get('expected')} at PP=1, {dp.get('actual')} here")
    else:
        where = c0.get("message", "")[:160]
    line += (f"; diverged at {','.join(c['key'].replace('split-', '') for c in diverged)} "
             f"(checks {','.join(checks)}; first at {diverged[0]['key']}: {where})")
fails = r.get("expect", {}).get("failures", [])
line += "; expect " + ("met" if not fails else "NOT MET: " + "; ".join(fails))
print(line)
PY
)")
done
# examples/hf_pp's family matrix (examples/hf_pp/matrix.py): every decoder family of
# models.py (Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, Gemma2, Gemma3, Phi3,
# GPT-NeoX, OLMo2, DeepSeek-V3), float32 and bf16, PP=2 at every split point and PP=3 at
# every pair of cuts of 4 layers, each sweep through the runner against its PP=1; gpt2 run
# once to show the adapter's refusal. One row per family and dtype goes to the final table.
detail="every family and dtype: every split point identical to its PP=1"
step external-hf-matrix 600 python3 "$root/examples/hf_pp/matrix.py" \
  --splitcheck "$build/splitcheck" --jobs "${MATRIX_JOBS:-3}" --sweeps "${MATRIX_SWEEPS:-12}" \
  --out "$log/hf-matrix"
matrix_rows="$(sed -n '/^family /,$p' "$log/external-hf-matrix.log" 2>/dev/null || true)"
detail="decode step with and without recording (target: at most 10%)"
step external-hf-recording-cost 300 python3 "$root/examples/hf_pp/bench_recording.py"
recording_rows="$(grep -E "^ |^batched|^device" "$log/external-hf-recording-cost.log" 2>/dev/null || true)"

# k3-shape on one GPU (issue 12): every split point at PP=2 against PP=1, the model's
# weights held once (every stage views PP=1's copy); then one PP=1 forward's speed.
k3_rows=()
run_k3=1
[[ "${K3_SHAPE:-1}" == "0" ]] && run_k3=0
if [[ -n "${GPU_CHECK_ONLY:-}" ]] && ! [[ "sweep-k3-shape" =~ $GPU_CHECK_ONLY ||
  "k3-shape-forward" =~ $GPU_CHECK_ONLY || "properties-k3-shape" =~ $GPU_CHECK_ONLY ]]; then
  run_k3=0
fi
if [[ $run_k3 -eq 1 ]]; then
  detail="92 split points, PP=2, summary dumps"
  # The GPU's memory in use, sampled every second while the sweep runs (peak printed).
  mem_pid=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i 0 -l 1 \
      >"$log/k3-shape-memory.csv" 2>/dev/null &
    mem_pid=$!
  fi
  step sweep-k3-shape 480 "$build/splitcheck" sweep "$root/scenarios/gpu/k3-shape.json" \
    --threads 4 --report "$log/report-k3-shape"
  [[ -n "$mem_pid" ]] && kill "$mem_pid" 2>/dev/null
  grep -E "^summary:|^time:|expect" "$log/sweep-k3-shape.log" | tail -4
  if [[ -f "$log/report-k3-shape/report.json" ]]; then
    mapfile -t k3_rows < <(python3 - "$log/report-k3-shape/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cases = r.get("cases", [])
same = sum(1 for c in cases if c.get("verdict") == "pass")
t = r.get("timing", {})
pp1, total = t.get("pp1_seconds", 0), t.get("total_seconds", 0)
print(f"k3-shape split points          {len(cases)}")
print(f"k3-shape bit-identical         {same} of {len(cases)}  (expect 92 of 92)")
print(f"k3-shape sweep wall time       {total:.1f} s on {t.get('threads', '?')} threads")
print(f"k3-shape one PP=1 run          {pp1:.2f} s (includes generating the weights on the device: see 'generated in' below)")
print(f"k3-shape sweep / PP=1          {total / pp1 if pp1 else float('nan'):.1f} PP=1 runs")
fails = r.get("expect", {}).get("failures", [])
print("k3-shape expect                " + ("met" if not fails else "NOT MET: " + "; ".join(fails)))
PY
)
  else
    k3_rows=("k3-shape: no report (see $log/sweep-k3-shape.log)")
  fi
  if [[ -s "$log/k3-shape-memory.csv" ]]; then
    k3_rows+=("$(awk -F', *' '$1+0 > m {m = $1 + 0; t = $2 + 0} END {printf "k3-shape GPU memory peak       %.1f GiB of %.1f GiB (nvidia-smi, sampled each second; estimate: 79.54 GiB of weights + activations)", m / 1024, t / 1024}' "$log/k3-shape-memory.csv")")
  fi
  detail="PP=1 decode forwards: tokens/s, weight bytes/s vs HBM copy"
  step k3-shape-forward 300 "$build/k3_forward_benchmark" k3-shape 16
  mapfile -t -O "${#k3_rows[@]}" k3_rows < <(grep -E "^k3 forward:" "$log/k3-shape-forward.log")
  # The same forwards with every op's side work on the thread's own stream (same bits):
  # what the overlap gains, measured in this run.
  detail="the same, SPLITCHECK_CUDA_SIDE_STREAM=0 (side work in order)"
  step k3-shape-forward-no-side 300 env SPLITCHECK_CUDA_SIDE_STREAM=0 \
    "$build/k3_forward_benchmark" k3-shape 16
  mapfile -t -O "${#k3_rows[@]}" k3_rows < <(grep -E "^k3 forward: (prefill|decode \(1)" \
    "$log/k3-shape-forward-no-side.log" | sed 's/^k3 forward: /k3 forward, no side stream: /')

  # The properties on k3-shape, bounded: a first prompt of at most 16 tokens (h 8, a
  # verify of gamma 7 + 1 rows, chunks of 4): about 40 PP=1 forwards after the weights
  # are generated on the device (several seconds).
  python3 - "$root/scenarios/gpu/k3-shape.json" "$build/scenarios-cuda/k3-shape-properties.json" <<'PY'
import json, os, sys
src, out = sys.argv[1], sys.argv[2]
s = json.load(open(src))
wl = s["workload"]
wl["file"] = os.path.normpath(os.path.join(os.path.dirname(src), wl["file"]))
wl["max_prompt_tokens"] = 16
s["name"] = "k3-shape-properties"
json.dump(s, open(out, "w"), indent=2)
PY
  detail="decode/prefill, verify/decode, chunked/whole; 16 tokens"
  rm -f "$log/properties-k3-shape.json"
  step properties-k3-shape 180 "$build/splitcheck" properties \
    "$build/scenarios-cuda/k3-shape-properties.json" --json "$log/properties-k3-shape.json"
  [[ -s "$log/properties-k3-shape.json" ]] &&
    props="${props}${props:+$'\n'}$(format_props "$log/properties-k3-shape.json")"
fi

echo
echo "== gpu-check results (${gpu:-no nvidia-smi})"
printf '%-34s %-20s %7s  %s\n' "step" "result" "wall" "detail"
printf '%s\n' "${rows[@]}"
if [[ -s "$log/measured.txt" ]]; then echo "measured:"; cat "$log/measured.txt"; fi
if [[ -n "$props" ]]; then echo "properties (measured, not PP faults):"; echo "$props"; fi
if [[ ${#serving_rows[@]} -gt 0 ]]; then
  echo "serving on cuda (inproc; success: serving conformant 3/3 identical; each fault divergent at split-4,split-13,split-24 with tensors among the failed checks; every line says \"expect met\"):"
  printf '   %s\n' "${serving_rows[@]}"
fi
if [[ -s "$log/approx.txt" ]]; then echo "approximate lane (float64 judge):"; cat "$log/approx.txt"; fi
if [[ -f "$golden_out/MANIFEST.json" ]]; then
  echo "GPU golden: $golden_out"
  python3 -c 'import json,sys; [print("  ", g["file"], g["sha256"][:16], json.dumps(g["env"])) for g in json.load(open(sys.argv[1]))["goldens"]]' "$golden_out/MANIFEST.json" || true
fi
if [[ -n "$bench" ]]; then echo "benchmarks:"; echo "$bench" | sed 's/^/   /'; fi
if [[ -n "$attn_rows" ]]; then echo "attn_res against copy:"; echo "$attn_rows"; fi
if [[ -n "$serving_tp" ]]; then echo "serving throughput on the GPU (PP=1, wall clock):"; echo "$serving_tp"; fi
if [[ ${#k3_rows[@]} -gt 0 ]]; then echo "k3-shape:"; printf '   %s\n' "${k3_rows[@]}"; fi
if [[ ${#external_rows[@]} -gt 0 ]]; then
  echo "external engines on the GPU (runner protocol, --jobs $ext_jobs; split points identical to PP=1):"
  printf '   %s\n' "${external_rows[@]}"
fi
if [[ -n "${matrix_rows:-}" ]]; then
  echo "examples/hf_pp family matrix (examples/hf_pp/matrix.py; success: every row \"expect met\"):"
  echo "$matrix_rows" | sed 's/^/   /'
fi
if [[ -n "${recording_rows:-}" ]]; then echo "recording cost (examples/hf_pp/bench_recording.py):"; echo "$recording_rows" | sed 's/^/   /'; fi
exit $failed
