# Shared pieces of the interop suites (sourced by pingpong.sh, recovery.sh, ops.sh).
# Needs: the rxe-peer guests running (rxe-peer/start.sh) and an rverbs binary.
#   RXE_PEER   the rxe-peer harness (default: ../shared/rxe-peer beside the repository)
#   IOP_PCAP   a directory: rverbs captures every case there (RVERBS_PCAP), and
#              check_pcaps() decodes them with tshark and `rverbs pcap decode`
#   RAW_IF     rverbs in raw mode on this interface (RVERBS_RAW_IF=rxebr0): its RoCE v2
#              goes through the raw device with its own headers and ARP / ND
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peer=${RXE_PEER:-$here/../../shared/rxe-peer}
[ -d "$peer" ] || peer=$here/../shared/rxe-peer
bin=${1:-$here/../target/release/rverbs}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
filter=${2:-}
host4=10.77.0.1 host6=fd00:77::1 vm4=10.77.0.2 vm6=fd00:77::2
pass=0 fail=0 failed=() open=0 opened=()
# Cases a suite runs but whose failure is a known open problem (an issue names it):
# `known_open[NAME]=why`. A failure prints OPEN with the reason and the details, is
# counted apart, and does not fail the suite; a pass is a pass.
declare -A known_open=()
suite_start=$(date +%s)

guest() { "$peer/run.sh" -v 1 "$@"; }

# rverbs in the netns, with the case's extra environment (RVERBS_FAULTS, RVERBS_PCAP).
# Usage: rv_cmd LOG TIMEOUT ARGS...  (appends "exit=N" to LOG)
rv_cmd() {
  local log=$1 t=$2; shift 2
  local envs=()
  [ -n "${FAULTS:-}" ] && envs+=("RVERBS_FAULTS=$FAULTS")
  # RAW_IF: run rverbs in raw mode on that interface (rxebr0): RoCE v2 as Ethernet frames.
  [ -n "${RAW_IF:-}" ] && envs+=("RVERBS_RAW_IF=$RAW_IF")
  # WRITE_PIECES=1: multi-packet RC WRITEs as WRITE ONLY pieces, as over loopback.
  [ -n "${WRITE_PIECES:-}" ] && envs+=("RVERBS_WRITE_PIECES=$WRITE_PIECES")
  # SELECTIVE=1: rverbs offers selective repeat (its requests carry the marker, which
  # rxe must ignore; rxe never reports, so recovery stays go-back-N).
  [ -n "${SELECTIVE:-}" ] && envs+=("RVERBS_SELECTIVE_REPEAT=$SELECTIVE")
  [ -n "${IOP_PCAP:-}" ] && [ -n "${case_name:-}" ] && envs+=("RVERBS_PCAP=$IOP_PCAP/$case_name.pcap")
  # RV_ARGS: extra rverbs options of a suite (e.g. --ack-timeout).
  timeout "$t" "$peer/hostns.sh" env "${envs[@]}" "$bin" "$@" ${RV_ARGS:-} >"$log" 2>&1
  echo "exit=$?" >>"$log"
}

# Waits until the guest listens on TCP port $1 (slow under TCG emulation): one call
# into the guest that looks every 0.1 s for up to 30 s (each call costs ~0.4 s).
wait_listen() {
  local hex
  hex=$(printf '%04X' "$1")
  guest "for i in \$(seq 1 300); do grep -q ':$hex 00000000:0000 0A\|:$hex 00000000000000000000000000000000:0000 0A' /proc/net/tcp /proc/net/tcp6 && exit 0; sleep 0.1; done; exit 1" >/dev/null 2>&1
}

# Waits until rverbs listens on TCP port $1 in the host's netns (a server started with
# rv_cmd in the background), for up to 5 s, before the guest's client is started.
host_listen() {
  local hex i
  hex=$(printf '%04X' "$1")
  for i in $(seq 1 100); do
    "$peer/hostns.sh" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
      grep -q ":$hex 00000000:0000 0A\|:$hex 00000000000000000000000000000000:0000 0A" && return 0
    sleep 0.05
  done
  return 1
}

# Kills what a case may leave running in the guest (a killed case can leave a tool whose
# QP keeps retransmitting into the next case): a guest command, to be appended to the
# case's last call into the guest (each call costs ~0.4 s under TCG).
kill_leftovers='for p in $(ps | grep -E "_pingpong|rdma_ops|ib_[a-z]+_(bw|lat)" | grep -v grep | awk "{print \$1}"); do kill -9 $p; done; true'
guest_cleanup() { guest "$kill_leftovers" >/dev/null 2>&1; }

