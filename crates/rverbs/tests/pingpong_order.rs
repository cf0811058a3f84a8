//! An 8-byte RC ping-pong between two contexts on the loopback device, each side
//! sleeping in `Cq::wait` with no spin (the path that receives in `recvmmsg` itself).
//! On the loopback device a deferred ACK may leave behind the reply posted after it,
//! in one `UDP_SEGMENT` buffer; the receiver must still see it first: the echoing side
//! gets the completion of its echo before the next message, as it would from a peer
//! that acknowledges on receipt.

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
fn ping_pong_keeps_ack_before_next_request() {
    let dev = device(None).unwrap();
    let (a, b) = connected_pair(&dev, 4096, 4096);
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
