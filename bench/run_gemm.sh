#!/usr/bin/env bash
# Runs the GEMM benchmark and its cuBLAS peer (torch.matmul) in one go on a GPU
# machine and writes bench/results/NAME.{json,md,png}.
#   bench/run_gemm.sh [BUILD_DIR] [OUT_DIR] [NAME]
# GEMM_ONLY (a substring of the shape names) limits the shapes; GEMM_ARCH=sm_90
# (on an H200; the GPU's major version, without wgmma, elsewhere) runs the sm_80
# kernel (cp.async, ldmatrix, mma.sync) beside the same cuBLAS.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/run_common.sh"
name="${3:-gemm}"
bench="$(program bench gemm_bench)"
"$bench" --shapes "$here/gemm_shapes.json" --out "$tmp/tilejit.json" ${GEMM_ONLY:+--only "$GEMM_ONLY"} \
  ${GEMM_ARCH:+--arch "$GEMM_ARCH"}
python3 "$here/gemm_peer.py" --shapes "$here/gemm_shapes.json" --out "$tmp/peer.json" \
  ${GEMM_ONLY:+--only "$GEMM_ONLY"}
python3 "$here/gemm_report.py" "$tmp/tilejit.json" "$tmp/peer.json" --name "$name" --outdir "$out" \
  --command "${GEMM_ONLY:+GEMM_ONLY=$GEMM_ONLY }${GEMM_ARCH:+GEMM_ARCH=$GEMM_ARCH }bench/run_gemm.sh"
