#!/usr/bin/env bash
# Runs the whole test suite (lit, unit, CLI; GPU tests run where a GPU is and
# skip elsewhere) and prints ctest's summary line, then how many tests were
# skipped and why.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${TILEJIT_BUILD_DIR:-$here/build}"
if [ ! -f "$build_dir/CTestTestfile.cmake" ]; then
  echo "test.sh: no build in $build_dir; run scripts/setup.sh first" >&2
  exit 1
fi
cd "$build_dir"
# Tests that use the GPU hold ctest's resource lock "gpu": they run one at a
# time however many jobs run the rest.
ctest --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee ctest.log
status=${PIPESTATUS[0]}
grep -E "tests passed" ctest.log || true
# ctest lists skipped tests as "  N - name (Skipped)"; each GoogleTest binary
# whose tests all skipped printed "tilejit-tests: all N test(s) skipped:
# <reason>" into the test's output, which ctest keeps in LastTest.log.
skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' ctest.log)
if [ -n "$skipped" ]; then
  echo "$(echo "$skipped" | wc -l) test(s) skipped:"
  log=Testing/Temporary/LastTest.log
  for name in $skipped; do
    reason=$(awk -v want="$name" '
      / Testing: / { current = $NF }
      current == want && /^tilejit-tests: all .* skipped: / {
        sub(/^tilejit-tests: all [0-9]+ test\(s\) skipped: /, ""); print; exit }' "$log" 2>/dev/null)
    echo "  $name: ${reason:-no reason recorded}"
  done
else
  echo "0 tests skipped"
fi
exit "$status"
