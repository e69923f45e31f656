#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for tilejit, builds it, and runs the main
# job: `tilejit doctor` and a compile of an RMSNorm kernel to a cubin.
#   scripts/setup.sh            install packages (apt-get), build into build/, run
#   scripts/setup.sh --no-build install packages only
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${TILEJIT_BUILD_DIR:-$here/build}"
do_build=1
for a in "$@"; do
  case "$a" in
    --no-build) do_build=0 ;;
    *) echo "setup.sh: unknown argument '$a' (known: --no-build)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config git python3
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  zlib1g-dev libzstd-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
  libsqlite3-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libcpp-httplib-dev
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/nvrtc.h" ] || ! ls "$cuda"/lib64/libnvrtc.so* >/dev/null 2>&1; then
  echo "setup.sh: CUDA 13 not found at '$cuda' (need include/nvrtc.h and lib64/libnvrtc.so);" \
       "install the CUDA toolkit there or set CUDA_HOME" >&2
  exit 1
fi

if [ "$do_build" -eq 1 ]; then
  cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCUDAToolkit_ROOT="$cuda"
  cmake --build "$build_dir" -j "$(nproc)"
  "$build_dir/tools/tilejit" doctor
  "$build_dir/tools/tilejit" compile rmsnorm_fwd --shape 16384x4096 --emit cubin-info
fi
