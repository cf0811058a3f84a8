//! Errors of the verbs themselves (what `ibv_*` returns), and the flush of outstanding
//! work when a QP is moved to ERR.

mod common;
use common::*;
use rverbs_engine::modify::{QpAttr, QpAttrMask, QpCap};
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;
use std::sync::Arc;

fn errno<T: std::fmt::Debug>(r: VerbResult<T>) -> Errno {
    r.expect_err("the verb must fail").errno
}

fn small_cap() -> QpCap {
    QpCap {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 32,
    }
}

fn rc_pair(cap: QpCap, qp_type: QpType) -> (Sim, End, End) {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 31);
    let o = PairOpts {
        qp_type,
        cap,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    (sim, a, b)
}

#[test]
fn post_send_before_rts_is_einval() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 31);
    let o = PairOpts::default();
    let a = end(&mut sim, 0, &o);
    let b = end(&mut sim, 1, &o);
    let send = |sim: &mut Sim| {
        sim.engines[0].post_send(a.qpn, wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)]), 0)
    };
    assert_eq!(errno(send(&mut sim)), Errno::Inval, "RESET");
    let e = &mut sim.engines[0];
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: o.access,
        ..Default::default()
    };
    e.modify_qp(
        a.qpn,
        &init,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
        0,
    )
    .unwrap();
    assert_eq!(errno(send(&mut sim)), Errno::Inval, "INIT");
    let av = av_to(&sim, 1);
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::M1024,
        dest_qp_num: b.qpn,
        rq_psn: 1,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ah_attr: Some(rverbs_engine::modify::AhAttr { av, port_num: 1 }),
        ..Default::default()
    };
    sim.engines[0]
        .modify_qp(
            a.qpn,
            &rtr,
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
            0,
        )
        .unwrap();
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Rtr));
    assert_eq!(errno(send(&mut sim)), Errno::Inval, "RTR");
    // Receives may be posted from INIT on, not in RESET.
    let recv = RecvWr {
        wr_id: 1,
        sg_list: vec![sge(&b, 0, 8)].into(),
    };
    assert_eq!(
        errno(sim.engines[1].post_recv(b.qpn, recv.clone(), 0)),
        Errno::Inval,
        "post_recv in RESET"
    );
    assert!(sim.engines[0].post_recv(a.qpn, recv, 0).is_ok(), "RTR");
}

#[test]
fn post_send_argument_errors() {
    let (mut sim, a, _b) = rc_pair(small_cap(), QpType::Rc);
    let e = &mut sim.engines[0];
    let three = vec![sge(&a, 0, 8), sge(&a, 8, 8), sge(&a, 16, 8)];
    assert_eq!(
        errno(e.post_send(a.qpn, wr(1, WrOpcode::Send, three.clone()), 0)),
        Errno::Inval,
        "more SGEs than max_send_sge"
    );
    let msg = e
        .post_send(a.qpn, wr(1, WrOpcode::Send, three.clone()), 0)
        .unwrap_err()
        .to_string();
    assert!(
        msg.ends_with("too many SGEs (3 SGEs, the QP takes at most 2)"),
        "{msg}"
    );
    let recv = RecvWr {
        wr_id: 1,
        sg_list: three.into(),
    };
    let msg = e.post_recv(a.qpn, recv, 0).unwrap_err().to_string();
    assert!(
        msg.ends_with("too many SGEs (3 SGEs, the QP takes at most 2)"),
        "{msg}"
    );
    let mut inline = wr(1, WrOpcode::Send, vec![sge(&a, 0, 33)]);
    inline.flags = SendFlags::INLINE;
    assert_eq!(
        errno(e.post_send(a.qpn, inline.clone(), 0)),
        Errno::Inval,
        "inline above max_inline_data"
    );
    let msg = e
        .post_send(a.qpn, inline.clone(), 0)
        .unwrap_err()
        .to_string();
    assert!(
        msg.ends_with("(33 bytes, the QP takes at most 32)"),
        "{msg}"
    );
    inline.sg_list[0].length = 32;
    assert!(e.post_send(a.qpn, inline, 0).is_ok());
    for sg in [
        vec![sge(&a, 0, 4)],
        vec![sge(&a, 0, 16)],
        vec![sge(&a, 0, 4), sge(&a, 8, 4)],
    ] {
        for op in [WrOpcode::AtomicCmpAndSwp, WrOpcode::AtomicFetchAndAdd] {
            assert_eq!(
                errno(e.post_send(a.qpn, wr(1, op, sg.clone()), 0)),
                Errno::Inval,
                "{op:?} with {sg:?}"
            );
        }
    }
    assert!(e
        .post_send(a.qpn, wr(2, WrOpcode::Send, vec![sge(&a, 0, 8)]), 0)
        .is_ok());
    assert_eq!(
        errno(e.post_send(a.qpn, wr(3, WrOpcode::Send, vec![sge(&a, 0, 8)]), 0)),
        Errno::NoMem,
        "the send queue (max_send_wr 2) is full"
    );
}

