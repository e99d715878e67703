#!/usr/bin/env bash
# Install the Debian packages splitcheck needs (idempotent), then configure and build.
#   scripts/setup.sh [--no-build] [--build-dir DIR]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
do_build=1

usage() { echo "usage: $0 [--no-build] [--build-dir DIR]"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-build) do_build=0; shift ;;
    --build-dir)
      [[ $# -ge 2 && -n "$2" ]] || { usage >&2; exit 2; }
      build_dir="$2"; shift 2 ;;
    --build-dir=*) build_dir="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
# A relative --build-dir is taken relative to the caller's directory.
[[ "$build_dir" = /* ]] || build_dir="$PWD/$build_dir"

# Debian bookworm names (xtensor's companion is xtl-dev; there is no libxtl-dev).
packages=(
  cmake ninja-build g++ pkg-config
  libhdf5-dev hdf5-tools nlohmann-json3-dev libxtensor-dev xtl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libfmt-dev
  libssl-dev libxxhash-dev
  python3-h5py python3-numpy python3-jsonschema python3-torch python3-xxhash
  python3-pytest python3-venv python3-pip python3-setuptools  # python/ tests, pip install ./python
  chromium libopenmpi-dev openmpi-bin  # the mpi transport (mpirun; tests launch real ranks)
  clang libclang-rt-14-dev  # the libFuzzer build of scripts/fuzz.sh
  cmark-gfm  # tests render summary.md as GitHub renders a PR comment
  pmccabe  # scripts/long-functions.sh (the ctest entry function_length)
)

missing=()
for p in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  echo "setup: installing ${#missing[@]} missing package(s): ${missing[*]}"
  sudo=()
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: must run as root (or with sudo available)" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  echo "setup: packages installed"
fi

if [[ $do_build -eq 0 ]]; then
  echo "setup: --no-build given, skipping configure and build"
  exit 0
fi

# The CUDA backend is compiled wherever the toolkit is installed (CI too: a CUDA build
# break fails CI); its tests skip, saying why, on a machine without a GPU. The mpi
# transport is always built (its tests run real mpirun sweeps); the nccl transport where
# NCCL and the CUDA toolkit are installed (it compiles without a GPU and refuses to run
# without one).
flags=(-DSPLITCHECK_MPI=ON)
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  flags+=(-DSPLITCHECK_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  echo "setup: /usr/local/cuda/bin/nvcc found: building the CUDA backend"
fi
if [[ -f /usr/local/cuda/include/nccl.h || -f /usr/include/nccl.h ]] &&
   [[ -f /usr/local/cuda/include/cuda_runtime.h ]]; then
  flags+=(-DSPLITCHECK_NCCL=ON -DCUDAToolkit_ROOT=/usr/local/cuda)
fi
# ccache, where it is installed, makes a rebuild from another checkout cheap.
command -v ccache >/dev/null && flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "setup: configuring $build_dir (${flags[*]})"
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}"
echo "setup: building with $(nproc) job(s)"
cmake --build "$build_dir" -j"$(nproc)"
echo "setup: done ($build_dir)"
