//! A READ or an atomic followed by a SEND, posted together: the responder answers
//! both in one flush (READ RESPONSE or ATOMIC ACKNOWLEDGE with PSN n, then the ACK of
//! PSN n+1), which on the loopback device leaves as one `UDP_SEGMENT` train. The
//! requester must handle them in that order: they are one stream in the responder's
//! PSN order (IBTA 9.7.5.1.3), and an ACK of n+1 seen while the READ of n is
//! outstanding is an implied NAK. It used to be handled first (every ACK of a train
//! went first): each READ was counted a ghost and redone after a retransmit timeout
//! (~67 ms), and the SEND completed only then.

mod common;
use common::*;
use rverbs::*;

const ROUNDS: u64 = 40;

/// A's counters that an ACK handled ahead of its READ RESPONSE or ATOMIC ACKNOWLEDGE
/// moves (none of them moves for any other reason over loopback, whatever the load:
/// loopback does not reorder, and a retransmit is answered in PSN order too). A
/// tail-loss probe, sent when an answer is late on a loaded host, is answered a second
/// time: those answers, one per probe at most, are not out of order.
fn out_of_order(c: &Counters) -> (u64, u64) {
    (
        c.implied_nak_waits,
        c.rx_ghost_responses.saturating_sub(c.tail_loss_probes),
    )
}

#[test]
fn a_response_and_the_ack_behind_it_keep_their_order() {
    let dev = device(None).unwrap();
    let (a, b) = connected_pair(&dev, 4096, 4096);
    b.mr.write(0, &[7u8; 64]);
    b.mr.write(256, &5u64.to_le_bytes());
    for i in 0..ROUNDS {
        b.qp.post_recv(2 * i, &[b.mr.slice(128..192)]).unwrap();
        b.qp.post_recv(2 * i + 1, &[b.mr.slice(128..192)]).unwrap();
        a.mr.write(0, &[0u8; 64]);
        a.qp.post_send_list(&[
            SendRequest::read(4 * i, &[a.mr.slice(0..64)], b.mr.remote(0..64)),
            SendRequest::send(4 * i + 1, &[a.mr.slice(64..72)]),
        ])
        .unwrap();
        for want in [4 * i, 4 * i + 1] {
            let wc = wait(&a.cq);
            assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, want));
        }
        let mut got = [0u8; 64];
        a.mr.read(0, &mut got);
        assert_eq!(got, [7u8; 64], "round {i}: the READ's data");
        a.qp.post_send_list(&[
            SendRequest::fetch_add(4 * i + 2, a.mr.slice(72..80), b.mr.remote(256..264), 1),
            SendRequest::send(4 * i + 3, &[a.mr.slice(64..72)]),
        ])
        .unwrap();
        for want in [4 * i + 2, 4 * i + 3] {
            let wc = wait(&a.cq);
            assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, want));
        }
        let mut old = [0u8; 8];
        a.mr.read(72, &mut old);
        assert_eq!(
            u64::from_le_bytes(old),
            5 + i,
            "round {i}: the atomic's result"
        );
        for _ in 0..2 {
            assert_eq!(wait(&b.cq).status, WcStatus::Success);
        }
    }
    let c = a.ctx.counters();
    assert_eq!(
        out_of_order(&c),
        (0, 0),
        "(implied NAK waits, ghost responses) at the requester: {c:?}"
    );
}
