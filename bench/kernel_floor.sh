#!/usr/bin/env bash
# bench/kernel_floor.sh: how much of an 8-byte RC SEND ping-pong's latency is the
# kernel's, in one run on this machine: the TCP baseline of bench/compare.sh, plain
# connected UDP, the soft device's own socket calls without and with the ACK riding
# behind each message (bench/kernel_floor.c, no RDMA software), and rverbs itself in
# the spin policy. The gap between rverbs and `conn-ack` is what rverbs' code adds to
# a hop (every SEND signaled); between rverbs -Q 100 and `conn`, with the ACKs
# coalesced away. `roce` and `roce-ack` are the same with unconnected `sendto`, as the
# device sent until it kept a connected socket per peer. A second table does the same
# for the sleep policy (each side blocks in its receive call; rverbs with
# --spin-us 0, the default of `rverbs perf`): TCP, the device's calls and rverbs.
# `shm` is the floor of a same-host transport through shared memory, which does not
# pay for the kernel's UDP path at all; rverbs' own same-host carrier
# (crates/rverbs/src/same_host.rs) is such a transport, so the rverbs rows here run
# with it off (RVERBS_SAME_HOST=0): they measure rverbs over UDP against the UDP
# floors. bench/compare.sh measures what users get (the carrier on).
#
#   cargo build --profile bench-release -p rverbs-cli && bench/kernel_floor.sh
#
# Environment: RVERBS (binary, default target/bench-release/rverbs; skipped if absent),
# REPS (alternating rounds, default 5), ITERS (round trips per C measurement, default
# 200000), DUR (seconds per rverbs measurement, default 2), PORT (first port, default
# 18960), CC (default gcc).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${RVERBS:-target/bench-release/rverbs}
REPS=${REPS:-5}
ITERS=${ITERS:-200000}
DUR=${DUR:-2}
PORT=${PORT:-18960}
export RVERBS_SAME_HOST=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"${CC:-gcc}" -O2 -Wall -Wextra -pthread -o "$TMP/kernel_floor" bench/kernel_floor.c

# rverbs_lat PORT ARGS...: p50 (us, half RTT) of `rverbs perf send lat -s 8`, spin policy
# (SPIN=0: the sleep policy).
# It runs in a command substitution (no errexit, no EXIT trap there), so it checks each
# step itself and stops its own server when the client fails: a server whose client
# never came would wait for it forever, and this script with it.
rverbs_lat() {
    local port=$1; shift
    local args=(perf send lat -s 8 -D "$DUR" --spin-us "${SPIN:-1000000}" -p "$port" "$@" --json)
    "$BIN" "${args[@]}" >/dev/null 2>"$TMP/s.err" &
    local spid=$! out p50
    if ! out=$("$BIN" "${args[@]}" localhost 2>"$TMP/c.err" | tail -n 1); then
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        cat "$TMP/c.err" >&2
        exit 1
    fi
    wait "$spid" || { cat "$TMP/s.err" >&2; exit 1; }
    p50=$(sed -n 's/.*"p50":\([0-9.]*\).*/\1/p' <<<"$out")
    [[ -n $p50 ]] || { echo "no p50 in the rverbs client's output: $out" >&2; exit 1; }
    echo "$p50"
}

modes=(tcp udp conn conn-ack conn-ack-mt roce roce-ack shm)
declare -A V
have_rverbs=0
[[ -x $BIN ]] && have_rverbs=1
echo "# kernel floor of an 8-byte ping-pong, $(nproc) CPUs, $(uname -r), $REPS alternating round(s), $(date -u +%FT%TZ)"
for ((i = 0; i < REPS; i++)); do
    line="#  round $((i + 1))/$REPS:"
    for k in "${!modes[@]}"; do
        m=${modes[$k]}
        v=$("$TMP/kernel_floor" "$m" $((PORT + k)) "$ITERS" | awk '{print $2}')
        V[$m]="${V[$m]:-} $v"; line+=" $m $v"
    done
    if ((have_rverbs)); then
        v=$(rverbs_lat $((PORT + 8))); V[rverbs]="${V[rverbs]:-} $v"; line+=" rverbs $v"
        v=$(rverbs_lat $((PORT + 9)) -Q 100); V[rverbs_q]="${V[rverbs_q]:-} $v"; line+=" rverbs-Q100 $v"
    fi
    # The sleep policy: the same ports again (each measurement has ended).
    for k in tcp conn-ack-mt shm; do
        v=$("$TMP/kernel_floor" "$k" $((PORT + 10)) "$ITERS" sleep | awk '{print $2}')
        V[sleep_$k]="${V[sleep_$k]:-} $v"; line+=" sleep:$k $v"
    done
    if ((have_rverbs)); then
        v=$(SPIN=0 rverbs_lat $((PORT + 11))); V[sleep_rverbs]="${V[sleep_rverbs]:-} $v"
        line+=" sleep:rverbs $v"
    fi
    echo "$line" >&2
done

# Medians, and the median of the per-round ratios to TCP (BASE, default tcp).
report() {
    awk -v n="$1" -v a="${V[$2]}" -v b="${V[${BASE:-tcp}]}" '
    function med(x, k,   i, j, t) {
        for (i = 2; i <= k; i++) for (j = i; j > 1 && x[j - 1] > x[j]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
        return (k % 2) ? x[(k + 1) / 2] : (x[k / 2] + x[k / 2 + 1]) / 2
    }
    BEGIN {
        k = split(a, A, " "); split(b, B, " ");
        for (i = 1; i <= k; i++) R[i] = A[i] / B[i];
        printf "%-58s %8.3f %7.3f\n", n, med(A, k), med(R, k)
    }'
}
printf "%-58s %8s %7s\n" "ping-pong, 8 B message, spin (medians)" "p50 us" "/ TCP"
report "TCP, TCP_NODELAY (the baseline of compare.sh)" tcp
report "UDP, connected send/recv of 24 bytes" udp
report "UDP, the device's calls (connected send, recvmsg + address)" conn
report "  the same, the ACK riding as a UDP_SEGMENT segment" conn-ack
report "    the same, from processes with two threads (as rverbs)" conn-ack-mt
report "UDP, unconnected sendto instead (the device until 2026-11)" roce
report "  the same, with the ACK segment" roce-ack
report "shared memory, no network stack (not the device, see .c)" shm
if ((have_rverbs)); then
    report "rverbs RC SEND, every SEND signaled" rverbs
    report "rverbs RC SEND, -Q 100" rverbs_q
fi
printf "%-58s %8s %7s\n" "the same, sleep policy (medians)" "p50 us" "/ TCP"
BASE=sleep_tcp report "TCP, TCP_NODELAY, blocking recv" sleep_tcp
BASE=sleep_tcp report "UDP, the device's calls, ACK segment, two threads" sleep_conn-ack-mt
BASE=sleep_tcp report "shared memory, futex wake-up (not the device)" sleep_shm
if ((have_rverbs)); then
    BASE=sleep_tcp report "rverbs RC SEND, every SEND signaled, --spin-us 0" sleep_rverbs
fi
