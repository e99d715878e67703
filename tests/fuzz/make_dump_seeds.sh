#!/usr/bin/env bash
# Regenerates the committed seed dumps of the dump-reader and comparator fuzzers
# (tests/fuzz/corpus/dump/) from the tiny scenarios of tests/fuzz/seed-scenarios/.
#   tests/fuzz/make_dump_seeds.sh [SPLITCHECK_BINARY]   (default: build/splitcheck)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${1:-$here/../../build/splitcheck}"
out="$here/corpus/dump"
mkdir -p "$out"
for s in "$here"/seed-scenarios/*.json; do
  name="$(basename "$s" .json)"
  "$bin" run "$s" --out "$out/$name.h5" >/dev/null
  echo "$out/$name.h5: $(stat -c %s "$out/$name.h5") bytes"
done
