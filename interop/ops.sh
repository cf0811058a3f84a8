#!/usr/bin/env bash
# Interop of RDMA WRITE, READ (one-packet and 20-packet responses), SEND and WRITE with
# immediate, FETCH_ADD and CMP_SWAP between rverbs (`rverbs interop-peer`) and the
# kernel's rxe driven by interop/rdma_ops.c (plain libibverbs, built here on the host
# against rdma-core and run in the guest from /mnt/host, where the same rdma-core
# libraries live), in both roles: kernel responder / rverbs requester and the reverse.
# Data, immediates and atomic results are validated on both sides. Also run with
# RVERBS_FAULTS (seeded) and with netem on the guest's link.
#
# Needs: the guests running, gcc and libibverbs' headers (libibverbs-dev) on the host.
# Usage: interop/ops.sh [RVERBS_BIN] [FILTER]
set -u
. "$(dirname "$0")/lib.sh"
port=18900
share=/var/tmp/rxe-peer/share/interop
mkdir -p "$share"
if ! gcc -O2 -Wall -Wextra -Werror -o "$share/rdma_ops" "$here/rdma_ops.c" -libverbs 2>/tmp/interop-gcc.$$; then
  echo "FAIL building interop/rdma_ops.c (need gcc and libibverbs-dev):"; cat /tmp/interop-gcc.$$
  exit 1
fi
rm -f /tmp/interop-gcc.$$

# ops_case NAME ROLE(kernel-responder|rverbs-responder) IPV6(0|1) ITERS
ops_case() {
  local name=$1 role=$2 v6=$3 n=$4
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  case_name=$name
  port=$((port + 1))
  local gid=1 host=$host4 vm=$vm4
  [ "$v6" = 1 ] && { gid=2; host=$host6; vm=$vm6; }
  local rv_log=/tmp/interop-ops.$$ vm_log
  if [ "$role" = rverbs-responder ]; then
    rv_cmd "$rv_log" 120 interop-peer -d rv_rxebr0 --stats -p "$port" -n "$n" &
    local bg=$!
    host_listen "$port"
    vm_log=$(guest -t 110 "/mnt/host/interop/rdma_ops -d rxe0 -g $gid -p $port -n $n $host; echo exit=\$?; $kill_leftovers" 2>&1)
    # Killed at its time limit (the guest's timeout kills the shell, not the tool):
    # what it left running is killed here.
    grep -q "exit=" <<<"$vm_log" || guest_cleanup
    wait $bg
  else
    guest -b "ops$port" "/mnt/host/interop/rdma_ops -d rxe0 -g $gid -p $port -n $n; echo exit=\$?" >/dev/null 2>&1
    wait_listen "$port"
    rv_cmd "$rv_log" 120 interop-peer -d rv_rxebr0 --stats -p "$port" -n "$n" "$vm"
    vm_log=$(guest "for i in \$(seq 1 20); do grep -q exit= /tmp/bg-ops$port.log && break; sleep 0.25; done; cat /tmp/bg-ops$port.log; kill \$(cat /tmp/bg-ops$port.pid) 2>/dev/null; $kill_leftovers" 2>&1)
  fi
  local ok=0
  if rv_clean "$rv_log" && grep -q "exit=0" "$rv_log" && grep -q "responder: ok" "$rv_log" &&
     grep -q "exit=0" <<<"$vm_log" && grep -q "responder: ok" <<<"$vm_log"; then
    ok=1
  fi
  record "$name" $ok "--- rverbs (RVERBS_FAULTS=${FAULTS:-}):" "$(cat "$rv_log")" "--- guest (rdma_ops):" "$vm_log"
  [ -n "${VERBOSE:-}" ] && grep -h 'rverbs faults\|rverbs counters\|verified' "$rv_log" <<<"$vm_log"
  add_rv_counters "$rv_log"
  rm -f "$rv_log"
  # (What the case left running in the guest was killed by its last call there.)
}

before=$(counters)
for role in kernel-responder rverbs-responder; do
  ops_case "ops-$role-ip4" "$role" 0 4
  ops_case "ops-$role-ip6" "$role" 1 4
done
# rverbs' loopback packetization of WRITEs (`Config::write_pieces`) into rxe's
# responder: the 12000-byte WRITE as 12 WRITE ONLY pieces, its data checked by the guest.
WRITE_PIECES=1 ops_case "ops-kernel-responder-ip4-pieces" kernel-responder 0 4
check_counters "$before" "out_of_seq_request send_err retry_exceeded_err retry_rnr_exceeded_err" \
  "completer_retry_err duplicate_request rcvd_seq_err"
print_rv_totals
if [ "${OPS_FAULTS:-1}" = 1 ]; then
  echo "--- with faults"
  before=$(counters) rv_totals=""
  export RV_ARGS="--ack-timeout 16"   # see recovery.sh
  for role in kernel-responder rverbs-responder; do
    FAULTS="loss=0.03,dup=0.02,reorder=0.03,seed=21" ops_case "ops-$role-ip4-rverbs-faults" "$role" 0 8
  done
  WRITE_PIECES=1 FAULTS="loss=0.03,dup=0.02,reorder=0.03,seed=22" \
    ops_case "ops-kernel-responder-ip4-rverbs-faults-pieces" kernel-responder 0 8
  if guest_netem "loss 3%" >/dev/null 2>&1; then
    for role in kernel-responder rverbs-responder; do
      ops_case "ops-$role-ip4-netem-loss3" "$role" 0 8
    done
    echo "netem loss 3%: $(guest_netem_stats)"
    guest_netem off
  else
    record "ops netem" 0 "could not set up netem in the guest"
  fi
  check_counters "$before" "send_err retry_exceeded_err retry_rnr_exceeded_err" \
    "out_of_seq_request duplicate_request completer_retry_err rcvd_seq_err"
  print_rv_totals
fi
finish
