//! Requests that must not touch the responder's memory: bad keys, keys of other PDs or
//! of deregistered regions, ranges outside the region, missing MR or QP rights, bad
//! atomics; local protection and length errors; and packets the transport drops.
//! Each check: the responder's memory is byte-for-byte unchanged, the requester gets
//! the IBTA/rxe status, and both QPs end in the state rxe puts them in.

mod common;
mod driver;
use common::*;
use driver::*;
use rverbs_engine::modify::{QpAttr, QpAttrMask};
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;
use rverbs_wire::ext::{AtomicEthRepr, RethRepr};
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::PacketRepr;
use std::sync::Arc;

const MEM: usize = 1 << 16;

fn setup() -> (Sim, End, End) {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 21);
    let o = PairOpts {
        psn: [100, 900],
        mem_len: MEM,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    fill(&a, 0, &pattern(MEM, 1));
    fill(&b, 0, &pattern(MEM, 2));
    (sim, a, b)
}

/// Moves packets both ways until neither engine has anything to send; returns what B
/// sent.
fn settle(sim: &mut Sim) -> Vec<Pkt> {
    let mut from_b = Vec::new();
    loop {
        let pa = tx(sim, 0);
        let pb = tx(sim, 1);
        if pa.is_empty() && pb.is_empty() {
            return from_b;
        }
        rx_all(sim, &pa);
        rx_all(sim, &pb);
        from_b.extend(pb);
    }
}

fn remote(id: u64, op: WrOpcode, local: Sge, va: u64, rkey: u32) -> SendWr {
    let mut w = wr(id, op, vec![local]);
    w.remote_addr = va;
    w.rkey = rkey;
    w.flags = SendFlags::SIGNALED;
    w
}

/// Posts `w` on A, runs the exchange, and checks that it failed with `status` after
/// B answered with `nak`, that both QPs are in ERR, and that `guarded` memories did
/// not change.
fn rejected(
    sim: &mut Sim,
    a: &End,
    b: &End,
    w: SendWr,
    status: WcStatus,
    nak: &str,
    guarded: &[&Arc<VecMemory>],
) {
    let before: Vec<Vec<u8>> = guarded.iter().map(|m| m.snapshot()).collect();
    let id = w.wr_id;
    let now = sim.now;
    sim.engines[0].post_send(a.qpn, w, now).unwrap();
    let from_b = settle(sim);
    let last = from_b.last().expect("B answered").line();
    assert!(last.ends_with(nak), "B's last packet {last:?}, want {nak}");
    let wcs = drain(sim, a);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(id, status)]
    );
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Err));
    for (m, old) in guarded.iter().zip(before) {
        assert!(m.snapshot() == old, "memory changed");
    }
}

fn mr(sim: &mut Sim, b: &End, pd: PdId, iova: u64, access: Access) -> (Arc<VecMemory>, MrKeys) {
    let m = Arc::new(VecMemory::from_vec(pattern(4096, 3)));
    let k = sim.engines[b.engine]
        .reg_mr(pd, m.clone(), iova, access)
        .unwrap();
    (m, k)
}

const ALL: Access = Access(0xf);

#[test]
fn wrong_rkey() {
    for op in [
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicFetchAndAdd,
    ] {
        let (mut sim, a, b) = setup();
        let len = if op == WrOpcode::RdmaWrite || op == WrOpcode::RdmaRead {
            100
        } else {
            8
        };
        // Same slot, another tag.
        let bad = b.keys.rkey ^ 1;
        let w = remote(1, op, sge(&a, 0, len), b.base, bad);
        rejected(
            &mut sim,
            &a,
            &b,
            w,
            WcStatus::RemAccessErr,
            "NAK-ACC msn=0",
            &[&b.mem, &a.mem],
        );
    }
}

