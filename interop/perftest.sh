#!/usr/bin/env bash
# Interop: `rverbs perf write bw --perftest` as the client of an unmodified perftest
# `ib_write_bw` server on the kernel's rxe in a QEMU guest (../shared/rxe-peer).
# Passes when both sides exit 0, the server reports the bandwidth of every size, and
# rxe counted no out-of-sequence request, send error or exhausted retry.
#
# Needs: the rxe-peer guests running (rxe-peer/start.sh 1) and an rverbs binary.
# Usage: interop/perftest.sh [RVERBS_BIN]
set -u
here=$(cd "$(dirname "$0")" && pwd)
peer=${RXE_PEER:-$here/../../shared/rxe-peer}
[ -d "$peer" ] || peer=$here/../shared/rxe-peer
bin=${1:-$here/../target/release/rverbs}
pass=0 fail=0
counters() { "$peer/run.sh" -v 1 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in out_of_seq_request send_err retry_exceeded_err; do echo "$f $(cat $f)"; done' 2>/dev/null; }
before=$(counters)
port=18700
for size in 65536 4096 100; do
  port=$((port + 1))
  name="write-bw-$size"
  "$peer/run.sh" -v 1 -b "pt$port" "ib_write_bw -d rxe0 -x 1 -F -p $port -n 200 -s $size; echo exit=\$?"
  sleep 2
  out=$(timeout 120 "$peer/hostns.sh" "$bin" perf write bw 10.77.0.2 --perftest -d rv_rxebr0 -p "$port" -n 200 -s "$size" 2>&1)
  rc=$?
  sleep 1
  srv=$("$peer/run.sh" -v 1 "cat /tmp/bg-pt$port.log")
  # The server's result row: size, iterations, peak and average MB/s, Mpps.
  if [ $rc = 0 ] && echo "$srv" | grep -q "exit=0" && echo "$srv" | grep -Eq "^ *$size +200 "; then
    echo "PASS $name"; echo "$out" | tail -1; echo "$srv" | grep -E "^ *$size +200 "
    pass=$((pass + 1))
  else
    echo "FAIL $name (rverbs exit $rc)"; echo "$out"; echo "--- ib_write_bw:"; echo "$srv"
    fail=$((fail + 1))
  fi
done
after=$(counters)
while read -r c v; do
  b=$(echo "$before" | awk -v c="$c" '$1 == c { print $2 }')
  if [ -n "$b" ] && [ "$v" != "$b" ]; then echo "FAIL rxe counter $c grew by $((v - b))"; fail=$((fail + 1)); fi
done <<<"$after"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
