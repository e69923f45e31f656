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
