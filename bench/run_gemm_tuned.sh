#!/usr/bin/env bash
# Issue 12's bar run on a GPU machine: tunes every shape of
# bench/gemm_shapes.json into a fresh store (`tilejit tune gemm`, 48 configs,
# wall time per shape), then times tilejit's tuned winners, tilejit's default
# configs and cuBLAS in one run, and writes bench/results/NAME.{json,md,png}
# and each tuning's report to NAME_tune.log.
#   bench/run_gemm_tuned.sh [BUILD_DIR] [OUT_DIR] [NAME]
# TUNE_FLAGS adds flags to each `tilejit tune` (e.g. --in-process).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/run_common.sh"
name="${3:-gemm_tuned_all}"
bench="$(program bench gemm_bench)"
cli="$(program tools tilejit)"
shapes="$here/gemm_shapes.json"
# One line per shape: name|layout|m|n|k (the expansion gemm_peer.py and gemm_bench use).
python3 - "$shapes" > "$tmp/shapes.txt" <<'PY'
import sys
sys.path.insert(0, __import__("os").path.dirname(sys.argv[1]))
from gemm_peer import shapes
for nm, layout, m, n, k in shapes(sys.argv[1]):
    print(f"{nm}|{layout}|{m}|{n}|{k}")
PY
while IFS='|' read -r nm layout m n k; do
  # (A failed tuning has no time in the report, n/a, only its log.)
  tune_case "$nm" "$cli" tune gemm --m "$m" --n "$n" --k "$k" --layout "$layout" --dtype bf16 \
    --max-configs 48 --db "$tmp/tuned.db" ${TUNE_FLAGS:-}
  printf 'tuned %-26s %s %6d %6d %6d in %d.%02d s\n' "$nm" "$layout" "$m" "$n" "$k" \
    $((tune_ms / 1000)) $((tune_ms % 1000 / 10))
done < "$tmp/shapes.txt"
"$bench" --shapes "$shapes" --out "$tmp/default.json"
"$bench" --shapes "$shapes" --db "$tmp/tuned.db" --out "$tmp/tuned.json"
python3 "$here/gemm_peer.py" --shapes "$shapes" --out "$tmp/peer.json"
mkdir -p "$out"
cp "$tmp/tune_all.log" "$out/${name}_tune.log"
python3 "$here/gemm_report.py" "$tmp/tuned.json" "$tmp/peer.json" --default "$tmp/default.json" \
  --tune-walls "$tmp/tune_walls.txt" --name "$name" --outdir "$out" \
  --command "bench/run_gemm_tuned.sh"
