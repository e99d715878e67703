#!/usr/bin/env bash
# The nccl transport on a machine with two GPUs (one stage per GPU): builds splitcheck with
# the MPI and NCCL transports, then
#   1. the PP=2 sweep of k3-tiny (scenarios/default.json, all 31 split points) over NCCL,
#      compared with PP=1, and the same sweep in-process (inproc) for the wall time; then
#      the same scenario with backend cuda (stages compute on their GPUs) over NCCL;
#   2. every committed fault scenario over NCCL: its expect must be met (every fault caught).
#      One with more stages than GPUs runs on one rank per GPU: partition.remainder_dropped's
#      PP=4 partition is rejected at configuration, before any stage is built, so it gives
#      its verdict on 2 ranks. Then two refusals, each exit 2 naming the counts: more ranks
#      than GPUs (NCCL takes one GPU per rank), and a partition that would run with more
#      stages than ranks (pp3-pairwise on 2 ranks);
#   2b. serving over NCCL, each scenario trimmed to 8 requests at split point 13 (a serving
#      step's segment payloads travel through the channel as a forward's payload does):
#      serving.json with stages on the CPU, and (with the CUDA backend) on their GPUs over
#      NCCL (device bodies) and over mpi, each against the same sweep in-process (the
#      reports must agree but for times and the transport's name); the three serving fault
#      scenarios over NCCL, stages on the CPU, each meeting its trimmed expect (the fault
#      caught at split-13 by its check) and agreeing with in-process;
#   3. (K3_SHAPE=1) scenarios/gpu/k3-shape-nccl.json: 8 spread split points of k3-shape
#      over NCCL, against the same sweep on one GPU (inproc);
#   4. the payload bandwidth: the channel's device path (the split payload's body sent from
#      and received into device memory by one ncclSend, its size and header announced in
#      the job message, as stages on their GPUs send it) against a plain ncclSend/ncclRecv
#      of the same bytes (header + body) in the same run, at every payload size the
#      scenarios produce (printed) and 1-256 MiB, with the target (90% of raw) judged per
#      size, a per-job ratio beside it (the job's MPI message charged to both sides), and
#      every size's bytes checked as received;
# and prints a table. Exit 0 when every sweep met its scenario's expect. Logs and reports
# go to $OUT/nccl-check when OUT is set (the device tool's output folder), else to the
# build directory's nccl-check/.
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
# With the CUDA backend where nvcc is, so that stages can compute on their GPUs.
nvcc=/usr/local/cuda/bin/nvcc
[[ -x $nvcc ]] || nvcc="$(command -v nvcc || true)"
cuda_flags=()
[[ -n "$nvcc" ]] && cuda_flags=(-DSPLITCHECK_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc"
  -DCMAKE_CXX_FLAGS=-Wno-dangling-reference)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPLITCHECK_MPI=ON \
  -DSPLITCHECK_NCCL=ON -DSPLITCHECK_TESTS=OFF -DSPLITCHECK_BENCH=OFF "${cuda_flags[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target splitcheck nccl_payload_bench
bin="$build/splitcheck"
out="${OUT:+$OUT/nccl-check}"
out="${out:-$build/nccl-check}"
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
  # Which payload path the stages used over NCCL: device bodies (backend cuda: the body
  # sent from and received into device memory) or host bytes (backend cpu).
  if [[ "$transport" == "nccl" ]]; then
    if grep -q 'payload bodies travel from device memory' "$out/$name.txt"; then
      summary="$summary; payloads: device bodies"
    else
      summary="$summary; payloads: host bytes"
      if [[ "$name" == *cuda* ]]; then
        summary="$summary; DEVICE PATH NOT USED"
        failed=1
      fi
    fi
  fi
  rows+=("$(printf '%-34s %-7s %5s %8.1f s  %s' "$name" "$transport" "$rc" \
    "$(awk "BEGIN{print $t1 - $t0}")" "$summary")")
  echo "${rows[-1]}"
}

