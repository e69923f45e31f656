#!/bin/sh
# tilejit serve: listens on a free port, answers SIGTERM by draining and
# exits 0. Usage: cli-serve.sh TILEJIT (run in a fresh directory).
set -u
tj="$1"
echo "tok-1" > token
"$tj" serve --listen 127.0.0.1:0 --db t.db --token-file token --drain-grace 0.2 2> log &
pid=$!
i=0
while ! grep -q "listening on" log; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
    echo "cli-serve: no 'listening on' line"; cat log; kill $pid 2>/dev/null; exit 1
  fi
  sleep 0.1
done
kill -TERM $pid
wait $pid
rc=$?
cat log
[ $rc -eq 0 ] || { echo "cli-serve: exit $rc after SIGTERM"; exit 1; }
grep -q "listening on 127.0.0.1:[1-9][0-9]*, store t.db, writes need the token" log || exit 1
grep -q "SIGTERM: draining" log || exit 1
grep -q "stopped" log || exit 1
[ -f t.db ] || { echo "cli-serve: no store file"; exit 1; }
echo "cli-serve: all passed"
