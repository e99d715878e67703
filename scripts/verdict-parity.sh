#!/usr/bin/env bash
# Every committed fault scenario swept two ways, by the built-in sweep and through the
# runner with `splitcheck run` as the engine (tests/runner/verdict_parity_test.cc), and the
# verdict and failed checks of each case side by side, written to docs/bench/verdict-parity.txt.
#   scripts/verdict-parity.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="$root/docs/bench/verdict-parity.txt"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# The tree's revision before the table is rewritten (the table is a tracked file).
revision="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+dirty')"
start=$(date +%s)
status=0
"$build/splitcheck_tests" --gtest_filter='Committed/VerdictParityTest.*' >"$log" 2>&1 || status=$?
{
  echo "# Verdict parity: built-in sweep against the runner (splitcheck run as the engine)"
  echo "# commit $revision, $(nproc) cores (shared with other builds), $(date -u +%FT%TZ)"
  echo "# command: scripts/verdict-parity.sh (tests/runner/verdict_parity_test.cc), $(($(date +%s) - start)) s, gtest exit $status"
  echo "# each scenario at 8 layers (block 4), split points 2/4/6 (partition-remainder-dropped: 10 layers, PP=4 balanced)"
  printf '%-40s %-8s %-44s %s\n' scenario case built-in runner
  grep '^PARITY ' "$log" | sed 's/^PARITY //'
  echo
  grep -E '^\[ +(OK|FAILED) +\] Committed/VerdictParityTest' "$log" || true
} >"$out"
cat "$out"
exit "$status"
