#!/usr/bin/env bash
# bench/c_path.sh: what the C library adds to each operation, in instructions (which do
# not move with the load of a shared machine, where the timed bench/c_library.sh swings
# by tens of percent). Debian's unmodified ib_send_lat / ib_write_lat under
# `rverbs exec` against `rverbs perf send|write lat` with the same size, iterations,
# ACK timeout and no INLINE (perftest sends none on a device it does not know, so
# `rverbs perf` gets `-I 0`), both sides on this host.
#
#   cargo build --release -p rverbs-cli -p rverbs-libibverbs && bench/c_path.sh
#
# The server runs under valgrind's callgrind, the client natively and busy-polling, so
# each message is already there when the slowed server polls: what is counted is the
# work of the operations, not the spin of a waiting poller (the "polls" line shows the
# CQ polls per round trip: about one per completion). Rows, per round trip, are the
# inclusive instruction counts of what the program calls:
#   post_send  C: the library's ibv_post_send op; Rust: `Qp::post_send`
#   post_recv  C: the ibv_post_recv op;          Rust: `Qp::post_recv`
#   poll       C: the ibv_poll_cq op;            Rust: `Cq::wait` (the receive path runs
#              inside: the datagrams are taken off the socket by the polling thread)
#   memory     Rust only: `Mr::with` / `Mr::write` (the WRITE ping-pong's marker; C
#              reads and writes the memory itself)
#   driver     the device's driver thread (both)
# and their sum. `ratio` is C / Rust of the sums.
#
# Environment: RVERBS (binary, default target/release/rverbs), LIBDIR (where
# libibverbs.so.1 is, default the binary's folder), SIZE (bytes, default 8), ITERS
# (round trips, default 5000), PORT (default 19970), CLIENT_NICE, KEEP (a folder to keep
# the callgrind files in), FROM (such a folder: the table again from its files, with the
# ITERS they were made with). Needs perftest and valgrind
# (installed with apt-get when missing and run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${RVERBS:-target/release/rverbs}
LIBDIR=${LIBDIR:-$(dirname "$BIN")}
SIZE=${SIZE:-8}
ITERS=${ITERS:-5000}
PORT=${PORT:-19970}
# The client's niceness: as root, -10, so on a loaded machine the client answers
# while the slowed server is still busy, and the server rarely polls an empty CQ.
CLIENT_NICE=${CLIENT_NICE:-$([[ $(id -u) == 0 ]] && echo -10 || echo 0)}
# The UDP carrier, as bench/hop_cost.sh: the same-host rings would carry the datagrams
# otherwise (both paths take the same carrier either way).
export RVERBS_SAME_HOST=0
# Only the soft device (no system libibverbs looked for, by either side).
export RVERBS_SYSTEM_DEVICES=0
[[ -x $BIN ]] || { echo "c_path.sh: $BIN not found (cargo build --release -p rverbs-cli)" >&2; exit 2; }
[[ -e $LIBDIR/libibverbs.so.1 ]] || { echo "c_path.sh: no $LIBDIR/libibverbs.so.1 (cargo build --release -p rverbs-libibverbs)" >&2; exit 2; }
for tool in valgrind ib_send_lat; do
    command -v $tool >/dev/null 2>&1 && continue
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind perftest >/dev/null
    else
        echo "c_path.sh: valgrind and perftest are needed" >&2
        exit 2
    fi
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
BIN=$(realpath "$BIN")
LIBDIR=$(realpath "$LIBDIR")


# run NAME PORT SERVER... -- CLIENT...: the server under callgrind (output $TMP/NAME.cg),
# the client retried until the slow server listens.
run() {
    local name=$1 port=$2 srv=() cli=()
    shift 2
    while [[ $1 != -- ]]; do srv+=("$1"); shift; done
    shift
    cli=("$@")
    # LD_LIBRARY_PATH reaches the program through valgrind (valgrind itself loads no
    # libibverbs).
    env LD_LIBRARY_PATH="$LIBDIR" valgrind --tool=callgrind --callgrind-out-file="$TMP/$name.cg" \
        "${srv[@]}" >"$TMP/$name.s" 2>"$TMP/$name.vg" &
    local vg=$! ok=0
    for _ in $(seq 1 60); do
        sleep 1
        if nice -n "$CLIENT_NICE" "${cli[@]}" >"$TMP/$name.c" 2>&1; then ok=1; break; fi
        # A client that ran the test and then failed on the way out: the server's run
        # is what counts.
        kill -0 "$vg" 2>/dev/null || break
    done
    wait "$vg" || { echo "c_path.sh: $name: the server failed:" >&2; grep -v '^==[0-9]*==' "$TMP/$name.vg" | tail -20 >&2; cat "$TMP/$name.s" >&2; exit 1; }
    [[ $ok == 1 || -s $TMP/$name.cg ]] || { echo "c_path.sh: $name: the client failed:" >&2; tail -20 "$TMP/$name.c" >&2; exit 1; }
    [[ $ok == 1 ]] || { echo "c_path.sh: $name: the client failed after the run:" >&2; tail -3 "$TMP/$name.c" >&2; }
    [[ -z ${KEEP:-} ]] || cp "$TMP/$name.cg" "$KEEP/"
}