#[test]
fn rkey_of_an_mr_in_another_pd() {
    let (mut sim, a, b) = setup();
    let pd2 = sim.engines[1].alloc_pd();
    let (m2, k2) = mr(&mut sim, &b, pd2, 0x900_0000, ALL);
    let w = remote(1, WrOpcode::RdmaWrite, sge(&a, 0, 64), 0x900_0000, k2.rkey);
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&m2, &b.mem],
    );
}

#[test]
fn rkey_of_a_deregistered_mr_and_of_a_reused_slot() {
    let (mut sim, a, b) = setup();
    let (_m2, k2) = mr(&mut sim, &b, b.pd, 0x900_0000, ALL);
    sim.engines[1].dereg_mr(k2.lkey).unwrap();
    let w = remote(1, WrOpcode::RdmaWrite, sge(&a, 0, 64), 0x900_0000, k2.rkey);
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&b.mem],
    );

    // The slot is registered again (same iova): the old key names it but must fail.
    let (mut sim, a, b) = setup();
    let (_m2, old) = mr(&mut sim, &b, b.pd, 0x900_0000, ALL);
    sim.engines[1].dereg_mr(old.lkey).unwrap();
    let (m3, new) = mr(&mut sim, &b, b.pd, 0x900_0000, ALL);
    assert_eq!(
        old.rkey >> KEY_TAG_BITS,
        new.rkey >> KEY_TAG_BITS,
        "same slot"
    );
    assert_ne!(old.rkey, new.rkey);
    let w = remote(1, WrOpcode::RdmaWrite, sge(&a, 0, 64), 0x900_0000, old.rkey);
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&m3, &b.mem],
    );
}

#[test]
fn write_out_of_bounds() {
    // One byte past the end.
    let (mut sim, a, b) = setup();
    let w = remote(
        1,
        WrOpcode::RdmaWrite,
        sge(&a, 0, 11),
        b.base + MEM as u64 - 10,
        b.keys.rkey,
    );
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&b.mem],
    );
    // va + length wraps the 64-bit address space.
    let (mut sim, a, b) = setup();
    let w = remote(
        1,
        WrOpcode::RdmaWrite,
        sge(&a, 0, 16),
        u64::MAX - 7,
        b.keys.rkey,
    );
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&b.mem],
    );
    // A hand-made WRITE FIRST announcing 2 GiB from inside the region.
    let (mut sim, _a, b) = setup();
    let before = b.mem.snapshot();
    let p = craft(
        &sim,
        0,
        1,
        &PacketRepr {
            reth: Some(RethRepr {
                va: b.base,
                rkey: b.keys.rkey,
                dma_len: 1 << 31,
            }),
            ..PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST, b.qpn, 100), &[0xee; 1024])
        },
    );
    rx(&mut sim, &p);
    assert_eq!(
        lines(&tx(&mut sim, 1)),
        ["RC_ACKNOWLEDGE 100 NAK-ACC msn=0"]
    );
    assert!(b.mem.snapshot() == before);
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Err));
}

#[test]
fn read_without_remote_read_on_the_mr() {
    let (mut sim, a, b) = setup();
    let (m2, k2) = mr(
        &mut sim,
        &b,
        b.pd,
        0x900_0000,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let w = remote(1, WrOpcode::RdmaRead, sge(&a, 0, 64), 0x900_0000, k2.rkey);
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&m2, &a.mem],
    );
}

#[test]
fn write_without_remote_write_on_the_mr() {
    let (mut sim, a, b) = setup();
    let (m2, k2) = mr(
        &mut sim,
        &b,
        b.pd,
        0x900_0000,
        Access::LOCAL_WRITE | Access::REMOTE_READ,
    );
    let w = remote(1, WrOpcode::RdmaWrite, sge(&a, 0, 64), 0x900_0000, k2.rkey);
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&m2],
    );
}

#[test]
fn atomic_without_remote_atomic_on_the_mr() {
    let (mut sim, a, b) = setup();
    let (m2, k2) = mr(&mut sim, &b, b.pd, 0x900_0000, Access(0x7));
    let w = remote(
        1,
        WrOpcode::AtomicFetchAndAdd,
        sge(&a, 0, 8),
        0x900_0000,
        k2.rkey,
    );
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&m2],
    );
}

