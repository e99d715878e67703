#!/usr/bin/env bash
# Peak memory of comparing dumps with one large dataset: an external sweep (--jobs 2) of a
# 3-layer fake engine whose dumps each hold a BIG_MIB dataset (default 2048, bfloat16, at
# layer 0) and small ones, PP=1 and both split points writing the same bytes (a pass, so
# every byte is read and compared); then `compare` of PP=1's dump with split-1's. Each runs
# under /usr/bin/time -v; printed: peak RSS, and the same sweep with a 1 MiB dataset as the
# process's baseline. Target (issue 61, 6b): at most 512 MB over the baseline.
#   scripts/bench-dump-memory.sh [BIG_MIB] [BINARY]   (default: 2048, build/splitcheck)
# Needs about 4 x BIG_MIB of free disk under $TMPDIR (removed afterwards), /usr/bin/python3
# with h5py, numpy and xxhash. The engine writes in 64 MiB blocks, so its own peak (printed)
# stays far below splitcheck's (time -v counts the largest descendant too).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
big_mib="${1:-2048}"
bin="${2:-$root/build/splitcheck}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat >"$work/engine.py" <<'PY'
# The fake engine: argv scenario cuts out; BENCH_MIB sizes layer 0's pre_attn.
import os, resource, sys
import h5py, numpy as np, xxhash
scenario, cuts, out = sys.argv[1:4]
layers, width = 3, 32768
rows = max(1, int(os.environ["BENCH_MIB"]) * (1 << 20) // (2 * width))
bounds = [0] + [int(c) for c in cuts.split(",") if c] + [layers]
order = 0
def put(f, path, dtype, data=None, shape=None):
    global order
    if data is not None:
        d = f.create_dataset(path, data=data)
        digest = xxhash.xxh3_64(np.ascontiguousarray(data)).hexdigest()
    else:  # streamed in blocks of 1024 rows (64 MiB)
        d = f.create_dataset(path, shape=shape, dtype="<u2")
        h = xxhash.xxh3_64()
        base = (np.arange(1024 * width, dtype=np.uint32) * 40503 >> 7).astype(np.uint16)
        for r in range(0, shape[0], 1024):
            n = min(1024, shape[0] - r)
            block = (base[: n * width] ^ np.uint16(r & 0xFFFF)).reshape(n, width)
            d[r : r + n] = block
            h.update(block)
        digest = h.hexdigest()
    d.attrs["dtype"] = np.bytes_(dtype.encode())
    d.attrs["order"] = np.int64(order)
    d.attrs["digest"] = np.bytes_(("xxh3:" + digest).encode())
    order += 1
with h5py.File(out + ".tmp", "w", libver=("v108", "latest")) as f:
    f.attrs["format"] = np.bytes_(b"splitcheck.dump")
    f.attrs["format_version"] = np.int64(2)
    f.attrs["partition"] = np.bytes_("|".join(f"{a}-{b}" for a, b in zip(bounds, bounds[1:])).encode())
    for s, (a, b) in enumerate(zip(bounds, bounds[1:])):
        g = f.create_group(f"stages/{s}")
        g.attrs["layer_begin"] = np.int64(a)
        g.attrs["layer_end"] = np.int64(b)
        g.attrs["embedding"] = np.bytes_(b"real" if s == 0 else b"missing")
    put(f, "forward/0/input_ids", "int32", np.arange(4, dtype=np.int32))
    put(f, "forward/0/layers/0/pre_attn", "bfloat16", shape=(rows, width))
    for l in range(1, layers):
        put(f, f"forward/0/layers/{l}/pre_attn", "bfloat16",
            (np.arange(4 * 64, dtype=np.uint16) + l).reshape(4, 64))
    put(f, "forward/0/logits", "float32", np.linspace(-1, 1, 4 * 32, dtype=np.float32).reshape(4, 32))
os.rename(out + ".tmp", out)
print(f"engine peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB", file=sys.stderr)
PY

/usr/bin/python3 - "$root/scenarios/external-self.json" "$work" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
work = sys.argv[2]
j["model"]["overrides"] = {"num_hidden_layers": 3, "attn_res_block_size": 1}
j["engine"] = {"command": ["/usr/bin/python3", work + "/engine.py", "{scenario}", "{cuts}", "{out}"],
               "timeout_s": 300, "num_hidden_layers": 3, "attn_res_block_size": 1}
j["partitions"] = {"pp": 2, "splits": "all"}
j.pop("expect", None)
json.dump(j, open(work + "/scenario.json", "w"), indent=2)
PY

peak() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1"; }
sweep() {  # MIB NAME
  BENCH_MIB="$1" /usr/bin/time -v -o "$work/$2.time" "$bin" sweep "$work/scenario.json" --jobs 2 \
    --report "$work/$2" >"$work/$2.out" 2>"$work/$2.err" || true
  local verdict
  verdict="$(/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["verdict"], r["counts"])' \
    "$work/$2/report.json" 2>/dev/null || echo "no report")"
  echo "sweep --jobs 2, $1 MiB dataset: peak RSS $(($(peak "$work/$2.time") / 1024)) MB," \
    "wall $(sed -n 's/.*Elapsed (wall clock) time.*: //p' "$work/$2.time"), verdict $verdict;" \
    "$(grep -h 'engine peak' "$work/$2/"*/*stderr* 2>/dev/null | sort | tail -1 || true)"
}
df -h "$work" | tail -1 | awk '{print "free disk under " $6 ": " $4}'
sweep 1 base
base_kb="$(peak "$work/base.time")"
sweep "$big_mib" big
big_kb="$(peak "$work/big.time")"
echo "over the baseline: $(((big_kb - base_kb) / 1024)) MB (target at most 512 MB)"
wd="$(sed -n 's/.*"work_dir": *"\([^"]*\)".*/\1/p' "$work/big/report.json" | head -1)"
if [[ -n "$wd" && -f "$wd/pp1.h5" && -f "$wd/split-1.h5" ]]; then
  /usr/bin/time -v -o "$work/cmp.time" "$bin" compare "$wd/pp1.h5" "$wd/split-1.h5" >"$work/cmp.out" 2>&1 || true
  echo "compare pp1.h5 split-1.h5 ($(head -c 200 "$work/cmp.out" | head -1)): peak RSS" \
    "$(($(peak "$work/cmp.time") / 1024)) MB, wall $(sed -n 's/.*Elapsed (wall clock) time.*: //p' "$work/cmp.time")"
fi
