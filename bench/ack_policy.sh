#!/usr/bin/env bash
# bench/ack_policy.sh: the RC requester's ACK policies against each other, in one run:
# `RVERBS_ACK_POLICY=every-message` (AckReq on every message, as kernel rxe) and the
# default `coalesce`, alternating (old, new, old, new, ...) on both processes of each
# `rverbs perf` pair over loopback. Prints, per figure, the medians of both policies,
# the median of the per-pair ratios new/old and their range.
#
#   cargo build --profile bench-release -p rverbs-cli && bench/ack_policy.sh
#
# Figures: RC SEND 8 B latency p50 (half round trip) in the sleep policy (--spin-us 0)
# and the spin policy (--spin-us $SPIN_US), both with perftest's completion moderation
# -Q 100 (`rverbs perf` latency signals every SEND by default, and a signaled SEND
# needs its ACK under either policy); RC SEND and WRITE bandwidth at 64 KiB, -t 128.
# Environment: RVERBS (binary), DUR (seconds per measurement, default 2), REPS
# (alternating pairs, default 3), SPIN_US (default 1000000), PORT (default 18650).
set -euo pipefail
BIN=${RVERBS:-target/bench-release/rverbs}
DUR=${DUR:-2}
REPS=${REPS:-3}
PORT=${PORT:-18650}
SPIN_US=${SPIN_US:-1000000}
[[ -x $BIN ]] || { echo "ack_policy.sh: $BIN not found (cargo build --profile bench-release -p rverbs-cli)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run POLICY PORT ARGS...: one server and one client process, both with the policy;
# prints the client's JSON line.
run() {
    local pol=$1 port=$2; shift 2
    RVERBS_ACK_POLICY=$pol "$BIN" perf "$@" -D "$DUR" -p "$port" --json >"$TMP/s.json" 2>"$TMP/s.err" &
    local spid=$!
    if ! RVERBS_ACK_POLICY=$pol "$BIN" perf "$@" -D "$DUR" -p "$port" --json localhost >"$TMP/c.json" 2>"$TMP/c.err"; then
        echo "ack_policy.sh: client of '$*' ($pol) failed:" >&2; cat "$TMP/c.err" "$TMP/s.err" >&2
        wait "$spid" || true; exit 1
    fi
    wait "$spid" || { echo "ack_policy.sh: server of '$*' ($pol) failed:" >&2; cat "$TMP/s.err" >&2; exit 1; }
    tail -n 1 "$TMP/c.json"
}
f() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" <<<"$1"; }
declare -A V
add() { V[$1]="${V[$1]:-} $2"; }

echo "# RC ACK policy: every-message (old) vs coalesce (new), $(nproc) CPUs, -D $DUR, $REPS pair(s), $(date -u +%FT%TZ)"
for ((i = 0; i < REPS; i++)); do
    for pol in every-message coalesce; do
        r=$(run $pol $PORT send lat -s 8 -Q 100 --spin-us 0); add "sleep_$pol" "$(f "$r" p50)"
        r=$(run $pol $((PORT + 1)) send lat -s 8 -Q 100 --spin-us "$SPIN_US"); add "spin_$pol" "$(f "$r" p50)"
        r=$(run $pol $((PORT + 2)) send bw -s 65536 -t 128); add "sbw_$pol" "$(f "$r" gbps)"
        r=$(run $pol $((PORT + 3)) write bw -s 65536 -t 128); add "wbw_$pol" "$(f "$r" gbps)"
    done
    echo "#  pair $((i + 1))/$REPS: lat sleep${V[sleep_every-message]##* }/${V[sleep_coalesce]##* }" \
        "spin ${V[spin_every-message]##* }/${V[spin_coalesce]##* } us;" \
        "send bw ${V[sbw_every-message]##* }/${V[sbw_coalesce]##* } write bw ${V[wbw_every-message]##* }/${V[wbw_coalesce]##* } Gb/s (old/new)" >&2
done

row() { # NAME UNIT KEY
    awk -v n="$1" -v u="$2" -v a="${V[$3_every-message]}" -v b="${V[$3_coalesce]}" '
    function med(x, k,   i, j, t) {
        for (i = 2; i <= k; i++) for (j = i; j > 1 && x[j - 1] > x[j]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
        return (k % 2) ? x[(k + 1) / 2] : (x[k / 2] + x[k / 2 + 1]) / 2
    }
    BEGIN {
        k = split(a, A, " "); split(b, B, " "); lo = 1e300; hi = -1e300;
        for (i = 1; i <= k; i++) { R[i] = (A[i] > 0) ? B[i] / A[i] : 0; if (R[i] < lo) lo = R[i]; if (R[i] > hi) hi = R[i] }
        printf "%-42s %10.3f %10.3f %7.3f  %5.3f-%-5.3f\n", n " [" u "]", med(A, k), med(B, k), med(R, k), lo, hi
    }'
}
printf "%-42s %10s %10s %7s  %s\n" "figure (medians)" "old" "new" "new/old" "range"
row "SEND 8 B lat p50, sleep" "us" sleep
row "SEND 8 B lat p50, spin" "us" spin
row "SEND bw 64 KiB, -t 128" "Gb/s" sbw
row "WRITE bw 64 KiB, -t 128" "Gb/s" wbw
