#!/usr/bin/env bash
# A change against its base on one GPU, in one device call: the working tree (A) and the
# same tree with the changed sources as they were at a base revision (B) are each built
# once, then measured in alternation on the same machine (these machines differ by a few
# percent from one to the next, so only a same-machine ratio says what a change gains),
# and their PP=1 dumps are compared bit for bit: k3-shape's and k3-tiny's default scenario
# with every tensor, and k3-tiny's serving scenario (batched steps) with its layers.
#
#   scripts/gpu-ab.sh prepare BASE   here, in the git checkout: writes .ab/ (the base's
#                                    version of every source that differs from it)
#   scripts/gpu-ab.sh run [--rounds N] [--build-dir DIR]   (default build-ab; logs and binaries:
#                                    DIR/gpu-ab/)
#                                    on the device, with carry [".xt", ".ab"]
#
# `run` prints, for each round and side, the k3-shape 16-token prefill and decode (ms)
# and their ratio, one MoE layer at 1, 16 and 64 tokens and one KDA layer at 1 and 16
# (us), and k3-tiny serving on the GPU in one micro-batch (tokens/s batched and one
# request at a time, and their ratio); then each side's medians and A's over B's; then
# whether each pair of dumps is equal.
# Exit 0: both sides measured and their dumps equal; 1: the dumps differ (or a side's
# run failed); 2: usage, .ab/ missing, or a build failed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ab="$root/.ab"
usage() {
  sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

prepare() {
  local base="$1"
  git -C "$root" rev-parse --verify --quiet "$base^{commit}" >/dev/null ||
    { echo "gpu-ab: $base is not a commit of this checkout" >&2; exit 2; }
  rm -rf "$ab"
  mkdir -p "$ab/base"
  local f n=0
  while IFS= read -r f; do
    if git -C "$root" cat-file -e "$base:$f" 2>/dev/null; then
      mkdir -p "$ab/base/$(dirname "$f")"
      git -C "$root" show "$base:$f" >"$ab/base/$f"
    else
      echo "$f" >>"$ab/new-in-a"  # B builds without it
    fi
    n=$((n + 1))
  done < <(git -C "$root" diff --name-only "$base" -- kernels reference harness tests/bench CMakeLists.txt)
  [[ $n -gt 0 ]] || { echo "gpu-ab: no source differs from $base" >&2; rm -rf "$ab"; exit 2; }
  git -C "$root" rev-parse --short "$base" >"$ab/REV"
  echo "gpu-ab: B is $(cat "$ab/REV") in these $n files (A the working tree):"
  git -C "$root" diff --stat "$base" -- kernels reference harness tests/bench CMakeLists.txt | sed 's/^/  /'
}

# Puts B's sources in place (A's kept in .ab/head/) or A's back.
swap_to_b() {
  local f
  rm -f "$ab/gone-in-a"
  (cd "$ab/base" && find . -type f) | while IFS= read -r f; do
    if [[ -f "$root/$f" ]]; then
      mkdir -p "$ab/head/$(dirname "$f")"
      cp "$root/$f" "$ab/head/$f"
    else
      echo "$f" >>"$ab/gone-in-a"  # A deleted it: B has it until swap_to_a
    fi
    mkdir -p "$root/$(dirname "$f")"
    cp "$ab/base/$f" "$root/$f"
  done
  if [[ -f "$ab/new-in-a" ]]; then
    while IFS= read -r f; do
      mkdir -p "$ab/head-new/$(dirname "$f")"
      mv "$root/$f" "$ab/head-new/$f"
    done <"$ab/new-in-a"
  fi
}
# (Copied, not moved with their times, so that the next build sees them as newer than
# B's objects and rebuilds A.)
swap_to_a() {
  local f
  [[ -d "$ab/head" ]] && cp -r "$ab/head/." "$root/" && rm -rf "$ab/head"
  [[ -d "$ab/head-new" ]] && cp -r "$ab/head-new/." "$root/" && rm -rf "$ab/head-new"
  if [[ -f "$ab/gone-in-a" ]]; then
    while IFS= read -r f; do rm -f "$root/$f"; done <"$ab/gone-in-a"
    rm -f "$ab/gone-in-a"
  fi
  return 0
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR + 1) / 2)]; else print "-"}'; }

run() {
  # Its own build folder: the base's objects it leaves would look newer than the working
  # tree's sources to a later build there (a device call copies the tree with its times),
  # so a gpu-check in build-gpu after it would run B's code.
  local rounds=3 build="$root/build-ab"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --rounds) rounds="$2"; shift 2 ;;
      --build-dir) build="$2"; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ -f "$ab/REV" ]] || { echo "gpu-ab: no .ab/ here: run 'scripts/gpu-ab.sh prepare BASE' first and carry .ab" >&2; exit 2; }
  [[ -d "$root/.xt/usr/lib/x86_64-linux-gnu" ]] &&
    export LD_LIBRARY_PATH="$root/.xt/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:}${LD_LIBRARY_PATH:-}"
  local out="$build/gpu-ab" bins=(splitcheck k3_forward_benchmark cuda_benchmark serving_benchmark)
  mkdir -p "$out/A" "$out/B"

  echo "== gpu-ab: build A (the working tree)"
  GPU_CHECK_ONLY='^$' K3_SHAPE=0 "$root/scripts/gpu-check.sh" --build-dir "$build" >"$out/build-a.log" 2>&1 ||
    { tail -20 "$out/build-a.log"; exit 2; }
  for b in "${bins[@]}"; do cp "$build/$b" "$out/A/"; done
  echo "== gpu-ab: build B (the base's sources, $(cat "$ab/REV"))"
  trap swap_to_a EXIT
  swap_to_b
  cmake --build "$build" --target "${bins[@]}" >"$out/build-b.log" 2>&1 ||
    { tail -20 "$out/build-b.log"; exit 2; }
  for b in "${bins[@]}"; do cp "$build/$b" "$out/B/"; done
  swap_to_a
  trap - EXIT

  # The scenarios whose PP=1 dumps A and B must give bit for bit: k3-shape and k3-tiny's
  # default with every tensor (full), and k3-tiny's serving (batched steps, layers); on
  # the GPU, workload paths made absolute.
  python3 - "$root/scenarios" "$out" <<'PY'
