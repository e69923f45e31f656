#!/bin/sh
# The CLI against careless and hostile store files and output targets, one
# case per run: what a read verb must leave alone, what an import must not
# trust, what a failed write must not leave behind. Run in a temporary
# directory (tests/in-temp-dir.sh). Usage: cli-store-safety.sh CASE TILEJIT TORTURE
# Prints "CASE: passed" when every check held; exits 77 (skipped) where the
# machine lacks what the case needs.
set -u
case_name=$1
tilejit=$2
torture=$3
failed=0
fail() {
  echo "FAIL: $*"
  [ -f out.txt ] && cat out.txt
  failed=1
}
# run EXPECTED_STATUS COMMAND...: runs it with stdout and stderr in out.txt
run() {
  want=$1
  shift
  "$@" >out.txt 2>&1
  got=$?
  [ "$got" -eq "$want" ] || fail "$* exited $got, not $want"
}
expect() { grep -Eq "$1" out.txt || fail "expected /$1/"; }
refute() { ! grep -Eq "$1" out.txt || fail "did not expect /$1/"; }
sql() { # sql FILE STATEMENT
  python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.executescript(sys.argv[2]); db.commit(); db.close()' "$1" "$2"
}
sql_value() { # sql_value FILE QUERY
  python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$1" "$2"
}
fill() { "$torture" open "$1" >/dev/null && "$torture" open "$1" >/dev/null || fail "cannot fill $1"; }
digest() { cksum "$1" | cut -d' ' -f1,2; }

case "$case_name" in
foreign_file_left_alone)
  # Read verbs used to move another application's database aside.
  sql app.db "CREATE TABLE accounts (id INTEGER PRIMARY KEY);"
  before=$(digest app.db)
  for verb in "cache ls" "cache verify" "cache show abc" "explain rmsnorm_fwd --cols 8"; do
    # shellcheck disable=SC2086
    run 1 "$tilejit" $verb --db app.db
    expect "^tilejit: error: tilejit store app\.db is a SQLite database of another application .*; nothing was changed \(a command that writes"
  done
  [ "$(digest app.db)" = "$before" ] || fail "app.db changed"
  [ "$(ls -A)" = "$(printf 'app.db\nout.txt')" ] || fail "files appeared: $(ls -A)"
  ;;
corrupt_reported_then_moved_by_a_write)
  # Long enough to have a SQLite header, were it one.
  for i in 1 2 3 4 5 6 7 8 9 10; do echo "not a database, line $i"; done >t.db
  before=$(digest t.db)
  run 1 "$tilejit" cache verify --db t.db
  expect "^tilejit: error: tilejit store t\.db is not a SQLite database; nothing was changed"
  [ "$(digest t.db)" = "$before" ] || fail "verify changed t.db"
  # A command that writes sets it aside, and its notice has one prefix.
  run 0 "$tilejit" cache prune --older-than 30d --db t.db
  expect "^tilejit: store t\.db is not a SQLite database; moved it aside to t\.db\.corrupt-[0-9]+ and created a fresh store$"
  refute "tilejit: tilejit:"
  ;;
read_verbs_keep_an_export_as_it_is)
  # ls, verify and show used to switch an exported file to WAL.
  fill t.db
  run 0 "$tilejit" cache export copy.db --db t.db
  before=$(digest copy.db)
  run 0 "$tilejit" cache ls --db copy.db
  key=$(awk '/^kernel /{print $2; exit}' out.txt)
  run 0 "$tilejit" cache verify --db copy.db
  run 0 "$tilejit" cache show "$key" --db copy.db
  run 0 "$tilejit" explain rmsnorm_fwd --cols 8 --db copy.db
  [ "$(digest copy.db)" = "$before" ] || fail "copy.db changed"
  [ ! -e copy.db-wal ] && [ ! -e copy.db-shm ] || fail "WAL files appeared"
  ;;
show_keeps_a_bad_kernel)
  fill t.db
  key=$(sql_value t.db "SELECT key FROM kernels ORDER BY key LIMIT 1")
  sql t.db "UPDATE kernels SET cubin = zeroblob(100) WHERE key = '$key';"
  run 1 "$tilejit" cache show "$key" --db t.db
  expect "^tilejit: error: tilejit store t\.db: kernel $key failed its SHA-256 check .*left as it is"
  [ "$(sql_value t.db "SELECT count(*) FROM kernels")" = 2 ] || fail "show deleted the kernel"
  ;;
