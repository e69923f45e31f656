# Sourced by the bench/run_*.sh scripts after they set `here` (their
# directory): the build directory from their first argument (default
# ../build), the results directory from the second (default results), and
# `tmp`, a directory removed when the script exits.
build="${1:-$here/../build}"
out="${2:-$here/results}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# program DIR NAME: the build's DIR/NAME, else NAME on the PATH (a machine
# that has the programs without the build tree).
program() {
  if [ -x "$build/$1/$2" ]; then echo "$build/$1/$2"; else command -v "$2"; fi
}

# tune_case NAME COMMAND...: runs one tuning (`tilejit tune ...`, its input
# closed), adds its report to $tmp/tune_all.log and, where it succeeded, its
# wall time to $tmp/tune_walls.txt as 'NAME|milliseconds' (a failed one has
# only its log, and says so); the time is left in $tune_ms.
: > "$tmp/tune_walls.txt"
: > "$tmp/tune_all.log"
tune_case() {
  local nm=$1 start ok=1
  shift
  start=$(date +%s%N)
  "$@" < /dev/null > "$tmp/tune.log" 2>&1 || { ok=0; echo "tuning $nm failed:"; cat "$tmp/tune.log"; }
  { echo "== $nm"; cat "$tmp/tune.log"; } >> "$tmp/tune_all.log"
  tune_ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$ok" = 1 ]; then printf '%s|%d\n' "$nm" "$tune_ms" >> "$tmp/tune_walls.txt"; fi
}

# attn_modes: the attention scripts' mode from ATTN_BACKWARD=1 (the
# backward: bwd=(--backward), op=attn_bwd; else attn_fwd) and ATTN_NONDET=1
# (with ATTN_BACKWARD=1: its fast mode, dQ added atomically,
# nondet=(--nondeterministic)) and ATTN_PEER_DET=1 (with ATTN_BACKWARD=1:
# the peers' deterministic backward, peerdet=(--deterministic)); exits
# naming the mistake otherwise.
attn_modes() {
  bwd=()
  op=attn_fwd
  if [ "${ATTN_BACKWARD:-0}" = 1 ]; then bwd=(--backward); op=attn_bwd; fi
  nondet=()
  if [ "${ATTN_NONDET:-0}" = 1 ]; then
    [ "$op" = attn_bwd ] || { echo "ATTN_NONDET=1 needs ATTN_BACKWARD=1" >&2; exit 2; }
    nondet=(--nondeterministic)
  fi
  peerdet=()
  if [ "${ATTN_PEER_DET:-0}" = 1 ]; then
    [ "$op" = attn_bwd ] || { echo "ATTN_PEER_DET=1 needs ATTN_BACKWARD=1" >&2; exit 2; }
    peerdet=(--deterministic)
  fi
}
