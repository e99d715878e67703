#!/usr/bin/env bash
# The include graph of harness/ by folder: every "from -> to" pair of rooms where a file of
# `from` includes a header of `to`, with how many files do, checked against the rooms each
# folder's README.md says it may include (its "May include:" line). The rooms form floors,
# bottom first: dump, scenario, engine, transport, judge, runner, sweep, then gates and
# lanes, reports, cli;
# a room may include only rooms below it, so every arrow runs down. Exit 1 when any include
# is not allowed (an arrow back up a floor or sideways), or a folder has no such line.
#   scripts/include-graph.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
declare -A allowed
bad=0
for readme in harness/*/README.md; do
  room="$(basename "$(dirname "$readme")")"
  line="$(grep -m1 '^May include:' "$readme" || true)"
  if [[ -z $line ]]; then
    echo "$readme: no \"May include:\" line" >&2
    bad=$((bad + 1))
    continue
  fi
  allowed[$room]=" $({ grep -oE '`[a-z_]+`' <<<"$line" || true; } | tr -d '`' | tr '\n' ' ')"
done
while read -r count from to; do
  if [[ ${allowed[$from]-} != *" $to "* ]]; then
    printf '%-10s -> %-10s %3d file(s)  NOT ALLOWED (harness/%s/README.md)\n' \
      "$from" "$to" "$count" "$from"
    bad=$((bad + 1))
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
echo "includes not allowed: $bad"
(( bad == 0 ))
