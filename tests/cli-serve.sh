#!/bin/sh
# tilejit serve: listens on a free port, answers SIGTERM by draining and
# exits 0; /metrics answers on its own port.
# Usage: cli-serve.sh TILEJIT (run in a fresh directory).
set -u
tj="$1"
echo "tok-1" > token
"$tj" serve --listen 127.0.0.1:0 --db t.db --token-file token --metrics-addr 127.0.0.1:0 \
  --drain-grace 0.2 2> log &
pid=$!
i=0
while ! grep -q "metrics on" log; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
    echo "cli-serve: no 'metrics on' line"; cat log; kill $pid 2>/dev/null; exit 1
  fi
  sleep 0.1
done
metrics=$(sed -n 's|.*metrics on \(http://[^ ]*\)$|\1|p' log)
python3 -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())" \
  "$metrics" > metrics.txt || { echo "cli-serve: cannot read $metrics"; kill $pid; exit 1; }
grep -q "^tilejit_uptime_seconds " metrics.txt || { echo "cli-serve: no uptime in"; cat metrics.txt; kill $pid; exit 1; }

# The cache verbs against the server: its store copied to a file (a store
# `cache ls` reads), and merged back in with the token, refused without it.
addr=$(sed -n 's|.*listening on \(127\.0\.0\.1:[0-9]*\) .*|\1|p' log)
unfail() { echo "cli-serve: $*"; kill $pid; exit 1; }
"$tj" cache export --server "$addr" copy.db > out.txt 2>&1 || { cat out.txt; unfail "cache export --server failed"; }
grep -q "^exported $addr ([0-9]* bytes) to copy.db$" out.txt || { cat out.txt; unfail "cache export --server said"; }
"$tj" cache ls --db copy.db | grep -q "^copy.db: schema 1, 0 entries$" || unfail "copy.db is not a store"
"$tj" cache export --server "$addr" copy.db > out.txt 2>&1 && unfail "cache export --server overwrote copy.db"
grep -q "copy.db already exists; refusing to overwrite it" out.txt || { cat out.txt; unfail "no refusal to overwrite"; }
TILEJIT_TOKEN= "$tj" cache import --server "$addr" copy.db > out.txt 2>&1 && unfail "an import without a token was taken"
grep -q "^tilejit: error: server $addr: 16 writes need a bearer token" out.txt || { cat out.txt; unfail "no UNAUTHENTICATED"; }
TILEJIT_TOKEN=tok-1 "$tj" cache import --server "$addr" copy.db > out.txt 2>&1 || { cat out.txt; unfail "cache import --server failed"; }
grep -q "^imported 0 rows from copy.db into $addr$" out.txt || { cat out.txt; unfail "cache import --server said"; }
"$tj" cache import --server "$addr" --trust-binaries copy.db > out.txt 2>&1
[ $? -eq 2 ] || { cat out.txt; unfail "--trust-binaries with --server is not a usage error"; }

# tune on the server's GPU: a write, so the token is needed; where the
# server has no GPU it says so at once, where it has one it tunes and the
# stream ends with the winner.
TILEJIT_TOKEN= "$tj" tune rmsnorm_fwd --cols 1024 --max-configs 2 --server "$addr" > out.txt 2>&1 &&
  unfail "a tune without a token was taken"
grep -q "^tilejit: error: server $addr: 16 writes need a bearer token" out.txt || { cat out.txt; unfail "tune: no UNAUTHENTICATED"; }
TILEJIT_TOKEN=tok-1 "$tj" tune rmsnorm_fwd --cols 1024 --max-configs 2 --server "$addr" > out.txt 2>&1
rc=$?
if [ $rc -eq 0 ]; then
  grep -q "^tuning   rmsnorm_fwd .* (server $addr)$" out.txt || { cat out.txt; unfail "tune --server: no start line"; }
  grep -q "^    1/2 " out.txt || { cat out.txt; unfail "tune --server: no candidate line"; }
  grep -q "^winner   .* published on $addr$" out.txt || { cat out.txt; unfail "tune --server: no winner"; }