#[test]
fn misaligned_and_out_of_bounds_atomics() {
    let (mut sim, a, b) = setup();
    let w = remote(
        1,
        WrOpcode::AtomicFetchAndAdd,
        sge(&a, 0, 8),
        b.base + 4,
        b.keys.rkey,
    );
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemInvReqErr,
        "NAK-INV msn=0",
        &[&b.mem],
    );
    let (mut sim, a, b) = setup();
    let w = remote(
        1,
        WrOpcode::AtomicCmpAndSwp,
        sge(&a, 0, 8),
        b.base + MEM as u64,
        b.keys.rkey,
    );
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemAccessErr,
        "NAK-ACC msn=0",
        &[&b.mem],
    );
    // A hand-made atomic with a misaligned address and a good key.
    let (mut sim, _a, b) = setup();
    let before = b.mem.snapshot();
    let p = craft(
        &sim,
        0,
        1,
        &PacketRepr {
            atomic_eth: Some(AtomicEthRepr {
                va: b.base + 12,
                rkey: b.keys.rkey,
                swap_add: 1,
                compare: 0,
            }),
            ..PacketRepr::new(bth(Opcode::RC_FETCH_ADD, b.qpn, 100), &[])
        },
    );
    rx(&mut sim, &p);
    assert_eq!(
        lines(&tx(&mut sim, 1)),
        ["RC_ACKNOWLEDGE 100 NAK-INV msn=0"]
    );
    assert!(b.mem.snapshot() == before);
}

#[test]
fn bad_local_sges_are_local_protection_errors() {
    for bad in [
        |a: &End| Sge {
            addr: a.base,
            length: 8,
            lkey: a.keys.lkey ^ 1,
        },
        |a: &End| Sge {
            addr: a.base + MEM as u64 - 4,
            length: 8,
            lkey: a.keys.lkey,
        },
    ] {
        let (mut sim, a, b) = setup();
        let bm = b.mem.snapshot();
        let now = sim.now;
        sim.engines[0]
            .post_send(
                a.qpn,
                remote(1, WrOpcode::RdmaWrite, bad(&a), b.base, b.keys.rkey),
                now,
            )
            .unwrap();
        sim.engines[0]
            .post_send(a.qpn, wr(2, WrOpcode::Send, vec![sge(&a, 0, 8)]), now)
            .unwrap();
        assert!(tx(&mut sim, 0).is_empty(), "nothing leaves");
        let wcs = drain(&mut sim, &a);
        assert_eq!(
            wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
        );
        assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
        assert!(b.mem.snapshot() == bm);
    }
}

#[test]
fn receive_buffer_too_small() {
    let (mut sim, a, b) = setup();
    let now = sim.now;
    post_recv1(&mut sim, &b, 7, 0, 16, now);
    let mut w = wr(1, WrOpcode::Send, vec![sge(&a, 0, 17)]);
    w.flags = SendFlags::SIGNALED;
    let bm = b.mem.snapshot();
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemInvReqErr,
        "NAK-INV msn=0",
        &[],
    );
    let wcs = drain(&mut sim, &b);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(7, WcStatus::LocLenErr)]
    );
    assert!(
        b.mem.snapshot()[16..] == bm[16..],
        "nothing past the buffer"
    );
}

fn raw(sim: &mut Sim, to: usize, p: &Pkt, src: std::net::IpAddr, dst: std::net::IpAddr) {
    let mut payload = p.t.payload.clone();
    net::fill_icrc(src, dst, p.t.src_port, &mut payload);
    feed(sim, to, src, dst, p.t.src_port, &payload, false);
}

