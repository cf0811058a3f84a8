//! The ping-pong order of `pingpong_order.rs` over `::1`: a deferred ACK that leaves
//! behind the reply posted after it, in one `UDP_SEGMENT` buffer, must still be seen
//! first by the receiver, which needs the train whole (`UDP_GRO`) to restore the
//! order. The IPv6 socket used to lack `UDP_GRO`: the kernel cut the train up, the
//! request was handled before its ACK, and the echoing side got the next message
//! before its echo's completion (within a few rounds). Both QPs are on one context,
//! as only one context can have `::1`. (Its own test binary: it sets
//! `RVERBS_LOOPBACK_IPV6` for the process.)

mod common;
use common::*;
use rverbs::*;

const ROUNDS: u64 = 300;

#[test]
fn ping_pong_over_ipv6_localhost_keeps_ack_before_next_request() {
    if std::net::UdpSocket::bind("[::1]:4791").is_err() {
        eprintln!("SKIPPED: [::1]:4791 is taken (another process) or no IPv6");
        return;
    }
    std::env::set_var("RVERBS_LOOPBACK_IPV6", "1");
    let ctx = device(None).unwrap().open().unwrap();
    std::env::remove_var("RVERBS_LOOPBACK_IPV6");
    let lo6: Gid = std::net::Ipv6Addr::LOCALHOST.into();
    let Some(idx) = (0..4u8).find(|&i| ctx.gid(i) == Some(lo6)) else {
        eprintln!("SKIPPED: ::1 was taken before the context bound it");
        return;
    };
    let (a, b) = (end(ctx.clone(), 4096), end(ctx, 4096));
    let peer = |q: &Qp| PeerInfo {
        qpn: q.qp_num(),
        psn: 0,
        gid: lo6,
    };
    let o = ConnectOpts {
        sgid_index: idx,
        ..ConnectOpts::default()
    };
    a.qp.connect(&peer(&b.qp), &o).unwrap();
    b.qp.connect(&peer(&a.qp), &o).unwrap();
    ping_pong_in_order(a, b, ROUNDS);
}
