#!/usr/bin/env bash
# The slowest tests of the last ctest run, slowest first, with their wall seconds (what
# .ci/run prints after its test step). Reads build/Testing/Temporary/LastTest.log, where
# ctest writes each test's time whatever -j it ran with.
#   scripts/slowest-tests.sh [--count N] [--build-dir DIR]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
count=10
usage() { echo "usage: $0 [--count N] [--build-dir DIR]"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --count) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }; count="$2"; shift 2 ;;
    --build-dir) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; build_dir="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "slowest-tests: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
log="$build_dir/Testing/Temporary/LastTest.log"
[[ -f "$log" ]] || { echo "slowest-tests: $log not found (run ctest first)" >&2; exit 2; }

# A test's block: "N/M Test: NAME", its output between "Output:" and "<end of output>"
# (never read: a test may print anything), then "Test time =   S sec" and its outcome.
awk '
  /^[0-9]+\/[0-9]+ Test: / { name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); out = 0; next }
  /^Output:$/ { out = 1; next }
  /^<end of output>$/ { out = 0; next }
  !out && name != "" && /^Test time = +[0-9.]+ sec$/ { t = $4; next }
  !out && name != "" && t != "" && /^Test (Passed|Failed|Not Run|Skipped)|^\*\*\*/ {
    status = $0; sub(/^Test /, "", status); sub(/\.$/, "", status)
    printf "%s\t%s\t%s\n", t, status, name; name = ""; t = ""
  }
' "$log" | sort -t $'\t' -k1,1gr | head -n "$count" |
  awk -F '\t' -v total="$(grep -c '^[0-9]*/[0-9]* Test: ' "$log")" '
    NR == 1 { printf "the slowest tests of the last ctest run (%d tests):\n", total }
    { printf "%8.1f s  %-8s %s\n", $1, $2, $3 }'
