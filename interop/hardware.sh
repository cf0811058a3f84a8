#!/usr/bin/env bash
# Interop: rverbs on a device of the system's libibverbs, the kernel's rxe0 in the
# rxe-peer guest (../shared/rxe-peer), through the same Rust API and CLI as the soft
# device. The host-built binaries run in the guest from /mnt/host.
#
#   devinfo   `rverbs devinfo -v -d rxe0`: every line is one of `ibv_devinfo -v`'s
#   gids      `rverbs gids`: rxe0's entries are the kernel's (rxe-gids)
#   pp-soft   `rverbs pingpong rc|uc|ud -d rxe0` in the guest <-> the soft device on the
#             host (netns), both roles
#   pp-ibv    `rverbs pingpong rc|uc|ud -d rxe0` <-> rdma-core's ibv_*_pingpong on
#             rxe0 in the same guest, both roles; and with -e (completion channels)
#   pp-vm2    the same against ibv_*_pingpong on a second guest (booted here if
#             missing; HW_VM2=0 skips it)
#   example   the crate's examples (rc_send_recv, rdma_write_read, atomics, ud), both
#             ends on rxe0, unchanged but for `-d rxe0`
#   perf      `rverbs perf write bw` on rxe0 against itself, and `perf send bw
#             --perftest` against perftest's ib_send_bw
#   xproc     crates/rverbs/tests/xproc.rs with XPROC_HW_DEVICE=rxe0
#   feature   crates/rverbs/tests/device_features.rs (tokio feature) with
#             RVERBS_TEST_DEVICE=rxe0, one case per test: memory windows (type 1
#             bind/unbind, type 2 bind + LOCAL_INV, SEND_WITH_INV), a UD reply through
#             create_ah_from_wc, multicast attach/detach, the SRQ-limit event, completion
#             events on a tokio runtime
#   mcast     UD multicast between rxe0 and the host's soft device, both directions
#             (device_features' multicast_role_child, one process on each side)
#   cm        the RDMA CM on rxe0 through the guest's librdmacm: crates/rverbs/tests/
#             cm_device.rs (RVERBS_TEST_DEVICE=rxe0: connect / accept / reject with
#             private data, disconnect, UD over the UDP port space, the error without
#             librdmacm); `rverbs rping` (by address and with --dev), `udaddy` and
#             `ucmatose` against rdma-core's in the same guest, both roles, and rping /
#             udaddy against a second guest
#   flow      device_features' flow_steering_is_the_devices_answer: rxe0's own
#             EOPNOTSUPP from ibv_create_flow
#   port      device_features' port_events_follow_the_netdev: eth0 down and up gives
#             PORT_ERR and PORT_ACTIVE through Context::get_async_event (last: it
#             flaps the guest's link)
#
# Needs: the rxe-peer guest running (rxe-peer/start.sh) and cargo (to build the examples
# and the xproc test in release mode unless HW_EXAMPLES / HW_XPROC point at them).
# Usage: interop/hardware.sh [RVERBS_BIN] [FILTER]    (FILTER: substring of case names)
set -u
. "$(dirname "$0")/lib.sh"
repo=$(cd "$here/.." && pwd)
share=${RXE_WORK:-/var/tmp/rxe-peer}/share/interop/hw
g=/mnt/host/interop/hw
port=18900

want() { [ -z "$filter" ] || [[ $1 == *"$filter"* ]]; }

# A guest command that waits (up to 30 s) until something in the guest listens on TCP
# port $1.
glisten() {
  local hex
  hex=$(printf '%04X' "$1")
  echo "for i in \$(seq 1 300); do grep -q ':$hex 00000000:0000 0A\\|:$hex 00000000000000000000000000000000:0000 0A' /proc/net/tcp /proc/net/tcp6 && break; sleep 0.1; done"
}

# Release builds of the examples and of the xproc test binary (its path from cargo).
examples=${HW_EXAMPLES:-}
if [ -z "$examples" ]; then
  (cd "$repo" && cargo build -q --release -p rverbs --examples) || { echo "building the examples failed"; exit 1; }
  examples=$repo/target/release/examples