/// Hands `payload` to engine `to` as a datagram from `src`, with `icrc_checked` as
/// given (a raw-mode receiver vouching for the ICRC).
fn feed(
    sim: &mut Sim,
    to: usize,
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    src_port: u16,
    payload: &[u8],
    icrc_checked: bool,
) {
    let d = Datagram {
        src,
        dst,
        src_port,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        ipv4_id: Some(0),
        roce_v1: false,
        icrc_checked,
        payload,
    };
    let now = sim.now;
    sim.engines[to].handle_datagram(now, &d);
}

#[test]
fn transport_drops_are_counted() {
    let (mut sim, a, b) = setup();
    let now = sim.now;
    post_recv1(&mut sim, &b, 1, 0, 64, now);
    let bm = b.mem.snapshot();
    let send = |psn: u32, pkey: u16, qpn: u32| {
        let mut h = bth(Opcode::RC_SEND_ONLY, qpn, psn);
        h.pkey = pkey;
        craft(&sim, 0, 1, &PacketRepr::new(h, b"intruder"))
    };
    let good = send(100, 0xffff, b.qpn);
    let wrong_pkey = send(100, 0x1234, b.qpn);
    let unknown = send(100, 0xffff, 0xabcd);
    let limited = send(100, 0x7fff, b.qpn);
    let (a0, a1) = (sim.addr(0), sim.addr(1));
    // From another host, and to another address of ours.
    raw(&mut sim, 1, &good, "10.0.0.99".parse().unwrap(), a1);
    raw(&mut sim, 1, &good, a0, "10.0.0.98".parse().unwrap());
    assert_eq!(sim.engines[1].counters().rx_wrong_source, 2);
    // Wrong P_Key.
    rx(&mut sim, &wrong_pkey);
    assert_eq!(sim.engines[1].counters().rx_bad_pkey, 1);
    // Bad ICRC.
    let mut bad = good.clone();
    bad.t.payload[14] ^= 0x40;
    rx(&mut sim, &bad);
    assert_eq!(sim.engines[1].counters().rx_icrc_errors, 1);
    // Unknown QPN.
    rx(&mut sim, &unknown);
    assert_eq!(sim.engines[1].counters().rx_unknown_qp, 1);
    assert!(tx(&mut sim, 1).is_empty(), "no answer to any of them");
    assert!(drain(&mut sim, &b).is_empty());
    assert!(b.mem.snapshot() == bm);
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Rts));
    // A limited-member P_Key (0x7fff) is accepted by our full-member 0xffff.
    rx(&mut sim, &limited);
    assert_eq!(drain(&mut sim, &b).len(), 1);
    let _ = a;
}
/// A datagram whose ICRC the receiver already checked against the real headers (raw
/// mode) is not checked again from rebuilt ones; every other check still applies.
#[test]
fn an_icrc_checked_datagram_skips_only_the_icrc_check() {
    let (mut sim, _a, b) = setup();
    let now = sim.now;
    post_recv1(&mut sim, &b, 1, 0, 64, now);
    let send = |psn: u32, pkey: u16| {
        let mut h = bth(Opcode::RC_SEND_ONLY, b.qpn, psn);
        h.pkey = pkey;
        craft(&sim, 0, 1, &PacketRepr::new(h, b"vouched"))
    };
    let bad_pkey = send(100, 0x1234);
    let mut wrong_icrc = send(100, 0xffff);
    let (a0, a1) = (sim.addr(0), sim.addr(1));
    let deliver = |sim: &mut Sim, p: &Pkt| feed(sim, 1, a0, a1, p.t.src_port, &p.t.payload, true);
    let n = wrong_icrc.t.payload.len();
    wrong_icrc.t.payload[n - 4..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    deliver(&mut sim, &bad_pkey);
    assert_eq!(sim.engines[1].counters().rx_bad_pkey, 1);
    deliver(&mut sim, &wrong_icrc);
    assert_eq!(sim.engines[1].counters().rx_icrc_errors, 0);
    assert_eq!(drain(&mut sim, &b).len(), 1);
}

#[test]
fn a_reused_slot_never_gets_its_previous_key_back() {
    // KEY_TAG_BITS: "a tag that changes on every registration of the slot".
    let mut e = Engine::new(Config::default());
    let pd = e.alloc_pd();
    let mem: Arc<dyn Memory> = Arc::new(VecMemory::zeroed(8));
    let mut prev = e.reg_mr(pd, mem.clone(), 0, Access::NONE).unwrap().lkey;
    for _ in 0..20_000 {
        e.dereg_mr(prev).unwrap();
        let k = e.reg_mr(pd, mem.clone(), 0, Access::NONE).unwrap().lkey;
        assert_eq!(k >> KEY_TAG_BITS, prev >> KEY_TAG_BITS, "same slot");
        assert_ne!(k, prev, "a stale key would name the new region");
        prev = k;
    }
}

/// B's QP loses one remote right while its MR keeps them all.
fn qp_without(sim: &mut Sim, b: &End, right: Access) {
    let attr = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: Access(ALL.0 & !right.0),
        ..Default::default()
    };
    sim.engines[1]
        .modify_qp(
            b.qpn,
            &attr,
            QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS,
            0,
        )
        .unwrap();
}

