#!/usr/bin/env bash
# Interop: `rverbs pingpong ud --reply-from-wc` as the server, rdma-core's
# ibv_ud_pingpong on the kernel's Soft-RoCE (rxe) in a QEMU guest as the client, over
# IPv4 and IPv6 GIDs. The rverbs server answers every datagram through an AH built
# from its work completion; its AH must name the guest's GID, the host's own GID index
# (1 = ::ffff:10.77.0.1, 2 = fd00:77::1 on rv_rxebr0) and the TTL rxe sent (64).
#
# Needs: the rxe-peer guests running (rxe-peer/start.sh 1) and an rverbs binary.
# Usage: interop/reply_from_wc.sh [RVERBS_BIN]
set -u
here=$(cd "$(dirname "$0")" && pwd)
peer=${RXE_PEER:-$here/../../shared/rxe-peer}
[ -d "$peer" ] || peer=$here/../shared/rxe-peer
bin=${1:-$here/../target/release/rverbs}
pass=0 fail=0
for v6 in 0 1; do
  gid=1 want_dgid=::ffff:10.77.0.2
  [ $v6 = 1 ] && { gid=2; want_dgid=fd00:77::2; }
  port=$((18900 + v6)) log=/tmp/interop-rfw.$$
  (timeout 90 "$peer/hostns.sh" "$bin" pingpong ud --reply-from-wc -d rv_rxebr0 --stats -p $port -s 1000 -n 50 >"$log" 2>&1; echo "exit=$?" >>"$log") &
  bg=$!
  sleep 0.5
  # rdma-core's client makes the TCP exchange over IPv4; -g picks its GID family.
  vm_log=$("$peer/run.sh" -v 1 -t 90 "ibv_ud_pingpong -d rxe0 -g $gid -p $port -s 1000 -n 50 10.77.0.1; echo exit=\$?" 2>&1)
  wait $bg
  want="reply AH: sgid_index $gid, dgid $want_dgid, hop_limit 64, traffic_class 0"
  if grep -q "exit=0" "$log" && grep -q "50 iters in" "$log" && grep -qF "$want" "$log" \
     && grep -q " rx_icrc_errors=0" "$log" && grep -q "exit=0" <<<"$vm_log" && grep -q "50 iters in" <<<"$vm_log"; then
    pass=$((pass + 1)); echo "PASS ud-reply-from-wc-ip$([ $v6 = 1 ] && echo 6 || echo 4)"
  else
    fail=$((fail + 1)); echo "FAIL ud-reply-from-wc-ip$([ $v6 = 1 ] && echo 6 || echo 4) (want: $want)"
    echo "--- rverbs:"; cat "$log"; echo "--- guest:"; echo "$vm_log"
  fi
  rm -f "$log"
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
