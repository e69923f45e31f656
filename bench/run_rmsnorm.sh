#!/usr/bin/env bash
# Runs the RMSNorm benchmark and its torch peer in one go on a GPU machine and
# writes bench/results/rmsnorm.{json,md}. With RMSNORM_DB (a store file) set,
# tilejit runs the configs `tilejit tune` recorded there; otherwise its
# defaults.
#   bench/run_rmsnorm.sh [BUILD_DIR] [OUT_DIR] [NAME]
# RMSNORM_SHAPES (default 16384x4096,16384x8192) picks the shapes;
# RMSNORM_BACKEND (nvptx, the default, or cuda) the back end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/run_common.sh"
name="${3:-rmsnorm}"
shapes="${RMSNORM_SHAPES:-16384x4096,16384x8192}"
bench="$(program bench rmsnorm_bench)"
"$bench" --shapes "$shapes" --out "$tmp/tilejit.json" ${RMSNORM_DB:+--db "$RMSNORM_DB"} \
  --backend "${RMSNORM_BACKEND:-nvptx}"
python3 "$here/rmsnorm_peer.py" --shapes "$shapes" --out "$tmp/peer.json"
python3 "$here/report.py" "$tmp/tilejit.json" "$tmp/peer.json" --name "$name" --outdir "$out" \
  --command "${RMSNORM_DB:+RMSNORM_DB=$RMSNORM_DB }RMSNORM_SHAPES=$shapes RMSNORM_BACKEND=${RMSNORM_BACKEND:-nvptx} bench/run_rmsnorm.sh"