else
  [ $rc -eq 1 ] || { cat out.txt; unfail "tune --server: exit $rc"; }
  grep -q "^tilejit: error: server $addr: 9 this server has no GPU to tune on: " out.txt ||
    { cat out.txt; unfail "tune --server without a GPU said"; }
fi
"$tj" tune rmsnorm_fwd --cols 1024 --in-process --server "$addr" > out.txt 2>&1
[ $? -eq 2 ] || { cat out.txt; unfail "--in-process with --server is not a usage error"; }

# The read verbs against the server: no token needed.
TILEJIT_TOKEN= "$tj" cache ls --server "$addr" > out.txt 2>&1 || { cat out.txt; unfail "cache ls --server failed"; }
grep -q "^server $addr: [0-9]* entries, 0 lease(s) held$" out.txt || { cat out.txt; unfail "cache ls --server said"; }
"$tj" cache ls --server "$addr" --json > out.txt 2>&1 || { cat out.txt; unfail "cache ls --server --json failed"; }
python3 -c "import json,sys; j=json.load(open('out.txt')); assert j['server']==sys.argv[1] and j['leases']==[], j" "$addr" ||
  unfail "cache ls --server --json is not the listing"
"$tj" cache show 00ff --server "$addr" > out.txt 2>&1 && unfail "cache show --server of no kernel succeeded"
grep -q "^tilejit: error: no kernel with key '00ff' on server $addr$" out.txt || { cat out.txt; unfail "cache show --server said"; }
"$tj" cache ls --server "$addr" --db t.db > out.txt 2>&1
[ $? -eq 2 ] || { cat out.txt; unfail "--db with --server is not a usage error"; }
"$tj" explain rmsnorm_fwd --cols 1024 --server "$addr" > out.txt 2>&1 || { cat out.txt; unfail "explain --server failed"; }
grep -q "^server   $addr: the config's kernel is " out.txt || { cat out.txt; unfail "explain --server: no server line"; }
if [ $rc -ne 0 ]; then
  grep -q "^not tuned: the heuristic default \[.*\] is used$" out.txt || { cat out.txt; unfail "explain --server: not 'not tuned'"; }
fi
"$tj" explain rmsnorm_fwd --cols 0 --server "$addr" > out.txt 2>&1
[ $? -eq 2 ] || { cat out.txt; unfail "explain --server of a bad spec is not a usage error"; }
kill -TERM $pid
wait $pid
rc=$?
cat log
[ $rc -eq 0 ] || { echo "cli-serve: exit $rc after SIGTERM"; exit 1; }
grep -q "listening on 127.0.0.1:[1-9][0-9]* (plaintext), store t.db, writes need a read-write token (1 known, 0 of them read-only)" log || exit 1
grep -q "SIGTERM: draining" log || exit 1
grep -q "stopped" log || exit 1
[ -f t.db ] || { echo "cli-serve: no store file"; exit 1; }

# With TLS (a self-signed certificate made here) and a token file with a
# read-only token: the server says so when it listens.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem \
  -out cert.pem -days 1 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 2>/dev/null ||
  { echo "cli-serve: openssl failed"; exit 1; }
printf '# writers, then readers\ntok-w\ntok-r read-only\n' > tokens
"$tj" serve --listen 127.0.0.1:0 --db t2.db --token-file tokens --tls-cert cert.pem \
  --tls-key key.pem --drain-grace 0 2> log2 &
pid=$!
i=0
while ! grep -q "listening on" log2; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
    echo "cli-serve: no 'listening on' line with TLS"; cat log2; kill $pid 2>/dev/null; exit 1
  fi
  sleep 0.1
done
kill -TERM $pid
wait $pid || { echo "cli-serve: TLS server exit $?"; cat log2; exit 1; }
cat log2
grep -q "listening on 127.0.0.1:[1-9][0-9]* (TLS), store t2.db, writes need a read-write token (2 known, 1 of them read-only)" log2 || exit 1
echo "cli-serve: all passed"
