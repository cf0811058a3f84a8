#!/usr/bin/env bash
# bench/hop_cost.sh: the CPU work rverbs' own code does per hop of an 8-byte RC SEND
# ping-pong (every SEND signaled), counted in instructions under valgrind's callgrind:
# a figure that does not move with the load of a shared machine, where the timed
# benchmarks (bench/compare.sh) swing by tens of percent from one hour to the next.
#
#   cargo build --profile bench-release -p rverbs-cli && bench/hop_cost.sh [BIN [BIN2]]
#
# The server of `rverbs perf send lat -s 8 --spin-us 1000000 -n ITERS` runs under
# callgrind, the client natively. Per round trip the server receives one UDP_SEGMENT
# train (the client's SEND and the ACK of the server's previous reply) and sends one
# back (its reply and the ACK): the rows are the inclusive instruction counts of
#   receive  `Udp::ingest_batch` (the UDP carrier): cutting the train into its datagrams, ICRC
#            checks, parsing, the engine's responder and
#            completer (both packets);
#   reply    `Qp::post_send` (or the soft device's `DeviceQp::post_send` it forwards
#            to, when the forwarder is inlined): the verb, building both packets, the connected socket's
#            ICRCs, the system call's set-up (the kernel's work is not counted);
# and their sum, the user-space instructions between the train's arrival and the
# reply's system call. With BIN2, both binaries are measured and the ratio printed.
# System calls and the spin loop's empty polls are not in these rows.
#
# The rows count the UDP path (`RVERBS_SAME_HOST=0` for both processes): between
# two rverbs processes of one host the same-host carrier would otherwise take the
# datagrams (crates/rverbs/src/carrier/same_host/), and `ingest_batch` would see none.
#
# Environment: ITERS (round trips, default 5000), PORT (default 19870). Needs
# valgrind (installed with apt-get when missing and run as root).
set -euo pipefail
export RVERBS_SAME_HOST=0
cd "$(dirname "$0")/.."
ITERS=${ITERS:-5000}
PORT=${PORT:-19870}
if ! command -v valgrind >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    else
        echo "hop_cost.sh: valgrind is needed" >&2
        exit 2
    fi
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# measure BIN PORT: prints "receive reply" (instructions per round trip).
measure() {
    local bin=$1 port=$2 out=$TMP/cg.$2
    [[ -x $bin ]] || { echo "hop_cost.sh: $bin not found (cargo build --profile bench-release -p rverbs-cli)" >&2; exit 2; }
    # Instructions, not time, are measured: a 4 s ACK timeout (where the build has the
    # option) keeps a server slowed by valgrind on a loaded machine from being taken
    # for a dead peer.
    local slow=()
    "$bin" perf --help 2>/dev/null | grep -q -- --ack-timeout && slow=(--ack-timeout 20)
    valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$bin" perf send lat -s 8 --spin-us 1000000 -n "$ITERS" -p "$port" "${slow[@]}" >/dev/null 2>"$TMP/vg.err" &
    local vg=$!
    # The server is slow to start under valgrind: the client retries its connection.
    local ok=0
    for _ in $(seq 1 60); do
        if "$bin" perf send lat -s 8 --spin-us 0 -n "$ITERS" -p "$port" "${slow[@]}" localhost >/dev/null 2>"$TMP/c.err"; then
            ok=1
            break
        fi
        sleep 1
    done
    wait "$vg" || { echo "hop_cost.sh: the server failed:" >&2; grep -v '^==[0-9]*==' "$TMP/vg.err" | tail -20 >&2; exit 1; }
    [[ $ok == 1 ]] || { echo "hop_cost.sh: the client failed:" >&2; cat "$TMP/c.err" >&2; exit 1; }
    # Every function (the default threshold lists the costliest making up 99%: in a
    # short run of a spinning server, the two rows may fall under it).
    callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | awk -v n="$ITERS" '
        function count(s) { gsub(",", "", s); return s + 0 }
        /:rverbs::(context::Shared|carrier::udp::Udp)::ingest_batch \[/ { rb += count($1) }
        /:rverbs::context::Shared::ingest \[/ { rx += count($1) }
        /:rverbs::verbs::(qp::)?Qp::post_send \[/ { tx += count($1) }
        # The soft QP behind the device boundary: where the verb lands once `Qp::post_send`,
        # a forwarder, is inlined into its caller (the larger of the two counts: each
        # includes the other when both are there).
        /:<rverbs::soft::qp::SoftQp as rverbs::device::ops::DeviceQp>::post_send \[/ { dtx += count($1) }
        # `ingest_batch` (a whole train): of the UDP carrier since the carriers
        # redesign, of `Shared` before; older builds, `ingest` per datagram.
        END { printf "%.0f %.0f\n", (rb > 0 ? rb : rx) / n, (dtx > tx ? dtx : tx) / n }'
}

A=${1:-target/bench-release/rverbs}
read -r arx atx < <(measure "$A" "$PORT")
printf "%-40s %10s %10s %10s\n" "instructions per round trip (server)" receive reply sum
printf "%-40s %10d %10d %10d\n" "$A" "$arx" "$atx" $((arx + atx))
if [[ -n ${2:-} ]]; then
    read -r brx btx < <(measure "$2" $((PORT + 1)))
    printf "%-40s %10d %10d %10d\n" "$2" "$brx" "$btx" $((brx + btx))
    awk -v a=$((arx + atx)) -v b=$((brx + btx)) 'BEGIN { printf "%-40s %32.3f\n", "ratio (second / first)", b / a }'
fi