# rverbs' drop counters that must stay 0 whatever the faults: every packet rxe sent
# passed the ICRC and the transport checks.
rv_clean() {
  local c
  for c in rx_icrc_errors rx_malformed rx_bad_pkey rx_bad_qkey rx_wrong_source rx_wrong_transport; do
    grep -q " $c=0" "$1" || return 1
  done
}

case_t0=$(date +%s.%N)
record() { # name ok(0|1) [details...]
  local name=$1 ok=$2 dt; shift 2
  dt=$(echo "$(date +%s.%N) $case_t0" | awk '{ printf "%.1f s", $1 - $2 }')
  case_t0=$(date +%s.%N)
  if [ "$ok" = 1 ]; then
    pass=$((pass + 1)); echo "PASS $name ($dt)"
  elif [ -n "${known_open[$name]:-}" ]; then
    open=$((open + 1)); opened+=("$name")
    echo "OPEN $name ($dt): failed, a known open problem: ${known_open[$name]}"; printf '%s\n' "$@"
  else
    fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name ($dt)"; printf '%s\n' "$@"
  fi
}

# rxe's port counters, one "name value" per line: a guest command (appended to a case's
# last call into the guest, after the marker line), and the call on its own.
counters_cmd='echo @@counters@@; cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep -H . * | sed "s/:/ /"'
counters() { guest "$counters_cmd" 2>/dev/null | awk 'f && /^[a-z0-9_]+ [0-9]+$/; /^@@counters@@$/ { f = 1 }'; }
# The same after killing what a case left running.
cleanup_counters() { guest "$kill_leftovers; $counters_cmd" 2>/dev/null | awk 'f && /^[a-z0-9_]+ [0-9]+$/; /^@@counters@@$/ { f = 1 }'; }
# Splits a guest call's output that ended with $counters_cmd: the text before the marker,
# and any line after it that is not a counter, into the variable named $2; the counters
# into the one named $3.
split_counters() { # OUTPUT OUTVAR COUNTERSVAR
  printf -v "$2" '%s' "$(awk '/^@@counters@@$/ { f = 1; next } !f || !/^[a-z0-9_]+ [0-9]+$/' <<<"$1")"
  printf -v "$3" '%s' "$(awk 'f && /^[a-z0-9_]+ [0-9]+$/; /^@@counters@@$/ { f = 1 }' <<<"$1")"
}
counter_deltas() { join <(echo "$1" | sort) <(echo "$2" | sort) | awk '{ printf "%s %d\n", $1, $3 - $2 }'; }
counter_of() { echo "$1" | awk -v c="$2" '$1 == c { print $2 }'; }

# Prints the guest's rxe counter deltas; fails the suite on any counter in $2 (space
# separated) that grew. Usage: check_counters BEFORE "strict counters" "noted counters"
check_counters() {
  local after deltas c v
  after=$(counters)
  deltas=$(counter_deltas "$1" "$after")
  echo "rxe0 hw_counters during the suite (guest VM1):"
  echo "$deltas" | awk '$2 != 0 { printf "  %-24s %d\n", $1, $2 }'
  for c in $2; do
    v=$(counter_of "$deltas" "$c")
    if [ -n "$v" ] && [ "$v" != 0 ]; then
      echo "FAIL rxe counter $c grew by $v during the suite"; fail=$((fail + 1))
    fi
  done
  for c in $3; do
    v=$(counter_of "$deltas" "$c")
    if [ -n "$v" ] && [ "$v" != 0 ]; then
      echo "NOTE rxe counter $c grew by $v (retransmissions; injected faults or emulation timing)"
    fi
  done
}