# rows NAME K: the rows (see the top) per round trip, K completions per round trip.
rows() {
    local cg=$TMP/$1.cg
    # From the temporary folder: in the source tree callgrind_annotate shortens the
    # paths under it and splits one function into two rows.
    (
    cd "$TMP"
    {
        callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$cg" 2>/dev/null | sed 's/^/I /'
        callgrind_annotate --auto=no --inclusive=yes --tree=caller --threshold=100 "$cg" 2>/dev/null | sed 's/^/T /'
        callgrind_annotate --auto=no --inclusive=yes --tree=calling --threshold=100 "$cg" 2>/dev/null | sed 's/^/U /'
    } | awk -v n="$ITERS" -v k="$2" '
        function count(s) { gsub(",", "", s); return s + 0 }
        function calls(s) { sub(/.*\(/, "", s); sub(/x\).*/, "", s); gsub(",", "", s); return s + 0 }
        function keep(key, v) { if (v > m[key]) m[key] = v }
        $1 == "I" {
            v = count($2)
            # The entry points: the C library ops verbs.h inlines call, the Rust API (or
            # the soft device behind it where the forwarder is inlined: the larger count
            # includes the other).
            if (/:ibverbs::qp::post_send \[/ || /:rverbs::verbs::qp::Qp::post_send \[/ || /SoftQp as rverbs::device::ops::DeviceQp>::post_send \[/) keep("send", v)
            if (/:ibverbs::qp::post_recv \[/ || /:rverbs::verbs::qp::Qp::post_recv \[/ || /SoftQp as rverbs::device::ops::DeviceQp>::post_recv \[/) keep("recv", v)
            if (/:ibverbs::cq::poll_cq \[/) keep("cpoll", v)
            if (/:rverbs::verbs::cq::Cq::poll \[/) keep("rpoll", v)
            if (/Engine>::poll_cq \[/) m["enginepoll"] += v
            if (/:rverbs::verbs::mr::Mr::(with|write)[^ ]* \[/) m["mem"] += v
            if (/:rverbs::carrier::udp::Udp::ingest_batch \[/) m["rx"] += v
            if (/:rverbs::soft::Shared::flush \[/) m["tx"] += v
        }
        # Caller-specific counts: the packets sent outside the post verbs (the
        # answers of the receive path, deferred ACKs, the driver); what the post verbs send
        # (their flush, post_recv'"'"'s settle) is the rest, moved to the packets row.
        $1 == "T" && / < / { callers[++nc] = $0; next }
        $1 == "T" && /  \*  / {
            # Answers built ahead by post_recv (Shared::prebuild, inlined or not).
            if (/Engine::poll_transmit \[/) {
                for (i = 1; i <= nc; i++) {
                    c = callers[i]
                    split(c, f, " ")
                    if (c ~ /Shared::(settle|prebuild) /) m["tx"] += count(f[2])
                }
            }
            if (/:rverbs::soft::Shared::flush \[/) {
                for (i = 1; i <= nc; i++) {
                    c = callers[i]
                    split(c, f, " ")
                    if (c !~ /post_send|post_recv|ret_errno|Shared::settle/) m["tx_out"] += count(f[2])
                }
            }
            nc = 0
            next
        }
        $1 == "T" { nc = 0 }
        # The adaptive spin of an empty ibv_poll_cq (its clock reads and yields): the
        # cost of waiting, not of a poll that finds a completion.
        $1 == "U" && /  \*  / { inpoll = ($0 ~ /(cq\.rs:ibverbs::ret_neg|ibverbs::cq::poll_cq)( \[|$)/) ; next }
        $1 == "U" && / > / && inpoll && /(Instant>::elapsed|cq::mono_ns|yield_now) \(/ { split($0, f, " "); m["spin"] += count(f[2]) }
        # ibv_poll_cq calls.
        $1 == "U" && / > / && /ibverbs::cq::poll_cq \(/ { m["cpolls"] += calls($0) }
        $1 == "U" && / > / && /SoftCq as rverbs::device::ops::DeviceCq>::poll \(/ { m["dpolls"] += calls($0) }
        END {
            # The C layer of ibv_poll_cq per call (around the Rust API'"'"'s Cq::poll), for the
            # K polls a round trip needs.
            glue = (m["cpolls"] > 0) ? (m["cpoll"] - m["rpoll"] - m["spin"]) / m["cpolls"] * k : 0
            # The post verbs without the packets they send (one figure for both: where
            # a deferred ACK is built, in post_recv or post_send, depends on the order
            # the program posts in).
            posts = m["send"] + m["recv"] - (m["tx"] - m["tx_out"])
            printf "%.0f %.0f %.0f %.0f %.2f\n", posts / n, glue + m["enginepoll"] / n, m["mem"] / n, (m["rx"] + m["tx"]) / n, m["cpolls"] / n
        }'
    )
}

printf "# C (Debian perftest on libibverbs.so.1) vs Rust (rverbs perf), server under callgrind:\n"
printf "# instructions per round trip, -s %s -n %s, %s\n" "$SIZE" "$ITERS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
port=$PORT
for op in send write; do
    port=$((port + 1))
    [[ -z ${FROM:-} ]] || { TMP=$FROM; port=$((port + 1)); }
    [[ -n ${FROM:-} ]] || run "c_$op" $port "ib_${op}_lat" -d rv_lo -x 1 -s "$SIZE" -n "$ITERS" -u 20 -p $port -- \
        env LD_LIBRARY_PATH="$LIBDIR" "ib_${op}_lat" -d rv_lo -x 1 -s "$SIZE" -n "$ITERS" -u 20 -p $port 127.0.0.1
    port=$((port + 1))
    [[ -n ${FROM:-} ]] || run "r_$op" $port "$BIN" perf "$op" lat -s "$SIZE" -n "$ITERS" -I 0 --ack-timeout 20 --spin-us 1000000 -p $port -- \
        "$BIN" perf "$op" lat -s "$SIZE" -n "$ITERS" -I 0 --ack-timeout 20 --spin-us 1000000 -p $port localhost
    # Completions a round trip needs on the server: the SEND ping-pong a receive and
    # the (signaled) reply; the WRITE ping-pong the reply's.
    k=$([[ $op == send ]] && echo 2 || echo 1)
    read -r cs cp cm cx cpolls < <(rows "c_$op" "$k")
    read -r rs rp rm rx _ < <(rows "r_$op" "$k")
    printf "\n%-30s %10s %10s %8s\n" "$op lat, ${SIZE} B, per round trip" C Rust C-Rust
    printf "%-30s %10d %10d %8d\n" "post_send + post_recv" "$cs" "$rs" $((cs - rs))
    printf "%-30s %10d %10d %8d\n" poll "$cp" "$rp" $((cp - rp))
    printf "%-30s %10d %10d %8d\n" memory "$cm" "$rm" $((cm - rm))
    cv=$((cs + cp + cm))
    rv=$((rs + rp + rm))
    printf "%-30s %10d %10d %8d\n" "verbs (the sum above)" "$cv" "$rv" $((cv - rv))
    printf "%-30s %10d %10d %8d\n" "packets (receive, send)" "$cx" "$rx" $((cx - rx))
    printf "%-30s %10d %10d %8d\n" "total" $((cv + cx)) $((rv + rx)) $((cv + cx - rv - rx))
    printf "%-30s %10s\n" "ibv_poll_cq calls" "$cpolls"
    awk -v cv="$cv" -v rv="$rv" -v cx="$cx" -v rx="$rx" -v op="$op" 'BEGIN {
        printf "%-30s %21.3f\n", "C / Rust, verbs", cv / rv
        printf "%-30s %21.3f\n", "C / Rust, total", (cv + cx) / (rv + rx)
        printf "%-30s %21.3f\n", "C verbs extra / Rust total", (cv - rv) / (rv + rx)
    }'
done
