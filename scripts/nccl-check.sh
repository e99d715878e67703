#!/usr/bin/env bash
# The nccl transport on a machine with two GPUs (one stage per GPU): builds splitcheck with
# the MPI and NCCL transports, then
#   1. the PP=2 sweep of k3-tiny (scenarios/default.json, all 31 split points) over NCCL,
#      compared with PP=1, and the same sweep in-process (inproc) for the wall time;
#   2. every committed fault scenario over NCCL: its expect must be met (every fault caught);
#   3. (K3_SHAPE=1) 8 spread split points of k3-shape over NCCL against the same sweep in one
#      process (long on the CPU backend);
#   4. the payload bandwidth: the channel against a plain ncclSend/ncclRecv of the same bytes
#      in the same run, at the payload sizes the scenarios produce (printed) and 1-256 MiB;
# and prints a table. Exit 0 when every sweep met its scenario's expect.
#   scripts/nccl-check.sh [--build-dir DIR]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-nccl"
if [[ "${1:-}" == "--build-dir" && -n "${2:-}" ]]; then build="$2"; fi

# NVLink multicast (NVLS) stays off on the shared machines.
export NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE)

command -v nvidia-smi >/dev/null && nvidia-smi -L
gpus="$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)"
if [[ "$gpus" -lt 2 ]]; then
  echo "nccl-check: needs 2 GPUs, found $gpus" >&2
  exit 2
fi

echo "== nccl-check: build ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPLITCHECK_MPI=ON \
  -DSPLITCHECK_NCCL=ON -DSPLITCHECK_TESTS=OFF -DSPLITCHECK_BENCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target splitcheck nccl_payload_bench
bin="$build/splitcheck"
out="$build/nccl-check"
rm -rf "$out" && mkdir -p "$out"

rows=()
failed=0
# sweep NAME NP TRANSPORT SCENARIO [ANY_VERDICT]: runs it, keeps its summary and wall time
# for the table. Fails the check when it crashed, errored or missed its scenario's expect;
# without ANY_VERDICT also when it found a divergence (exit 1).
sweep() {
  local name="$1" np="$2" transport="$3" scenario="$4" any="${5:-}" rc=0 t0 t1
  t0=$(date +%s.%N)
  if [[ "$transport" == "inproc" ]]; then
    "$bin" sweep "$scenario" --report "$out/$name" >"$out/$name.txt" 2>&1 || rc=$?
  else
    "${mpirun[@]}" -np "$np" "$bin" sweep "$scenario" --transport "$transport" \
      --report "$out/$name" >"$out/$name.txt" 2>&1 || rc=$?
  fi
  t1=$(date +%s.%N)
  local summary
  summary="$(grep -E '^summary:' "$out/$name.txt" | sed 's/^summary: //' || true)"
  [[ -n "$summary" ]] || summary="(no summary: see $out/$name.txt)"
  if grep -q 'expect: NOT MET' "$out/$name.txt"; then
    summary="$summary; EXPECT NOT MET"
    failed=1
  fi
  if [[ $rc -ne 0 && ! ( -n "$any" && $rc -eq 1 ) ]]; then failed=1; fi
  rows+=("$(printf '%-34s %-7s %5s %8.1f s  %s' "$name" "$transport" "$rc" \
    "$(awk "BEGIN{print $t1 - $t0}")" "$summary")")
  echo "${rows[-1]}"
}

echo "== nccl-check: k3-tiny PP=2, every split point"
sweep default-nccl 2 nccl "$root/scenarios/default.json"
sweep default-inproc 1 inproc "$root/scenarios/default.json"

echo "== nccl-check: every fault scenario over NCCL"
for f in "$root"/scenarios/fault-*.json; do
  name="$(basename "$f" .json)"
  # Serving scenarios run over inproc only (refused over mpi and nccl, exit 2).
  if grep -q '"serving"' "$f"; then
    rows+=("$(printf '%-34s %-7s %5s %10s  %s' "$name" "nccl" "-" "-" "not run: serving runs over inproc only")")
    continue
  fi
  np="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['partitions'].get('pp', 2))" "$f")"
  # A fault scenario exits 1 (a divergence found) when its expect is met; judge by expect.
  sweep "$name" "$np" nccl "$f" any-verdict
done

if [[ "${K3_SHAPE:-0}" == "1" ]]; then
  echo "== nccl-check: k3-shape, 8 spread split points"
  python3 - "$root/scenarios" "$out/k3-shape-sample.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/default.json"))
s["name"] = "k3-shape-sample"
s["model"] = {"preset": "k3-shape"}
s["workload"]["file"] = sys.argv[1] + "/workloads/gsm8k_style_seed2026_n32.json"
s["partitions"] = {"pp": 2, "splits": [[c] for c in (10, 20, 31, 41, 51, 62, 72, 82)]}
s["expect"] = {"verdict": "conformant", "identical_splits": 8}
json.dump(s, open(sys.argv[2], "w"), indent=2)
PY
  sweep k3-shape-nccl 2 nccl "$out/k3-shape-sample.json"
  sweep k3-shape-inproc 1 inproc "$out/k3-shape-sample.json"
fi

echo "== nccl-check: payload bandwidth (channel vs plain ncclSend/ncclRecv, same run)"
"${mpirun[@]}" -np 2 "$build/nccl_payload_bench" "$root"/scenarios/*.json | tee "$out/bandwidth.txt"

echo
echo "== nccl-check: table (a fault scenario's rc is 1 when its expect is met)"
printf '%-34s %-7s %5s %10s  %s\n' "sweep" "via" "rc" "wall" "summary"
printf '%s\n' "${rows[@]}"
echo "bandwidth: $out/bandwidth.txt; reports: $out/<sweep>/report.json"
if [[ $failed -ne 0 ]]; then
  echo "nccl-check: FAILED: a sweep crashed, errored or did not meet its scenario's expect" >&2
  exit 1
fi
echo "nccl-check: every sweep met its scenario's expect"
