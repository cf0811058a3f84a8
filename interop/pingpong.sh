#!/usr/bin/env bash
# Interop: rverbs pingpong <-> rdma-core's ibv_{rc,uc,ud}_pingpong on the kernel's
# Soft-RoCE (rxe) in a QEMU guest (../shared/rxe-peer), both roles, IPv4 and IPv6 GIDs,
# sizes below / equal to / above the path MTU, with and without -e, data checked (-c).
#
# Needs: the rxe-peer guests running (rxe-peer/start.sh) and an rverbs binary.
# Usage: interop/pingpong.sh [RVERBS_BIN] [FILTER]    (FILTER: substring of case names)
set -u
. "$(dirname "$0")/lib.sh"
port=18600

# run_case NAME TRANSPORT ROLE(rv-server|rv-client) IPV6(0|1) SIZE EVENTS
# Environment: FAULTS (RVERBS_FAULTS for rverbs), ITERS (default 50), GUEST_ENV
# (assignments put before the guest's tool, e.g. LD_PRELOAD=...).
run_case() {
  local name=$1 t=$2 role=$3 v6=$4 size=$5 ev=$6
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  case_name=$name
  port=$((port + 1))
  local gid=1 host=$host4
  [ "$v6" = 1 ] && { gid=2; host=$host6; }
  local evf="" iters=${ITERS:-50} opts
  [ "$ev" = 1 ] && evf="-e"
  opts="-p $port -s $size -n $iters $evf"
  [ "$t" != ud ] && opts="$opts -c"
  local rv_log=/tmp/interop-rv.$$ vm_log
  if [ "$role" = rv-server ]; then
    rv_cmd "$rv_log" 90 pingpong "$t" -d rv_rxebr0 --stats $opts &
    local bg=$!
    host_listen "$port"
    vm_log=$(guest -t 90 "${GUEST_ENV:-} ibv_${t}_pingpong -d rxe0 -g $gid $opts $host; echo exit=\$?; $kill_leftovers" 2>&1)
    # Killed at its time limit (the guest's timeout kills the shell, not the tool):
    # what it left running is killed here.
    grep -q "exit=" <<<"$vm_log" || guest_cleanup
    wait $bg
  else
    guest -b "pp$port" "${GUEST_ENV:-} ibv_${t}_pingpong -d rxe0 -g $gid $opts" >/dev/null 2>&1
    wait_listen "$port"
    # rdma-core's server listens on IPv4 only (getaddrinfo's first passive result), so
    # the TCP exchange goes over IPv4 and the IPv6 GID is chosen explicitly.
    local rvgid=""
    [ "$v6" = 1 ] && rvgid="-g 2"
    # In raw mode (RAW_IF) every GID is listed twice, v1 then v2: fd00:77::1 is v2 at 5.
    [ "$v6" = 1 ] && [ -n "${RAW_IF:-}" ] && rvgid="-g 5"
    rv_cmd "$rv_log" 90 pingpong "$t" -d rv_rxebr0 --stats $rvgid $opts "$vm4"
    # The tool's output is buffered until it exits: give it 3 s to finish (a lingering
    # QP, see linger.c), then stop it.
    vm_log=$(guest "p=\$(cat /tmp/bg-pp$port.pid); for i in \$(seq 1 30); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-pp$port.log; kill \$p 2>/dev/null; $kill_leftovers" 2>&1)
    grep -q "usec/iter" <<<"$vm_log" && vm_log="$vm_log
exit=0"
  fi
  # Every packet rxe sent must have passed rverbs' checks: no ICRC errors, nothing
  # malformed or dropped for a wrong P_Key/Q_Key/state/source.
  local ok=0
  if rv_clean "$rv_log" && grep -q "exit=0" "$rv_log" && grep -q "$iters iters in" "$rv_log" && grep -q "exit=0" <<<"$vm_log" && grep -q "$iters iters in" <<<"$vm_log"; then
    ok=1
  fi
  record "$name" $ok "--- rverbs (RVERBS_FAULTS=${FAULTS:-}):" "$(cat "$rv_log")" "--- guest:" "$vm_log"
  [ -n "${VERBOSE:-}" ] && grep -h 'rverbs faults\|rverbs counters' "$rv_log"
  add_rv_counters "$rv_log"
  rm -f "$rv_log"
  # (What the case left running in the guest was killed by its last call there.)
}

# As a library (recovery.sh): only the functions.
[ -n "${PINGPONG_LIB:-}" ] && return 0

before=$(counters)
for t in rc uc ud; do
  for role in rv-server rv-client; do
    for v6 in 0 1; do
      if [ "$t" = ud ]; then sizes="100 1024"; else sizes="100 1024 10000"; fi
      for size in $sizes; do
        run_case "$t-$role-ip$([ $v6 = 1 ] && echo 6 || echo 4)-$size" "$t" "$role" "$v6" "$size" 0
      done
      run_case "$t-$role-ip$([ $v6 = 1 ] && echo 6 || echo 4)-events" "$t" "$role" "$v6" 1024 1
    done
  done
done
# rxe must have accepted every packet rverbs sent: nothing out of sequence, no send
# errors, no exhausted retries. Retries and duplicates can also come from emulation
# timing (a late ACK under TCG), so they are reported, not failed.
check_counters "$before" "out_of_seq_request send_err retry_exceeded_err retry_rnr_exceeded_err" \
  "completer_retry_err duplicate_request rcvd_seq_err"
print_rv_totals
finish
