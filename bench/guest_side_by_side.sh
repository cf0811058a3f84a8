#!/bin/bash
# Issue #7 "Also report": inside ONE rxe-peer guest, kernel rxe (ib_send_bw / ib_send_lat
# over rxe0 loopback) against rverbs perf send bw|lat (loopback soft device), then the
# same sizes over TCP. rxe holds UDP 4791 on every address, so rxe0 and rdma_rxe are
# removed before the rverbs runs. Run in the guest with the rverbs binary in /mnt/host:
#   cp target/bench-release/rverbs /var/tmp/rxe-peer/share/perf-helper/ && cp bench/guest_side_by_side.sh /var/tmp/rxe-peer/share/perf-helper/side.sh
#   flock /tmp/rxe-peer.lock -c "$T/start.sh 1 && $T/run.sh -v 1 -t 540 \"bash /mnt/host/perf-helper/side.sh\"; $T/stop.sh"
# Side by side inside one guest: kernel rxe (loopback on rxe0) vs rverbs (loopback soft device).
B=/mnt/host/perf-helper/rverbs
N=${N:-1000}
echo "=== rxe: ib_send_bw -d rxe0 -x 1 -F -n $N -s 65536 10.77.0.2"
ib_send_bw -d rxe0 -x 1 -F -n $N -s 65536 > /tmp/sbw_srv.txt 2>&1 &
sleep 1
timeout 120 ib_send_bw -d rxe0 -x 1 -F -n $N -s 65536 10.77.0.2 | tail -3
wait
echo "=== rxe: ib_send_lat -d rxe0 -x 1 -F -n $N -s 8 10.77.0.2"
ib_send_lat -d rxe0 -x 1 -F -n $N -s 8 > /tmp/slat_srv.txt 2>&1 &
sleep 1
timeout 120 ib_send_lat -d rxe0 -x 1 -F -n $N -s 8 10.77.0.2 | tail -4
wait
echo "=== removing rxe0 and rdma_rxe (its UDP socket holds port 4791 on every address)"
rdma link delete rxe0; rmmod rdma_rxe; lsmod | grep -c rxe
$B devinfo | grep -E "hca_id|active_mtu"
echo "=== rverbs: perf send bw -n $N -s 65536 -m 1024 (loopback soft device)"
$B perf send bw -n $N -s 65536 -m 1024 -p 18600 > /tmp/rbw_srv.txt 2>&1 &
sleep 1
timeout 120 $B perf send bw -n $N -s 65536 -m 1024 -p 18600 localhost
wait; tail -2 /tmp/rbw_srv.txt
echo "=== rverbs: perf send lat -n $N -s 8"
$B perf send lat -n $N -s 8 -p 18601 > /tmp/rlat_srv.txt 2>&1 &
sleep 1
timeout 120 $B perf send lat -n $N -s 8 -p 18601 localhost
wait; tail -2 /tmp/rlat_srv.txt
echo "=== rverbs: perf tcp bw / lat (same guest)"
$B perf tcp bw -n $N -s 65536 -p 18602 > /dev/null 2>&1 & sleep 1; timeout 120 $B perf tcp bw -n $N -s 65536 -p 18602 localhost; wait
$B perf tcp lat -n $N -s 8 -p 18603 > /dev/null 2>&1 & sleep 1; timeout 120 $B perf tcp lat -n $N -s 8 -p 18603 localhost; wait
