#!/usr/bin/env bash
# Runs the RMSNorm benchmark and its torch peer in one go on a GPU machine and
# writes bench/results/rmsnorm.{json,md}. With TILEJIT_DB set, tilejit runs the
# configs `tilejit tune` recorded there; otherwise its defaults.
#   bench/run_rmsnorm.sh [BUILD_DIR] [OUT_DIR] [NAME]
# RMSNORM_SHAPES (default 16384x4096,16384x8192) picks the shapes;
# TILEJIT_BACKEND (nvptx, the default, or cuda) the back end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
out="${2:-$here/results}"
name="${3:-rmsnorm}"
shapes="${RMSNORM_SHAPES:-16384x4096,16384x8192}"
bench="$build/bench/rmsnorm_bench"
[ -x "$bench" ] || bench="$(command -v rmsnorm_bench)"
tmp="$(mktemp -d)"
"$bench" --shapes "$shapes" --out "$tmp/tilejit.json" ${TILEJIT_DB:+--db "$TILEJIT_DB"} \
  --backend "${TILEJIT_BACKEND:-nvptx}"
python3 "$here/rmsnorm_peer.py" --shapes "$shapes" --out "$tmp/peer.json"
python3 "$here/report.py" "$tmp/tilejit.json" "$tmp/peer.json" --name "$name" --outdir "$out" \
  --command "${TILEJIT_DB:+TILEJIT_DB=$TILEJIT_DB }RMSNORM_SHAPES=$shapes TILEJIT_BACKEND=${TILEJIT_BACKEND:-nvptx} bench/run_rmsnorm.sh"
