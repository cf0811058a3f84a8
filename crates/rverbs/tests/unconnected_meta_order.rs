//! The ping-pong order of `pingpong_order.rs` with a non-default TTL on a path that
//! has no connected socket (`conn_tx.rs`: all `MAX_CONNECTED` = 64 slots are held by
//! paths in use), so the device's unconnected socket sends each datagram on its own
//! with its TTL in a control message. A deferred ACK that `trains` swapped behind the
//! reply posted after it must still leave first: sent on its own, it is a datagram of
//! its own at the receiver, which restores the order only inside a train. It used to
//! leave after the reply, and the echoing side got the next message before its echo's
//! completion.

mod common;
use common::*;
use rverbs::*;

const ROUNDS: u64 = 200;
/// Paths with a connected socket at most (`conn_tx::MAX_CONNECTED`).
const MAX_CONNECTED: u8 = 64;
/// The ping-pong's TTL; the paths that take the slots use 100, 101, ...
const TTL: u8 = 42;

#[test]
fn unconnected_sends_with_a_ttl_keep_ack_before_next_request() {
    let dir = std::env::temp_dir().join(format!("rverbs-unconn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("a.pcap");
    let opts = OpenOptions {
        pcap: Some(pcap.clone()),
        ..OpenOptions::default()
    };
    // One context: both ends of every QP pair send along the same path (its address
    // to itself), one path per TTL.
    let ctx = Context::open_with(device(None).unwrap(), &opts).unwrap();
    let with_ttl = |hop_limit| ConnectOpts {
        hop_limit,
        ..ConnectOpts::default()
    };
    // Every connected-socket slot taken, by paths in use (one SEND each).
    let mut fillers = Vec::new();
    for i in 0..MAX_CONNECTED {
        let (a, b) = (end(ctx.clone(), 64), end(ctx.clone(), 64));
        connect(&a, &b, &with_ttl(100 + i));
        b.qp.post_recv(0, &[b.mr.slice(0..8)]).unwrap();
        a.qp.post_send(&SendRequest::send(0, &[a.mr.slice(0..8)]))
            .unwrap();
        assert_eq!(wait(&b.cq).status, WcStatus::Success);
        assert_eq!(wait(&a.cq).status, WcStatus::Success);
        fillers.push((a, b));
    }
    let (a, b) = (end(ctx.clone(), 4096), end(ctx.clone(), 4096));
    connect(&a, &b, &with_ttl(TTL));
    ping_pong_in_order(a, b, ROUNDS);
    drop((fillers, ctx));
    // The ping-pong took the path the test means: its datagrams left from port 4791
    // (the unconnected socket), not from a connected socket's port.
    let cap = std::fs::read(&pcap).unwrap();
    let (mut off, mut ours) = (24, 0);
    while off + 16 <= cap.len() {
        let n = u32::from_le_bytes(cap[off + 8..off + 12].try_into().unwrap()) as usize;
        let ip = &cap[off + 16..off + 16 + n];
        if ip[8] == TTL {
            assert_eq!(u16::from_be_bytes([ip[20], ip[21]]), 4791, "source port");
            ours += 1;
        }
        off += 16 + n;
    }
    assert!(ours >= 2 * ROUNDS, "{ours} datagrams with TTL {TTL}");
    let _ = std::fs::remove_dir_all(&dir);
}
