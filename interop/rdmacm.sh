#!/usr/bin/env bash
# Interop of the RDMA CM: `rverbs rping` / `udaddy` / `ucmatose` / `perf -R`, and Debian's
# own rping, udaddy, ucmatose and perftest `-R` on rverbs' librdmacm.so.1 (`rverbs exec`),
# against rdma-core's tools and perftest on the kernel's rxe in the guest (../shared/rxe-peer), both roles.
# The native tools run over IPv4 and IPv6. The connection is made by CM MADs on QP1 (REQ/REP/RTU, DREQ/DREP; SIDR for
# udaddy; several connections at once for ucmatose); rping then moves its data with RDMA READ and WRITE (-S 5000: 5-packet
# transfers at the 1024-byte path MTU), checked on the client with -V.
#
# Needs: the rxe-peer guest running (rxe-peer/start.sh 1) and an rverbs binary.
# Usage: interop/rdmacm.sh [RVERBS_BIN] [FILTER]    (FILTER: substring of case names)
# FAULTS=loss=0.05,seed=7 runs rverbs with RVERBS_FAULTS (udaddy's UD datagrams are
# not resent by anyone: filter it out then, e.g. FILTER=rping or ucmatose).
set -u
. "$(dirname "$0")/lib.sh"
port=7300
kill_cm='for p in $(ps | grep -E "rping|udaddy" | grep -v grep | awk "{print \$1}"); do kill -9 $p; done; true'

# Waits (in the guest) until an rdma_cm ID listens on port $1, for up to 30 s.
guest_cm_listen() {
  guest "for i in \$(seq 1 300); do rdma res show cm_id 2>/dev/null | grep -q 'LISTEN.*:$1\b' && exit 0; sleep 0.1; done; exit 1" >/dev/null 2>&1
}

