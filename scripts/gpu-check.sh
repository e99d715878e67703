#!/usr/bin/env bash
# The CUDA backend on a GPU machine, in one go (within 10 minutes on one H200):
# configure with CUDA, build, run the CUDA tests, sweep k3-tiny on the GPU (all 31 split
# points, layer reuse off so every stage computes), run every fault scenario on the GPU,
# run the approximate lane (CPU and CUDA against the float64 judge), write and verify the
# GPU golden of the default scenario (into $OUT/golden/ when OUT is set), run the
# benchmarks, and print a results table last.
#   scripts/gpu-check.sh [--build-dir DIR] [--jobs N]   (GPU_CHECK_ONLY=REGEX: only those steps)
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
  local verdict="ok"
  [[ $rc -eq 0 ]] || { verdict="FAILED (exit $rc)"; failed=1; }
  [[ $rc -eq 124 ]] && verdict="FAILED (over ${budget}s)"
  rows+=("$(printf '%-34s %-20s %6ss  %s' "$name" "$verdict" "$dt" "${detail:-}")")
  detail=""
  tail -n 3 "$log/$name.log"
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
step build 300 cmake --build "$build" -j"$jobs" --target splitcheck splitcheck_tests cuda_benchmark \
  || { printf '%s\n' "${rows[@]}"; exit 1; }

gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

step cuda-tests 180 "$build/splitcheck_tests" --gtest_filter='Cuda*:GateTest.BackendOr*' \
  --gtest_brief=0
grep -h "\[ measured \]" "$log/cuda-tests.log" | sed 's/^/   /' >"$log/measured.txt"
grep -E "SKIPPED|FAILED" "$log/cuda-tests.log" | head -5

# The committed scenarios with backend "cuda" (workload paths made absolute).
mkdir -p "$build/scenarios-cuda"
python3 - "$root" "$build/scenarios-cuda" <<'PY'
import json, os, sys
root, out = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(os.path.join(root, "scenarios"))):
    if not name.endswith(".json") or name == "scenario.schema.json":
        continue
    with open(os.path.join(root, "scenarios", name)) as f:
        s = json.load(f)
    if "serving" in s:
        continue  # serving runs on the cpu backend only (refused on cuda, exit 2)
    s["backend"] = "cuda"
    wl = s.get("workload", {})
    if "file" in wl and not os.path.isabs(wl["file"]):
        wl["file"] = os.path.join(root, "scenarios", wl["file"])
    with open(os.path.join(out, name), "w") as f:
        json.dump(s, f, indent=2)
PY

detail="all 31 split points, PP=2, reuse off"
step sweep-k3-tiny-cuda 240 "$build/splitcheck" sweep "$build/scenarios-cuda/default.json" \
  --reuse off --threads 4 --report "$log/report-default"
grep -E "identical|conformant|divergent|split points" "$log/sweep-k3-tiny-cuda.log" | tail -3

# A fault scenario passes when its sweep ran (exit 0 or 1: a fault is a divergence) and
# its expect block is met (report.json: expect.failures empty).
sweep_meets_expect() {
  local f="$1" report="$2" rc
  "$build/splitcheck" sweep "$f" --reuse off --threads 4 --report "$report"
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
  n="$(basename "$f" .json)"
  detail="caught on the GPU as its expect block says"
  step "$n" 90 bash -c 'sweep_meets_expect "$@"' _ "$f" "$log/report-$n"
done

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
golden_out="${OUT:-$log}/golden"
detail="default on cuda, PP=1 -> $golden_out"
step golden-cuda-update 240 "$build/splitcheck" golden --dir "$golden_out" update --backend cuda \
  --reason "GPU golden of the default scenario (k3-tiny, PP=1) on ${gpu:-the GPU}" \
  "$root/scenarios/default.json"
detail="recomputed on this GPU, bit for bit"
step golden-cuda-verify 240 "$build/splitcheck" golden --dir "$golden_out" verify

step benchmarks 120 "$build/cuda_benchmark" --benchmark_min_time=0.2s
bench="$(grep -E "^BM_" "$log/benchmarks.log" || true)"

echo
echo "== gpu-check results (${gpu:-no nvidia-smi})"
printf '%-34s %-20s %7s  %s\n' "step" "result" "wall" "detail"
printf '%s\n' "${rows[@]}"
if [[ -s "$log/measured.txt" ]]; then echo "measured:"; cat "$log/measured.txt"; fi
if [[ -s "$log/approx.txt" ]]; then echo "approximate lane (float64 judge):"; cat "$log/approx.txt"; fi
if [[ -f "$golden_out/MANIFEST.json" ]]; then
  echo "GPU golden: $golden_out"
  python3 -c 'import json,sys; [print("  ", g["file"], g["sha256"][:16], json.dumps(g["env"])) for g in json.load(open(sys.argv[1]))["goldens"]]' "$golden_out/MANIFEST.json" || true
fi
if [[ -n "$bench" ]]; then echo "benchmarks:"; echo "$bench" | sed 's/^/   /'; fi
exit $failed
