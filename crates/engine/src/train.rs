//! Trains: which datagrams may leave together, and in which order the datagrams of
//! a received train reach the engine.
//!
//! A carrier that sends trains (UDP `UDP_SEGMENT` buffers, one doorbell for many
//! records) asks [`plan`] how to group a batch; one that receives them hands their
//! datagrams to the engine in [`RxOrder`]. Both carry one IBTA rule: requests and
//! responses are independent streams (IBTA 9.7.5.1), so an ACK may ride behind the
//! request after it, but never behind a response of its own stream, whose PSN order
//! the receiver must see (an ACK seen ahead of a READ's response is an implied NAK,
//! IBTA 9.7.5.1.3).

use crate::net::Transmit;
use rverbs_wire::opcode::Opcode;
use std::net::IpAddr;

/// One train: `count` datagrams of `order[first..first + count]` (see [`plan`]), to
/// `dst`, all `segment` bytes long but the last (`last_len`, no longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Train {
    /// Where the train goes.
    pub dst: IpAddr,
    /// Its first datagram's position in `order`.
    pub first: usize,
    /// How many datagrams it holds.
    pub count: usize,
    /// The segment size when `count > 1` (0 for one datagram).
    pub segment: u16,
    /// The first datagram's length.
    pub first_len: usize,
    /// The last datagram's length.
    pub last_len: usize,
    /// All its bytes.
    pub bytes: usize,
}

/// What one train may hold: the carrier's limits.
#[derive(Debug, Clone, Copy)]
pub struct TrainLimits {
    /// Whether trains of more than one datagram are sent at all.
    pub trains: bool,
    /// Most datagrams in one train.
    pub max_segments: usize,
    /// Most bytes in one train.
    pub max_bytes: usize,
}

fn is_ack(t: &Transmit) -> bool {
    t.payload.first() == Some(&Opcode::RC_ACKNOWLEDGE.0)
}

fn is_req(t: &Transmit) -> bool {
    t.payload.first().is_some_and(|&o| is_request(o))
}

/// Groups the datagrams `mine` (indices into `ts`, in the engine's order) into
/// trains of same-size datagrams to one destination with the same `key` (what the
/// carrier must send alike: TTL and TOS), in `trains`, with the datagrams' order in
/// `order`. With `swap`, an ACK followed by a request to the same peer that is at
/// least as long swaps places with it and rides as the last segment of the
/// request's train (a ping-pong's deferred ACK and its reply: one buffer, one
/// wake-up of the peer); the receiver undoes it ([`RxOrder`]). Never behind a
/// response (IBTA 9.7.5.1.3). False when a swapped ACK did not join its request's
/// train: plan again without `swap`.
pub fn plan<K: PartialEq>(
    ts: &[Transmit],
    mine: &[usize],
    key: impl Fn(&Transmit) -> K,
    limits: TrainLimits,
    swap: bool,
    order: &mut Vec<usize>,
    trains: &mut Vec<Train>,
) -> bool {
    order.clear();
    trains.clear();
    let mut i = 0;
    while i < mine.len() {
        let t = &ts[mine[i]];
        let pair = if swap && is_ack(t) {
            mine.get(i + 1).copied().filter(|&u| {
                let u = &ts[u];
                u.dst == t.dst && key(u) == key(t) && is_req(u) && u.len() >= t.len()
            })
        } else {
            None
        };
        let group = match pair {
            Some(u) => {
                i += 2;
                [u, mine[i - 2]]
            }
            None => {
                i += 1;
                [mine[i - 1], usize::MAX]
            }
        };
        for (k, &at) in group.iter().enumerate() {
            if at == usize::MAX {
                break;
            }
            let t = &ts[at];
            let len = t.len();
            order.push(at);
            if let Some(last) = trains.last_mut() {
                let seg = last.first_len;
                if limits.trains
                    && last.dst == t.dst
                    && key(&ts[order[last.first]]) == key(t)
                    && last.last_len == seg
                    && len <= seg
                    && last.count < limits.max_segments
                    && last.bytes + len <= limits.max_bytes
                    && seg <= usize::from(u16::MAX)
                {
                    last.count += 1;
                    last.last_len = len;
                    last.bytes += len;
                    last.segment = seg as u16;
                    continue;
                }
            }
            if k == 1 {
                // The swapped ACK would travel alone, after its request.
                return false;
            }
            trains.push(Train {
                dst: t.dst,
                first: order.len() - 1,
                count: 1,
                segment: 0,
                first_len: len,
                last_len: len,
                bytes: len,
            });
        }
    }
    true
}

