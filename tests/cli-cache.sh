#!/bin/sh
# The CLI's cache commands on a store with two kernels in it (written by
# tilejit_store_torture, no GPU needed): ls, show by a unique key prefix and
# an ambiguous one, export, import into another store, verify, prune. Run in
# a temporary directory (tests/in-temp-dir.sh). Usage: cli-cache.sh TILEJIT TORTURE
set -u
tilejit=$1
torture=$2
failed=0
check() { # check WHAT COMMAND...: the command must succeed
  what=$1
  shift
  if ! "$@" >out.txt 2>&1; then
    echo "FAIL: $what: $* exited $?:"
    cat out.txt
    failed=1
  fi
}
expect() { # expect PATTERN: out.txt must match the extended regex
  if ! grep -Eq "$1" out.txt; then
    echo "FAIL: expected /$1/ in:"
    cat out.txt
    failed=1
  fi
}
"$torture" open t.db && "$torture" open t.db || { echo "FAIL: cannot fill t.db"; exit 1; }

check "ls" "$tilejit" cache ls --db t.db
expect "^t\.db: schema 1, 2 entries$"
key=$(awk '/^kernel /{print $2; exit}' out.txt)
[ ${#key} -eq 16 ] || { echo "FAIL: no kernel key in ls"; failed=1; }

check "ls --json" "$tilejit" cache ls --db t.db --json
python3 -c 'import json,sys; d=json.load(open("out.txt")); e=d["entries"]; print(d["store"], d["schema"], len(e), e[0]["kind"], e[0]["key"][:16], e[0]["bytes"] > 0)' \
  >json.txt 2>&1
if [ "$(cat json.txt)" != "t.db 1 2 kernel $key True" ]; then
  echo "FAIL: ls --json:"
  cat out.txt json.txt
  failed=1
fi

check "show by prefix" "$tilejit" cache show "$(echo "$key" | cut -c1-10)" --db t.db
expect "^key        $key[0-9a-f]{48}$"
expect "^spec       open pid=[0-9]+ n=100$"
expect "^cubin      100 bytes, sha256 [0-9a-f]{64}$"

if "$tilejit" cache show "" --db t.db >out.txt 2>&1; then
  echo "FAIL: an ambiguous prefix was accepted"
  failed=1
fi
expect "^tilejit: error: key prefix '' is ambiguous$"

check "export" "$tilejit" cache export copy.db --db t.db
expect "^exported t\.db to copy\.db$"
# The kernels are not ones this tilejit compiles: taken only when trusted.
check "import" "$tilejit" cache import copy.db --db other.db --trust-binaries
expect "^imported 2 rows from copy\.db into other\.db$"
check "ls after import" "$tilejit" cache ls --db other.db
expect "^other\.db: schema 1, 2 entries$"
expect "^kernel $key "

check "verify" "$tilejit" cache verify --db other.db
expect "^other\.db: ok$"

check "prune" "$tilejit" cache prune --older-than 30d --db other.db
expect "^pruned 0 rows older than 30d$"
check "ls after prune" "$tilejit" cache ls --db other.db
expect "2 entries$"

# Every verb prints JSON with --json, errors included.
jfield() { # jfield EXPR: evaluates EXPR on the JSON in out.txt (as d)
  python3 -c "import json; d=json.load(open('out.txt')); print(($1))" 2>&1
}
jexpect() { # jexpect EXPR VALUE
  got=$(jfield "$1")
  if [ "$got" != "$2" ]; then
    echo "FAIL: $1 = '$got', expected '$2' in:"
    cat out.txt
    failed=1
  fi
}
"$tilejit" cache show "$(echo "$key" | cut -c1-10)" --db t.db --json >out.txt 2>/dev/null
jexpect 'd["key"][:16], d["cubin_bytes"], len(d["sha256"])' "('$key', 100, 64)"
"$tilejit" cache export copy2.db --db t.db --json >out.txt 2>/dev/null
jexpect 'd["store"], d["exported_to"]' "('t.db', 'copy2.db')"
"$tilejit" cache import copy2.db --db third.db --trust-binaries --json >out.txt 2>/dev/null
jexpect 'd["rows"], d["kernels_left"]' "(2, 0)"
"$tilejit" cache verify --db third.db --json >out.txt 2>/dev/null
jexpect 'd["ok"], d["problems"]' "(True, [])"
"$tilejit" cache prune --older-than 30d --db third.db --json >out.txt 2>/dev/null
jexpect 'd["pruned"], d["older_than"]' "(0, '30d')"
"$tilejit" cache show nosuchkey --db t.db --json >out.txt 2>/dev/null
rc=$?
jexpect 'd["exit"], d["error"]' "(1, \"no kernel with key 'nosuchkey' in t.db\")"
[ "$rc" -eq 1 ] || { echo "FAIL: show of a missing key with --json exited $rc"; failed=1; }

if [ "$failed" -eq 0 ]; then
  echo "cli-cache: all passed"
fi
exit "$failed"