read_only_store)
  # A store on a read-only mount or without write permission serves the read
  # verbs. Root may write anyway: then the verbs run as nobody.
  as=""
  if [ "$(id -u)" -eq 0 ]; then
    command -v setpriv >/dev/null || { echo "no setpriv to drop root"; exit 77; }
    as="setpriv --reuid=65534 --regid=65534 --clear-groups"
  fi
  fill t.db
  run 0 "$tilejit" cache export copy.db --db t.db
  chmod 0444 t.db copy.db
  chmod 0555 .
  for db in t.db copy.db; do
    before=$(digest $db)
    # shellcheck disable=SC2086
    $as "$tilejit" cache ls --db $db >out.txt 2>&1 || fail "ls of read-only $db"
    expect "^$db: schema 1, 2 entries$"
    # shellcheck disable=SC2086
    $as "$tilejit" cache verify --db $db >out.txt 2>&1 || fail "verify of read-only $db"
    # shellcheck disable=SC2086
    $as "$tilejit" explain rmsnorm_fwd --cols 8 --db $db >out.txt 2>&1 || fail "explain of read-only $db"
    [ "$(digest $db)" = "$before" ] || fail "$db changed"
  done
  chmod 0755 .
  ;;
forged_binary)
  # A binary whose stored hash was made to match passed verify, and import
  # took it: GPU code from whoever wrote the file.
  fill t.db
  key=$(sql_value t.db "SELECT key FROM kernels ORDER BY key LIMIT 1")
  sql t.db "UPDATE kernels SET cubin = X'DEADBEEF', sha256 = '5f78c33274e43fa9de5659265c1d917e25c03722dcb0b8d27db8d5feaa813953' WHERE key = '$key';"
  run 1 "$tilejit" cache verify --db t.db
  expect "^problem: kernel $key: its binary is not an ELF file$"
  run 0 "$tilejit" cache import t.db --db other.db
  expect "^imported [0-9]+ rows from t\.db into other\.db$"
  expect "^left 2 kernel\(s\) out, compiled here at first use instead \(kernel [0-9a-f]{64}: .*\); --trust-binaries takes them as they are$"
  [ "$(sql_value other.db "SELECT count(*) FROM kernels")" = 0 ] || fail "kernels were imported"
  run 0 "$tilejit" cache import t.db --db trusting.db --trust-binaries
  [ "$(sql_value trusting.db "SELECT count(*) FROM kernels")" = 2 ] || fail "--trust-binaries"
  run 2 "$tilejit" cache import t.db --db x.db --trust-binaries --no-binaries
  ;;
rederived_binary)
  # A real kernel, compiled here and put in a store as the engine would:
  # import takes it because compiling its spec and config gives its bytes;
  # the same kernel with one byte changed (and its hash made to match) is
  # left out, and verify --recompile names it.
  "$tilejit" compile rmsnorm_fwd --cols 256 --emit cubin -o k.cubin >out.txt 2>&1 || fail "compile"
  "$tilejit" compile rmsnorm_fwd --cols 256 --emit cubin-info >info.txt 2>&1 || fail "cubin-info"
  run 0 "$tilejit" cache prune --older-than 1d --db t.db
  put() { # put DB FLIP: stores k.cubin under the key cubin-info printed, one byte flipped if FLIP
    python3 -c 'import hashlib, sqlite3, sys
info = dict(l.split(None, 1) for l in open("info.txt").read().splitlines() if " " in l)
cubin = bytearray(open("k.cubin", "rb").read())
if sys.argv[2] == "1":
    cubin[len(cubin) // 2] ^= 1
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, 0, ?, 1000, ?, ?)",
           (info["key"].strip(), info["spec"].strip(), info["config"].strip(), "sm_90a",
            "test", "{}", hashlib.sha256(cubin).hexdigest(), "", bytes(cubin)))
db.commit()' "$1" "$2"
  }
  put t.db 0
  run 0 "$tilejit" cache verify --recompile --db t.db
  expect "^t\.db: ok$"
  run 0 "$tilejit" cache import t.db --db other.db
  refute "^left"
  [ "$(sql_value other.db "SELECT count(*) FROM kernels")" = 1 ] || fail "the kernel was not imported"
  run 0 "$tilejit" cache prune --older-than 1d --db changed.db
  put changed.db 1
  run 1 "$tilejit" cache verify --recompile --db changed.db
  expect "^problem: kernel [0-9a-f]{64}: compiling its spec and config here gives other bytes$"
  run 0 "$tilejit" cache import changed.db --db third.db
  expect "^left 1 kernel\(s\) out, compiled here at first use instead \(kernel [0-9a-f]{64}: compiling its spec and config here gives other bytes\)"
  [ "$(sql_value third.db "SELECT count(*) FROM kernels")" = 0 ] || fail "the changed kernel was imported"
  ;;