/// The order in which the datagrams of one received buffer (a coalesced `UDP_GRO`
/// train, or one datagram) are handled: the train's order, but for an ACK right behind
/// a run of requests, which goes first: the peer may have swapped it behind the request
/// it queued after it ([`plan`]). Requests and responses are independent
/// streams (IBTA 9.7.5.1), so that is an order the peer could have sent. Never past a
/// response, though: READ RESPONSEs, ATOMIC ACKNOWLEDGEs, ACKs and NAKs are one stream
/// in the responder's PSN order, and an ACK handled before the READ RESPONSE of a lower
/// PSN reads as an implied NAK (IBTA 9.7.5.1.3): the READ is redone after a
/// retransmit timeout.
pub struct RxOrder {
    /// The next datagram in the train's order, and the buffer's end.
    at: usize,
    end: usize,
    /// The datagrams' size (the last may be shorter; a lone datagram's own size).
    seg: usize,
    /// The end of the run of requests last looked through for an ACK behind it.
    scanned: usize,
    /// Where the ACK handled ahead of its run is (skipped when its turn comes).
    hoisted: Option<usize>,
}

impl RxOrder {
    /// The buffer of `len` bytes at `offset`, a train of `segment`-byte datagrams
    /// (0: one datagram).
    pub fn new(offset: usize, len: usize, segment: usize) -> RxOrder {
        RxOrder {
            at: offset,
            end: offset + len,
            seg: if segment > 0 { segment } else { len.max(1) },
            scanned: offset,
            hoisted: None,
        }
    }

    /// Where the next datagram to handle is in `buf` (the receive buffer, which may
    /// change between calls only inside the datagrams already returned).
    pub fn next(&mut self, buf: &[u8]) -> Option<std::ops::Range<usize>> {
        let step = |k: usize| (k + self.seg).min(self.end);
        loop {
            let at = self.at;
            if at >= self.end {
                return None;
            }
            if self.hoisted == Some(at) {
                self.hoisted = None;
                self.at = step(at);
                continue;
            }
            if at >= self.scanned && is_request(buf[at]) {
                let mut k = step(at);
                while k < self.end && is_request(buf[k]) {
                    k = step(k);
                }
                self.scanned = k;
                if k < self.end && buf[k] == Opcode::RC_ACKNOWLEDGE.0 {
                    // The run's requests follow it (`at` again, not scanned twice).
                    self.hoisted = Some(k);
                    return Some(k..step(k));
                }
            }
            self.at = step(at);
            return Some(at..self.at);
        }
    }
}

