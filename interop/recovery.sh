#!/usr/bin/env bash
# Interop recovery: rverbs pingpong <-> rdma-core's ibv_*_pingpong on kernel rxe with
# packets lost, duplicated and reordered
#   - on the rverbs side (RVERBS_FAULTS, seeded: the same decisions every run), in both
#     directions of rverbs' traffic, so rverbs recovers from rxe's "losses" and rxe from
#     rverbs' ones;
#   - on the link (tc netem on the guest's eth0, both directions: the host kernel need
#     not have sch_netem, the guest's Debian kernel does). netem cannot be seeded: its
#     pattern varies, the outcome (RC completes with correct data) must not.
# RC carries the loss cases (both roles, data checked with -c, 10000-byte messages =
# 10 packets at MTU 1024). UC and UD lose messages by design, and rxe's UC responder
# drops the rest of a message after a duplicated or reordered middle packet, so UC gets
# only duplication of single-packet messages (both tools count the extra receive and
# still finish). UD gets nothing: with 4 of 80 datagrams duplicated, the guest's
# ibv_ud_pingpong hung in both roles (killed by the case timeout) while rverbs finished.
#
# Usage: interop/recovery.sh [RVERBS_BIN] [FILTER]
set -u
PINGPONG_LIB=1 . "$(dirname "$0")/pingpong.sh"
port=18800

# The guest's ibv_*_pingpong gets linger.so (its QP outlives the last exchange by 1 s,
# as rverbs' does): without it, a lost last ACK fails the peer although all data arrived.
share=/var/tmp/rxe-peer/share/interop
mkdir -p "$share"
if gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$share/linger.so" "$here/linger.c" -ldl 2>/tmp/interop-gcc.$$; then
  export GUEST_ENV="LD_PRELOAD=/mnt/host/interop/linger.so"
else
  echo "WARNING: interop/linger.c did not build (need gcc and libibverbs-dev); the guest's tools run without it and a lost last ACK can fail a case:"
  cat /tmp/interop-gcc.$$
fi
rm -f /tmp/interop-gcc.$$

# rverbs' ACK timeout: 2^16 x 4.096 us = 268 ms instead of 67 ms, so its 7 retries span
# 2 s. The guest is emulated (TCG) on a shared 2-core host; it was seen silent for 0.5 s,
# which exhausted rverbs' retries at 67 ms while it was merely late. (rxe retries for
# ever with retry_cnt 7, so the guest side needs no such change.)
export RV_ARGS="--ack-timeout 16"

before=$(counters)
for role in rv-server rv-client; do
  ITERS=40 FAULTS="loss=0.03,seed=11" run_case "rc-$role-ip4-rverbs-loss3%" rc "$role" 0 10000 0
  ITERS=40 FAULTS="loss=0.03,seed=12" run_case "rc-$role-ip6-rverbs-loss3%-events" rc "$role" 1 10000 1
  ITERS=40 FAULTS="dup=0.05,reorder=0.05,seed=13" run_case "rc-$role-ip4-rverbs-dup5%-reorder5%" rc "$role" 0 10000 0
  ITERS=40 FAULTS="loss=0.02,dup=0.02,reorder=0.02,seed=14" run_case "rc-$role-ip4-rverbs-mixed-1024" rc "$role" 0 1024 0
  ITERS=40 FAULTS="dup=0.1,seed=15" run_case "uc-$role-ip4-rverbs-dup10%-100" uc "$role" 0 100 0
done
netem_note=""
for spec in "loss 3%" "delay 1ms reorder 20% duplicate 3%"; do
  if ! guest_netem "$spec" >/tmp/interop-netem.$$ 2>&1; then
    record "netem $spec" 0 "could not set up netem in the guest:" "$(cat /tmp/interop-netem.$$)"
    continue
  fi
  tag=$(echo "$spec" | tr -d '%' | tr ' ' '-')
  for role in rv-server rv-client; do
    ITERS=40 run_case "rc-$role-ip4-netem-$tag" rc "$role" 0 10000 0
  done
  netem_note="$netem_note
  netem $spec: $(guest_netem_stats)"
  guest_netem off
done
rm -f /tmp/interop-netem.$$
echo "link faults (guest eth0 egress and ingress via ifb0):$netem_note"
# rverbs' losses make rxe see gaps and duplicates (out_of_seq_request, duplicate_request)
# and retransmit (completer_retry_err, rcvd_seq_err): those are the faults at work. What
# must stay 0: exhausted retries and send errors (every transfer completed).
check_counters "$before" "send_err retry_exceeded_err retry_rnr_exceeded_err" \
  "out_of_seq_request duplicate_request completer_retry_err rcvd_seq_err rcvd_rnr_err send_rnr_err"
print_rv_totals
finish
