#!/bin/bash
# Raw-mode RoCE v2 (frames through the AF_PACKET raw device, RVERBS_RAW_IF) against
# UDP-socket mode, `rverbs perf <op> bw|lat` between two network namespaces joined by a
# veth pair, alternating rounds in one run; prints each round, the medians and their
# ratio (bw: Gb/s; lat: median latency in us). For lat pass a small size (e.g. 2).
# Needs root (creates the namespaces and the veth pair, removed at exit).
# Usage: [RAW_RX=ring|plain] bench/raw_v2_bw.sh [seconds-per-round] [rounds] [size] [op] [bw|lat]
# (RAW_RX sets RVERBS_RAW_RX, the raw device's receive mode for RAW_PACKET QPs; RVERBS_BIN
# runs another build of the tool, e.g. an older one to compare with)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-3}
ROUNDS=${2:-3}
SIZE=${3:-65536}
OP=${4:-write}
KIND=${5:-bw}
FIELD='"gbps":\([0-9.]*\)'
UNIT=Gb/s
[ "$KIND" = lat ] && { FIELD='"p50":\([0-9.]*\)'; UNIT=us; }
cargo build -q --profile bench-release -p rverbs-cli
BIN=${RVERBS_BIN:-$PWD/target/bench-release/rverbs}
A=rvbw_a$$
B=rvbw_b$$
cleanup() {
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$A"
ip netns add "$B"
ip link add "va$$" type veth peer name "vb$$"
ip link set "va$$" netns "$A"
ip link set "vb$$" netns "$B"
ip -n "$A" addr add 10.233.0.1/24 dev "va$$"
ip -n "$B" addr add 10.233.0.2/24 dev "vb$$"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "va$$" up
ip -n "$B" link set "vb$$" up
sleep 1

# One measurement: prints the "gbps" or the "p50" of perf --json.
run() {
    local mode=$1 envs_a=() envs_b=()
    if [ "$mode" = raw ]; then
        envs_a=(RVERBS_RAW_IF="va$$" RVERBS_RAW_RX="${RAW_RX:-}")
        envs_b=(RVERBS_RAW_IF="vb$$" RVERBS_RAW_RX="${RAW_RX:-}")
    fi
    ip netns exec "$B" env "${envs_b[@]}" "$BIN" perf "$OP" "$KIND" -d "rv_vb$$" -s "$SIZE" -D "$DUR" --json >/dev/null &
    local srv=$!
    sleep 0.5
    local out
    out=$(ip netns exec "$A" env "${envs_a[@]}" "$BIN" perf "$OP" "$KIND" 10.233.0.2 -d "rv_va$$" -s "$SIZE" -D "$DUR" --json)
    wait "$srv" || true
    echo "$out" | sed -n "s/.*$FIELD.*/\\1/p" | head -1
}

udp=()
raw=()
for r in $(seq "$ROUNDS"); do
    u=$(run udp)
    w=$(run raw)
    udp+=("$u")
    raw+=("$w")
    echo "round $r: udp $u $UNIT, raw $w $UNIT"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mu=$(median "${udp[@]}")
mr=$(median "${raw[@]}")
echo "perf $OP $KIND -s $SIZE -D $DUR, median of $ROUNDS: udp $mu $UNIT, raw $mr $UNIT, raw/udp $(awk -v a="$mr" -v b="$mu" 'BEGIN {printf "%.2f", a / b}')"
