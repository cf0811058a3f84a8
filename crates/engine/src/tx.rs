//! Building a QP's packets into datagrams: headers, payload (copied, or lent from
//! registered memory), pad, ICRC and the IP/UDP addressing (RoCE v2 / v1).

use crate::memory::Memory;
use crate::net::{self, Transmit};
use crate::qp::{Ctx, Qp};
use crate::types::*;
use rverbs_wire::bth::Bth;
use rverbs_wire::grh::Gid;
use rverbs_wire::packet::PacketRepr;
use std::sync::Arc;

impl Qp {
    /// Serialises a packet for `av` and fills its ICRC.
    pub(crate) fn transmit(
        &self,
        repr: &PacketRepr<'_>,
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        let body = repr.payload;
        self.transmit_with(repr, body.len(), |buf| buf.copy_from_slice(body), av, ctx)
    }

    /// [`Qp::transmit`] of a packet whose `len` payload bytes `fill` writes straight
    /// into the datagram (`repr.payload` is empty), saving a staging buffer and a copy
    /// per packet.
    pub(crate) fn transmit_with(
        &self,
        repr: &PacketRepr<'_>,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        self.transmit_from(repr, len, fill, None, av, ctx)
    }

    /// [`Qp::transmit_with`] of a packet whose payload is also `len` bytes at `offset`
    /// of `mem`: with [`crate::Config::lend_payloads`], a RoCE v2 packet of at least
    /// [`crate::LEND_MIN`] payload bytes leaves them there ([`Transmit::body`]) and
    /// `fill` is not called.
    pub(crate) fn transmit_from(
        &self,
        repr: &PacketRepr<'_>,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        lend: Option<(&Arc<dyn Memory>, usize)>,
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        // (The requester's and responder's reprs come without a payload: used as they
        // are, not copied.)
        let stripped;
        let empty = if repr.payload.is_empty() {
            repr
        } else {
            stripped = PacketRepr {
                payload: &[],
                ..*repr
            };
            &stripped
        };
        let hdr = empty.buffer_len() - rverbs_wire::icrc::ICRC_LEN;
        let pad = len.wrapping_neg() & 3;
        // A recycled buffer when the driver gave some back: no allocation, and its pages
        // are already mapped. Its old bytes are not cleared first (a data stream's
        // buffers come back at full length, and zeroing 4 KiB per packet only to
        // overwrite it showed in profiles): every byte is written below — the header
        // room zeroed and emitted, the payload by `fill` (which writes all of it), the
        // pad and ICRC zeroed.
        let roce_v1 = Self::roce_v1(av, ctx);
        // (`lend_payloads` holds only with `sender_fills_icrc`: the driver hashes the
        // body into the ICRC as it sends it.)
        let lend = lend.filter(|_| ctx.lend_payloads && !roce_v1 && len >= crate::LEND_MIN);
        let inline = if lend.is_some() { 0 } else { len };
        let n = hdr + inline + pad + rverbs_wire::icrc::ICRC_LEN;
        let mut payload = ctx.spare.borrow_mut().pop().unwrap_or_default();
        if payload.len() < n {
            payload.resize(n, 0);
        } else {
            payload.truncate(n);
        }
        payload[..hdr].fill(0);
        // Headers (and a zero ICRC, overwritten below). Our own Reprs always match
        // their opcode; a failure here is a bug, so send what we have rather than
        // panic in the data path.
        let _ = empty.emit(&mut payload[..hdr + rverbs_wire::icrc::ICRC_LEN]);
        if inline > 0 {
            fill(&mut payload[hdr..hdr + inline]);
        }
        if len > 0 {
            Bth::new_unchecked(&mut payload[..rverbs_wire::bth::BTH_LEN]).set_pad(pad as u8);
        }
        payload[hdr + inline..].fill(0);
        if self.sr_marks(&payload) {
            Bth::new_unchecked(&mut payload[..rverbs_wire::bth::BTH_LEN])
                .set_resv7(crate::selective::SR_MARK);
        }
        let body = lend.map(|(mem, offset)| net::Body::new(mem.clone(), offset, len, hdr));
        self.addressed(payload, body, roce_v1, av, ctx)
    }

    /// Whether `av`'s source GID is a RoCE v1 entry.
    pub(crate) fn roce_v1(av: &AddressVector, ctx: &Ctx<'_>) -> bool {
        ctx.gid_roce_v1
            .get(usize::from(av.sgid_index))
            .copied()
            .unwrap_or(false)
    }

