#!/bin/sh
# capi-exports.sh LIB HEADER: LIB exports exactly the functions HEADER
# declares (tj_*), and no other function or variable (no LLVM or MLIR symbol).
set -eu
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort)
declared=$(grep -o 'tj_[a-z_]*(' "$header" | tr -d '(' | sort -u)
if [ "$exported" != "$declared" ]; then
  echo "exported and declared differ:"
  printf '%s\n' "$exported" > /tmp/capi-exported.$$
  printf '%s\n' "$declared" | diff /tmp/capi-exported.$$ - || true
  rm -f /tmp/capi-exported.$$
  exit 1
fi
echo "$(printf '%s\n' "$exported" | wc -l) functions, all declared in $(basename "$header")"