#[test]
fn opcodes_a_transport_does_not_have() {
    let (mut sim, a, _) = rc_pair(small_cap(), QpType::Uc);
    for op in [
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
    ] {
        assert_eq!(
            errno(sim.engines[0].post_send(a.qpn, wr(1, op, vec![sge(&a, 0, 8)]), 0)),
            Errno::Inval,
            "UC {op:?}"
        );
    }
    let (mut sim, a, b) = rc_pair(small_cap(), QpType::Ud);
    let av = av_to(&sim, 1);
    let ah = sim.engines[0].create_ah(a.pd, av).unwrap();
    for op in [
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicFetchAndAdd,
    ] {
        let mut w = wr(1, op, vec![sge(&a, 0, 8)]);
        w.ud = Some(UdDest {
            ah,
            remote_qpn: b.qpn,
            remote_qkey: 1,
        });
        assert_eq!(
            errno(sim.engines[0].post_send(a.qpn, w, 0)),
            Errno::Inval,
            "UD {op:?}"
        );
    }
    assert_eq!(
        errno(sim.engines[0].post_send(a.qpn, wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)]), 0)),
        Errno::Inval,
        "UD without an AH"
    );
}

#[test]
fn objects_in_use_are_ebusy() {
    let mut e = Engine::new(Config {
        gids: vec![net::ip_to_gid("10.0.0.1".parse().unwrap())],
        ..Config::default()
    });
    let pd = e.alloc_pd();
    let cq = e.create_cq(16).unwrap();
    let srq = e.create_srq(pd, 8, 1, 0).unwrap();
    let mem: Arc<dyn Memory> = Arc::new(VecMemory::zeroed(64));
    let mr = e.reg_mr(pd, mem, 0, Access::LOCAL_WRITE).unwrap();
    let qpn = e
        .create_qp(QpInit {
            pd,
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            srq: Some(srq),
            cap: small_cap(),
            sq_sig_all: false,
        })
        .unwrap();
    assert_eq!(errno(e.dealloc_pd(pd)), Errno::Busy);
    assert_eq!(errno(e.destroy_cq(cq)), Errno::Busy);
    assert_eq!(errno(e.destroy_srq(srq)), Errno::Busy);
    e.destroy_qp(qpn).unwrap();
    e.destroy_cq(cq).unwrap();
    e.destroy_srq(srq).unwrap();
    assert_eq!(errno(e.dealloc_pd(pd)), Errno::Busy, "the MR is left");
    e.dereg_mr(mr.lkey).unwrap();
    e.dealloc_pd(pd).unwrap();
}