#[test]
fn operations_the_qp_does_not_allow_are_invalid_requests() {
    // rxe `check_op_valid`: RESPST_ERR_UNSUPPORTED_OPCODE, class C, NAK invalid request.
    for (right, op, len) in [
        (Access::REMOTE_WRITE, WrOpcode::RdmaWrite, 64),
        (Access::REMOTE_READ, WrOpcode::RdmaRead, 64),
        (Access::REMOTE_ATOMIC, WrOpcode::AtomicCmpAndSwp, 8),
    ] {
        let (mut sim, a, b) = setup();
        qp_without(&mut sim, &b, right);
        let w = remote(1, op, sge(&a, 0, len), b.base, b.keys.rkey);
        rejected(
            &mut sim,
            &a,
            &b,
            w,
            WcStatus::RemInvReqErr,
            "NAK-INV msn=0",
            &[&b.mem, &a.mem],
        );
    }
    // Even a zero-length WRITE, which checks no R_Key, needs the QP's right.
    let (mut sim, a, b) = setup();
    qp_without(&mut sim, &b, Access::REMOTE_WRITE);
    let mut w = remote(1, WrOpcode::RdmaWrite, sge(&a, 0, 0), b.base, 0);
    w.sg_list.clear();
    rejected(
        &mut sim,
        &a,
        &b,
        w,
        WcStatus::RemInvReqErr,
        "NAK-INV msn=0",
        &[&b.mem],
    );
}
#[test]
fn bad_local_sge_behind_an_outstanding_send_completes_in_order() {
    // Completions of a send queue come back in posting order (IBTA ch. 10; rxe's
    // completer only reaches the failed WQE after the ones before it).
    let (mut sim, a, b) = setup();
    for i in 0..2 {
        let now = sim.now;
        post_recv1(&mut sim, &b, i, 0, 64, now);
    }
    let now = sim.now;
    let mut ok = wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)]);
    ok.flags = SendFlags::SIGNALED;
    sim.engines[0].post_send(a.qpn, ok, now).unwrap();
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), ["RC_SEND_ONLY 100"]);
    let mut bad = wr(2, WrOpcode::Send, vec![sge(&a, 0, 8)]);
    bad.sg_list[0].lkey ^= 1;
    sim.engines[0].post_send(a.qpn, bad, now).unwrap();
    sim.engines[0]
        .post_send(a.qpn, wr(3, WrOpcode::Send, vec![sge(&a, 0, 8)]), now)
        .unwrap();
    assert!(tx(&mut sim, 0).is_empty());
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    rx_all(&mut sim, &ack);
    assert!(tx(&mut sim, 0).is_empty());
    let wcs = drain(&mut sim, &a);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
}

/// A 4 GiB region of zeros that allocates nothing (for RETH lengths past 2^31).
struct Huge;
impl Memory for Huge {
    fn len(&self) -> usize {
        1 << 32
    }
    fn read(&self, _: usize, dst: &mut [u8]) {
        dst.fill(0)
    }
    fn write(&self, _: usize, _: &[u8]) {}
    fn atomic(&self, _: usize, _: AtomicOp) -> u64 {
        0
    }
}