/// Whether a packet with this BTH opcode is a request (SEND, WRITE, READ request,
/// atomics, ... of any transport; a MAD is a UD SEND). Responses (READ RESPONSE, ATOMIC
/// ACKNOWLEDGE, ACKNOWLEDGE), CNPs and opcodes rverbs does not know are not.
pub fn is_request(opcode: u8) -> bool {
    Opcode(opcode).info().is_some_and(|i| i.is_request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The datagrams of a received buffer (`seg`-byte segments, the last `last` bytes;
    /// segment `i`'s first byte is `ops[i]`) in the order `RxOrder` hands them out,
    /// by index.
    fn handled(ops: &[Opcode], seg: usize, last: usize) -> Vec<usize> {
        let len = (ops.len() - 1) * seg + last;
        // At an offset, as in a batch buffer.
        let mut buf = vec![0u8; 7 + len];
        for (i, o) in ops.iter().enumerate() {
            buf[7 + i * seg] = o.0;
        }
        let mut order = RxOrder::new(7, len, if ops.len() > 1 { seg } else { 0 });
        let mut got = Vec::new();
        while let Some(d) = order.next(&buf) {
            assert_eq!(d.len(), if d.end == 7 + len { last } else { seg });
            assert_eq!((d.start - 7) % seg, 0);
            got.push((d.start - 7) / seg);
        }
        got
    }

    /// A train's ACK is handled ahead of the requests right before it (the sender's
    /// swap, undone), never ahead of a response: READ RESPONSE, ATOMIC ACKNOWLEDGE and
    /// ACKNOWLEDGE are one stream in the responder's PSN order (IBTA 9.7.5.1.3).
    #[test]
    fn a_train_s_ack_moves_ahead_of_requests_only() {
        const ACK: Opcode = Opcode::RC_ACKNOWLEDGE;
        const SEND: Opcode = Opcode::RC_SEND_ONLY;
        const WRITE: Opcode = Opcode::RC_RDMA_WRITE_ONLY;
        const READ_REQ: Opcode = Opcode::RC_RDMA_READ_REQUEST;
        const READ_RESP: Opcode = Opcode::RC_RDMA_READ_RESPONSE_ONLY;
        const ATOMIC_ACK: Opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
        // The ping-pong's swapped pair: the ACK first.
        assert_eq!(handled(&[SEND, ACK], 24, 20), [1, 0]);
        assert_eq!(handled(&[READ_REQ, WRITE, ACK], 32, 20), [2, 0, 1]);
        // Responses keep their order: the READ's data before the ACK of the SEND
        // after it (the bug: ACK 1 first, an implied NAK of the READ).
        assert_eq!(handled(&[READ_RESP, ACK], 84, 20), [0, 1]);
        assert_eq!(handled(&[ATOMIC_ACK, ACK], 28, 20), [0, 1]);
        assert_eq!(handled(&[ACK, ACK], 20, 20), [0, 1]);
        // Past requests, not past the response before them.
        assert_eq!(handled(&[READ_RESP, SEND, ACK], 84, 20), [0, 2, 1]);
        assert_eq!(
            handled(&[SEND, ACK, READ_RESP, SEND, WRITE, ACK, SEND], 84, 24),
            [1, 0, 2, 5, 3, 4, 6]
        );
        // A CNP or an opcode not known is no request: nothing moves past it.
        assert_eq!(handled(&[Opcode::CNP, ACK], 32, 20), [0, 1]);
        assert_eq!(handled(&[Opcode(0x1f), ACK], 32, 20), [0, 1]);
        // One datagram; no datagram.
        assert_eq!(handled(&[ACK], 20, 20), [0]);
        let mut none = RxOrder::new(3, 0, 0);
        assert_eq!(none.next(&[0; 8]), None);
    }

    fn packet(op: Opcode, len: usize) -> Transmit {
        let mut payload = vec![0u8; len];
        payload[0] = op.0;
        Transmit {
            src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            dst: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)),
            src_port: 4791,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            roce_v1: false,
            payload,
            body: None,
        }
    }

    /// The sender swaps an ACK behind the request after it (one buffer, the ACK as its
    /// last segment), never behind a response of its own stream.
    #[test]
    fn an_ack_swaps_places_with_a_request_only() {
        let trains = |ts: &[Transmit]| {
            let (mut order, mut out) = (Vec::new(), Vec::new());
            let mine: Vec<usize> = (0..ts.len()).collect();
            let limits = TrainLimits {
                trains: true,
                max_segments: 64,
                max_bytes: 65_000,
            };
            assert!(plan(
                ts,
                &mine,
                |t| t.hop_limit,
                limits,
                true,
                &mut order,
                &mut out
            ));
            let counts: Vec<usize> = out.iter().map(|m| m.count).collect();
            (order, counts)
        };
        let ack = || packet(Opcode::RC_ACKNOWLEDGE, 20);
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_SEND_ONLY, 24)]),
            (vec![1, 0], vec![2])
        );
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_RDMA_READ_REQUEST, 32)]),
            (vec![1, 0], vec![2])
        );
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 84)]),
            (vec![0, 1], vec![1, 1])
        );
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_ATOMIC_ACKNOWLEDGE, 28)]),
            (vec![0, 1], vec![1, 1])
        );
        // A response then its ACK: one train in their order.
        assert_eq!(
            trains(&[packet(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 84), ack()]),
            (vec![0, 1], vec![2])
        );
    }
}