fi
xproc=${HW_XPROC:-}
if [ -z "$xproc" ]; then
  xproc=$(cd "$repo" && cargo test -q --release -p rverbs --test xproc --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*xproc[^"]*"' | tail -1 | cut -d'"' -f4)
  [ -n "$xproc" ] || { echo "building the xproc test failed"; exit 1; }
fi
cmdev=${HW_CM:-}
if [ -z "$cmdev" ]; then
  cmdev=$(cd "$repo" && cargo test -q --release -p rverbs --test cm_device --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*cm_device[^"]*"' | tail -1 | cut -d'"' -f4)
  [ -n "$cmdev" ] || { echo "building the cm_device test failed"; exit 1; }
fi
features=${HW_FEATURES:-}
if [ -z "$features" ]; then
  features=$(cd "$repo" && cargo test -q --release -p rverbs --features tokio --test device_features --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*device_features[^"]*"' | tail -1 | cut -d'"' -f4)
  [ -n "$features" ] || { echo "building the device_features test failed"; exit 1; }
fi
mkdir -p "$share"
cp -f "$bin" "$share/rverbs"
cp -f "$xproc" "$share/xproc"
cp -f "$features" "$share/device_features"
cp -f "$cmdev" "$share/cm_device"
for e in rc_send_recv rdma_write_read atomics ud; do cp -f "$examples/$e" "$share/$e"; done

if want devinfo; then
  out=$(guest "$g/rverbs devinfo -v -d rxe0 >/tmp/hw-rv.txt 2>&1; echo rc=\$?; ibv_devinfo -v -d rxe0 >/tmp/hw-ibv.txt 2>&1
    echo lines=\$(wc -l </tmp/hw-rv.txt); echo missing:; grep -Fxv -f /tmp/hw-ibv.txt /tmp/hw-rv.txt; echo end" 2>&1)
  missing=$(sed -n '/^missing:$/,/^end$/p' <<<"$out" | sed '1d;$d')
  lines=$(sed -n 's/^lines=//p' <<<"$out")
  ok=0
  grep -q '^rc=0$' <<<"$out" && [ -z "$missing" ] && [ "${lines:-0}" -ge 40 ] && ok=1
  record devinfo-v-rxe0 $ok "$out"
fi

if want gids; then
  out=$(guest "$g/rverbs gids | awk '\$1 == \"rxe0\" { print \$3, \$4 }'; echo @@; rxe-gids | awk 'NR > 1 { print \$1, \$2 }'" 2>&1)
  rv=$(sed -n '1,/^@@$/p' <<<"$out" | sed '$d')
  kern=$(sed -n '/^@@$/,$p' <<<"$out" | sed '1d')
  ok=0
  [ -n "$rv" ] && [ "$rv" = "$kern" ] && ok=1
  record gids-rxe0 $ok "rverbs:" "$rv" "kernel:" "$kern"
fi

# pp_soft TRANSPORT ROLE(hw-server|hw-client)
pp_soft() {
  local t=$1 role=$2 c="" name="pp-soft-$1-$2" log=/tmp/interop-hw.$$ out ok=0
  want "$name" || return 0
  port=$((port + 1))
  [ "$t" != ud ] && c="-c"
  if [ "$role" = hw-server ]; then
    guest -b "hw$port" "$g/rverbs pingpong $t -d rxe0 -g 1 -p $port -n 50 $c" >/dev/null 2>&1
    wait_listen "$port"
    rv_cmd "$log" 60 pingpong "$t" -d rv_rxebr0 -p "$port" -n 50 $c "$vm4"
    out=$(guest "p=\$(cat /tmp/bg-hw$port.pid); for i in \$(seq 1 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-hw$port.log; kill \$p 2>/dev/null; true" 2>&1)
  else
    rv_cmd "$log" 60 pingpong "$t" -d rv_rxebr0 -p "$port" -n 50 $c &
    local bg=$!
    host_listen "$port"
    out=$(guest -t 60 "$g/rverbs pingpong $t -d rxe0 -g 1 -p $port -n 50 $c $host4" 2>&1)
    wait $bg
  fi
  grep -q "exit=0" "$log" && grep -q "50 iters in" "$log" && grep -q "50 iters in" <<<"$out" && ok=1
  record "$name" $ok "--- host (soft):" "$(cat "$log")" "--- guest (rxe0):" "$out"
  rm -f "$log"
}

# in_guest NAME PORT SERVER CLIENT [COUNT_PATTERN]: a server and its client in the
# guest, both on rxe0; passes when both exit 0 (and COUNT_PATTERN appears twice).
in_guest() {
  local name=$1 port=$2 srv=$3 cli=$4 pat=${5:-} out ok=0
  out=$(guest -t 120 "$srv >/tmp/hw-srv.log 2>&1 & s=\$!
    $(glisten "$port")
    timeout 90 $cli >/tmp/hw-cli.log 2>&1; echo client=\$?
    for i in \$(seq 1 100); do kill -0 \$s 2>/dev/null || break; sleep 0.1; done
    kill \$s 2>/dev/null; wait \$s; echo server=\$?
    echo '--- server:'; cat /tmp/hw-srv.log; echo '--- client:'; cat /tmp/hw-cli.log; $kill_leftovers" 2>&1)
  grep -q '^client=0$' <<<"$out" && grep -q '^server=0$' <<<"$out" && ok=1
  [ -n "$pat" ] && [ "$(grep -c "$pat" <<<"$out")" != 2 ] && ok=0
  record "$name" $ok "$out"
}

# pp_ibv TRANSPORT ROLE(rv-server|rv-client) [events]: rverbs and ibv_*_pingpong, both
# on rxe0; with `events`, both sleep on their completion channel (-e).
pp_ibv() {
  local t=$1 role=$2 c="" name="pp-ibv-$1-$2${3:+-$3}" rv ibv
  want "$name" || return 0
  port=$((port + 1))
  [ "$t" != ud ] && c="-c"
  [ -n "${3:-}" ] && c="$c -e"
  rv="$g/rverbs pingpong $t -d rxe0 -g 1 -p $port -n 50 $c"
  ibv="ibv_${t}_pingpong -d rxe0 -g 1 -p $port -n 50 $c"
  if [ "$role" = rv-server ]; then
    in_guest "$name" "$port" "$rv" "$ibv 127.0.0.1" "50 iters in"
  else
    in_guest "$name" "$port" "$ibv" "$rv 127.0.0.1" "50 iters in"
  fi
}

for t in rc uc ud; do
  pp_soft "$t" hw-server
  pp_soft "$t" hw-client
  pp_ibv "$t" rv-server
  pp_ibv "$t" rv-client
done
# With a second guest running (rxe-peer/start.sh 2): rverbs on VM1's rxe0 against
# ibv_*_pingpong on VM2's rxe0, over the bridge (rxe short-circuits a VM's own traffic,
# so this is the case whose packets are on the wire).
guest2() { "$peer/run.sh" -v 2 "$@"; }
pp_vm2() { # TRANSPORT ROLE(rv-server|rv-client)
  local t=$1 role=$2 c="" name="pp-vm2-$1-$2" out1 out2 ok=0 vm2=10.77.0.3
  want "$name" || return 0
  port=$((port + 1))
  [ "$t" != ud ] && c="-c"
  local rv="$g/rverbs pingpong $t -d rxe0 -g 1 -p $port -n 50 $c"
  local ibv="ibv_${t}_pingpong -d rxe0 -g 1 -p $port -n 50 $c"
  if [ "$role" = rv-server ]; then
    guest -b "v2$port" "$rv" >/dev/null 2>&1
    guest "$(glisten "$port")" >/dev/null 2>&1
    out2=$(guest2 -t 60 "timeout 50 $ibv $vm4; echo rc=\$?" 2>&1)
    out1=$(guest "p=\$(cat /tmp/bg-v2$port.pid); for i in \$(seq 1 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-v2$port.log; kill \$p 2>/dev/null; true" 2>&1)
  else
    guest2 -b "v2$port" "$ibv" >/dev/null 2>&1
    guest2 "$(glisten "$port")" >/dev/null 2>&1
    out1=$(guest -t 60 "timeout 50 $rv $vm2; echo rc=\$?" 2>&1)
    out2=$(guest2 "p=\$(cat /tmp/bg-v2$port.pid); for i in \$(seq 1 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-v2$port.log; kill \$p 2>/dev/null; true" 2>&1)
  fi
  grep -q "50 iters in" <<<"$out1" && grep -q "50 iters in" <<<"$out2" && ok=1
  record "$name" $ok "--- VM1 (rverbs):" "$out1" "--- VM2 (rdma-core):" "$out2"
}
# The second guest is booted here when missing (start.sh starts only missing VMs;
# HW_VM2=0 skips these cases); the caller's stop.sh stops it with the first.
if want pp-vm2 && [ "${HW_VM2:-1}" != 0 ] && ! guest2 true >/dev/null 2>&1; then
  bash "$peer/start.sh" 2 >/tmp/hw-vm2-start.log 2>&1 || tail -5 /tmp/hw-vm2-start.log
fi
if [ "${HW_VM2:-1}" != 0 ] && guest2 true >/dev/null 2>&1; then
  cp -f "$bin" "$share/rverbs"
  for t in rc uc ud; do
    pp_vm2 "$t" rv-server
    pp_vm2 "$t" rv-client
  done
else
  want pp-vm2 && echo "SKIP pp-vm2-*: no second guest (HW_VM2=0, or rxe-peer/start.sh 2 failed)"
fi

pp_ibv rc rv-server events
pp_ibv rc rv-client events
pp_ibv ud rv-server events

if want example; then
  for e in rc_send_recv rdma_write_read atomics ud; do
    port=$((port + 1))
    in_guest "example-$e-rxe0" "$port" "$g/$e server $port -d rxe0" "$g/$e client 127.0.0.1 $port -d rxe0"
  done
fi

# `rverbs perf` on rxe0: against itself, and speaking perftest's exchange to ib_*_bw.
if want perf; then
  port=$((port + 1))
  in_guest perf-write-bw-rxe0 "$port" "$g/rverbs perf write bw -d rxe0 -x 1 -p $port -n 500 -s 4096" \
    "$g/rverbs perf write bw -d rxe0 -x 1 -p $port -n 500 -s 4096 127.0.0.1"
  port=$((port + 1))
  in_guest perf-ib_send_bw-rxe0 "$port" "$g/rverbs perf send bw --perftest -d rxe0 -x 1 -p $port -n 500 -s 4096" \
    "ib_send_bw -d rxe0 -x 1 -p $port -n 500 -s 4096 127.0.0.1"
fi

# feature TEST [ENV...]: one test of device_features on rxe0 (both ends in the guest).
feature() {
  local t=$1 out ok=0; shift
  want "feature-$t" || return 0
  out=$(guest -t 120 "cd /tmp && RVERBS_TEST_DEVICE=rxe0 $* timeout 100 $g/device_features --exact $t --test-threads=1 2>&1 | tail -30" 2>&1)
  grep -q '^test result: ok\. 1 passed' <<<"$out" && ok=1
  record "feature-$t-rxe0" $ok "$out"
}
feature type1_window_grants_and_revokes_remote_writes
feature type2_window_is_bound_by_a_request_and_invalidated_locally
feature send_with_invalidate_revokes_the_receivers_window
feature a_ud_reply_goes_to_the_address_handle_made_from_the_request
feature an_srq_below_its_limit_raises_the_async_event
feature completion_events_wake_a_tokio_task
# rxe hands a group's datagrams to the wire only (no local copy; rxe_net.c sends a
# multicast packet out through the netdev): attach, send and detach are checked here,
# delivery in the mcast cases below.
feature multicast_attach_detach_and_delivery RVERBS_TEST_MCAST_LOCAL=0
feature flow_steering_is_the_devices_answer

# mcast DIRECTION(rxe0-to-soft|soft-to-rxe0) [ENV...]: UD multicast between rxe0 in the
# guest and the soft device on the host (netns), one process each
# (device_features' multicast_role_child); the receiver must get one of the sender's datagrams.
mcast() {
  local dir=$1 name="mcast-$1" log=/tmp/interop-hw-mc.$$ out ok=0 bg i; shift
  local grp="239.78.$((RANDOM % 250)).$((RANDOM % 250 + 1))"
  local t="--exact multicast_role_child --ignored --nocapture --test-threads=1"
  want "$name" || return 0
  port=$((port + 1))
  : >"$log"
  if [ "$dir" = rxe0-to-soft ]; then
    timeout 60 "$peer/hostns.sh" env RVERBS_TEST_DEVICE=rv_rxebr0 RVERBS_TEST_MCAST_ROLE=recv \
      RVERBS_TEST_MCAST_GROUP="$grp" "$share/device_features" $t >"$log" 2>&1 &
    bg=$!
    for i in $(seq 1 100); do grep -q 'ready qpn' "$log" && break; sleep 0.1; done
    out=$(guest -t 60 "RVERBS_TEST_DEVICE=rxe0 RVERBS_TEST_MCAST_ROLE=send RVERBS_TEST_MCAST_GROUP=$grp \
      timeout 50 $g/device_features $t 2>&1 | tail -15" 2>&1)
    wait $bg
    echo "exit=$?" >>"$log"
    grep -q '^exit=0$' "$log" && grep -q 'got "mcast-' "$log" && ok=1
  else
    guest "rm -f /tmp/bg-mc$port.log" >/dev/null 2>&1
    guest -b "mc$port" "RVERBS_TEST_DEVICE=rxe0 RVERBS_TEST_MCAST_ROLE=recv RVERBS_TEST_MCAST_GROUP=$grp $* \
      timeout 50 $g/device_features $t; echo exit=\$?" >/dev/null 2>&1
    guest "for i in \$(seq 1 300); do grep -q 'ready qpn' /tmp/bg-mc$port.log && exit 0; sleep 0.1; done; exit 1" >/dev/null 2>&1
    timeout 60 "$peer/hostns.sh" env RVERBS_TEST_DEVICE=rv_rxebr0 RVERBS_TEST_MCAST_ROLE=send \
      RVERBS_TEST_MCAST_GROUP="$grp" "$share/device_features" $t >"$log" 2>&1
    echo "exit=$?" >>"$log"
    out=$(guest "p=\$(cat /tmp/bg-mc$port.pid); for i in \$(seq 1 300); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-mc$port.log; kill \$p 2>/dev/null; true" 2>&1)
    grep -q '^exit=0$' <<<"$out" && grep -q 'got "mcast-' <<<"$out" && ok=1
  fi
  record "$name" $ok "--- host (soft):" "$(cat "$log")" "--- guest (rxe0):" "$out"
  rm -f "$log"
}
mcast rxe0-to-soft
# Linux 6.1's rxe adds only a link-layer address for an attached group (rxe_mcast.c),
# so the guest's IP layer drops the group's datagrams unless the host is a member: the
# receiver also joins the group on eth0 with a UDP socket, as a program on rxe must.
mcast soft-to-rxe0 RVERBS_TEST_MCAST_JOIN=$vm4

# The RDMA CM on rxe0 (the kernel's rdma_cm through the guest's librdmacm.so.1).
if want cm-test; then
  out=$(guest -t 200 "cd /tmp && RVERBS_TEST_DEVICE=rxe0 timeout 180 $g/cm_device --test-threads=1 2>&1 | tail -30" 2>&1)
  ok=0
  grep -q '^test result: ok\. 5 passed' <<<"$out" && ok=1
  record cm-test-rxe0 $ok "$out"
fi

kill_cm='for p in $(ps | grep -E "rping|udaddy|ucmatose" | grep -v grep | awk "{print \$1}"); do kill -9 $p; done; true'
guest_n() { "$peer/run.sh" -v "$@"; }
# cm_pair NAME PORT SRV_VM SERVER CLI_VM CLIENT PATTERN COUNT: an RDMA CM server (started
# first, in the background, and waited for: `rdma res show cm_id` lists its LISTEN) and
# its client, each in guest 1 or 2, both on rxe0. Passes when both exit 0 and PATTERN
# appears COUNT times in their output together.
cm_pair() {
  local name=$1 p=$2 sv=$3 srv=$4 cv=$5 cli=$6 pat=$7 count=$8 outs outc ok=0
  want "$name" || return 0
  guest_n "$sv" "rm -f /tmp/bg-cm$p.log" >/dev/null 2>&1
  guest_n "$sv" -b "cm$p" "timeout 100 $srv; echo exit=\$?" >/dev/null 2>&1
  guest_n "$sv" "for i in \$(seq 1 300); do rdma res show cm_id 2>/dev/null | grep -q 'LISTEN.*:$p\b' && exit 0; sleep 0.1; done; exit 1" >/dev/null 2>&1
  outc=$(guest_n "$cv" -t 100 "timeout 90 $cli; echo exit=\$?" 2>&1)
  outs=$(guest_n "$sv" "p=\$(cat /tmp/bg-cm$p.pid); for i in \$(seq 1 100); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat /tmp/bg-cm$p.log; $kill_cm" 2>&1)
  [ "$(grep -c '^exit=0$' <<<"$outs")" = 1 ] && [ "$(grep -c '^exit=0$' <<<"$outc")" = 1 ] &&
    [ "$(printf '%s\n%s\n' "$outs" "$outc" | grep -c "$pat")" = "$count" ] && ok=1
  record "$name" $ok "--- server (VM$sv): $srv" "$outs" "--- client (VM$cv): $cli" "$outc"
}
rv="$g/rverbs"
# rping: 10 pings of 5000 bytes (RDMA READ and WRITE), checked (-V); "ping data" lines
# are the client's 10 and the server's 10. rverbs finds rxe0 by the address, or --dev.
port=$((port + 1))
cm_pair rping-rxe0-rv-server $port 1 "$rv rping -s -a $vm4 -p $port -S 5000 -v" \
  1 "rping -c -a $vm4 -p $port -S 5000 -C 10 -v -V" "ping data: rdma-ping-" 20
port=$((port + 1))
cm_pair rping-rxe0-rv-client $port 1 "rping -s -a $vm4 -p $port -S 5000 -v" \
  1 "$rv rping -c --dev rxe0 -a $vm4 -p $port -S 5000 -C 10 -v -V" "ping data: rdma-ping-" 20
# udaddy (UD through the UDP port space, SIDR; its port is fixed): "return status 0" on
# both sides.
cm_pair udaddy-rxe0-rv-server 7174 1 "$rv udaddy --dev rxe0 -b $vm4 -C 10" \
  1 "udaddy -s $vm4 -C 10" "return status 0" 2
cm_pair udaddy-rxe0-rv-client 7174 1 "udaddy -b $vm4 -C 10" \
  1 "$rv udaddy --dev rxe0 -s $vm4 -C 10" "return status 0" 2
port=$((port + 1))
cm_pair ucmatose-rxe0-rv-server $port 1 "$rv ucmatose --dev rxe0 -b $vm4 -c 2 -C 10 -p $port" \
  1 "ucmatose -s $vm4 -c 2 -C 10 -p $port" "return status 0" 2
port=$((port + 1))
cm_pair ucmatose-rxe0-rv-client $port 1 "ucmatose -b $vm4 -c 2 -C 10 -p $port" \
  1 "$rv ucmatose --dev rxe0 -s $vm4 -c 2 -C 10 -p $port" "return status 0" 2
# Against the second guest: the CM's MADs and the data on the wire.
if [ "${HW_VM2:-1}" != 0 ] && guest2 true >/dev/null 2>&1; then
  port=$((port + 1))
  cm_pair rping-vm2-rv-server $port 1 "$rv rping -s -a $vm4 -p $port -S 5000 -v" \
    2 "rping -c -a $vm4 -p $port -S 5000 -C 10 -v -V" "ping data: rdma-ping-" 20
  port=$((port + 1))
  cm_pair rping-vm2-rv-client $port 2 "rping -s -a 10.77.0.3 -p $port -S 5000 -v" \
    1 "$rv rping -c -a 10.77.0.3 -p $port -S 5000 -C 10 -v -V" "ping data: rdma-ping-" 20
  cm_pair udaddy-vm2-rv-server 7174 1 "$rv udaddy --dev rxe0 -b $vm4 -C 10" \
    2 "udaddy -s $vm4 -C 10" "return status 0" 2
  cm_pair udaddy-vm2-rv-client 7174 2 "udaddy -b 10.77.0.3 -C 10" \
    1 "$rv udaddy --dev rxe0 -s 10.77.0.3 -C 10" "return status 0" 2
else
  want rping-vm2 && echo "SKIP rping-vm2-*, udaddy-vm2-*: no second guest"
fi
# Without the system's librdmacm the CM on rxe0 fails and names it.
if want cm-no-librdmacm; then
  out=$(guest -t 60 "RVERBS_LIBRDMACM=/nonexistent/librdmacm.so.1 timeout 30 $rv rping -s --dev rxe0 -p 1; echo exit=\$?" 2>&1)
  ok=0
  grep -q '^exit=1$' <<<"$out" && grep -q 'librdmacm.so.1' <<<"$out" && ok=1
  record cm-no-librdmacm-rxe0 $ok "$out"
fi

if want xproc; then
  out=$(guest -t 900 "cd /tmp && XPROC_HW_DEVICE=rxe0 timeout 850 $g/xproc 2>&1 | tail -20" 2>&1)
  ok=0
  grep -q '^test result: ok\. [1-9]' <<<"$out" && ok=1
  record xproc-rxe0 $ok "$out"
fi

# Last: it sets the guest's eth0 down and up (rxe0's port events).
if want feature-port; then
  out=$(guest -t 120 "cd /tmp && RVERBS_TEST_DEVICE=rxe0 RVERBS_TEST_PORT_FLAP=eth0 timeout 100 $g/device_features --exact port_events_follow_the_netdev --ignored --nocapture --test-threads=1 2>&1 | tail -30" 2>&1)
  ok=0
  # A link down flushes eth0's static IPv6 address: put it back.
  guest "ip -6 addr add $vm6/64 dev eth0 nodad 2>/dev/null; true" >/dev/null 2>&1
  grep -q '^test result: ok\. 1 passed' <<<"$out" && ok=1
  record feature-port_events_follow_the_netdev-rxe0 $ok "$out"
fi

finish
