#!/bin/sh
# Runs a command in a directory of its own under $TMPDIR (else /tmp), with
# TILEJIT_CACHE_DIR pointing there, and removes the directory after: tests
# that write files share none, under ctest -j too. Exits as the command did.
dir=$(mktemp -d "${TMPDIR:-/tmp}/tilejit-test.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
cd "$dir" || exit 1
TILEJIT_CACHE_DIR="$dir" "$@"
rc=$?
exit $rc
