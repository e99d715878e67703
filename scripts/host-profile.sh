#!/usr/bin/env bash
# Where a serving run's host time goes: serving_benchmark's step split under a sampling
# CPU profiler (gperftools' libprofiler, preloaded; the GPU machines have no perf), one run
# at a time (batched, then one at a time), each read by pprof as cumulative and own samples
# under serve_requests.
#
#   scripts/host-profile.sh prepare   here, with apt: unpacks Debian's gperftools and
#                                     libunwind into .prof/ (git-ignored)
#   scripts/host-profile.sh run [--gpu 0|1] [--shared-forward 0|1] [--repetitions N]
#                                     [--build-dir DIR] [--out DIR]
#                                     on the device with carry [".xt", ".prof"] (--gpu 1,
#                                     the default), or here with --gpu 0
#
# `run` builds serving_benchmark with frame pointers into DIR (default build-prof/), runs
# BM_ServingStepHostAndDevice once plainly (its step split), then once a run under the
# profiler with N repetitions (default 4; the first serve of a process pins its product
# shapes, later ones are warm), and writes OUT/RUN.prof and OUT/RUN.txt (default OUT:
# $OUT where the device tool sets it, else DIR/profile). The sampling rate is the
# machine's timer's (about 260 a second on the H200 machines): compare runs by their
# shares, not their counts.
# Exit 0: profiles written; 2: usage, .prof/ missing, or the build failed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prof="$root/.prof"
usage() {
  sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

prepare() {
  local tmp
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  (cd "$tmp" && apt-get download libgoogle-perftools4 libtcmalloc-minimal4 libunwind8 \
    google-perftools) || { echo "host-profile: apt-get download failed" >&2; exit 2; }
  rm -rf "$prof"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$prof"; done
  # A carried tree may drop symbolic links: copies in their place.
  find "$prof" -type l | while read -r link; do
    cp --remove-destination -L "$link" "$link.copy" && mv "$link.copy" "$link"
  done
  du -sh "$prof"
}

run() {
  local gpu=1 shared=1 reps=4 build="$root/build-prof" out="${OUT:-}"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --gpu) gpu="$2"; shift 2 ;;
      --shared-forward) shared="$2"; shift 2 ;;
      --repetitions) reps="$2"; shift 2 ;;
      --build-dir) build="$2"; shift 2 ;;
      --out) out="$2"; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ "$gpu" =~ ^[01]$ && "$shared" =~ ^[01]$ && "$reps" =~ ^[1-9][0-9]*$ ]] || usage
  local lib="$prof/usr/lib/x86_64-linux-gnu/libprofiler.so.0" pprof="$prof/usr/bin/google-pprof"
  [[ -f $lib && -f $pprof ]] || { echo "host-profile: run 'prepare' first (no $lib)" >&2; exit 2; }
  out="${out:-$build/profile}"
  mkdir -p "$build" "$out"
  local args=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=-fno-omit-frame-pointer -Wno-dangling-reference")
  if [[ $gpu == 1 ]]; then
    local nvcc=/usr/local/cuda/bin/nvcc
    [[ -x $nvcc ]] || nvcc="$(command -v nvcc || true)"
    args+=(-DSPLITCHECK_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc")
    if [[ -d "$root/.xt/usr" ]]; then  # Debian's xtensor and xxhash, carried (device-deps.sh)
      export CMAKE_PREFIX_PATH="$root/.xt/usr${CMAKE_PREFIX_PATH:+:}${CMAKE_PREFIX_PATH:-}"
      mkdir -p "$build/pc"
      sed "s|^prefix=.*|prefix=$root/.xt/usr|" \
        "$root/.xt/usr/lib/x86_64-linux-gnu/pkgconfig/libxxhash.pc" >"$build/pc/libxxhash.pc"
      export PKG_CONFIG_PATH="$build/pc${PKG_CONFIG_PATH:+:}${PKG_CONFIG_PATH:-}"
      export LD_LIBRARY_PATH="$root/.xt/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:}${LD_LIBRARY_PATH:-}"
    fi
  fi
  { cmake -S "$root" -B "$build" -G Ninja "${args[@]}" &&
    cmake --build "$build" -j"$(nproc)" --target serving_benchmark; } >"$build/host-profile-build.log" 2>&1 ||
    { tail -n 30 "$build/host-profile-build.log" >&2; exit 2; }
  local bench="$build/serving_benchmark" filter="HostAndDevice/gpu:$gpu/shared_forward:$shared"
  "$bench" --benchmark_filter="$filter" 2>&1 | grep '^BM_'
  # The profiler's own libraries (libunwind) beside it, on the path of the profiled process
  # alone.
  local r libs
  libs="$(dirname "$lib")${LD_LIBRARY_PATH:+:}${LD_LIBRARY_PATH:-}"
  for r in batched one_at_a_time; do
    echo "== $r: $reps repetitions under the profiler"
    SPLITCHECK_SERVING_RUN=$r CPUPROFILE="$out/$r.prof" CPUPROFILE_FREQUENCY=2000 \
      LD_LIBRARY_PATH="$libs" LD_PRELOAD="$lib" \
      "$bench" --benchmark_filter="$filter" --benchmark_repetitions="$reps" \
      --benchmark_report_aggregates_only=true 2>&1 | grep -E '^BM_|PROFILE'
    {
      echo "# $r, $filter, $reps repetitions: cumulative samples under serve_requests"
      perl "$pprof" --text --cum --focus=serve_requests --nodecount=80 "$bench" "$out/$r.prof"
      echo "# own samples"
      perl "$pprof" --text --focus=serve_requests --nodecount=40 "$bench" "$out/$r.prof"
    } >"$out/$r.txt" 2>/dev/null
    echo "   $out/$r.txt"
  done
}

case "${1:-}" in
  prepare) shift; [[ $# -eq 0 ]] || usage; prepare ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
