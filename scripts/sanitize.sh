#!/usr/bin/env bash
# Sanitizer builds and their test runs, each in a build folder of its own.
#   scripts/sanitize.sh asan [--jobs N] [--filter GTEST_FILTER]
#       AddressSanitizer + UBSan (SPLITCHECK_SANITIZE, every UBSan report halts) in
#       build-asan/: the whole test suite through ctest, leak checking on.
#   scripts/sanitize.sh tsan [--jobs N]
#       ThreadSanitizer (SPLITCHECK_TSAN) in build-tsan/: the suites that run threads
#       (sweep, stages, the partitioned engine, transports, layer reuse, the generation
#       loop), the rest of the suite being single-threaded.
# Fails (non-zero) on any test failure or sanitizer report.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc)"
filter=""
usage() { echo "usage: $0 asan|tsan [--jobs N] [--filter GTEST_FILTER]"; }
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
kind="$1"; shift
while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; jobs="$2"; shift 2 ;;
    --filter) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; filter="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "sanitize: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

# The thread-using suites TSan runs (GoogleTest filter over splitcheck_tests).
tsan_filter='Gate*:LayerReuse*:Handoff*:Partition*:StageMemory*:Tap0Residency*:Drafter*:SelfCheck*:EveryDumpLevel*:CheckpointRun*:*/CommittedScenario.*'

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
case "$kind" in
  asan) build_dir="$root/build-asan"; option=-DSPLITCHECK_SANITIZE=ON ;;
  tsan) build_dir="$root/build-tsan"; option=-DSPLITCHECK_TSAN=ON ;;
  *) usage >&2; exit 2 ;;
esac

echo "== sanitize ($kind): configure and build $build_dir"
# -O1 with line tables: a fifth faster to build than -O3, readable reports; the float
# flags (SPEC 1) are the same as Release's, so the numbers are too.
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
  "-DCMAKE_CXX_FLAGS_SANITIZE=-O1 -g1" "-DCMAKE_C_FLAGS_SANITIZE=-O1" "${launcher[@]}" \
  "$option" -DSPLITCHECK_BENCH=OFF >/dev/null
cmake --build "$build_dir" -j"$jobs" --target splitcheck splitcheck_tests

# libhdf5 leaks blocks of its own free lists on some error paths; those are its own, not
# ours. ASan's fast unwinder keeps the suite quick but stops at libhdf5 (no frame
# pointers), so leaks allocated inside libhdf5 are suppressed by module (lsan-fast.supp,
# shared with scripts/fuzz.sh); leaks of splitcheck's own allocations are reported.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan-fast.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:${TSAN_OPTIONS:-}"

echo "== sanitize ($kind): tests"
start=$SECONDS
if [[ "$kind" == tsan ]]; then
  filter="${filter:-$tsan_filter}"
fi
if [[ -n "$filter" ]]; then
  "$build_dir/splitcheck_tests" --gtest_filter="$filter" --gtest_brief=1
else
  ctest --test-dir "$build_dir" --output-on-failure -j"$jobs"
fi
echo "== sanitize ($kind): tests passed in $((SECONDS - start)) s"
