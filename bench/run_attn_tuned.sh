#!/usr/bin/env bash
# Tunes every case of bench/attn_shapes.json into a fresh store (`tilejit
# tune attn_fwd`, or attn_bwd with ATTN_BACKWARD=1; wall time per case),
# then times tilejit's tuned winners (`attn_bench --db`), its default configs
# and the peers (torch SDPA with cuDNN and flash) in one run, and writes
# bench/results/NAME.{json,md,png} and each tuning's report to NAME_tune.log.
#   bench/run_attn_tuned.sh [BUILD_DIR] [OUT_DIR] [NAME]
# TUNE_BUDGET (seconds, default 60) bounds each tuning; TUNE_FLAGS adds
# flags to each `tilejit tune`; ATTN_ONLY (a substring of the case names)
# limits the cases. ATTN_NONDET=1 (with ATTN_BACKWARD=1): the backward's
# fast mode, whose specs allow dQ added atomically (deterministic=0: the
# fused configs join the tuning space), tuned and timed (attn_bench
# --nondeterministic) as such (for peers whose backward need not repeat
# bitwise). ATTN_PEER_DET=1 (with ATTN_BACKWARD=1): the peers under
# torch.use_deterministic_algorithms(True) (attn_peer.py --deterministic).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/run_common.sh"
attn_modes
name="${3:-${op}${nondet:+_fast}${peerdet:+_detpeers}_tuned}"
bench="$(program bench attn_bench)"
cli="$(program tools tilejit)"
shapes="$here/attn_shapes.json"
# One line per case: name|b|hq|hkv|s|d|causal.
python3 - "$shapes" "${ATTN_ONLY:-}" > "$tmp/cases.txt" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if sys.argv[2] in c["name"]:
        print("|".join(str(x) for x in (c["name"], c["b"], c["hq"], c["hkv"], c["s"], c["d"],
                                        int(c["causal"]))))
PY
while IFS='|' read -r nm b hq hkv s d causal; do
  tune_case "$nm" "$cli" tune "$op" --set b="$b" --set hq="$hq" --set hkv="$hkv" --set sq="$s" \
    --set sk="$s" --set d="$d" --set causal="$causal" ${nondet:+--set deterministic=0} \
    --budget "${TUNE_BUDGET:-60}" --db "$tmp/tuned.db" ${TUNE_FLAGS:-}
  printf 'tuned %-32s in %d.%02d s\n' "$nm" $((tune_ms / 1000)) $((tune_ms % 1000 / 10))
done < "$tmp/cases.txt"
only=()
[ -n "${ATTN_ONLY:-}" ] && only=(--only "$ATTN_ONLY")
"$bench" --shapes "$shapes" --out "$tmp/default.json" "${only[@]}" "${bwd[@]}" "${nondet[@]}"
"$bench" --shapes "$shapes" --db "$tmp/tuned.db" --out "$tmp/tuned.json" "${only[@]}" "${bwd[@]}" \
  "${nondet[@]}"
python3 "$here/attn_peer.py" --shapes "$shapes" --out "$tmp/peer.json" "${only[@]}" "${bwd[@]}" \
  "${peerdet[@]}"
mkdir -p "$out"
cp "$tmp/tune_all.log" "$out/${name}_tune.log"
python3 "$here/attn_report.py" "$tmp/tuned.json" "$tmp/peer.json" --default "$tmp/default.json" \
  --tune-walls "$tmp/tune_walls.txt" --name "$name" --outdir "$out" \
  --command "${ATTN_ONLY:+ATTN_ONLY=\"$ATTN_ONLY\" }${bwd:+ATTN_BACKWARD=1 }${nondet:+ATTN_NONDET=1 }${peerdet:+ATTN_PEER_DET=1 }TUNE_BUDGET=${TUNE_BUDGET:-60} ${TUNE_FLAGS:+TUNE_FLAGS=\"$TUNE_FLAGS\" }bench/run_attn_tuned.sh"
