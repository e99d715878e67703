#!/usr/bin/env bash
# examples/hf_pp where transformers is (the GPU machine), in one go: build splitcheck
# (CPU-only: the sweep driver needs no CUDA; the engine's stages use the GPU) while
# pytest runs examples/hf_pp, then sweep every scenarios/external-hf-pp-*.json (PP=1 and
# the 7 split points of 8 layers), printing each sweep's cases, verdict, expect and wall
# time, and a table last.
#   examples/hf_pp/device-check.sh [--jobs N]   (HF_PP_ONLY=REGEX: only those scenarios;
#   HF_PP_PYTEST=0: no pytest; HF_PP_BUILD=DIR: build there, default build-hf)
# HF_PP_MATRIX=1: the scenarios are swept side by side with the family matrix instead
# (examples/hf_pp/matrix.py: every family, float32 and bf16, PP=2 and PP=3 at every split
# point; HF_PP_SWEEPS sweeps at once, default 4, each with --jobs engine runs;
# HF_PP_MATRIX_ARGS: more of matrix.py's arguments, e.g. "--deadline 300"), then with
# HF_PP_BENCH=1 bench_recording.py (HF_PP_BENCH_ARGS, within HF_PP_BENCH_S seconds).
# SPLITCHECK_SRC: the source tree to build splitcheck from (default: this checkout; e.g. a
# `git archive HEAD` of it while the checkout holds unfinished C++ edits).
# Libraries missing on the machine (xtensor, xtl, libxxhash) are taken from .xt/ as
# scripts/gpu-check.sh does (scripts/device-deps.sh fills it). With OUT set, the log,
# pytest's output, the transformers API it ran against and the reports (no dumps) are
# copied there. Exit 0 when pytest passed and every sweep met its expect block, else 1.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${HF_PP_BUILD:-$root/build-hf}"
jobs=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs) jobs="$2"; shift 2 ;;
    *) echo "device-check: unknown argument: $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-$build/out}"
mkdir -p "$build" "$out"
cd "$root"
failed=0
rows=()

export CMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}${CMAKE_PREFIX_PATH:+:}$root/.xt/usr"
if ! pkg-config --exists libxxhash 2>/dev/null && [[ -d "$root/.xt/usr/include" ]]; then
  mkdir -p "$build/pc"
  sed "s|^prefix=.*|prefix=$root/.xt/usr|" "$root/.xt/usr/lib/x86_64-linux-gnu/pkgconfig/libxxhash.pc" \
    >"$build/pc/libxxhash.pc"
  export PKG_CONFIG_PATH="$build/pc${PKG_CONFIG_PATH:+:}${PKG_CONFIG_PATH:-}"
  export LD_LIBRARY_PATH="$root/.xt/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:}${LD_LIBRARY_PATH:-}"
fi

echo "== machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
python3 - <<'PY' 2>&1 | tee "$out/tf-api.txt" | head -6
import inspect, sys, torch, transformers
sys.path.insert(0, "examples/hf_pp")
import models
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}, cuda {torch.cuda.is_available()}")
for family in models.FAMILIES:
    c = models.build_model(family, 7).config
    print(f"{family}: attention {c._attn_implementation}, experts "
          f"{getattr(c, '_experts_implementation', None)}")
from transformers.masking_utils import create_causal_mask
from transformers.models.llama import modeling_llama as ml
print("create_causal_mask", inspect.signature(create_causal_mask))
print("DynamicCache", inspect.signature(transformers.DynamicCache.__init__))
print("LlamaDecoderLayer.forward", inspect.signature(ml.LlamaDecoderLayer.forward))
PY
# The build, in the background, while pytest runs the example's tests.
(
  cmake -S "${SPLITCHECK_SRC:-$root}" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPLITCHECK_CUDA=OFF \
    -DSPLITCHECK_TESTS=OFF -DSPLITCHECK_BENCH=OFF -DCMAKE_CXX_FLAGS=-Wno-dangling-reference \
    && cmake --build "$build" -j"$(nproc)" --target splitcheck
) >"$build/build.log" 2>&1 &
build_pid=$!
t0=$SECONDS
if [[ "${HF_PP_PYTEST:-1}" != 0 ]]; then  # HF_PP_PYTEST=0: sweeps only
  echo "== pytest examples/hf_pp"
  python3 -m pytest -q -rs -p no:cacheprovider -n 4 examples/hf_pp >"$out/pytest.log" 2>&1
  rc=$?
  tail -n 25 "$out/pytest.log"
  rows+=("$(printf '%-40s %-12s %5ss' pytest "$([[ $rc -eq 0 ]] && echo ok || echo "FAILED($rc)")" $((SECONDS - t0)))")
  [[ $rc -eq 0 ]] || failed=1
