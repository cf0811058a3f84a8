#!/bin/sh
# Raw receive packets/s on a veth pair: the flow-steered raw device (rverbs-raw, 101
# rules, one RAW_PACKET QP drained by a consumer) with its TPACKET_V3 ring and with plain
# recvmsg, against a bare AF_PACKET reader, same offered load, alternating rounds in one
# run. Needs root (creates two network
# namespaces and a veth pair, removed at exit).
# Usage: bench/raw_pps.sh [seconds-per-round] [rounds]
set -e
cd "$(dirname "$0")/.."
cargo run -q --profile bench-release -p rverbs-raw --example raw_pps -- "${1:-2}" "${2:-3}"