import json, os, sys
src, out = sys.argv[1], sys.argv[2]
for name, path, level in [("k3-shape", "gpu/k3-shape.json", "full"),
                          ("k3-tiny-default", "default.json", "full"),
                          ("k3-tiny-serving", "serving.json", "layer")]:
    path = os.path.join(src, path)
    s = json.load(open(path))
    s["backend"] = "cuda"
    s.setdefault("engine", {})["dump_level"] = level
    wl = s["workload"]
    wl["file"] = os.path.normpath(os.path.join(os.path.dirname(path), wl["file"]))
    json.dump(s, open(os.path.join(out, name + ".json"), "w"), indent=2)
PY
  local side r status=0
  for ((r = 1; r <= rounds; ++r)); do
    for side in A B; do
      local log="$out/$side/round$r.log"
      "$out/$side/k3_forward_benchmark" k3-shape 16 >"$log" 2>&1
      "$out/$side/cuda_benchmark" --benchmark_filter='BM_Cuda(Moe|Kda)/' >>"$log" 2>&1
      "$out/$side/serving_benchmark" --benchmark_filter='BatchedServingVsOneAtATime/gpu:1/shared_forward:1' \
        >>"$log" 2>&1
      local pre dec moe kda serve
      pre="$(sed -nE 's/^k3 forward: prefill 16 tokens \(median of [0-9]+\) ([0-9.]+) ms.*/\1/p' "$log")"
      dec="$(sed -nE 's/^k3 forward: decode \(1 token\) median of [0-9]+ ([0-9.]+) ms.*/\1/p' "$log")"
      moe="$(sed -nE 's|^BM_CudaMoe/.* us_per_call=([0-9.]+[kM]?).*|\1|p' "$log" | paste -sd/)"
      kda="$(sed -nE 's|^BM_CudaKda/.* us_per_call=([0-9.]+[kM]?).*|\1|p' "$log" | paste -sd/)"
      serve="$(sed -nE 's|^BM_BatchedServing.* batched_tokens_per_s=([0-9.]+k?) .* one_at_a_time_tokens_per_s=([0-9.]+k?) speedup_cpu=[0-9.]+ speedup_wall=([0-9.]+).*|\1 vs \2 = \3x|p' "$log")"
      [[ -n "$serve" ]] && echo "$serve" | sed -E 's/.*= ([0-9.]+)x/\1/' >>"$out/$side/serving"
      [[ -n "$pre" && -n "$dec" ]] || { echo "gpu-ab: side $side round $r measured nothing:"; tail -5 "$log"; status=1; continue; }
      echo "$pre" >>"$out/$side/prefill"
      echo "$dec" >>"$out/$side/decode"
      echo "$pre $dec" | awk '{print $1 / $2}' >>"$out/$side/ratio"
      printf 'round %d %s  prefill %6.1f ms  decode %6.2f ms  ratio %.3f  moe 1/16/64 %s us  kda 1/16 %s us  serving %s\n' \
        "$r" "$side" "$pre" "$dec" "$(tail -1 "$out/$side/ratio")" "${moe:--}" "${kda:--}" "${serve:--}"
    done
  done
  echo "medians over $rounds rounds (A: the working tree, B: $(cat "$ab/REV")'s sources):"
  local what a b
  for what in prefill decode ratio serving; do
    a="$(median <"$out/A/$what" 2>/dev/null)"
    b="$(median <"$out/B/$what" 2>/dev/null)"
    printf '  %-8s A %-8s B %-8s A/B %s\n' "$what" "$a" "$b" \
      "$(awk -v a="$a" -v b="$b" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-"}')"
  done

  local name rc
  for name in k3-shape k3-tiny-default k3-tiny-serving; do
    echo "== gpu-ab: $name dumps, A against B"
    local ran=1
    for side in A B; do
      "$out/$side/splitcheck" run "$out/$name.json" --out "$out/$side/$name.h5" \
        >"$out/$side/run-$name.log" 2>&1 ||
        { echo "gpu-ab: side $side's run failed:"; tail -5 "$out/$side/run-$name.log"; ran=0; status=1; }
    done
    if [[ $ran -eq 1 ]]; then
      "$out/A/splitcheck" compare "$out/B/$name.h5" "$out/A/$name.h5" >"$out/compare-$name.log" 2>&1
      rc=$?
      head -3 "$out/compare-$name.log"
      [[ $rc -eq 0 ]] || status=1
    fi
    rm -f "$out/A/$name.h5" "$out/B/$name.h5"
  done
  exit "$status"
}

case "${1:-}" in
  prepare) [[ $# -eq 2 ]] || usage; prepare "$2" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