fi
wait "$build_pid"
rc=$?
rows+=("$(printf '%-40s %-12s %5ss' build "$([[ $rc -eq 0 ]] && echo ok || echo "FAILED($rc)")" $((SECONDS - t0)))")
splitcheck="$build/splitcheck"
if [[ $rc -ne 0 ]]; then
  tail -n 40 "$build/build.log"
  failed=1
  # A binary built elsewhere (carried as build/splitcheck), when it runs here.
  splitcheck="$root/build/splitcheck"
  "$splitcheck" --version >/dev/null 2>&1 || { printf '%s\n' "${rows[@]}"; exit 1; }
  echo "device-check: the build failed; sweeping with $splitcheck"
fi

if [[ "${HF_PP_MATRIX:-0}" == 1 ]]; then
  chosen=()
  for f in scenarios/external-hf-pp-*.json; do
    n="$(basename "$f" .json)"
    [[ -n "${HF_PP_ONLY:-}" && ! "$n" =~ $HF_PP_ONLY ]] && continue
    chosen+=("$f")
  done
  echo "== matrix and ${#chosen[@]} scenarios"
  t0=$SECONDS
  python3 examples/hf_pp/matrix.py --splitcheck "$splitcheck" --jobs "$jobs" \
    --sweeps "${HF_PP_SWEEPS:-4}" --out "$out/matrix" ${HF_PP_MATRIX_ARGS:-} --scenarios "${chosen[@]}"
  rc=$?
  rows+=("$(printf '%-40s %-12s %5ss' matrix "$([[ $rc -eq 0 ]] && echo ok || echo "FAILED($rc)")" $((SECONDS - t0)))")
  [[ $rc -eq 0 ]] || failed=1
  if [[ "${HF_PP_BENCH:-0}" == 1 ]]; then  # what recording costs a decode step
    echo "== bench_recording"
    t0=$SECONDS
    timeout "${HF_PP_BENCH_S:-120}" python3 examples/hf_pp/bench_recording.py ${HF_PP_BENCH_ARGS:-}
    rows+=("$(printf '%-40s %-12s %5ss' bench_recording "exit $?" $((SECONDS - t0)))")
  fi
  echo "== results"
  printf '%s\n' "${rows[@]}" | tee "$out/results.txt"
  exit $failed
fi

# Each scenario: the sweep's cases and verdict, then whether its expect block was met.
for f in scenarios/external-hf-pp-*.json; do
  n="$(basename "$f" .json)"
  [[ -n "${HF_PP_ONLY:-}" && ! "$n" =~ $HF_PP_ONLY ]] && continue
  echo "== $n"
  t0=$SECONDS
  timeout 240 "$splitcheck" sweep "$f" --jobs "$jobs" --report "$build/reports/$n" \
    >"$build/$n.log" 2>&1
  rc=$?
  dt=$((SECONDS - t0))
  grep -E "^  split-|^summary|^time|^expect|dispatch:|first numeric" "$build/$n.log" | cut -c1-400
  verdict="$(python3 - "$build/reports/$n/report.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except OSError:
    print("no-report"); sys.exit()
fails = r.get("expect", {}).get("failures", [])
print("expect-met" if not fails else "EXPECT-NOT-MET")
PY
)"
  [[ $rc -le 1 && "$verdict" == expect-met ]] || { failed=1; tail -n 30 "$build/$n.log"; }
  rows+=("$(printf '%-40s %-12s %5ss  exit %s' "$n" "$verdict" "$dt" "$rc")")
done

tar -czf "$out/reports.tgz" -C "$build" --exclude='*.h5' reports $(cd "$build" && ls ./*.log) 2>/dev/null
echo "== results"
printf '%s\n' "${rows[@]}" | tee "$out/results.txt"
exit $failed
