#!/usr/bin/env bash
# Every function of harness/ (*.cc) over 100 lines, as Debian's pmccabe counts them (first to
# last line of the function), longest first: "lines  file:line  name", then the count; exit 1
# when any function is over, 2 when pmccabe cannot parse a file (a function it loses track of
# would go uncounted). It is the ctest entry `function_length`.
#   scripts/long-functions.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v pmccabe >/dev/null || { echo "long-functions: pmccabe is not installed" >&2; exit 2; }
limit=100
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# pmccabe predates C++11: a `noexcept` or `override` after a parameter list throws it off for
# the rest of the file, so a copy without them is measured (line numbers unchanged).
mapfile -t sources < <(find harness -name '*.cc' | sort)
for f in "${sources[@]}"; do
  mkdir -p "$tmp/$(dirname "$f")"
  sed -E 's/\b(noexcept|override)\b//g' "$f" >"$tmp/$f"
done
if ! (cd "$tmp" && pmccabe "${sources[@]}" >measured.tsv 2>parse-errors.txt) ||
  [[ -s $tmp/parse-errors.txt ]]; then
  echo "long-functions: pmccabe could not parse every file:" >&2
  cat "$tmp/parse-errors.txt" >&2
  exit 2
fi
# pmccabe's columns: modified and traditional complexity, statements, first line, lines, then
# "file(line): name".
over="$(awk -F'\t' -v limit="$limit" '$5 > limit {
    where = $6; sub(/: .*/, "", where); sub(/\(/, ":", where); sub(/\)$/, "", where)
    name = $6; sub(/^[^:]*\([0-9]+\): /, "", name)
    printf "%5d  %s  %s\n", $5, where, name
  }' "$tmp/measured.tsv" | sort -k1,1nr -k2,2)"
count=0
[[ -z $over ]] || { printf '%s\n' "$over"; count="$(wc -l <<<"$over")"; }
echo "functions over $limit lines: $count"
[[ $count -eq 0 ]]
