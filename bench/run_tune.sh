#!/usr/bin/env bash
# Tunes the RMSNorm benchmark shapes over their whole config space on a GPU
# machine, each with a fresh store, and prints every result with its wall time
# (process start to exit, compile included).
#   bench/run_tune.sh [BUILD_DIR] [extra `tilejit tune` flags, e.g. --in-process]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/run_common.sh"
shift || true
cli="$(program tools tilejit)"
for op in rmsnorm_fwd rmsnorm_bwd; do
  for shape in 16384x4096 16384x8192; do
    start=$(date +%s%N)
    "$cli" tune "$op" --shape "$shape" --dtype bf16 --db "$tmp/$op-$shape.db" "$@"
    ms=$((($(date +%s%N) - start) / 1000000))
    printf 'wall %d.%02d s\n' $((ms / 1000)) $((ms % 1000 / 10))
  done
done
