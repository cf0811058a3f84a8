#!/usr/bin/env bash
# Interop: rverbs pingpong <-> rdma-core's ibv_{rc,uc,ud}_pingpong on the kernel's
# Soft-RoCE (rxe) in a QEMU guest (../shared/rxe-peer), both roles, IPv4 and IPv6 GIDs,
# sizes below / equal to / above the path MTU, with and without -e, data checked (-c).
#
# Needs: the rxe-peer guests running (rxe-peer/start.sh 2) and an rverbs binary.
# Usage: interop/pingpong.sh [RVERBS_BIN] [FILTER]    (FILTER: substring of case names)
set -u
here=$(cd "$(dirname "$0")" && pwd)
peer=${RXE_PEER:-$here/../../shared/rxe-peer}
[ -d "$peer" ] || peer=$here/../shared/rxe-peer
bin=${1:-$here/../target/release/rverbs}
filter=${2:-}
host4=10.77.0.1 host6=fd00:77::1 vm4=10.77.0.2 vm6=fd00:77::2
pass=0 fail=0 failed=()
port=18600

run_case() { # name transport role(rv-server|rv-client) ipv6(0|1) size events
  local name=$1 t=$2 role=$3 v6=$4 size=$5 ev=$6
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  port=$((port + 1))
  local gid=1 vm=$vm4 host=$host4
  [ "$v6" = 1 ] && { gid=2; vm=$vm6; host=$host6; }
  local evf="" iters=50 opts
  [ "$ev" = 1 ] && evf="-e"
  opts="-p $port -s $size -n $iters $evf"
  [ "$t" != ud ] && opts="$opts -c"
  local rv_log=/tmp/interop-rv.$$ vm_log
  if [ "$role" = rv-server ]; then
    (timeout 90 "$peer/hostns.sh" "$bin" pingpong "$t" -d rv_rxebr0 --stats $opts >"$rv_log" 2>&1; echo "exit=$?" >>"$rv_log") &
    local bg=$!
    sleep 0.5
    vm_log=$("$peer/run.sh" -v 1 -t 90 "ibv_${t}_pingpong -d rxe0 -g $gid $opts $host; echo exit=\$?" 2>&1)
    wait $bg
  else
    "$peer/run.sh" -v 1 -b "pp$port" "ibv_${t}_pingpong -d rxe0 -g $gid $opts" >/dev/null 2>&1
    # Wait until the guest's server listens (slow under TCG emulation).
    local hex i
    hex=$(printf '%04X' "$port")
    for i in $(seq 1 40); do
      "$peer/run.sh" -v 1 "grep -q ':$hex 00000000:0000 0A\|:$hex 00000000000000000000000000000000:0000 0A' /proc/net/tcp /proc/net/tcp6" >/dev/null 2>&1 && break
      sleep 0.25
    done
    # rdma-core's server listens on IPv4 only (getaddrinfo's first passive result), so
    # the TCP exchange goes over IPv4 and the IPv6 GID is chosen explicitly.
    local rvgid=""
    [ "$v6" = 1 ] && rvgid="-g 2"
    timeout 90 "$peer/hostns.sh" "$bin" pingpong "$t" -d rv_rxebr0 --stats $rvgid $opts "$vm4" >"$rv_log" 2>&1; echo "exit=$?" >>"$rv_log"
    sleep 0.5
    vm_log=$("$peer/run.sh" -v 1 "sleep 1; cat /tmp/bg-pp$port.log; kill \$(cat /tmp/bg-pp$port.pid) 2>/dev/null; true" 2>&1)
    grep -q "usec/iter" <<<"$vm_log" && vm_log="$vm_log
exit=0"
  fi
  # Every packet rxe sent must have passed rverbs' checks: no ICRC errors, nothing
  # malformed or dropped for a wrong P_Key/Q_Key/state/source.
  local clean=1
  for c in rx_icrc_errors rx_malformed rx_bad_pkey rx_bad_qkey rx_wrong_source rx_wrong_transport; do
    grep -q " $c=0" "$rv_log" || clean=0
  done
  if [ $clean = 1 ] && grep -q "exit=0" "$rv_log" && grep -q "$iters iters in" "$rv_log" && grep -q "exit=0" <<<"$vm_log" && grep -q "$iters iters in" <<<"$vm_log"; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name"
    echo "--- rverbs:"; cat "$rv_log"; echo "--- guest:"; echo "$vm_log"
  fi
  rm -f "$rv_log"
  # A killed case can leave an rdma-core tool running (run.sh's timeout kills only its
  # shell); its QP would keep retransmitting into the next case.
  "$peer/run.sh" -v 1 'for p in $(ps | grep _pingpong | grep -v grep | awk "{print \$1}"); do kill -9 $p; done; true' >/dev/null 2>&1
}

counters() { "$peer/run.sh" -v 1 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo "$f $(cat $f)"; done' 2>/dev/null; }
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
after=$(counters)
echo "rxe0 hw_counters during the run (guest VM1):"
deltas=$(join <(echo "$before" | sort) <(echo "$after" | sort) | awk '{ printf "%s %d\n", $1, $3 - $2 }')
echo "$deltas" | awk '{ printf "  %-24s %d\n", $1, $2 }'
# rxe must have accepted every packet rverbs sent: nothing out of sequence, no send
# errors, no exhausted retries. Retries and duplicates can also come from emulation
# timing (a late ACK under TCG), so they are reported, not failed.
for c in out_of_seq_request send_err retry_exceeded_err retry_rnr_exceeded_err; do
  v=$(echo "$deltas" | awk -v c=$c '$1 == c { print $2 }')
  if [ -n "$v" ] && [ "$v" != 0 ]; then
    echo "FAIL rxe counter $c grew by $v during the run"; fail=$((fail + 1))
  fi
done
for c in completer_retry_err duplicate_request rcvd_seq_err; do
  v=$(echo "$deltas" | awk -v c=$c '$1 == c { print $2 }')
  if [ -n "$v" ] && [ "$v" != 0 ]; then
    echo "NOTE rxe counter $c grew by $v (retransmissions; timing under emulation)"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