escape_codes_in_the_store)
  fill t.db
  key=$(sql_value t.db "SELECT key FROM kernels ORDER BY key LIMIT 1")
  sql t.db "UPDATE kernels SET spec = 'x' || char(27) || '[2J' || char(10) || 'kernel forged' WHERE key = '$key';"
  run 0 "$tilejit" cache ls --db t.db
  if grep -q "$(printf '\033')" out.txt; then fail "an escape code reached the output"; fi
  refute "^kernel forged"
  expect 'x\\x1b\[2J\\x0akernel forged'
  run 0 "$tilejit" cache show "$key" --db t.db
  if grep -q "$(printf '\033')" out.txt; then fail "an escape code reached show's output"; fi
  ;;
full_device)
  # Output that could not be written exited 0.
  fill t.db
  "$tilejit" compile rmsnorm_fwd --cols 8 --emit mlir >/dev/full 2>out.txt
  [ $? -eq 1 ] || fail "compile to /dev/full"
  expect "^tilejit: error: writing to standard output failed: No space left on device$"
  "$tilejit" cache ls --db t.db >/dev/full 2>out.txt
  [ $? -eq 1 ] || fail "ls to /dev/full"
  "$tilejit" cache export copy.db --db t.db >/dev/full 2>out.txt
  [ $? -eq 1 ] || fail "export to /dev/full"
  run 1 "$tilejit" compile rmsnorm_fwd --cols 8 --emit mlir -o /dev/full
  expect "^tilejit: error: cannot write '/dev/full': No space left on device$"
  ;;
no_partial_output_file)
  # A write that fails half-way (here: past a file size limit, as on a full
  # disk) used to leave a truncated file.
  # (Its messages go through a pipe, which the limit does not cover.)
  ( (trap '' XFSZ; ulimit -f 1; exec "$tilejit" compile rmsnorm_fwd --cols 4096 --emit ptx -o out.ptx) 2>&1
    echo "exit $?") | cat >out.txt
  expect "^exit 1$"
  expect "^tilejit: error: cannot write 'out\.ptx': File too large$"
  [ "$(ls -A)" = "out.txt" ] || fail "files left: $(ls -A | tr '\n' ' ')"
  ;;
no_partial_store)
  fill t.db
  run 0 "$tilejit" cache export copy.db --db t.db
  # A new store on a full disk used to be left as an empty file.
  ( (trap '' XFSZ; ulimit -f 0; exec "$tilejit" cache import copy.db --db new/new.db) 2>&1
    echo "exit $?") | cat >out.txt
  expect "^exit 1$"
  expect "^tilejit: error: tilejit store new/new\.db: cannot create it: "
  [ ! -e new ] || fail "left: $(ls -A new)"
  # A killed export used to leave a file that opened as an empty store.
  ( (ulimit -f 8; exec "$tilejit" cache export again.db --db t.db) 2>&1; echo "exit $?") | cat >out.txt
  expect "^exit 153$" # 128 + SIGXFSZ: killed while writing
  [ ! -e again.db ] || fail "a killed export left again.db"
  ;;
cubin_to_terminal)
  command -v script >/dev/null || { echo "no script(1) to make a terminal"; exit 77; }
  script -qec "\"$tilejit\" compile rmsnorm_fwd --cols 8 --emit cubin -o -; echo \"exit \$?\"" /dev/null >out.txt 2>&1
  expect "tilejit: error: --emit cubin -o - would write binary to a terminal"
  expect "exit 2"
  script -qec "\"$tilejit\" compile rmsnorm_fwd --cols 8 --emit cubin -o /dev/tty; echo \"exit \$?\"" /dev/null >out.txt 2>&1
  expect "tilejit: error: --emit cubin -o /dev/tty would write binary to a terminal"
  expect "exit 2"
  "$tilejit" compile rmsnorm_fwd --cols 8 --emit cubin -o - >k.cubin 2>out.txt || fail "cubin to a file"
  [ "$(head -c 4 k.cubin | od -An -c | tr -d ' ')" = '177ELF' ] || fail "no ELF cubin on a pipe"
  ;;
*)
  echo "unknown case $case_name"
  exit 2
  ;;
esac
[ "$failed" -eq 0 ] && echo "$case_name: passed"
exit "$failed"