#[test]
fn reg_mr_and_create_qp_argument_errors() {
    let mut e = Engine::new(Config::default());
    let pd = e.alloc_pd();
    let mem: Arc<dyn Memory> = Arc::new(VecMemory::zeroed(64));
    for access in [Access::REMOTE_WRITE, Access::REMOTE_ATOMIC] {
        assert_eq!(
            errno(e.reg_mr(pd, mem.clone(), 0, access)),
            Errno::Inval,
            "{access:?} without LOCAL_WRITE"
        );
    }
    assert!(e.reg_mr(pd, mem.clone(), 0, Access::REMOTE_READ).is_ok());
    let cq = e.create_cq(16).unwrap();
    let limits = e.config().limits;
    let init = |cap| QpInit {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
    };
    for cap in [
        QpCap {
            max_send_wr: limits.max_qp_wr + 1,
            ..small_cap()
        },
        QpCap {
            max_recv_wr: limits.max_qp_wr + 1,
            ..small_cap()
        },
        QpCap {
            max_send_sge: limits.max_send_sge + 1,
            ..small_cap()
        },
        QpCap {
            max_recv_sge: limits.max_recv_sge + 1,
            ..small_cap()
        },
        QpCap {
            max_inline_data: limits.max_inline_data + 1,
            ..small_cap()
        },
    ] {
        let r = e.create_qp(init(cap));
        let err = r.expect_err("cap beyond the limits");
        assert_eq!(
            (err.verb, err.errno),
            ("create_qp", Errno::Inval),
            "{cap:?}"
        );
    }
    assert_eq!(e.qp_count(), 0);
}

#[test]
fn modify_qp_surfaces_validation_errors() {
    let mut e = Engine::new(Config::default());
    let pd = e.alloc_pd();
    let cq = e.create_cq(16).unwrap();
    let qpn = e
        .create_qp(QpInit {
            pd,
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: small_cap(),
            sq_sig_all: false,
        })
        .unwrap();
    // RESET → RTR is not a transition.
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        ..Default::default()
    };
    let err = e.modify_qp(qpn, &attr, QpAttrMask::STATE, 0).unwrap_err();
    assert_eq!(err.errno, Errno::Inval);
    assert_eq!(e.qp_state(qpn), Some(QpState::Reset), "nothing applied");
}

#[test]
fn moving_to_err_flushes_every_wqe_in_order() {
    let (mut sim, a, _b) = rc_pair(
        QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            ..small_cap()
        },
        QpType::Rc,
    );
    let e = &mut sim.engines[0];
    for i in 1..=3 {
        e.post_send(a.qpn, wr(i, WrOpcode::Send, vec![sge(&a, 0, 8)]), 0)
            .unwrap();
        e.post_recv(
            a.qpn,
            RecvWr {
                wr_id: 10 + i,
                sg_list: vec![sge(&a, 64, 8)].into(),
            },
            0,
        )
        .unwrap();
    }
    // The first SEND is on the wire, the others are not started.
    assert!(e.poll_transmit(0).is_some());
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..Default::default()
    };
    e.modify_qp(a.qpn, &attr, QpAttrMask::STATE, 0).unwrap();
    let wcs = drain(&mut sim, &a);
    let sends: Vec<_> = wcs
        .iter()
        .filter(|w| w.opcode == WcOpcode::Send)
        .map(|w| (w.wr_id, w.status))
        .collect();
    let recvs: Vec<_> = wcs
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| (w.wr_id, w.status))
        .collect();
    let flush = WcStatus::WrFlushErr;
    assert_eq!(sends, [(1, flush), (2, flush), (3, flush)]);
    assert_eq!(recvs, [(11, flush), (12, flush), (13, flush)]);
    assert_eq!(wcs.len(), 6);
    assert!(sim.engines[0].poll_transmit(0).is_none());
    // Work posted in ERR completes at once with a flush error.
    let e = &mut sim.engines[0];
    e.post_send(a.qpn, wr(4, WrOpcode::Send, vec![sge(&a, 0, 8)]), 0)
        .unwrap();
    let wcs = drain(&mut sim, &a);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(4, flush)]
    );
}

