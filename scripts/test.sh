#!/usr/bin/env bash
# Runs the whole test suite (lit, unit, CLI; GPU tests run where a GPU is and
# say why they skip elsewhere) and prints ctest's summary line.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${TILEJIT_BUILD_DIR:-$here/build}"
if [ ! -f "$build_dir/CTestTestfile.cmake" ]; then
  echo "test.sh: no build in $build_dir; run scripts/setup.sh first" >&2
  exit 1
fi
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee ctest.log
status=${PIPESTATUS[0]}
grep -E "tests passed" ctest.log || true
exit "$status"
