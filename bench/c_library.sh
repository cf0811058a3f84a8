#!/usr/bin/env bash
# bench/c_library.sh: what the C path costs. Debian's unmodified perftest on rverbs'
# libibverbs.so.1 against `rverbs perf` (the Rust API) on the same soft device, the two
# alternating in one run (C, Rust, C, Rust, ...), both sides of each pair on this host:
#   64 KiB RC WRITE and SEND bandwidth (ib_write_bw / ib_send_bw -D DUR vs perf write|send bw)
#   8-byte RC SEND half round trip, busy polling (ib_send_lat vs perf send lat --spin-us)
# A row gives the medians, the median of the per-pair ratios C / Rust and their range.
#
#   cargo build --release -p rverbs-cli -p rverbs-libibverbs && bench/c_library.sh
#
# Environment: RVERBS (binary, default target/release/rverbs), LIBDIR (where
# libibverbs.so.1 is, default the binary's folder), DUR (seconds per bandwidth run,
# default 2), ITERS (latency iterations, default 20000), REPS (pairs, default 3), PORT
# (first port, default 18900). Needs perftest (apt-get install perftest).
set -euo pipefail
BIN=${RVERBS:-target/release/rverbs}
LIBDIR=${LIBDIR:-$(dirname "$BIN")}
DUR=${DUR:-2}
ITERS=${ITERS:-20000}
REPS=${REPS:-3}
PORT=${PORT:-18900}
[[ -x $BIN ]] || { echo "c_library.sh: $BIN not found (cargo build --release -p rverbs-cli)" >&2; exit 2; }
[[ -e $LIBDIR/libibverbs.so.1 ]] || { echo "c_library.sh: no $LIBDIR/libibverbs.so.1 (cargo build --release -p rverbs-libibverbs)" >&2; exit 2; }
command -v ib_write_bw >/dev/null || { echo "c_library.sh: perftest is needed (apt-get install perftest)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
port=$PORT

# listening PORT: true once a TCP socket listens on PORT (from /proc: a probe
# connection would be taken by the server for its peer).
listening() {
    local hex
    hex=$(printf ':%04X ' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v h="$hex" '$4 == "0A" && index($2 " ", h) { f = 1 } END { exit !f }'
}

# pair PORT SERVER_CMD... -- CLIENT_CMD...: runs both, prints the client's stdout.
pair() {
    local port=$1 srv=() cli=()
    shift
    while [[ $1 != -- ]]; do srv+=("$1"); shift; done
    shift
    cli=("$@")
    "${srv[@]}" >"$TMP/s.out" 2>&1 &
    local spid=$!
    for _ in $(seq 1 200); do listening "$port" && break; sleep 0.05; done
    if ! "${cli[@]}" >"$TMP/c.out" 2>&1; then
        echo "c_library.sh: client '${cli[*]}' failed:" >&2; tail -5 "$TMP/c.out" >&2
        kill "$spid" 2>/dev/null || true
    fi
    wait "$spid" 2>/dev/null || true
    cat "$TMP/c.out"
}
c() { env LD_LIBRARY_PATH="$LIBDIR" "$@"; }

# perftest's result row: the line that starts with the size; MB/s average (column 4)
# to Gb/s, or t_typical (column 5) in microseconds.
c_bw() {
    port=$((port + 1))
    pair $port c "ib_$1_bw" -d rv_lo -x 1 -s 65536 -D "$DUR" -p $port -- \
        c "ib_$1_bw" -d rv_lo -x 1 -s 65536 -D "$DUR" -p $port 127.0.0.1 |
        awk '$1 == 65536 { printf "%.3f\n", $4 * 8 / 1000 }' | tail -n 1
}
c_lat() {
    port=$((port + 1))
    pair $port c ib_send_lat -d rv_lo -x 1 -s 8 -n "$ITERS" -p $port -- \
        c ib_send_lat -d rv_lo -x 1 -s 8 -n "$ITERS" -p $port 127.0.0.1 |
        awk '$1 == 8 { print $5 }' | tail -n 1
}
rust_bw() {
    port=$((port + 1))
    pair $port "$BIN" perf "$1" bw -s 65536 -D "$DUR" -p $port --json -- \
        "$BIN" perf "$1" bw -s 65536 -D "$DUR" -p $port --json localhost |
        sed -n 's/.*"gbps":\([-0-9.e+]*\).*/\1/p' | tail -n 1
}
rust_lat() {
    port=$((port + 1))
    pair $port "$BIN" perf send lat -s 8 -n "$ITERS" --spin-us 1000000 -p $port --json -- \
        "$BIN" perf send lat -s 8 -n "$ITERS" --spin-us 1000000 -p $port --json localhost |
        sed -n 's/.*"p50":\([-0-9.e+]*\).*/\1/p' | tail -n 1
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf "# C (perftest on libibverbs.so.1) vs Rust (rverbs perf), %s, DUR=%s ITERS=%s REPS=%s, %s\n" \
    "$(nproc) CPUs" "$DUR" "$ITERS" "$REPS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf "%-34s %10s %10s %8s %14s\n" figure C Rust "C/Rust" "ratio range"
for fig in write send lat; do
    : >"$TMP/c" ; : >"$TMP/r" ; : >"$TMP/q"
    for _ in $(seq 1 "$REPS"); do
        if [[ $fig == lat ]]; then a=$(c_lat); b=$(rust_lat); else a=$(c_bw "$fig"); b=$(rust_bw "$fig"); fi
        [[ -n $a ]] && echo "$a" >>"$TMP/c"
        [[ -n $b ]] && echo "$b" >>"$TMP/r"
        [[ -n $a && -n $b ]] && awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }' >>"$TMP/q"
    done
    case $fig in
        write) name="RC WRITE bw 64 KiB [Gb/s]" ;;
        send) name="RC SEND bw 64 KiB [Gb/s]" ;;
        lat) name="RC SEND 8 B half RTT p50 [us]" ;;
    esac
    range=$(sort -g "$TMP/q" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%s-%s", lo, hi; else print "-" }')
    printf "%-34s %10s %10s %8s %14s\n" "$name" "$(median <"$TMP/c")" "$(median <"$TMP/r")" "$(median <"$TMP/q")" "$range"
done
echo "(bandwidth: higher is better, so C/Rust below 1 is the C path's cost; latency: lower is better."
echo " perftest's t_typical is its median half round trip; both sides busy-poll.)"
