#!/usr/bin/env bash
# The include graph of harness/ by folder: every "from -> to" pair of rooms where a file of
# `from` includes a header of `to`, with how many files do, and whether the arrow runs down
# the floors or back up. Floors, bottom first: dump (files and the comparator, used by every
# room), engine, transport (where the engine's stages run), verdict, runner (external
# engines, judged by verdict's rules), cli (the only room that calls reports/). A room may
# include the rooms below it. Exit 1 when any arrow runs back up.
#   scripts/include-graph.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
declare -A floor=([dump]=0 [engine]=1 [transport]=2 [verdict]=3 [runner]=4 [cli]=5)
up=0
while read -r count from to; do
  if (( ${floor[$to]:-0} > ${floor[$from]:-0} )); then
    printf '%-10s -> %-10s %3d file(s)  up a floor\n' "$from" "$to" "$count"
    up=$((up + 1))
  else
    printf '%-10s -> %-10s %3d file(s)\n' "$from" "$to" "$count"
  fi
done < <(
  find harness -name '*.h' -o -name '*.cc' | sort | while read -r f; do
    from="$(cut -d/ -f2 <<<"$f")"
    { grep -oE '^#include "harness/[a-z_]+/' "$f" || true; } | cut -d/ -f2 | sort -u |
      while read -r to; do [[ $to == "$from" ]] || echo "$from $to"; done
  done | sort | uniq -c | awk '{print $1, $2, $3}'
)
echo "arrows back up a floor: $up"
(( up == 0 ))
