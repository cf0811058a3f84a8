#!/usr/bin/env bash
# rdma-core's ping-pongs on rverbs' libibverbs.so.1 (host, netns of the rxe-peer
# harness) against the same unmodified tools on kernel rxe (guest), in both roles.
# Needs: root, the rxe-peer guest running (rxe-peer/start.sh 1), ibverbs-utils on the
# host, and `cargo build --release -p rverbs-libibverbs -p rverbs-cli`.
# Usage: interop/c-library.sh [ITERS]      (exit 0 when every case passed)
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peer=${RXE_PEER:-$here/../../shared/rxe-peer}
[ -d "$peer" ] || peer=$here/../shared/rxe-peer
rv=$here/../target/release/rverbs
iters=${1:-100}
host4=10.77.0.1 vm4=10.77.0.2
pass=0 fail=0
[ -x "$rv" ] && [ -e "$here/../target/release/libibverbs.so.1" ] || {
  echo "build first: cargo build --release -p rverbs-libibverbs -p rverbs-cli" >&2
  exit 2
}
check() { # NAME LOG...: every log has the closing line and exit=0
  local name=$1 ok=1; shift
  for l in "$@"; do
    grep -q "$iters iters in" "$l" && grep -q '^exit=0$' "$l" || ok=0
  done
  if [ $ok = 1 ]; then pass=$((pass + 1)); echo "ok   $name"; else
    fail=$((fail + 1)); echo "FAIL $name"; tail -n 5 "$@"; fi
}
tmp=$(mktemp -d)
for t in rc uc ud; do
  for ev in "" "-e"; do
    args="-g 1 -n $iters -c $ev"
    # kernel server, rverbs client
    "$peer/run.sh" -v 1 -b "cl$t" "ibv_${t}_pingpong -d rxe0 $args; echo exit=\$?" >/dev/null
    sleep 2
    timeout 120 "$peer/hostns.sh" "$rv" exec -- "ibv_${t}_pingpong" -d rv_rxebr0 $args $vm4 >"$tmp/h" 2>&1
    echo "exit=$?" >>"$tmp/h"
    sleep 1
    "$peer/run.sh" -v 1 "cat /tmp/bg-cl$t.log" >"$tmp/g" 2>&1
    check "$t$ev: rxe server, rverbs client" "$tmp/h" "$tmp/g"
    # rverbs server, kernel client
    (timeout 120 "$peer/hostns.sh" "$rv" exec -- "ibv_${t}_pingpong" -d rv_rxebr0 $args >"$tmp/h" 2>&1
     echo "exit=$?" >>"$tmp/h") &
    sleep 2
    "$peer/run.sh" -v 1 -t 120 "ibv_${t}_pingpong -d rxe0 $args $host4; echo exit=\$?" >"$tmp/g" 2>&1
    wait
    check "$t$ev: rverbs server, rxe client" "$tmp/h" "$tmp/g"
  done
done
rm -rf "$tmp"
echo "passed $pass, failed $fail"
[ $fail = 0 ]
