#!/usr/bin/env bash
# Interop: `rverbs perf OP KIND --perftest` against unmodified perftest tools (Debian's
# perftest 4.5+0.17 = 6.06) on the kernel's rxe in a QEMU guest (../shared/rxe-peer):
# ib_{write,send,read,atomic}_{bw,lat}, rverbs as the client and as the server, at
# perftest's default message size (and default -n for the latency tools), other
# sizes, and an -a sweep. A case passes when both sides exit 0, rverbs reports its own
# non-zero figures, perftest prints its result row with non-zero figures (the tools
# that print one on that side), and rverbs dropped no packet of rxe's (ICRC, headers);
# the suite fails if rxe counted a send error, an exhausted retry or an out-of-sequence
# request that a case's capture does not show to be a packet lost on the way (every
# request PSN rverbs sent in order: long streams into the emulated guest can lose one;
# retransmissions are reported per case). tshark decodes every packet rverbs
# captured (IOP_PCAP).
#
# Needs: the rxe-peer guest running (rxe-peer/start.sh 1) and an rverbs binary.
# Usage: interop/perftest.sh [RVERBS_BIN] [FILTER]    (FILTER: substring of case names)
#   PERFTEST_SRC=DIR  also run against another perftest whose ib_* tools are in DIR on
#                     this host (e.g. a newer release than the guest's package): its
#                     tools and the libraries the guest lacks are staged in the guest's
#                     /mnt/host/perftest-src.
set -u
. "$(dirname "$0")/lib.sh"
port=18700
pt_prefix="" pt_tag=""
stage_perftest() { # DIR
  local d=/var/tmp/rxe-peer/share/perftest-src t lib
  rm -rf "$d"; mkdir -p "$d/lib"
  for t in write send read atomic; do
    cp -f "$1/ib_${t}_bw" "$1/ib_${t}_lat" "$d/" || return 1
  done
  for lib in $(ldd "$d"/ib_* | awk '/=>/ { print $3 }' | sort -u); do
    [ -e "/var/tmp/rxe-peer/rootfs/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ] || cp -fL "$lib" "$d/lib/"
  done
  pt_prefix="LD_LIBRARY_PATH=/mnt/host/perftest-src/lib /mnt/host/perftest-src/"
  pt_tag="-v$("$1/ib_write_bw" --version 2>/dev/null | awk '/Version/ { print $2 }')"
}

# The figure a side must report as non-zero: rverbs' JSON (gbps, or the p50 of a
# latency test), perftest's result row (BW average, or t_min).
rv_figure() { # LOG KIND
  local key=gbps
  [ "$2" = lat ] && key=p50
  grep -o "\"$key\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2
}
pt_row() { # OUTPUT SIZE ITERS KIND -> the row's figure (BW average / t_min)
  local col=4
  [ "$4" = lat ] && col=3
  awk -v s="$2" -v n="$3" -v c="$col" '$1 == s && ($2 == n || n == "any") { print $c; exit }' <<<"$1"
}
positive() { awk -v v="${1:-0}" 'BEGIN { exit !(v + 0 > 0) }'; }

# run_case TOOL(write_bw|...) ROLE(rv-client|rv-server) SIZE(or "" = default) ITERS(or "") [EXTRA]
run_case() {
  local tool=$1 role=$2 size=$3 iters=$4 extra=${5:-}
  local op=${tool%_*} kind=${tool#*_}
  local name="ib_${tool}${pt_tag}-${role}-s${size:-def}-n${iters:-def}${extra:+-${extra// /}}${GIDX:+-gid$GIDX}${WRITE_PIECES:+-pieces}"
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && return
  case_name=$name
  # The 8 MiB sweeps are captured aside, for the PSN check below only (tshark would
  # take minutes over them), and the capture is deleted after it.
  local sweep=0
  [[ " $extra " == *" -a "* ]] && sweep=1
  if [ $sweep = 1 ] && [ -n "${IOP_PCAP:-}" ]; then
    mkdir -p "$IOP_PCAP/sweeps"
    case_name=sweeps/$name
  fi
  port=$((port + 1))
  local opts="-p $port"
  [ -n "$size" ] && opts="$opts -s $size"
  [ -n "$iters" ] && opts="$opts -n $iters"
  [ -n "$extra" ] && opts="$opts $extra"
  # What each side reports: size and iterations of its row.
  local rsize=${size:-65536} riters=${iters:-1000}
  [ "$kind" = lat ] && rsize=${size:-2}
  [ "$tool" = write_bw ] && riters=${iters:-5000}
  [ "$op" = atomic ] && rsize=8
  [ $sweep = 1 ] && rsize=8388608
  # UD: one packet per message, so a sweep ends at the path MTU (1024 with the guest's
  # 1500-byte Ethernet MTU).
  [ $sweep = 1 ] && [[ " $extra " == *" -c UD "* ]] && rsize=1024
  # A duration (-D): the row counts what was sent in it.
  [[ $extra == *-D* ]] && riters=any
  # Several QPs (-q N): the rows count every QP's messages.
  if [[ " $extra " =~ \ -q\ ([0-9]+)\  ]] && [ "$riters" != any ]; then
    riters=$((riters * BASH_REMATCH[1]))
  fi
  local rv_log=/tmp/perftest-rv.$$ pt c0 gx=${GIDX:-1} rvx=""
  # GIDX: both sides' GID index (2: the IPv6 GIDs; the TCP exchange stays on IPv4).
  [ -n "${GIDX:-}" ] && rvx="-x $GIDX"
  # The counters before the case are those the previous case read at its end (its last
  # call into the guest, which also killed what it left running, reads them too).
  c0=$last_counters
  local out c1
  if [ "$role" = rv-server ]; then
    rv_cmd "$rv_log" 240 perf "$op" "$kind" --perftest --json -d rv_rxebr0 $rvx $opts &
    local bg=$!
    host_listen "$port"
    # (The tool's stderr joins its stdout: the harness prints a call's stderr after all
    # of its stdout, which would put it behind the counters.)
    out=$(guest -t 240 "{ ${pt_prefix}ib_$tool -d rxe0 -x $gx -F $opts $host4; echo exit=\$?; } 2>&1; $kill_leftovers; $counters_cmd" 2>&1)
    # (rverbs is read after the tool's end: what rxe counts of rverbs' last packets after
    # that, if any, falls to the next case. The closing handshake follows the traffic.)
    wait $bg
  else
    guest -b "pt$port" "${pt_prefix}ib_$tool -d rxe0 -x $gx -F $opts" >/dev/null 2>&1
    wait_listen "$port"
    rv_cmd "$rv_log" 240 perf "$op" "$kind" --perftest --json -d rv_rxebr0 $rvx $opts "$vm4"
    out=$(guest "p=\$(cat /tmp/bg-pt$port.pid); for i in \$(seq 1 100); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-pt$port.log; kill \$p 2>/dev/null; $kill_leftovers; $counters_cmd" 2>&1)
  fi
  split_counters "$out" pt c1
  # A guest call that ended before the counters (killed at its time limit): again.
  [ -n "$c1" ] || c1=$(cleanup_counters)
  [ -n "$c1" ] && [ -n "$c0" ] || echo "  NOTE rxe's counters could not be read around this case: its counter checks are skipped"
  last_counters=$c1
  local ok=1 why=() noted
  grep -q "exit=0" "$rv_log" || { ok=0; why+=("rverbs did not exit 0"); }
  # Every packet rxe sent passed rverbs' checks (ICRC, headers, P_Key, state, source).
  rv_clean "$rv_log" || { ok=0; why+=("rverbs dropped packets from rxe (see its counters)"); }
  # perftest's background log has no exit line: its result row or closing line stands for it.
  if [ "$role" = rv-server ]; then
    grep -q "exit=0" <<<"$pt" || { ok=0; why+=("$tool did not exit 0"); }
  fi
  # rverbs' figure: the read/atomic latency server only answers (no figure).
  if ! { [ "$role" = rv-server ] && [ "$kind" = lat ] && { [ "$op" = read ] || [ "$op" = atomic ]; }; }; then
    positive "$(rv_figure "$rv_log" "$kind")" || { ok=0; why+=("rverbs reported no figure"); }
  fi
  # perftest's row: every tool prints one, but for ib_read_lat/ib_atomic_lat only the client.
  if ! { [ "$role" = rv-client ] && [ "$kind" = lat ] && { [ "$op" = read ] || [ "$op" = atomic ]; }; }; then
    positive "$(pt_row "$pt" "$rsize" "$riters" "$kind")" || { ok=0; why+=("no $tool result row for $rsize B x $riters with a non-zero figure"); }
  elif ! grep -q -- "---------" <<<"$pt"; then
    ok=0; why+=("$tool printed nothing")
  fi
  # UC and UD recover no lost packet, and the emulated guest drops a few datagrams of a
  # burst when the host is loaded (in one CI run rxe's ib_send_bw server got 298 of 300
  # UD messages and waited for the rest): such a case runs once more, and says so.
  if [ $ok = 0 ] && [ -z "${pt_again:-}" ] && [[ " $extra " == *" -c U"[CD]" "* ]]; then
    echo "NOTE $name: ${why[*]}; UC/UD lose what the guest drops: once more"
    rm -f "$rv_log"
    pt_again=1 run_case "$@"
    return
  fi
  # RC recovers losses, but not a guest that stops answering: under a loaded host the
  # emulated guest has gone silent for longer than perftest's retry budget (7 resends,
  # 67 ms apart; RETRY_EXC_ERR at rverbs). Such a case runs once more, says so, and the
  # count is printed at the end; a second failure fails the suite.
  if [ $ok = 0 ] && [ -z "${pt_again:-}" ] && grep -q 'completed with RetryExcErr' "$rv_log"; then
    echo "NOTE $name: ${why[*]}; rverbs exhausted its retries (the guest stopped answering): once more"
    rc_again=$((rc_again + 1))
    rm -f "$rv_log"
    pt_again=1 run_case "$@"
    return
  fi
  record "$name" $ok "${why[@]}" "--- rverbs:" "$(cat "$rv_log")" "--- $tool:" "$pt"
  if [ $ok = 1 ]; then
    echo "  rverbs: $(grep '^{' "$rv_log" | tail -1 | grep -o '"size":[0-9]*,"msgs":[0-9]*\|"gbps":[0-9.e+-]*\|"p50":[0-9.e+-]*' | tr '\n' ' ')"
    pt_line=$(awk -v s="$rsize" -v n="$riters" '$1 == s && ($2 == n || n == "any")' <<<"$pt" | head -1)
    [ -n "$pt_line" ] && echo "  $tool: $(echo $pt_line)"
  fi
  # Retransmissions are noted per case (TCG timing can make an ACK late).
  local deltas oos gaps
  deltas=$(counter_deltas "$c0" "$c1")
  # Out-of-sequence requests at rxe fail the suite unless rverbs' capture of the case
  # shows every request PSN sent in order: then a long stream into the emulated guest
  # lost packets on the way (rverbs went back and the case completed).
  oos=$(counter_of "$deltas" out_of_seq_request)
  if [ "${oos:-0}" != 0 ] && [ -n "${IOP_PCAP:-}" ] && [ -f "$IOP_PCAP/$case_name.pcap" ]; then
    gaps=$(sent_psn_gaps "$IOP_PCAP/$case_name.pcap")
    if [ "$gaps" = 0 ]; then
      lost_on_the_way=$((lost_on_the_way + oos))
      echo "  NOTE rxe: $oos out-of-sequence request(s): packets lost on the way (rverbs' capture has every PSN in order)"
    else
      echo "  rverbs' capture has $gaps request PSN(s) that skipped ahead"
    fi
  fi
  noted=$(echo "$deltas" | awk '($1 == "completer_retry_err" || $1 == "duplicate_request" || $1 == "rcvd_seq_err") && $2 != 0 { printf "%s=%d ", $1, $2 }')
  [ -n "$noted" ] && echo "  NOTE rxe: $noted; rverbs: $(grep -o 'retransmitted_packets=[0-9]*\|rx_duplicate_requests=[0-9]*\|tx_nak_seq=[0-9]*' "$rv_log" | tr '\n' ' ')"
  add_rv_counters "$rv_log"
  rm -f "$rv_log"
  [[ $case_name == sweeps/* ]] && rm -f "$IOP_PCAP/$case_name.pcap"
}

before=$(counters)
last_counters=$before
lost_on_the_way=0
rc_again=0
for role in rv-client rv-server; do
  # The bandwidth tools at perftest's default size (65536; -n small: TCG is slow).
  for tool in write_bw send_bw read_bw atomic_bw; do
    run_case "$tool" "$role" "" 200
  done
  # The latency tools with perftest's defaults (2 bytes, 1000 iterations).
  for tool in write_lat send_lat read_lat atomic_lat; do
    run_case "$tool" "$role" "" ""
  done
done
# Sizes below and above the path MTU, multi-packet latency messages.
run_case write_bw rv-client 100 200
run_case write_bw rv-client 4096 200
run_case send_bw rv-server 3000 200
run_case read_bw rv-server 5000 100
run_case write_lat rv-server 4000 100
run_case send_lat rv-client 1500 100
# Post lists (-l: chains of requests per ibv_post_send, on whichever side sends) and
# durations (-D: the client sends for that long; the passive server waits for it).
run_case write_bw rv-client 4096 200 "-l 4"
run_case send_bw rv-server 3000 200 "-l 4"
run_case write_bw rv-client 1024 "" "-D 2 -l 2 -t 32"
run_case read_bw rv-server 4096 "" "-D 2"
# Bidirectional (-b, perftest's duplex): both sides send, each prints the sum.
run_case write_bw rv-client 4096 200 "-b"
run_case write_bw rv-server 4096 200 "-b"
run_case read_bw rv-server 4096 100 "-b"
run_case atomic_bw rv-client "" 200 "-b"
run_case send_bw rv-client 3000 200 "-b"
run_case send_bw rv-server 3000 200 "-b"
# ... and per size in a sweep (2 B .. 8 MiB, with the extra handshakes).
run_case send_bw rv-client "" 5 "-b -a"
run_case write_bw rv-server "" 5 "-b -a"
# Several QPs (-q): every bandwidth tool in both roles with 4 QPs (each its own keys and
# area of the region; the per-QP handshakes in each tool's order), and with a post list.
for role in rv-client rv-server; do
  for tool in write_bw send_bw read_bw; do
    run_case "$tool" "$role" 3000 100 "-q 4"
  done
  run_case atomic_bw "$role" "" 100 "-q 4"   # (perftest's atomics take no -s)
done
run_case write_bw rv-client 4096 200 "-q 3 -l 4"
# ... and both ways (-b: `run_iter_bi` over every QP, receives counted per QP).
run_case write_bw rv-client 3000 100 "-q 2 -b"
run_case read_bw rv-server 3000 100 "-q 2 -b"
run_case atomic_bw rv-client "" 100 "-q 2 -b"
run_case send_bw rv-client 3000 100 "-q 2 -b"
run_case send_bw rv-server 3000 100 "-q 2 -b"
run_case read_bw rv-server 4096 "" "-q 2 -D 2"
run_case send_bw rv-server "" 5 "-q 2 -a"
# UC (-c UC): the SEND and WRITE tools in both roles (no ACKs; an ib_send_bw receiver
# posts a receive per message, up to 16000, as perftest does over UC). UC does not
# recover a lost packet, and the emulated guest drops some of a long burst (in one CI
# run 2 of 200 4-packet SENDs from rverbs, which ib_send_bw then waited for): rverbs'
# SEND stream into the guest is 100 one-packet messages; the guest's into rverbs is
# longer.
run_case send_bw rv-client 1024 100 "-c UC"
run_case send_bw rv-server 4096 200 "-c UC"
for role in rv-client rv-server; do
  run_case write_bw "$role" "" 200 "-c UC"
  run_case send_lat "$role" "" "" "-c UC"
  run_case write_lat "$role" 100 200 "-c UC"
done
# UD (-c UD): ib_send_bw and ib_send_lat in both roles (messages of one MTU at most,
# the 40-byte GRH area in front of each received one), a sweep (2 B .. the MTU) and
# several QPs (an address handle each).
run_case send_bw rv-client 1024 100 "-c UD"   # (the guest may drop UD as UC, above)
run_case send_bw rv-server 1024 200 "-c UD"
for role in rv-client rv-server; do
  run_case send_lat "$role" "" "" "-c UD"
done
run_case send_bw rv-server "" 5 "-c UD -a"
run_case send_bw rv-client 512 100 "-c UD -q 3"
# Compare-and-swap (-A CMP_AND_SWAP; perftest's client swaps 0 for 0) in both roles.
run_case atomic_bw rv-client "" 200 "-A CMP_AND_SWAP"
run_case atomic_bw rv-server "" 200 "-A CMP_AND_SWAP"
run_case atomic_lat rv-client "" "" "-A CMP_AND_SWAP"
run_case atomic_lat rv-server "" "" "-A CMP_AND_SWAP"
# rverbs' loopback packetization of WRITEs (one WRITE ONLY per packet, each with its
# own RETH; `Config::write_pieces`) into rxe's responder: a stream of 64 KiB WRITEs, and
# ib_write_lat, whose server sees each 4000-byte WRITE by polling its last byte (the
# data itself is checked by ops.sh's pieces case).
WRITE_PIECES=1 run_case write_bw rv-client "" 200
WRITE_PIECES=1 run_case write_lat rv-client 4000 100
# RoCE v2 over IPv6 GIDs.
GIDX=2 run_case send_bw rv-server 3000 100
GIDX=2 run_case write_lat rv-client 100 100
# A sweep (2 B .. 8 MiB): per-size handshakes of ib_send_bw, and ib_write_lat's markers
# moving with the size.
run_case send_bw rv-server "" 5 -a
run_case write_lat rv-client "" 5 -a
# A newer perftest (>= 6.28 negotiates parameters only with a peer announcing >= 6.28;
# we announce 6.06): every tool in both roles at its defaults.
if [ -n "${PERFTEST_SRC:-}" ]; then
  if stage_perftest "$PERFTEST_SRC"; then
    for role in rv-client rv-server; do
      for tool in write_bw send_bw read_bw atomic_bw; do run_case "$tool" "$role" "" 200; done
      for tool in write_lat send_lat read_lat atomic_lat; do run_case "$tool" "$role" "" ""; done
    done
  else
    record "perftest from $PERFTEST_SRC" 0 "could not stage its tools"
  fi
fi
# As the other suites: errors and exhausted retries fail; retransmissions (a late ACK
# under TCG) are reported.
check_counters "$before" "send_err retry_exceeded_err retry_rnr_exceeded_err" \
  "completer_retry_err duplicate_request rcvd_seq_err rcvd_rnr_err send_rnr_err"
# Every out-of-sequence request must be a loss that a case's capture explained.
oos_total=$(counter_of "$(counter_deltas "$before" "$(counters)")" out_of_seq_request)
if [ "$((${oos_total:-0} - lost_on_the_way))" -gt 0 ]; then
  echo "FAIL rxe counted $oos_total out-of-sequence request(s), $lost_on_the_way of them packets lost on the way"
  fail=$((fail + 1))
elif [ "${oos_total:-0}" != 0 ]; then
  echo "NOTE rxe counted $oos_total out-of-sequence request(s), each a packet lost on the way (the captures show every PSN sent in order)"
fi
[ "$rc_again" = 0 ] || echo "NOTE $rc_again RC case(s) ran a second time after RETRY_EXC_ERR (the guest stopped answering)"
print_rv_totals
finish
