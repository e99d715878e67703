#!/usr/bin/env bash
# Everything this project runs on a GPU machine, in one call: scripts/gpu-check.sh on GPU 0
# and, where there are two GPUs, scripts/nccl-check.sh, side by side, each under a time
# limit (DEVICE_BUDGET_S, default 540 s). Libraries the machine lacks (xtensor, xtl,
# libxxhash) come from .xt/ (scripts/device-deps.sh). Logs and tables go to $OUT (the
# device tool's output folder) or build-device/. Exit 0 when every check passed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/build-device}"
budget="${DEVICE_BUDGET_S:-540}"
mkdir -p "$out"
if [[ -d "$root/.xt/usr" ]]; then
  export CMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}${CMAKE_PREFIX_PATH:+:}$root/.xt/usr"
  if ! pkg-config --exists libxxhash 2>/dev/null; then
    mkdir -p "$root/build-device-pc"
    sed "s|^prefix=.*|prefix=$root/.xt/usr|" \
      "$root/.xt/usr/lib/x86_64-linux-gnu/pkgconfig/libxxhash.pc" >"$root/build-device-pc/libxxhash.pc"
    export PKG_CONFIG_PATH="$root/build-device-pc${PKG_CONFIG_PATH:+:}${PKG_CONFIG_PATH:-}"
    export LD_LIBRARY_PATH="$root/.xt/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:}${LD_LIBRARY_PATH:-}"
  fi
fi
nvidia-smi -L | tee "$out/gpus.txt"
gpus="$(nvidia-smi -L 2>/dev/null | wc -l)"
CUDA_VISIBLE_DEVICES=0 timeout "$budget" bash "$root/scripts/gpu-check.sh" >"$out/gpu-check.txt" 2>&1 &
gpu_pid=$!
nccl_pid=""
if [[ "$gpus" -ge 2 ]]; then
  timeout "$budget" bash "$root/scripts/nccl-check.sh" >"$out/nccl-check.txt" 2>&1 &
  nccl_pid=$!
fi
rc=0
wait "$gpu_pid" || rc=1
[[ -z "$nccl_pid" ]] || wait "$nccl_pid" || rc=1
mkdir -p "$out/gpu-logs" "$out/nccl-logs"
cp "$root"/build-gpu/gpu-check/*.log "$out/gpu-logs/" 2>/dev/null
find "$root/build-nccl/nccl-check" -maxdepth 1 -type f -exec cp {} "$out/nccl-logs/" \; 2>/dev/null
echo "== gpu-check (tail)"; tail -n 40 "$out/gpu-check.txt"
if [[ -n "$nccl_pid" ]]; then echo "== nccl-check (tail)"; tail -n 30 "$out/nccl-check.txt"; fi
exit $rc