/// QP numbers reserved for QPs outside the engine (rverbs' RAW_PACKET QPs) are never
/// handed to an engine QP, RAW_PACKET itself is refused by the engine (EOPNOTSUPP), and
/// pushed completions follow the CQ's rules (arming, overflow).
#[test]
fn reserved_qpns_raw_packet_and_pushed_completions() {
    let mut sim = Sim::new(1, false, LinkConfig::default(), 31);
    let e = &mut sim.engines[0];
    let pd = e.alloc_pd();
    let cq = e.create_cq(1).unwrap();
    let init = |qp_type| QpInit {
        pd,
        qp_type,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: small_cap(),
        sq_sig_all: false,
    };
    let reserved: Vec<u32> = (0..8).map(|_| e.reserve_qpn().unwrap()).collect();
    let mut qpns = Vec::new();
    for _ in 0..8 {
        qpns.push(e.create_qp(init(QpType::Ud)).unwrap());
    }
    for q in &qpns {
        assert!(
            !reserved.contains(q),
            "engine QP {q:#x} got a reserved number"
        );
    }
    e.release_qpn(reserved[0]);
    // RAW_PACKET's column of the kernel's transition table.
    use rverbs_engine::modify::{required, transition};
    let raw = QpType::RawPacket;
    assert_eq!(
        required(raw, QpState::Reset, QpState::Init),
        Some(QpAttrMask::STATE | QpAttrMask::PORT)
    );
    // INIT→INIT lists no attribute for IB_QPT_RAW_PACKET (the port is set once).
    assert_eq!(
        transition(raw, QpState::Init, QpState::Init),
        Some((QpAttrMask::default(), QpAttrMask::default()))
    );
    // RATE_LIMIT is the only optional attribute, on RTR→RTS and RTS→RTS.
    for (f, t) in [(QpState::Rtr, QpState::Rts), (QpState::Rts, QpState::Rts)] {
        assert_eq!(
            transition(raw, f, t),
            Some((QpAttrMask::default(), QpAttrMask::RATE_LIMIT))
        );
    }
    // The table's validity does not depend on the type: SQD is reachable, bare.
    for (f, t) in [
        (QpState::Rts, QpState::Sqd),
        (QpState::Sqd, QpState::Sqd),
        (QpState::Sqd, QpState::Rts),
        (QpState::Sqe, QpState::Rts),
    ] {
        assert_eq!(
            transition(raw, f, t),
            Some((QpAttrMask::default(), QpAttrMask::default())),
            "{f:?}->{t:?}"
        );
    }
    // RESET→ERR is not valid for any type.
    assert_eq!(transition(raw, QpState::Reset, QpState::Err), None);
    assert_eq!(transition(raw, QpState::Init, QpState::Sqd), None);
    assert_eq!(
        required(raw, QpState::Init, QpState::Rtr),
        Some(QpAttrMask::STATE)
    );
    assert_eq!(
        required(raw, QpState::Rtr, QpState::Rts),
        Some(QpAttrMask::STATE)
    );
    assert_eq!(
        required(raw, QpState::Rts, QpState::Err),
        Some(QpAttrMask::STATE)
    );
    assert_eq!(required(raw, QpState::Reset, QpState::Rtr), None);
    assert_eq!(
        errno(e.create_qp(init(QpType::RawPacket))),
        Errno::NotSupported
    );
    // Pushed completions: an armed CQ raises one event; a full CQ loses the next one.
    e.req_notify_cq(cq, false).unwrap();
    let wc = Wc {
        wr_id: 5,
        flow_tag: 9,
        wc_flags: WcFlags::WITH_FLOW_TAG,
        ..Wc::default()
    };
    assert!(e.push_wc(cq, wc, false).unwrap());
    assert_eq!(e.poll_completion_event(), Some(cq));
    assert!(!e.push_wc(cq, wc, false).unwrap(), "CQ of 1 is full");
    assert_eq!(e.counters().cq_overflows, 1);
    assert_eq!(e.poll_event(), Some(AsyncEvent::CqErr(cq)));
    let mut out = [Wc::default(); 2];
    assert_eq!(e.poll_cq(cq, &mut out).unwrap(), 1);
    assert_eq!(out[0], wc);
    let gone = e.create_cq(4).unwrap();
    e.destroy_cq(gone).unwrap();
    assert_eq!(errno(e.push_wc(gone, wc, false)), Errno::Inval);
}