# How many of the requests rverbs sent in capture $1 skipped ahead of their QP's next
# PSN when they first appeared (a retransmission repeats an older PSN, which is fine).
# 0 proves that an out-of-sequence request rxe counted meanwhile was a packet lost on
# the way, not a PSN rverbs skipped. A READ request takes as many PSNs as its
# responses: its length over the path MTU, which is the largest payload in the
# capture (1024 when no packet is that long; a READ that fits any MTU takes one).
sent_psn_gaps() { # PCAP
  "$bin" pcap decode "$1" 2>/dev/null | awk -v h4="$host4:" -v h6="[$host6]:" '
    function field(name,   i) {
      for (i = 6; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2) + 0
      return -1
    }
    { pl = field("payload"); if (pl > mtu) mtu = pl }
    $3 == ">" && (index($2, h4) == 1 || index($2, h6) == 1) && $5 ~ /^(RC|UC)_(SEND|RDMA_WRITE|RDMA_READ_REQUEST|COMPARE_SWAP|FETCH_ADD)/ {
      n++; key[n] = $4 " " $6; psn[n] = field("psn")
      len[n] = ($5 ~ /READ_REQUEST/) ? field("len") : -1
    }
    END {
      if (mtu < 256) mtu = 1024
      for (i = 1; i <= n; i++) {
        k = key[i]; p = psn[i]
        if (p < 0) continue
        if (k in next_psn) {
          d = (p - next_psn[k] + 16777216) % 16777216
          # Behind the next PSN: a retransmission (its span is already counted).
          if (d >= 8388608) continue
          if (d > 0) gaps++
        }
        span = (len[i] > mtu) ? int((len[i] + mtu - 1) / mtu) : 1
        next_psn[k] = (p + span) % 16777216
      }
      print gaps + 0
    }'
}

# Sum of rverbs' counters over the suite's logs (kept in $rv_totals).
rv_totals=""
add_rv_counters() {
  local line
  line=$(grep -o 'rverbs counters: .*' "$1" | head -1 | sed 's/rverbs counters: //')
  [ -z "$line" ] && return
  rv_totals=$(printf '%s\n%s\n' "$rv_totals" "$(echo "$line" | tr ' ' '\n')" | awk -F= 'NF == 2 { s[$1] += $2 } END { for (k in s) print k "=" s[k] }' | sort)
}
print_rv_totals() {
  echo "rverbs counters summed over the suite (nonzero):"
  echo "$rv_totals" | awk -F= 'NF == 2 && $2 != 0 { printf "  %-24s %d\n", $1, $2 }'
}