# Waits until the rverbs server's log says it listens (for up to 10 s).
rv_listening() {
  local i
  for i in $(seq 1 200); do
    grep -q "listening on" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# rping_case NAME ROLE(rv-server|rv-client) IPV6(0|1) SIZE COUNT
rping_case() {
  local name=$1 role=$2 v6=$3 size=$4 count=$5
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  case_name=$name
  port=$((port + 1))
  local host=$host4 vm=$vm4
  [ "$v6" = 1 ] && { host=$host6; vm=$vm6; }
  local rv_log=/tmp/interop-rv.$$ vm_log ok=0
  if [ "$role" = rv-server ]; then
    rv_cmd "$rv_log" 90 rping -s -a "$host" -p "$port" -S "$size" -v -d --stats --timeout 60 &
    local bg=$!
    rv_listening "$rv_log"
    vm_log=$(guest -t 90 "rping -c -a $host -p $port -S $size -C $count -v -V; echo exit=\$?; $kill_cm" 2>&1)
    wait $bg
    if rv_clean "$rv_log" && grep -q "exit=0" "$rv_log" && grep -q "exit=0" <<<"$vm_log" &&
      [ "$(grep -c '^ping data: rdma-ping-' <<<"$vm_log")" = "$count" ] &&
      [ "$(grep -c '^server ping data: rdma-ping-' "$rv_log")" = "$count" ]; then
      ok=1
    fi
  else
    guest -b "rping$port" "rping -s -a $vm -p $port -S $size -v" >/dev/null 2>&1
    guest_cm_listen "$port"
    rv_cmd "$rv_log" 90 rping -c -a "$vm" -p "$port" -S "$size" -C "$count" -v -V --stats --timeout 60
    vm_log=$(guest "p=\$(cat /tmp/bg-rping$port.pid); for i in \$(seq 1 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-rping$port.log; kill -0 \$p 2>/dev/null && echo still-running; $kill_cm" 2>&1)
    if rv_clean "$rv_log" && grep -q "exit=0" "$rv_log" && ! grep -q still-running <<<"$vm_log" &&
      [ "$(grep -c '^ping data: rdma-ping-' "$rv_log")" = "$count" ] &&
      [ "$(grep -c '^server ping data: rdma-ping-' <<<"$vm_log")" = "$count" ]; then
      ok=1
    fi
  fi
  record "$name" $ok "--- rverbs:" "$(cat "$rv_log")" "--- guest:" "$vm_log"
  add_rv_counters "$rv_log"
  rm -f "$rv_log"
}

# udaddy_case NAME ROLE(rv-server|rv-client) IPV6(0|1) COUNT
udaddy_case() {
  local name=$1 role=$2 v6=$3 count=$4
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  case_name=$name
  local host=$host4 vm=$vm4
  [ "$v6" = 1 ] && { host=$host6; vm=$vm6; }
  local rv_log=/tmp/interop-rv.$$ vm_log ok=0
  # udaddy's port is fixed (7174).
  if [ "$role" = rv-server ]; then
    rv_cmd "$rv_log" 90 udaddy -b "$host" -C "$count" --timeout 60 &
    local bg=$!
    sleep 1
    vm_log=$(guest -t 90 "udaddy -s $host -C $count; echo exit=\$?; $kill_cm" 2>&1)
    wait $bg
  else
    guest -b "udaddy" "udaddy -b $vm -C $count" >/dev/null 2>&1
    guest_cm_listen 7174
    rv_cmd "$rv_log" 90 udaddy -s "$vm" -C "$count" --timeout 60
    vm_log=$(guest "p=\$(cat /tmp/bg-udaddy.pid); for i in \$(seq 1 100); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-udaddy.log; $kill_cm" 2>&1)
  fi
  if grep -q "exit=0" "$rv_log" && grep -q "return status 0" "$rv_log" &&
    grep -q "return status 0" <<<"$vm_log" && grep -q "data transfers complete" <<<"$vm_log"; then
    ok=1
  fi
  record "$name" $ok "--- rverbs:" "$(cat "$rv_log")" "--- guest:" "$vm_log"
  rm -f "$rv_log"
}

# ucmatose_case NAME ROLE(rv-server|rv-client) IPV6(0|1) CONNECTIONS COUNT SIZE
ucmatose_case() {
  local name=$1 role=$2 v6=$3 conns=$4 count=$5 size=$6
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  case_name=$name
  port=$((port + 1))
  local host=$host4 vm=$vm4
  [ "$v6" = 1 ] && { host=$host6; vm=$vm6; }
  local rv_log=/tmp/interop-rv.$$ vm_log ok=0
  local args="-c $conns -C $count -S $size -p $port"
  if [ "$role" = rv-server ]; then
    rv_cmd "$rv_log" 90 ucmatose -b "$host" $args --timeout 60 &
    local bg=$!
    sleep 1
    vm_log=$(guest -t 90 "ucmatose -s $host $args; echo exit=\$?; $kill_cm" 2>&1)
    wait $bg
  else
    guest -b "ucm$port" "ucmatose -b $vm $args" >/dev/null 2>&1
    guest_cm_listen "$port"
    rv_cmd "$rv_log" 90 ucmatose -s "$vm" $args --timeout 60
    vm_log=$(guest "p=\$(cat /tmp/bg-ucm$port.pid); for i in \$(seq 1 100); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-ucm$port.log; $kill_cm" 2>&1)
  fi
  if grep -q "exit=0" "$rv_log" && grep -q "return status 0" "$rv_log" &&
    grep -q "return status 0" <<<"$vm_log" && grep -q "data transfers complete" <<<"$vm_log"; then
    ok=1
  fi
  record "$name" $ok "--- rverbs:" "$(cat "$rv_log")" "--- guest:" "$vm_log"
  rm -f "$rv_log"
}

# Debian's unmodified tools on rverbs' librdmacm.so.1 (`rverbs exec`, which puts it and
# libibverbs.so.1 on the library path; needs `cargo build --release -p
# rverbs-libibverbs` beside the rverbs binary) against the same tools on rxe.
# c_case NAME ROLE(rv-server|rv-client) PORT HOST_SERVER GUEST_CLIENT GUEST_SERVER HOST_CLIENT
#   WANT [RV_WANT] (commands; the rverbs side's are run with `rverbs exec --`, or with
#   `rv_exec=` set empty as rverbs subcommands), with the checks as grep patterns: WANT
#   in both outputs, or WANT in the guest's and RV_WANT in rverbs'.
c_case() {
  local name=$1 role=$2 lport=$3 hs=$4 gc=$5 gs=$6 hc=$7 want=$8 rv_want=${9:-$8}
  local run_as=${rv_exec-exec --}
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  case_name=$name
  local rv_log=/tmp/interop-rv.$$ vm_log ok=0
  if [ "$role" = rv-server ]; then
    rv_cmd "$rv_log" 120 $run_as $hs &
    local bg=$!
    # (A listener off the loopback device announces nothing to wait for.)
    sleep 2
    vm_log=$(guest -t 100 "$gc; echo exit=\$?; $kill_cm; $kill_leftovers" 2>&1)
    wait $bg
  else
    # perftest connects twice, its server listening again only after the parameter
    # exchange: a client quicker than the (emulated) guest is rejected with reason 8
    # (over UD, SIDR: unreachable, status 1), and perftest 4.5-0.17 then retries with
    # the IDs it destroyed and crashes (fixed upstream). That outcome is tried again,
    # up to five times in all (against the emulated guest it comes in most tries);
    # five of them skip the case with a line that says so.
    local attempt
    for attempt in 1 2 3 4 5; do
      guest -b "c$lport" "$gs" >/dev/null 2>&1
      guest_cm_listen "$lport"
      rv_cmd "$rv_log" 120 $run_as $hc
      vm_log=$(guest "p=\$(cat /tmp/bg-c$lport.pid); for i in \$(seq 1 100); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-c$lport.log; kill -0 \$p 2>/dev/null && echo still-running; $kill_cm; $kill_leftovers" 2>&1)
      grep -q "REJECTED; error: 8\|UNREACHABLE; error: 1\." "$rv_log" || break
      if [ $attempt = 5 ]; then
        # Lost to perftest's own race every time: not a result of rverbs either way.
        echo "SKIPPED $name: perftest's client came before its emulated server listened again, 5 times"
        rm -f "$rv_log"
        return
      fi
      echo "NOTE $name: perftest's client came before its server listened again; once more"
    done
  fi
  if grep -q "exit=0" "$rv_log" && ! grep -q still-running <<<"$vm_log" &&
    grep -q -- "$rv_want" "$rv_log" && grep -q -- "$want" <<<"$vm_log"; then
    ok=1
  fi
  [ "$role" = rv-server ] && ! grep -q "exit=0" <<<"$vm_log" && ok=0
  record "$name" $ok "--- rverbs (C tool):" "$(cat "$rv_log")" "--- guest:" "$vm_log"
  rm -f "$rv_log"
}

# Every perftest run (here and in perf_r_cases) gets -F: perftest divides its report by
# the CPU clock it measures, and when that fails (samples that do not correlate, as on a
# loaded or emulated machine: "Correlation coefficient r^2: ... < 0.9") it exits at its
# report unless -F is given, before the closing handshake its peer then waits for with
# no time limit. -F prints zeros instead.
c_cases() {
  local p
  p=$((port += 1))
  c_case "c-rping-rv-server-ip4" rv-server "$p" \
    "rping -s -a $host4 -p $p -S 5000 -v -C 10" "rping -c -a $host4 -p $p -S 5000 -C 10 -v -V" \
    "" "" "ping data: rdma-ping-9"
  p=$((port += 1))
  c_case "c-rping-rv-client-ip4" rv-client "$p" "" "" \
    "rping -s -a $vm4 -p $p -S 5000 -v -C 10" "rping -c -a $vm4 -p $p -S 5000 -C 10 -v -V" \
    "ping data: rdma-ping-9"
  c_case "c-udaddy-rv-server-ip4" rv-server 7174 "udaddy -b $host4 -C 10" "udaddy -s $host4 -C 10" \
    "" "" "return status 0"
  c_case "c-udaddy-rv-client-ip4" rv-client 7174 "" "" "udaddy -b $vm4 -C 10" "udaddy -s $vm4 -C 10" \
    "return status 0"
  p=$((port += 1))
  c_case "c-ucmatose-rv-client-ip4" rv-client "$p" "" "" "ucmatose -b $vm4 -c 2 -C 10 -p $p" \
    "ucmatose -s $vm4 -c 2 -C 10 -p $p" "return status 0"
  local t
  for t in ib_send_bw ib_write_bw ib_read_lat; do
    p=$((port += 1))
    c_case "c-$t-R-rv-server" rv-server "$p" "$t -d rv_rxebr0 -R -F -n 100 -p $p" \
      "$t -d rxe0 -R -F -n 100 -p $p $host4" "" "" "Data ex. method : rdma_cm"
    # ib_read_lat's emulated server listens the second time too late for every try
    # (rdma res show: its second listener appears after the REJ), so only the bw tools
    # run with rverbs as the client.
    [ $t = ib_read_lat ] && continue
    p=$((port += 1))
    c_case "c-$t-R-rv-client" rv-client "$p" "" "" "$t -d rxe0 -R -F -n 100 -p $p" \
      "$t -d rv_rxebr0 -R -F -n 100 -p $p $vm4" "Data ex. method : rdma_cm"
  done
  # -R -c UD: the test's QPs found by SIDR (port space UDP), the accept naming its QP
  # (conn_param.qp_num); the latency server learns the client's QP from its first SEND.
  for t in ib_send_bw ib_send_lat; do
    p=$((port += 1))
    c_case "c-$t-R-UD-rv-server" rv-server "$p" "$t -d rv_rxebr0 -R -F -c UD -n 100 -p $p" \
      "$t -d rxe0 -R -F -c UD -n 100 -p $p $host4" "" "" "Data ex. method : rdma_cm"
    p=$((port += 1))
    c_case "c-$t-R-UD-rv-client" rv-client "$p" "" "" "$t -d rxe0 -R -F -c UD -n 100 -p $p" \
      "$t -d rv_rxebr0 -R -F -c UD -n 100 -p $p $vm4" "Data ex. method : rdma_cm"
  done
}

# `rverbs perf -R` (perftest's -R on the Rust CM API) against the guest's perftest -R,
# both roles. As the client rverbs retries a reject for nobody listening (yet) for 10 s
# itself, so ib_read_lat's late second listener is waited for.
perf_r_cases() {
  local p t op kind
  for t in ib_send_bw ib_write_bw ib_read_lat; do
    op=${t#ib_}; kind=${op#*_}; op=${op%_*}
    p=$((port += 1))
    rv_exec='' c_case "perf-$t-R-rv-server" rv-server "$p" \
      "perf $op $kind -R -d rv_rxebr0 -n 100 -p $p" \
      "$t -d rxe0 -R -F -n 100 -p $p $host4" "" "" "Data ex. method : rdma_cm" "rverbs counters"
    p=$((port += 1))
    rv_exec='' c_case "perf-$t-R-rv-client" rv-client "$p" "" "" "$t -d rxe0 -R -F -n 100 -p $p" \
      "perf $op $kind -R -d rv_rxebr0 -n 100 -p $p $vm4" "Data ex. method : rdma_cm" "rverbs counters"
  done
  # UD (SIDR): perftest's -R -c UD, the SEND tools.
  for t in ib_send_bw ib_send_lat; do
    kind=${t##*_}
    p=$((port += 1))
    rv_exec='' c_case "perf-$t-R-UD-rv-server" rv-server "$p" \
      "perf send $kind -R -c UD -d rv_rxebr0 -n 100 -p $p" \
      "$t -d rxe0 -R -F -c UD -n 100 -p $p $host4" "" "" "Data ex. method : rdma_cm" "rverbs counters"
    p=$((port += 1))
    rv_exec='' c_case "perf-$t-R-UD-rv-client" rv-client "$p" "" "" "$t -d rxe0 -R -F -c UD -n 100 -p $p" \
      "perf send $kind -R -c UD -d rv_rxebr0 -n 100 -p $p $vm4" "Data ex. method : rdma_cm" "rverbs counters"
  done
}

before=$(counters)
if [ -e "$(dirname "$bin")/libibverbs.so.1" ] || [ -n "${RVERBS_LIBIBVERBS:-}" ]; then
  c_cases
else
  echo "NOTE: no libibverbs.so.1 beside $bin: the C tools' cases are not run"
fi
perf_r_cases
for role in rv-client rv-server; do
  for v6 in 0 1; do
    ipv=ip$([ $v6 = 1 ] && echo 6 || echo 4)
    rping_case "rping-$role-$ipv-64" "$role" "$v6" 64 20
    rping_case "rping-$role-$ipv-5000" "$role" "$v6" 5000 10
  done
  udaddy_case "udaddy-$role-ip4" "$role" 0 10
  ucmatose_case "ucmatose-$role-ip4" "$role" 0 4 10 100
  ucmatose_case "ucmatose-$role-ip6-4000" "$role" 1 2 5 4000
done
# rxe must have accepted every packet rverbs sent; with FAULTS (rverbs drops some of
# what it sends) a request after a lost one is out of sequence, as it should be.
strict="out_of_seq_request send_err retry_exceeded_err retry_rnr_exceeded_err"
noted="completer_retry_err duplicate_request rcvd_seq_err"
[ -n "${FAULTS:-}" ] && { strict="send_err retry_exceeded_err retry_rnr_exceeded_err"; noted="out_of_seq_request $noted"; }
# Without faults but with every case captured, an out-of-sequence request is allowed
# only as a packet lost on the way into the emulated guest (the bandwidth cases stream
# thousands of packets through its TAP): every capture must show rverbs sending each
# request PSN in order, as interop/perftest.sh checks per case.
explain_oos=0
if [ -z "${FAULTS:-}" ] && [ -n "${IOP_PCAP:-}" ]; then
  strict="send_err retry_exceeded_err retry_rnr_exceeded_err"
  explain_oos=1
fi
check_counters "$before" "$strict" "$noted"
if [ $explain_oos = 1 ]; then
  oos_total=$(counter_of "$(counter_deltas "$before" "$(counters)")" out_of_seq_request)
  if [ "${oos_total:-0}" != 0 ]; then
    gaps=0
    for f in "$IOP_PCAP"/*.pcap; do
      [ -f "$f" ] || continue
      g=$(sent_psn_gaps "$f")
      [ "${g:-0}" != 0 ] && echo "  $(basename "$f" .pcap): rverbs' capture has $g request PSN(s) that skipped ahead"
      gaps=$((gaps + ${g:-0}))
    done
    if [ "$gaps" = 0 ]; then
      echo "NOTE rxe counted $oos_total out-of-sequence request(s), each a packet lost on the way (every capture shows each PSN sent in order)"
    else
      echo "FAIL rxe counted $oos_total out-of-sequence request(s) and rverbs skipped $gaps request PSN(s)"
      fail=$((fail + 1))
    fi
  fi
fi
print_rv_totals
finish