echo "== nccl-check: k3-tiny PP=2, every split point"
sweep default-nccl 2 nccl "$root/scenarios/default.json"
sweep default-inproc 1 inproc "$root/scenarios/default.json"
if [[ ${#cuda_flags[@]} -gt 0 ]]; then
  # The same scenario with its stages computing on their GPUs (backend cuda).
  python3 - "$root/scenarios/default.json" "$out/default-cuda.json" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
s["name"] = "default-cuda"
s["backend"] = "cuda"
s["workload"]["file"] = os.path.join(os.path.dirname(sys.argv[1]), s["workload"]["file"])
json.dump(s, open(sys.argv[2], "w"), indent=2)
PY
  sweep default-cuda-nccl 2 nccl "$out/default-cuda.json"
fi

# refused NAME NP SCENARIO WHAT: a sweep that must be refused cleanly over NCCL (exit 2,
# rank 0 saying WHAT, a fixed string naming the counts); its log is kept.
refused() {
  local name="$1" np="$2" scenario="$3" what="$4" rc=0
  "${mpirun[@]}" -np "$np" "$bin" sweep "$scenario" --transport nccl --report "$out/$name" \
    >"$out/$name.txt" 2>&1 || rc=$?
  local said
  said="$(grep -m1 -F "$what" "$out/$name.txt" | sed 's/^.*error: //' || true)"
  local verdict="refused cleanly (exit 2): ${said:-no message}"
  if [[ $rc -ne 2 || -z "$said" ]]; then
    verdict="NOT REFUSED CLEANLY (exit $rc, expected: $what; see $out/$name.txt)"
    failed=1
  fi
  rows+=("$(printf '%-34s %-7s %5s %10s  %s' "$name" "nccl" "$rc" "-" "$verdict")")
  echo "${rows[-1]}"
}

# same_as NAME OTHER: whether sweep NAME's report equals sweep OTHER's (in-process) but for
# times, the command, the host and the transport's name: the verdict, counts, every case's
# verdict, failed checks and message, what the stages computed. A row of its own.
same_as() {
  local name="$1" other="$2" said rc=0
  said="$(python3 - "$out/$name/report.json" "$out/$other/report.json" <<'PY'
import json, sys
def strip(path):
    r = json.load(open(path))
    for k in ("timing", "command", "provenance"):
        r.pop(k, None)
    r["scenario"].pop("sha256", None)
    r["scenario"]["resolved"].pop("transport", None)
    for c in r["cases"]:
        c.pop("seconds", None)
    return r
try:
    a, b = strip(sys.argv[1]), strip(sys.argv[2])
except Exception as e:
    print(f"CANNOT COMPARE: {e}")
    sys.exit(1)
if a != b:
    print("REPORT DIFFERS in: " + ", ".join(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)))
    sys.exit(1)
print(f"same report: {a['verdict']}; " + ", ".join(
    f"{c['key']} {c['verdict']}" + (f" ({', '.join(c['failed_checks'])})" if c.get('failed_checks') else "")
    for c in a["cases"]))
PY
)" || rc=$?
  [[ $rc -eq 0 ]] || failed=1
  rows+=("$(printf '%-34s %-7s %5s %10s  %s' "$name" "=inproc" "-" "-" "$said (vs $other)")")
  echo "${rows[-1]}"
}

echo "== nccl-check: every fault scenario over NCCL"
for f in "$root"/scenarios/fault-*.json; do
  name="$(basename "$f" .json)"
  # Serving fault scenarios run trimmed, below.
  if grep -q '"serving"' "$f"; then continue; fi
  np="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['partitions'].get('pp', 2))" "$f")"
  # One rank per GPU at most (NCCL forbids two ranks of one communicator on one GPU): a
  # scenario with more stages runs on as many ranks as GPUs. A partition rejected at
  # configuration needs no rank (partition.remainder_dropped's PP=4 gives its verdict on
  # 2); one that would run is refused, exit 2 (below).
  [[ "$np" -le "$gpus" ]] || np="$gpus"
  # A fault scenario exits 1 (a divergence found) when its expect is met; judge by expect.
  sweep "$name" "$np" nccl "$f" any-verdict
done

echo "== nccl-check: refusals over NCCL"
refused more-ranks-than-gpus "$((gpus + 1))" "$root/scenarios/default.json" \
  "needs one GPU per rank"
refused fewer-ranks-than-stages 2 "$root/scenarios/pp3-pairwise.json" \
  "has 3 stages, but the nccl transport has 2 rank(s)"

