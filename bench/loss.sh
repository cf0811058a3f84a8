#!/usr/bin/env bash
# bench/loss.sh: RC goodput under loss, in one run, as a ratio to the clean run:
# `RVERBS_FAULTS` loss 0.1 / 1 / 5 / 10 % and corrupt 1 % on the client process, for
# 64 KiB WRITE bandwidth (`rverbs perf write bw -s 65536`) and the 100 KB RC pingpong
# (`rverbs pingpong rc -c -s 100000`, time per iteration), over the UDP path
# (RVERBS_SAME_HOST=0) and over the same-host carrier. The issue's goals: at 1 % loss
# the pingpong within 1.5x the clean time per iteration and WRITE bandwidth at least
# 0.7x clean; at 10 % within 5x and at least 0.2x. A failed run prints "-".
#
# The faults are the client's only: a process's `RVERBS_FAULTS` act on what it sends
# and on what it receives, so every datagram, either way, passes exactly one fault
# injector and "1 %" is 1 % of the datagrams (with the faults on both processes each
# datagram would pass two: 1.99 %, and "10 %" would be 19 %; FAULTS_ON=both measures
# that way, as this script did before).
#
#   cargo build --release -p rverbs-cli && bench/loss.sh
#
# Environment: RVERBS (binary), DUR (seconds per bandwidth run, default 2), ITERS
# (pingpong iterations, default 300), PORT (default 18700), FAULTS_ON (client, the
# default, or both). Both processes inherit the
# rest: RVERBS_SELECTIVE_REPEAT=1 measures selective repeat between the two (the
# header line says which).
set -euo pipefail
BIN=${RVERBS:-target/release/rverbs}
DUR=${DUR:-2}
ITERS=${ITERS:-300}
PORT=${PORT:-18700}
FAULTS_ON=${FAULTS_ON:-client}
[[ $FAULTS_ON == client || $FAULTS_ON == both ]] || { echo "loss.sh: FAULTS_ON is client or both" >&2; exit 2; }
[[ -x $BIN ]] || { echo "loss.sh: $BIN not found (cargo build --release -p rverbs-cli)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# pair SAME_HOST FAULTS PORT CMD ARGS...: one server and one client process, the
# client with the faults (FAULTS_ON=both: the server too); prints the client's stdout.
pair() {
    local sh=$1 faults=$2 port=$3; shift 3
    local sfaults=""
    [[ $FAULTS_ON == both ]] && sfaults=$faults
    RVERBS_SAME_HOST=$sh RVERBS_FAULTS=$sfaults "$BIN" "$@" -p "$port" >"$TMP/s.out" 2>"$TMP/s.err" &
    local spid=$!
    sleep 0.3
    if ! RVERBS_SAME_HOST=$sh RVERBS_FAULTS=$faults "$BIN" "$@" -p "$port" localhost >"$TMP/c.out" 2>"$TMP/c.err"; then
        echo "loss.sh: client of '$*' (faults '$faults') failed:" >&2; cat "$TMP/c.err" >&2
        kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
        echo FAILED; return
    fi
    wait "$spid" || true
    cat "$TMP/c.out"
}
wbw() { pair "$1" "$2" "$3" perf write bw -s 65536 -D "$DUR" --json | sed -n 's/.*"gbps":\([-0-9.e+]*\).*/\1/p' | tail -n 1; }
ppt() { pair "$1" "$2" "$3" pingpong rc -c -s 100000 -n "$ITERS" | sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' | tail -n 1; }

echo "# RC goodput under loss (RVERBS_FAULTS on the $([[ $FAULTS_ON == both ]] && echo "client and the server: twice" || echo "client: once") per datagram), $(nproc) CPUs, -D $DUR, $ITERS pingpong iterations, selective repeat ${RVERBS_SELECTIVE_REPEAT:-0}, $(date -u +%FT%TZ)"
printf "%-10s %-14s %12s %8s %14s %8s\n" carrier faults "write Gb/s" ratio "pingpong us/it" ratio
port=$PORT
for sh in 0 1; do
    carrier=$([[ $sh == 1 ]] && echo same-host || echo udp)
    base_w="" base_p=""
    for faults in "" loss=0.001 loss=0.01 loss=0.05 loss=0.1 corrupt=0.01; do
        w=$(wbw $sh "$faults" $port); port=$((port + 1))
        p=$(ppt $sh "$faults" $port); port=$((port + 1))
        [[ -z $faults ]] && { base_w=$w; base_p=$p; }
        rw=$(awk -v a="$w" -v b="$base_w" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2f", a / b; else print "-" }')
        rp=$(awk -v a="$p" -v b="$base_p" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2f", a / b; else print "-" }')
        printf "%-10s %-14s %12s %8s %14s %8s\n" "$carrier" "${faults:-none}" "${w:--}" "$rw" "${p:--}" "$rp"
    done
done