    /// The [`Transmit`] of a packet built in `payload` (BTH through a zero ICRC, `body`
    /// aside): addressed along `av`, its ICRC filled unless the driver fills it.
    pub(crate) fn addressed(
        &self,
        mut payload: Vec<u8>,
        body: Option<net::Body>,
        roce_v1: bool,
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        let src = net::gid_to_ip(
            ctx.gids
                .get(usize::from(av.sgid_index))
                .copied()
                .unwrap_or(Gid::ZERO),
        );
        let dst = net::gid_to_ip(av.dgid);
        let src_port = ctx.src_port.unwrap_or(self.src_port);
        if roce_v1 || !ctx.sender_fills_icrc {
            net::fill_icrc_for_cached(
                &mut ctx.icrc.borrow_mut(),
                roce_v1,
                src,
                dst,
                src_port,
                &mut payload,
            );
        }
        Transmit {
            src,
            dst,
            src_port,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
            flow_label: av.flow_label,
            roce_v1,
            payload,
            body,
        }
    }

    /// An RC ACKNOWLEDGE (BTH, AETH, ICRC: 20 bytes) written straight into a buffer:
    /// the same bytes as [`Qp::transmit`] of its [`PacketRepr`] (a test checks), without
    /// the generic header walk, for the packet every signaled message costs.
    pub(crate) fn ack_packet(
        &self,
        bth: &rverbs_wire::bth::BthRepr,
        aeth: rverbs_wire::ext::AethRepr,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        use rverbs_wire::bth::BTH_LEN;
        const AETH_LEN: usize = 4;
        let av = self.peer_av();
        let mut payload = ctx.spare.borrow_mut().pop().unwrap_or_default();
        payload.clear();
        payload.resize(BTH_LEN + AETH_LEN + rverbs_wire::icrc::ICRC_LEN, 0);
        bth.emit(&mut Bth::new_unchecked(&mut payload[..BTH_LEN]));
        aeth.emit(&mut payload[BTH_LEN..BTH_LEN + AETH_LEN]);
        if self.sr_marks(&payload) {
            Bth::new_unchecked(&mut payload[..BTH_LEN]).set_resv7(crate::selective::SR_MARK);
        }
        self.addressed(payload, None, Self::roce_v1(&av, ctx), &av, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QpInit;
    use crate::counters::Counters;
    use crate::modify::QpCap;
    use crate::qp::{DEFAULT_PKEY, MAX_UNACKED_PSNS};
    use crate::slab::Slab;
    use rverbs_wire::bth::BthRepr;
    use rverbs_wire::ext::{AethRepr, NakCode, RethRepr, Syndrome};
    use rverbs_wire::opcode::Opcode;
    use rverbs_wire::psn::Psn;
    use std::collections::VecDeque;

    /// `transmit_with` builds the same datagram as emitting the whole packet at once,
    /// for every pad length and with and without extension headers.
    #[test]
    fn transmit_with_matches_a_whole_emit() {
        let qp = Qp::new(
            0x11,
            &QpInit {
                pd: PdId(0),
                qp_type: QpType::Rc,
                send_cq: CqId(0),
                recv_cq: CqId(0),
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: false,
            },
        );
        let (mrs, mut cqs, mut srqs) = (Slab::default(), Slab::default(), Slab::default());
        let mut mws = Slab::default();
        let (mut events, mut comp_events, mut counters) =
            (VecDeque::new(), VecDeque::new(), Counters::default());
        let gids = [Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1))];
        let ctx = Ctx {
            mrs: &mrs,
            mws: &mut mws,
            cqs: &mut cqs,
            srqs: &mut srqs,
            events: &mut events,
            comp_events: &mut comp_events,
            counters: &mut counters,
            gids: &gids,
            gid_roce_v1: &[],
            src_port: None,
            sender_fills_icrc: false,
            lend_payloads: false,
            max_unacked: MAX_UNACKED_PSNS,
            read_piece: 0,
            write_pieces: false,
            ack_policy: crate::config::AckPolicy::default(),
            now: 0,
            spare: &std::cell::RefCell::new(Vec::new()),
            icrc: &Default::default(),
            dead: &mut Vec::new(),
            placing: None,
        };
        let av = AddressVector {
            dgid: Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 2)),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) | 1).collect();
        for (opcode, aeth, reth) in [
            (Opcode::RC_SEND_ONLY, None, None),
            (
                Opcode::RC_RDMA_WRITE_ONLY,
                None,
                Some(RethRepr {
                    va: 0x1234,
                    rkey: 0x5678,
                    dma_len: 9,
                }),
            ),
            (
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                Some(AethRepr {
                    syndrome: Syndrome::ACK,
                    msn: 3,
                }),
                None,
            ),
        ] {
            for len in 0..9 {
                let bth = BthRepr {
                    opcode,
                    solicited: false,
                    mig_req: true,
                    pad: 0,
                    pkey: DEFAULT_PKEY,
                    fecn: false,
                    becn: false,
                    dest_qp: 0x22,
                    ack_req: true,
                    psn: Psn::new(5),
                };
                let whole = PacketRepr {
                    aeth,
                    reth,
                    ..PacketRepr::new(bth, &data[..len])
                };
                let split = PacketRepr {
                    payload: &[],
                    ..whole
                };
                let a = qp.transmit(&whole, &av, &ctx);
                let built = || {
                    qp.transmit_with(
                        &split,
                        len,
                        |buf| buf.copy_from_slice(&data[..len]),
                        &av,
                        &ctx,
                    )
                };
                assert_eq!(a, built(), "{opcode:?} len {len}");
                // A recycled buffer, dirty and larger than needed, gives the same bytes.
                ctx.spare.borrow_mut().push(vec![0xAA; 4096]);
                let c = qp.transmit(&whole, &av, &ctx);
                assert!(ctx.spare.borrow().is_empty(), "the spare buffer was used");
                assert_eq!(a, c, "{opcode:?} len {len}, recycled buffer");
                // Dirty and shorter than the packet (it grows).
                let mut short = vec![0x55u8; 4096];
                short.truncate(9);
                ctx.spare.borrow_mut().push(short);
                assert_eq!(a, built(), "{opcode:?} len {len}, short recycled buffer");
                let mut expect = vec![0u8; whole.buffer_len()];
                whole.emit(&mut expect).unwrap();
                let n = expect.len() - 4;
                assert_eq!(&a.payload[..n], &expect[..n], "{opcode:?} len {len}");
            }
        }
        // The ACK builder writes what the generic path writes, ICRC included, in a fresh
        // or a dirty recycled buffer.
        for (syndrome, msn, psn) in [
            (Syndrome::ACK, 0, 0),
            (Syndrome::ACK, 0xab_cdef, 0xff_ffff),
            (Syndrome::Nak(NakCode::PsnSequenceError), 7, 12),
            (Syndrome::RnrNak { timer: 0x1f }, 1, 2),
        ] {
            let bth = qp.resp_bth(Opcode::RC_ACKNOWLEDGE, Psn::new(psn));
            let aeth = AethRepr { syndrome, msn };
            let repr = PacketRepr {
                aeth: Some(aeth),
                ..PacketRepr::new(bth, &[])
            };
            let want = qp.transmit(&repr, &qp.peer_av(), &ctx);
            assert_eq!(qp.ack_packet(&bth, aeth, &ctx), want, "{syndrome:?}");
            ctx.spare.borrow_mut().push(vec![0xAA; 4096]);
            assert_eq!(
                qp.ack_packet(&bth, aeth, &ctx),
                want,
                "{syndrome:?} recycled"
            );
        }
        // With `lend_payloads` (and the ICRC left to the sender), a payload of at
        // least LEND_MIN bytes stays in its region: the packet is the headers, pad
        // and ICRC around a body, and materializes to the copied packet; shorter ones
        // and RoCE v1 packets are copied as before.
        let big: Vec<u8> = (0..crate::LEND_MIN + 8)
            .map(|i| (i * 13 + 1) as u8)
            .collect();
        let mem: Arc<dyn Memory> = Arc::new(crate::VecMemory::from_vec(big.clone()));
        let mut ctx = Ctx {
            sender_fills_icrc: true,
            lend_payloads: true,
            ..ctx
        };
        for v1 in [false, true] {
            ctx.gid_roce_v1 = if v1 { &[true] } else { &[] };
            for len in crate::LEND_MIN - 1..crate::LEND_MIN + 4 {
                let repr = PacketRepr::new(qp.resp_bth(Opcode::RC_SEND_ONLY, Psn::new(7)), &[]);
                let copied = qp.transmit_with(
                    &repr,
                    len,
                    |buf| buf.copy_from_slice(&big[3..3 + len]),
                    &av,
                    &ctx,
                );
                assert!(copied.body.is_none());
                let filled = std::cell::Cell::new(false);
                let mut lent = qp.transmit_from(
                    &repr,
                    len,
                    |buf| {
                        filled.set(true);
                        buf.copy_from_slice(&big[3..3 + len]);
                    },
                    Some((&mem, 3)),
                    &av,
                    &ctx,
                );
                if v1 || len < crate::LEND_MIN {
                    assert_eq!(lent, copied, "len {len}, v1 {v1}: copied");
                    assert!(filled.get());
                    let mut whole = vec![0u8; copied.len()];
                    copied.write_into(&mut whole);
                    assert_eq!(whole, copied.payload);
                    continue;
                }
                assert!(!filled.get(), "len {len}: a lent payload is not copied");
                let b = lent.body.clone().expect("a body");
                assert_eq!((b.len(), b.at()), (len, 12), "len {len}");
                assert_eq!(lent.len(), copied.len(), "len {len}");
                assert_eq!(b.bytes(&big), &big[3..3 + len]);
                // A lent region shorter than the body (never: regions do not shrink)
                // gives no bytes, not others.
                assert!(b.bytes(&big[..len]).is_empty());
                let parts = lent.parts(b.bytes(&big)).concat();
                assert_eq!(parts, copied.payload, "len {len}: the pieces");
                let mut whole = vec![0u8; lent.len()];
                lent.write_into(&mut whole);
                assert_eq!(whole, copied.payload, "len {len}: written in place");
                lent.materialize();
                assert_eq!(lent, copied, "len {len}: materialized");
            }
        }
    }
}