/// A READ or WRITE longer than 2^31 bytes (IBTA's largest message) is an invalid
/// request (rxe `check_length`), even where the region is that large: a READ of
/// 2^32 - 1 bytes at MTU 256 was answered, its 2^24 response PSNs wrapping the
/// responder's expected PSN back onto the request's own (so its resend ran again as a
/// new READ instead of being a duplicate).
#[test]
fn a_reth_longer_than_2_gib_is_an_invalid_request() {
    for op in [Opcode::RC_RDMA_READ_REQUEST, Opcode::RC_RDMA_WRITE_FIRST] {
        let mut sim = Sim::new(2, false, LinkConfig::default(), 21);
        let o = PairOpts {
            psn: [100, 900],
            mtu: Mtu::M256,
            ..Default::default()
        };
        let (_a, b) = pair(&mut sim, &o);
        let access = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        let k = sim.engines[1]
            .reg_mr(b.pd, Arc::new(Huge), 0x1_0000_0000, access)
            .unwrap();
        let payload = [0u8; 256];
        let body: &[u8] = if op == Opcode::RC_RDMA_READ_REQUEST {
            &[]
        } else {
            &payload
        };
        let req = PacketRepr {
            reth: Some(RethRepr {
                va: 0x1_0000_0000,
                rkey: k.rkey,
                dma_len: (1 << 31) + 1,
            }),
            ..PacketRepr::new(bth(op, b.qpn, 100), body)
        };
        let p = craft(&sim, 0, 1, &req);
        rx(&mut sim, &p);
        let now = sim.now;
        let answer = sim.engines[1]
            .poll_transmit(now)
            .map(|t| Pkt { from: 1, t }.line())
            .expect("an answer");
        assert!(answer.contains("NAK-INV"), "{op:?}: {answer}");
    }
}

/// A READ of exactly 2^31 bytes (the largest message) at MTU 256 is 2^23 response
/// PSNs: its responses are accepted. Its end lies exactly half the PSN space ahead,
/// which the signed PSN compare read as behind: the requester's end of what it sent
/// stayed put, and every response was dropped as a ghost (a response past what was
/// sent) until the READ failed with retries exhausted.
#[test]
fn the_responses_of_a_2_gib_read_are_accepted() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 21);
    let o = PairOpts {
        psn: [100, 900],
        mtu: Mtu::M256,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let local = sim.engines[0]
        .reg_mr(a.pd, Arc::new(Huge), 0x1_0000_0000, Access::LOCAL_WRITE)
        .unwrap();
    let remote = sim.engines[1]
        .reg_mr(b.pd, Arc::new(Huge), 0x1_0000_0000, Access::REMOTE_READ)
        .unwrap();
    let sge = Sge {
        addr: 0x1_0000_0000,
        length: 1 << 31,
        lkey: local.lkey,
    };
    let mut w = SendWr::send(1, vec![sge]);
    w.opcode = WrOpcode::RdmaRead;
    w.remote_addr = 0x1_0000_0000;
    w.rkey = remote.rkey;
    w.flags = SendFlags::SIGNALED;
    let now = sim.now;
    sim.engines[0].post_send(a.qpn, w, now).unwrap();
    let req = tx(&mut sim, 0);
    assert_eq!(req.len(), 1);
    rx_all(&mut sim, &req);
    // The first responses (the responder streams 2^23 of them; a few are enough).
    let mut got = 0;
    while got < 8 {
        let now = sim.now;
        let Some(t) = sim.engines[1].poll_transmit(now) else {
            break;
        };
        rx(&mut sim, &Pkt { from: 1, t });
        got += 1;
    }
    assert_eq!(got, 8);
    assert_eq!(sim.engines[0].counters().rx_ghost_responses, 0);
}
