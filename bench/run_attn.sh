#!/usr/bin/env bash
# Runs the attention benchmark and its peers (torch SDPA with cuDNN and flash)
# in one go on a GPU machine and writes bench/results/NAME.{json,md,png}.
#   bench/run_attn.sh [BUILD_DIR] [OUT_DIR] [NAME]
# ATTN_ONLY (a substring of the case names) limits the cases; ATTN_BACKWARD=1
# times the backward pass instead of the forward, ATTN_NONDET=1 with it the
# backward's fast mode (attn_bench --nondeterministic: dQ may be added
# atomically, as the peers' backward adds it), ATTN_PEER_DET=1 with it the
# peers under torch.use_deterministic_algorithms(True) (attn_peer.py
# --deterministic: the back ends' deterministic backward); ATTN_PACKED=1
# runs bench/attn_packed_shapes.json as packed sequences (THD: attn_bench
# --packed against attn_peer.py --packed, FlashAttention-2's varlen kernels
# and cuDNN on nested jagged tensors); ATTN_SHAPES names another shapes
# file of the same form (bench/attn_tp_shapes.json: the shapes of
# tensor-parallel ranks); ATTN_ARCH
# builds tilejit's kernels for another target of the GPU (sm_90 on Hopper:
# the kernels of targets without wgmma).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/run_common.sh"
name="${3:-attn}"
bench="$(program bench attn_bench)"
attn_modes
shapes="$here/attn_shapes.json"
packed=()
if [ "${ATTN_PACKED:-0}" = 1 ]; then shapes="$here/attn_packed_shapes.json"; packed=(--packed); fi
if [ -n "${ATTN_SHAPES:-}" ]; then shapes="$ATTN_SHAPES"; fi
"$bench" --shapes "$shapes" --out "$tmp/tilejit.json" ${ATTN_ONLY:+--only "$ATTN_ONLY"} \
  ${ATTN_ARCH:+--arch "$ATTN_ARCH"} "${bwd[@]}" "${nondet[@]}" "${packed[@]}"
python3 "$here/attn_peer.py" --shapes "$shapes" --out "$tmp/peer.json" \
  ${ATTN_ONLY:+--only "$ATTN_ONLY"} "${bwd[@]}" "${peerdet[@]}" "${packed[@]}"
python3 "$here/attn_report.py" "$tmp/tilejit.json" "$tmp/peer.json" --name "$name" --outdir "$out" \
  --command "${ATTN_SHAPES:+ATTN_SHAPES=$ATTN_SHAPES }${ATTN_ONLY:+ATTN_ONLY=$ATTN_ONLY }${ATTN_ARCH:+ATTN_ARCH=$ATTN_ARCH }${bwd:+ATTN_BACKWARD=1 }${nondet:+ATTN_NONDET=1 }${peerdet:+ATTN_PEER_DET=1 }${packed:+ATTN_PACKED=1 }bench/run_attn.sh"
