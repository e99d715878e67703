#!/usr/bin/env bash
# Build the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan) in build-fuzz/,
# run every known input once (the committed regressions, the golden), then fuzz each
# target for a bounded time, --jobs targets at once (default: one per core). Fails
# (non-zero) on any crash, leak, timeout, OOM or sanitizer report; the input that caused
# it is left under build-fuzz/artifacts/.
#   scripts/fuzz.sh [--time SECONDS] [--build-dir DIR] [--jobs N]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build-fuzz"
seconds=45
jobs="$(nproc)"
targets=(scenario_fuzz dump_fuzz compare_fuzz handoff_fuzz)

usage() { echo "usage: $0 [--time SECONDS] [--build-dir DIR] [--jobs N]"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --time) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; seconds="$2"; shift 2 ;;
    --build-dir) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; build_dir="$2"; shift 2 ;;
    --jobs) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }; jobs="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fuzz: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$build_dir" = /* ]] || build_dir="$PWD/$build_dir"
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs it)" >&2; exit 2; }

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "== fuzz: configure and build $build_dir"
# -O1 with line tables: fast to build, readable stack traces, asserts kept.
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz \
  "-DCMAKE_CXX_FLAGS_FUZZ=-O1 -gline-tables-only" "-DCMAKE_C_FLAGS_FUZZ=-O1" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang "${launcher[@]}" \
  -DSPLITCHECK_FUZZ=ON -DSPLITCHECK_TESTS=OFF -DSPLITCHECK_BENCH=OFF >/dev/null
cmake --build "$build_dir" -j"$jobs" --target "${targets[@]}" handoff_seeds

# Seed corpora, rebuilt each run from committed files (read-only inputs for libFuzzer).
seeds="$build_dir/fuzz-seeds"
rm -rf "$seeds"
mkdir -p "$seeds"/{scenario_fuzz,dump_fuzz,compare_fuzz,handoff_fuzz}
cp "$root"/scenarios/*.json "$root"/tests/fuzz/seed-scenarios/*.json "$seeds/scenario_fuzz/"
cp "$root"/tests/fuzz/corpus/dump/*.h5 "$seeds/dump_fuzz/"
"$build_dir/handoff_seeds" "$seeds/handoff_fuzz"
# A comparator input is u32 little-endian len(A), A, B (tests/fuzz/compare_fuzz.cc).
pair() {
  python3 -c 'import struct,sys
a=open(sys.argv[1],"rb").read(); b=open(sys.argv[2],"rb").read()
open(sys.argv[3],"wb").write(struct.pack("<I",len(a))+a+b)' "$1" "$2" "$3"
}
dumps=("$root"/tests/fuzz/corpus/dump/*.h5)
for a in "${dumps[@]}"; do
  for b in "${dumps[@]}"; do
    pair "$a" "$b" "$seeds/compare_fuzz/$(basename "$a" .h5)--$(basename "$b" .h5)"
  done
done
# The golden is too large to mutate quickly; it is run once, as a known input.
known="$build_dir/fuzz-known"
rm -rf "$known"
mkdir -p "$known"
pair "$root/golden/default.h5" "$root/golden/default.h5" "$known/golden-pair"

export TMPDIR="${TMPDIR:-/tmp}"
[[ -d /dev/shm && -w /dev/shm ]] && export TMPDIR=/dev/shm
# Known inputs run with full malloc stacks, so the suppressions of libhdf5's own
# free-list leaks match by frame (tests/fuzz/lsan.supp); the timed loop keeps the fast
# unwinder and suppresses leaks inside libhdf5 by module (tests/fuzz/lsan-fast.supp).
asan_known="detect_leaks=1:fast_unwind_on_malloc=0:${ASAN_OPTIONS:-}"
lsan_known="suppressions=$root/tests/fuzz/lsan.supp:${LSAN_OPTIONS:-}"
asan_loop="detect_leaks=1:${ASAN_OPTIONS:-}"
lsan_loop="suppressions=$root/tests/fuzz/lsan-fast.supp:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
flags=(-timeout=10 -rss_limit_mb=2048 -max_len=131072 -print_final_stats=0)

fail=0
run_once() {  # target, files...: each file once
  local t="$1"; shift
  [[ $# -gt 0 ]] || return 0
  echo "== fuzz: $t over $# known input(s)"
  if ! ASAN_OPTIONS="$asan_known" LSAN_OPTIONS="$lsan_known" \
      "$build_dir/$t" "${flags[@]}" "$@" >"$build_dir/$t.known.log" 2>&1; then
    echo "fuzz: $t FAILED on a known input (log: $build_dir/$t.known.log)" >&2
    tail -n 40 "$build_dir/$t.known.log" >&2
    fail=1
  fi
}
for t in "${targets[@]}"; do
  files=()
  if [[ -d "$root/tests/fuzz/regressions/$t" ]]; then
    while IFS= read -r -d '' f; do files+=("$f"); done \
      < <(find "$root/tests/fuzz/regressions/$t" -type f -print0 | sort -z)
  fi
  case "$t" in
    dump_fuzz) files+=("$root/golden/default.h5") ;;
    compare_fuzz) files+=("$known/golden-pair") ;;
  esac
  run_once "$t" "${files[@]}"
done

fuzz_one() {  # target: fuzz it for the bounded time; its log and artifacts stay in build_dir
  local t="$1"
  local work="$build_dir/fuzz-corpus/$t"     # new inputs found; kept between runs
  local artifacts="$build_dir/artifacts/$t/"
  mkdir -p "$work" "$artifacts"
  ASAN_OPTIONS="$asan_loop" LSAN_OPTIONS="$lsan_loop" \
    "$build_dir/$t" "${flags[@]}" -max_total_time="$seconds" -artifact_prefix="$artifacts" \
    "$work" "$seeds/$t" >"$build_dir/$t.log" 2>&1
}
# The targets fuzz --jobs at a time, each a process of one thread with the whole time.
for ((first = 0; first < ${#targets[@]}; first += jobs)); do
  batch=("${targets[@]:first:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    echo "== fuzz: $t for ${seconds}s"
    fuzz_one "$t" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    t="${batch[$i]}"
    if ! wait "${pids[$i]}"; then
      echo "fuzz: $t FAILED (log: $build_dir/$t.log, input under $build_dir/artifacts/$t/)" >&2
      tail -n 60 "$build_dir/$t.log" >&2
      fail=1
    else
      echo "fuzz: $t: $(grep -E '^Done [0-9]+ runs' "$build_dir/$t.log" || tail -n 1 "$build_dir/$t.log")"
    fi
  done
done

if [[ $fail -ne 0 ]]; then
  echo "== fuzz: FAILED" >&2
  exit 1
fi
echo "== fuzz: all targets passed"