echo "== nccl-check: serving over NCCL (8 requests at split point 13) against in-process"
# trim SRC DST BACKEND: the serving scenario SRC with its first 8 requests at split point 13
# on BACKEND, its expect rewritten for that one split point (conformant: identical there;
# a fault scenario: diverged there, caught by the check its expect names).
trim() {
  python3 - "$@" <<'PY'
import json, os, sys
src, dst, backend = sys.argv[1], sys.argv[2], sys.argv[3]
s = json.load(open(src))
s["name"] = os.path.basename(dst)[:-5]
s["backend"] = backend
s["workload"]["file"] = os.path.join(os.path.dirname(src), s["workload"]["file"])
s["workload"]["prompts"] = min(s["workload"].get("prompts", 8), 8)
s["partitions"] = {"pp": 2, "splits": [[13]]}
e = s["expect"]
s["expect"] = ({"verdict": "conformant", "identical_splits": 1} if e["verdict"] == "conformant"
               else {"verdict": "divergent", "diverged": ["split-13"], "caught_by": e["caught_by"]})
json.dump(s, open(dst, "w"), indent=2)
PY
}
trim "$root/scenarios/serving.json" "$out/serving.json" cpu
sweep serving-inproc 1 inproc "$out/serving.json"
sweep serving-nccl 2 nccl "$out/serving.json"
same_as serving-nccl serving-inproc
if [[ ${#cuda_flags[@]} -gt 0 ]]; then
  trim "$root/scenarios/serving.json" "$out/serving-cuda.json" cuda
  sweep serving-cuda-inproc 1 inproc "$out/serving-cuda.json"
  sweep serving-cuda-nccl 2 nccl "$out/serving-cuda.json"
  same_as serving-cuda-nccl serving-cuda-inproc
  sweep serving-cuda-mpi 2 mpi "$out/serving-cuda.json"
  same_as serving-cuda-mpi serving-cuda-inproc
fi
for f in "$root"/scenarios/fault-*.json; do
  grep -q '"serving"' "$f" || continue
  name="$(basename "$f" .json)"
  trim "$f" "$out/$name.json" cpu
  sweep "$name-inproc" 1 inproc "$out/$name.json" any-verdict
  sweep "$name" 2 nccl "$out/$name.json" any-verdict
  same_as "$name" "$name-inproc"
done

if [[ "${K3_SHAPE:-0}" == "1" ]]; then
  echo "== nccl-check: k3-shape, 8 spread split points (scenarios/gpu/k3-shape-nccl.json)"
  sweep k3-shape-nccl 2 nccl "$root/scenarios/gpu/k3-shape-nccl.json"
  # The same split points on one GPU, in one process (the scenario with transport inproc:
  # a scenario naming nccl is refused outside mpirun).
  python3 - "$root/scenarios/gpu/k3-shape-nccl.json" "$out/k3-shape-one-gpu.json" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
s["name"] = "k3-shape-one-gpu"
s["transport"] = "inproc"
s["workload"]["file"] = os.path.normpath(os.path.join(os.path.dirname(sys.argv[1]), s["workload"]["file"]))
json.dump(s, open(sys.argv[2], "w"), indent=2)
PY
  t0=$(date +%s.%N)
  rc=0
  CUDA_VISIBLE_DEVICES=0 "$bin" sweep "$out/k3-shape-one-gpu.json" --threads 1 \
    --report "$out/k3-shape-one-gpu" >"$out/k3-shape-one-gpu.txt" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  summary="$(grep -E '^summary:' "$out/k3-shape-one-gpu.txt" | sed 's/^summary: //' || true)"
  [[ $rc -eq 0 ]] || failed=1
  rows+=("$(printf '%-34s %-7s %5s %8.1f s  %s' k3-shape-one-gpu inproc "$rc" \
    "$(awk "BEGIN{print $t1 - $t0}")" "${summary:-(no summary: see $out/k3-shape-one-gpu.txt)}")")
  echo "${rows[-1]}"
fi

echo "== nccl-check: payload bandwidth (channel vs plain ncclSend/ncclRecv, same run)"
rc=0
scenario_files=()
for f in "$root"/scenarios/*.json "$root"/scenarios/gpu/*.json; do
  [[ "$(basename "$f")" == scenario.schema.json ]] || scenario_files+=("$f")
done
"${mpirun[@]}" -np 2 "$build/nccl_payload_bench" "${scenario_files[@]}" \
  2>&1 | tee "$out/bandwidth.txt" || rc=$?
if [[ $rc -ne 0 ]] || ! grep -q '^bytes: every size received as sent' "$out/bandwidth.txt"; then
  echo "nccl-check: the payload benchmark failed or received other bytes than sent" >&2
  failed=1
fi

echo
echo "== nccl-check: table (a fault scenario's rc is 1 when its expect is met)"
printf '%-34s %-7s %5s %10s  %s\n' "sweep" "via" "rc" "wall" "summary"
printf '%s\n' "${rows[@]}"
echo "bandwidth (channel vs raw; target: at least 90% of raw at every scenario payload size):"
grep -E "^ +bytes |^ +[0-9]+ |^target|^per job|^path|^bytes:" "$out/bandwidth.txt" |
  sed 's/^/   /' || true
echo "logs: $out/<sweep>.txt; bandwidth: $out/bandwidth.txt; reports: $out/<sweep>/report.json"
if [[ $failed -ne 0 ]]; then
  echo "nccl-check: FAILED: a sweep crashed, errored or did not meet its scenario's expect" >&2
  exit 1
fi
echo "nccl-check: every sweep met its scenario's expect"