# tshark must decode every captured packet as InfiniBand with no malformed or
# warning-level expert entries, and rverbs' own decoder must find every ICRC good.
# One tshark pass per file: protocols, malformed flag and the highest expert severity
# (Wireshark: PI_WARN = 0x00600000, PI_ERROR = 0x00800000).
# Two of Wireshark's InfiniBand payload heuristics (RPC-over-RDMA, and Ethernet over IB)
# claim short RC payloads and report them as malformed (perftest's 2-byte SENDs and
# WRITEs, from rxe as from rverbs): they are turned off, under the names this tshark
# knows (they differ between versions; a name it does not know would fail every read).
ts_opts=""
ts_heuristics_off() {
  local n
  for n in rpcrdma_infiniband rpcordma_infiniband eth_over_ib; do
    tshark --disable-heuristic "$n" -r "$1" -c 1 >/dev/null 2>&1 && ts_opts="$ts_opts --disable-heuristic $n"
  done
}
check_pcaps() {
  [ -n "${IOP_PCAP:-}" ] || return 0
  local f n ib nd bad icrc total=0 files=0 rows first
  first=$(ls "$IOP_PCAP"/*.pcap 2>/dev/null | head -1)
  [ -n "$first" ] && ts_heuristics_off "$first"
  for f in "$IOP_PCAP"/*.pcap; do
    [ -f "$f" ] || continue
    # (Raw mode records rxe's IPv6 frames as received, with the UDP checksum 0 rxe sends,
    # which tshark flags as a warning; socket-mode captures rebuild the UDP header. Those
    # frames are not counted as warnings: column 4 is the IPv6 source, 5 the UDP checksum.)
    if ! rows=$(tshark $ts_opts -r "$f" -T fields -E separator=/t -e frame.protocols -e _ws.malformed -e _ws.expert.severity -e ipv6.src -e udp.checksum 2>/dev/null); then
      record "tshark $(basename "$f")" 0 "tshark could not read it"; continue
    fi
    n=$(grep -c . <<<"$rows")
    [ "$n" = 0 ] && { echo "NOTE $(basename "$f"): empty (its case failed before any traffic)"; continue; }
    files=$((files + 1))
    ib=$(awk -F'\t' '$1 ~ /:infiniband/' <<<"$rows" | wc -l)
    # Raw mode (RAW_IF) captures its own ARP / Neighbor Discovery too.
    nd=$(awk -F'\t' '$1 ~ /:arp$|:icmpv6$/' <<<"$rows" | wc -l)
    ib=$((ib + nd))
    bad=$(awk -F'\t' -v raw="${RAW_IF:-}" '{ split($3, s, ","); w = 0; for (i in s) if (s[i] + 0 >= 6291456) w = 1; if (raw != "" && $4 != "" && $5 == "0x0000") w = 0 } $2 != "" || w' <<<"$rows" | wc -l)
    icrc=$("$bin" pcap decode "$f" 2>&1 | grep -c 'icrc=bad\|malformed:')
    total=$((total + n))
    if [ "$ib" != "$n" ] || [ "$bad" != 0 ] || [ "$icrc" != 0 ]; then
      record "tshark $(basename "$f")" 0 "packets $n, decoded as InfiniBand $ib, malformed/warnings $bad, bad ICRC or undecodable $icrc" \
        "$(tshark $ts_opts -r "$f" -Y '_ws.malformed || _ws.expert.severity >= "warning"' -V 2>/dev/null | head -60)"
    fi
  done
  echo "tshark: $files captures, $total packets; every one decoded as InfiniBand, none malformed or with expert warnings; every ICRC good (rverbs pcap decode)"
}

# netem on the guest's link, both directions (the host kernel may lack sch_netem; the
# guest's Debian kernel has it as a module): egress on eth0 (guest -> rverbs) and, via
# ifb0, on eth0's ingress (rverbs -> guest). The guest's tc is busybox's (no netem), so
# the host's iproute2 tc runs from /mnt/host with the one library the guest lacks.
# Usage: guest_netem "loss 3%" | guest_netem off
gtc="LD_LIBRARY_PATH=/mnt/host/interop/lib /mnt/host/interop/bin/tc"
guest_netem() {
  if [ "$1" = off ]; then
    guest "$gtc qdisc del dev eth0 root 2>/dev/null; $gtc qdisc del dev ifb0 root 2>/dev/null; true" >/dev/null 2>&1
    return 0
  fi
  local kdir ko tc lib
  kdir=$(ls -d /var/tmp/rxe-peer/kernel/lib/modules/*/kernel 2>/dev/null | head -1)
  tc=$(command -v tc) || { echo "no iproute2 tc on the host"; return 1; }
  mkdir -p /var/tmp/rxe-peer/share/interop/ko /var/tmp/rxe-peer/share/interop/bin /var/tmp/rxe-peer/share/interop/lib
  cp -f "$tc" /var/tmp/rxe-peer/share/interop/bin/tc || return 1
  for lib in $(ldd "$tc" | awk '/=>/ { print $3 }'); do
    [ -e "/var/tmp/rxe-peer/rootfs/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ] || cp -fL "$lib" /var/tmp/rxe-peer/share/interop/lib/
  done
  for ko in net/sched/sch_netem net/sched/sch_ingress net/sched/cls_matchall net/sched/act_mirred drivers/net/ifb; do
    cp -f "$kdir/$ko.ko" /var/tmp/rxe-peer/share/interop/ko/ || return 1
  done
  guest "set -e
    for m in sch_netem sch_ingress cls_matchall act_mirred ifb; do
      grep -q \"^\$m \" /proc/modules || insmod /mnt/host/interop/ko/\$m.ko
    done
    [ -e /sys/class/net/ifb0 ] || /bin/ip link add ifb0 type ifb
    /bin/ip link set ifb0 up
    $gtc qdisc replace dev eth0 root netem $1
    $gtc qdisc replace dev ifb0 root netem $1
    if $gtc qdisc add dev eth0 handle ffff: ingress 2>/dev/null; then
      $gtc filter add dev eth0 parent ffff: prio 1 matchall action mirred egress redirect dev ifb0
    fi
    $gtc qdisc show dev eth0 | head -1"
}
guest_netem_stats() { guest "$gtc -s qdisc show dev eth0; $gtc -s qdisc show dev ifb0" 2>/dev/null | grep -E 'qdisc netem|Sent|dropped' | tr -s ' ' | paste -sd' '; }

finish() {
  check_pcaps
  echo "$pass passed, $fail failed, $open known open ($(($(date +%s) - suite_start)) s)"
  [ "$fail" = 0 ] || printf '  failed: %s\n' "${failed[@]}"
  [ "$open" = 0 ] || printf '  known open (failed): %s\n' "${opened[@]}"
  [ "$fail" = 0 ]
}
