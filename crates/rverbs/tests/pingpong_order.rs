//! An 8-byte RC ping-pong between two contexts on the loopback device, each side
//! sleeping in `Cq::wait` with no spin (the path that receives in `recvmmsg` itself).
//! On the loopback device a deferred ACK may leave behind the reply posted after it,
//! in one `UDP_SEGMENT` buffer; the receiver must still see it first: the echoing side
//! gets the completion of its echo before the next message, as it would from a peer
//! that acknowledges on receipt.

mod common;
use common::*;
use rverbs::*;

const ROUNDS: u64 = 300;

#[test]
fn ping_pong_keeps_ack_before_next_request() {
    let dev = device(None).unwrap();
    let (a, b) = connected_pair(&dev, 4096, 4096);
    ping_pong_in_order(a, b, ROUNDS);
}
