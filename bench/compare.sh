#!/usr/bin/env bash
# bench/compare.sh: rverbs against a plain TCP socket, in one run, on this machine:
# two processes over loopback, identical sizes, depth and duration. Prints a table of
# the figures of issue #6 with their ratios and goals.
#
#   cargo build --release -p rverbs-cli && bench/compare.sh
#
# Environment: RVERBS (binary, default target/release/rverbs), DUR (seconds per
# measurement, default 3), PORT (first TCP control port, default 18600), SMOKE=1
# (a few hundred messages per measurement: checks the script, not the speed).
set -euo pipefail
BIN=${RVERBS:-target/release/rverbs}
DUR=${DUR:-3}
PORT=${PORT:-18600}
if [[ ${SMOKE:-0} == 1 ]]; then LEN=(-n 200); else LEN=(-D "$DUR"); fi
[[ -x $BIN ]] || { echo "compare.sh: $BIN not found (cargo build --release -p rverbs-cli)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run PORT ARGS...: one server and one client process; prints the client's JSON line.
run() {
    local port=$1; shift
    "$BIN" perf "$@" "${LEN[@]}" -p "$port" --json >"$TMP/s.json" 2>"$TMP/s.err" &
    local spid=$!
    if ! "$BIN" perf "$@" "${LEN[@]}" -p "$port" --json localhost >"$TMP/c.json" 2>"$TMP/c.err"; then
        echo "compare.sh: client of '$*' failed:" >&2; cat "$TMP/c.err" "$TMP/s.err" >&2
        wait "$spid" || true; exit 1
    fi
    if ! wait "$spid"; then
        echo "compare.sh: server of '$*' failed:" >&2; cat "$TMP/s.err" >&2; exit 1
    fi
    tail -n 1 "$TMP/c.json"
}
# f JSON KEY: a numeric field of a flat JSON line.
f() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" <<<"$1"; }

echo "# rverbs vs TCP, $(nproc) CPUs, $(uname -r), ${LEN[*]} per figure, $(date -u +%FT%TZ)"
send_bw=$(run "$PORT" send bw -s 65536 -t 128)
write_bw=$(run $((PORT + 1)) write bw -s 65536 -t 128)
tcp_bw=$(run $((PORT + 2)) tcp bw -s 65536)
send_lat=$(run $((PORT + 3)) send lat -s 8)
tcp_lat=$(run $((PORT + 4)) tcp lat -s 8)
rate=$(run $((PORT + 5)) write bw -s 64 -t 512 -l 32)
tcp_rate=$(run $((PORT + 6)) tcp bw -s 64)

row() { # name ours theirs unit goal-op goal
    awk -v n="$1" -v a="$2" -v b="$3" -v u="$4" -v op="$5" -v g="$6" 'BEGIN {
        r = (b > 0) ? a / b : 0;
        ok = (op == ">=") ? (r >= g) : (r <= g);
        printf "%-44s %12.3f %12.3f %8.3f   %s %s  %s\n", n " [" u "]", a, b, r, op, g, ok ? "met" : "NOT met" }'
}
printf "%-44s %12s %12s %8s   %s\n" "figure" "rverbs" "TCP" "ratio" "goal (ratio)"
row "RC SEND bw, 64 KiB" "$(f "$send_bw" gbps)" "$(f "$tcp_bw" gbps)" Gb/s ">=" 1.0
row "RC WRITE bw, 64 KiB" "$(f "$write_bw" gbps)" "$(f "$tcp_bw" gbps)" Gb/s ">=" 1.0
row "RC SEND 8 B latency, half RTT p50" "$(f "$send_lat" p50)" "$(f "$tcp_lat" p50)" usec "<=" 1.0
awk -v a="$(f "$rate" mpps)" -v b="$(f "$tcp_rate" mpps)" 'BEGIN {
    printf "%-44s %12.3f %12.3f %8.3f   >= 1.0 Mmsg/s absolute  %s\n",
        "64 B WRITE msg rate, 1 QP, -l 32 [Mmsg/s]", a, b, (b > 0) ? a / b : 0, (a >= 1.0) ? "met" : "NOT met" }'
row "CPU per GB, SEND 64 KiB vs TCP" "$(f "$send_bw" cpu_s_per_gb)" "$(f "$tcp_bw" cpu_s_per_gb)" "CPU s/GB" "<=" 1.0
row "CPU per GB, WRITE 64 KiB vs TCP" "$(f "$write_bw" cpu_s_per_gb)" "$(f "$tcp_bw" cpu_s_per_gb)" "CPU s/GB" "<=" 1.0
echo "(TCP column of the message rate: 64 B writes on a TCP stream, for scale; CPU goal is 'reported'.)"
echo "# latency detail (usec): rverbs p50 $(f "$send_lat" p50) p99 $(f "$send_lat" p99) p99.9 $(f "$send_lat" p99_9); TCP p50 $(f "$tcp_lat" p50) p99 $(f "$tcp_lat" p99) p99.9 $(f "$tcp_lat" p99_9)"
