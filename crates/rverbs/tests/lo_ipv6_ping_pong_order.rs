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
use std::time::{Duration, Instant};

const ROUNDS: u64 = 300;

/// The next completion, sleeping in `Cq::wait` (no spin); fails after 10 s.
fn next(cq: &Cq) -> Wc {
    let start = Instant::now();
    let mut wc = [Wc::default()];
    loop {
        let n = cq
            .wait(&mut wc, Duration::ZERO, Duration::from_millis(1))
            .unwrap();
        if n == 1 {
            assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
            return wc[0];
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no completion in 10 s"
        );
    }
}

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
    let server = std::thread::spawn(move || {
        b.qp.post_recv(0, &[b.mr.slice(0..64)]).unwrap();
        for i in 0..ROUNDS {
            let wc = next(&b.cq);
            assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Recv, 8), "round {i}");
            let mut m = [0u8; 8];
            b.mr.read(0, &mut m);
            assert_eq!(u64::from_le_bytes(m), i, "round {i}: the message");
            b.qp.post_recv(i + 1, &[b.mr.slice(0..64)]).unwrap();
            b.mr.write(64, &m);
            b.qp.post_send(&SendRequest::send(i, &[b.mr.slice(64..72)]))
                .unwrap();
            // The client's next message follows our echo's ACK: the echo completes
            // first.
            let wc = next(&b.cq);
            assert_eq!((wc.opcode, wc.wr_id), (WcOpcode::Send, i), "round {i}");
        }
    });
    a.qp.post_recv(0, &[a.mr.slice(0..64)]).unwrap();
    for i in 0..ROUNDS {
        a.mr.write(64, &i.to_le_bytes());
        a.qp.post_send(&SendRequest::send(i, &[a.mr.slice(64..72)]))
            .unwrap();
        let (mut sent, mut echoed) = (false, false);
        while !(sent && echoed) {
            let wc = next(&a.cq);
            match wc.opcode {
                WcOpcode::Send => sent = true,
                WcOpcode::Recv => {
                    let mut m = [0u8; 8];
                    a.mr.read(0, &mut m);
                    assert_eq!(u64::from_le_bytes(m), i, "round {i}: the echo");
                    a.qp.post_recv(i + 1, &[a.mr.slice(0..64)]).unwrap();
                    echoed = true;
                }
                o => panic!("round {i}: unexpected {o:?}"),
            }
        }
    }
    server.join().unwrap();
}
