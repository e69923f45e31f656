#!/usr/bin/env bash
# Runs the attention benchmark and its peers (torch SDPA with cuDNN and flash)
# in one go on a GPU machine and writes bench/results/NAME.{json,md,png}.
#   bench/run_attn.sh [BUILD_DIR] [OUT_DIR] [NAME]
# ATTN_ONLY (a substring of the case names) limits the cases; ATTN_BACKWARD=1
# times the backward pass instead of the forward, ATTN_NONDET=1 with it the
# backward's fast mode (attn_bench --nondeterministic: dQ may be added
# atomically, as the peers' backward adds it), ATTN_PEER_DET=1 with it the
# peers under torch.use_deterministic_algorithms(True) (attn_peer.py
# --deterministic: the back ends' deterministic backward); ATTN_ARCH
# builds tilejit's kernels for another target of the GPU (sm_90 on Hopper:
# the kernels of targets without wgmma).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/run_common.sh"
name="${3:-attn}"
bench="$(program bench attn_bench)"
attn_modes
"$bench" --shapes "$here/attn_shapes.json" --out "$tmp/tilejit.json" ${ATTN_ONLY:+--only "$ATTN_ONLY"} \
  ${ATTN_ARCH:+--arch "$ATTN_ARCH"} "${bwd[@]}" "${nondet[@]}"
python3 "$here/attn_peer.py" --shapes "$here/attn_shapes.json" --out "$tmp/peer.json" \
  ${ATTN_ONLY:+--only "$ATTN_ONLY"} "${bwd[@]}" "${peerdet[@]}"
python3 "$here/attn_report.py" "$tmp/tilejit.json" "$tmp/peer.json" --name "$name" --outdir "$out" \
  --command "${ATTN_ONLY:+ATTN_ONLY=$ATTN_ONLY }${ATTN_ARCH:+ATTN_ARCH=$ATTN_ARCH }${bwd:+ATTN_BACKWARD=1 }${nondet:+ATTN_NONDET=1 }${peerdet:+ATTN_PEER_DET=1 }bench/run_attn.sh"
