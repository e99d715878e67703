#!/usr/bin/env bash
# The runner's own cost against the engines' own time, measured in one run: sweeps an
# external scenario with --jobs 2, REPEATS times, and prints per sweep
#   runner overhead = sum over cases of (case wall - engine wall) / sum of engine wall
# (what splitcheck adds per case: starting and containing the engine, verifying and loading
# its dump, judging it) and the wall against the ideal schedule of the engines alone
# (PP=1, then the cases' engine time spread over the jobs); then the median of each.
#   scripts/runner-overhead.sh [SCENARIO] [REPEATS]   (default: scenarios/external-torch-pp.json, 3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scenario="${1:-$root/scenarios/external-torch-pp.json}"
repeats="${2:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 "$repeats"); do
  "$root/build/splitcheck" sweep "$scenario" --jobs 2 --report "$work/r$i" >/dev/null || true
  /usr/bin/python3 - "$work/r$i/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cases = r["cases"]
engine = sum(c.get("engine_seconds", 0) for c in cases)
case_wall = sum(c["seconds"] for c in cases)
pp1 = r["timing"]["pp1_seconds"]
wall = r["timing"]["total_seconds"]
ideal = pp1 + engine / r["engine"]["jobs"]
print(f"cases {len(cases)} verdict {r['verdict']}: engine {engine:.2f} s, case wall {case_wall:.2f} s, "
      f"runner overhead {100 * (case_wall - engine) / engine:.2f}%; sweep wall {wall:.2f} s, "
      f"ideal {ideal:.2f} s, wall/ideal {wall / ideal:.3f}")
PY
done | tee "$work/lines"
/usr/bin/python3 - "$work/lines" <<'PY'
import re, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
over = [float(re.search(r"runner overhead ([0-9.]+)%", l).group(1)) for l in lines]
ratio = [float(re.search(r"wall/ideal ([0-9.]+)", l).group(1)) for l in lines]
print(f"median over {len(lines)} sweeps: runner overhead {statistics.median(over):.2f}% "
      f"(target at most 5%), wall/ideal {statistics.median(ratio):.3f}")
PY
