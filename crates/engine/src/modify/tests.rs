//! Tests of `modify`: the transition graph snapshot and the attribute checks.

use super::*;
use rverbs_wire::grh::Gid;

type M = QpAttrMask;
const TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];
const STATES: [QpState; 7] = [RESET, INIT, RTR, RTS, SQD, SQE, ERR];

fn names(m: QpAttrMask) -> String {
    if m.is_empty() {
        "-".to_string()
    } else {
        m.names().collect::<Vec<_>>().join(" ")
    }
}

/// The whole graph, one line per legal transition.
fn render() -> String {
    let mut out = String::new();
    for (t, tn) in [(QpType::Rc, "RC"), (QpType::Uc, "UC"), (QpType::Ud, "UD")] {
        for (from, to, req, opt) in legal_transitions(t) {
            let edge = format!("{from:?}->{to:?}").to_uppercase();
            out += &format!("{tn} {edge:<12} req: {}; opt: {}\n", names(req), names(opt));
        }
    }
    out
}

/// Reviewed against `qp_state_table` in Linux `drivers/infiniband/core/verbs.c`.
/// A change to the table must show up here.
const EXPECTED_GRAPH: &str = "\
RC RESET->RESET req: -; opt: -
RC RESET->INIT  req: ACCESS_FLAGS PKEY_INDEX PORT; opt: -
RC INIT->RESET  req: -; opt: -
RC INIT->INIT   req: -; opt: ACCESS_FLAGS PKEY_INDEX PORT
RC INIT->RTR    req: AV PATH_MTU RQ_PSN MIN_RNR_TIMER MAX_DEST_RD_ATOMIC DEST_QPN; opt: ACCESS_FLAGS PKEY_INDEX ALT_PATH
RC INIT->ERR    req: -; opt: -
RC RTR->RESET   req: -; opt: -
RC RTR->RTS     req: TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC SQ_PSN; opt: CUR_STATE ACCESS_FLAGS ALT_PATH MIN_RNR_TIMER PATH_MIG_STATE
RC RTR->ERR     req: -; opt: -
RC RTS->RESET   req: -; opt: -
RC RTS->RTS     req: -; opt: CUR_STATE ACCESS_FLAGS ALT_PATH MIN_RNR_TIMER PATH_MIG_STATE
RC RTS->SQD     req: -; opt: EN_SQD_ASYNC_NOTIFY
RC RTS->ERR     req: -; opt: -
RC SQD->RESET   req: -; opt: -
RC SQD->RTS     req: -; opt: CUR_STATE ACCESS_FLAGS ALT_PATH MIN_RNR_TIMER PATH_MIG_STATE
RC SQD->SQD     req: -; opt: ACCESS_FLAGS PKEY_INDEX PORT AV TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC ALT_PATH MIN_RNR_TIMER MAX_DEST_RD_ATOMIC PATH_MIG_STATE
RC SQD->ERR     req: -; opt: -
RC SQE->RESET   req: -; opt: -
RC SQE->ERR     req: -; opt: -
RC ERR->RESET   req: -; opt: -
RC ERR->ERR     req: -; opt: -
UC RESET->RESET req: -; opt: -
UC RESET->INIT  req: ACCESS_FLAGS PKEY_INDEX PORT; opt: -
UC INIT->RESET  req: -; opt: -
UC INIT->INIT   req: -; opt: ACCESS_FLAGS PKEY_INDEX PORT
UC INIT->RTR    req: AV PATH_MTU RQ_PSN DEST_QPN; opt: ACCESS_FLAGS PKEY_INDEX ALT_PATH
UC INIT->ERR    req: -; opt: -
UC RTR->RESET   req: -; opt: -
UC RTR->RTS     req: SQ_PSN; opt: CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
UC RTR->ERR     req: -; opt: -
UC RTS->RESET   req: -; opt: -
UC RTS->RTS     req: -; opt: CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
UC RTS->SQD     req: -; opt: EN_SQD_ASYNC_NOTIFY
UC RTS->ERR     req: -; opt: -
UC SQD->RESET   req: -; opt: -
UC SQD->RTS     req: -; opt: CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
UC SQD->SQD     req: -; opt: ACCESS_FLAGS PKEY_INDEX AV ALT_PATH PATH_MIG_STATE
UC SQD->ERR     req: -; opt: -
UC SQE->RESET   req: -; opt: -
UC SQE->RTS     req: -; opt: CUR_STATE ACCESS_FLAGS
UC SQE->ERR     req: -; opt: -
UC ERR->RESET   req: -; opt: -
UC ERR->ERR     req: -; opt: -
UD RESET->RESET req: -; opt: -
UD RESET->INIT  req: PKEY_INDEX PORT QKEY; opt: -
UD INIT->RESET  req: -; opt: -
UD INIT->INIT   req: -; opt: PKEY_INDEX PORT QKEY
UD INIT->RTR    req: -; opt: PKEY_INDEX QKEY
UD INIT->ERR    req: -; opt: -
UD RTR->RESET   req: -; opt: -
UD RTR->RTS     req: SQ_PSN; opt: CUR_STATE QKEY
UD RTR->ERR     req: -; opt: -
UD RTS->RESET   req: -; opt: -
UD RTS->RTS     req: -; opt: CUR_STATE QKEY
UD RTS->SQD     req: -; opt: EN_SQD_ASYNC_NOTIFY
UD RTS->ERR     req: -; opt: -
UD SQD->RESET   req: -; opt: -
UD SQD->RTS     req: -; opt: CUR_STATE QKEY
UD SQD->SQD     req: -; opt: PKEY_INDEX QKEY
UD SQD->ERR     req: -; opt: -
UD SQE->RESET   req: -; opt: -
UD SQE->RTS     req: -; opt: CUR_STATE QKEY
UD SQE->ERR     req: -; opt: -
UD ERR->RESET   req: -; opt: -
UD ERR->ERR     req: -; opt: -
";

#[test]
fn graph_snapshot() {
    let got = render();
    if got != EXPECTED_GRAPH {
        panic!("transition graph changed; new rendering:\n{got}");
    }
}

fn ah() -> AhAttr {
    AhAttr {
        av: AddressVector {
            dgid: Gid::ZERO,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        },
        port_num: 1,
    }
}

/// Every field set to an in-range value.
fn good() -> QpAttr {
    QpAttr {
        path_mtu: Mtu::M1024,
        qkey: 0x1111_1111,
        rq_psn: 0x12_3456,
        sq_psn: 0x65_4321,
        dest_qp_num: 0x11,
        qp_access_flags: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        ah_attr: Some(ah()),
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        port_num: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    }
}

fn limits() -> ModifyLimits {
    ModifyLimits {
        gid_table_len: 4,
        ..ModifyLimits::default()
    }
}

/// `modify_qp(from → to)` with `mask | STATE` and attributes `a`.
fn go(t: QpType, from: QpState, to: QpState, mut a: QpAttr, mask: M) -> VerbResult<QpState> {
    a.qp_state = to;
    a.cur_qp_state = from;
    check_modify(t, from, &a, mask | M::STATE, &limits())
}

fn reason(r: VerbResult<QpState>) -> &'static str {
    let e = r.expect_err("expected an error");
    assert_eq!((e.verb, e.errno), ("modify_qp", Errno::Inval), "{e}");
    e.reason
}

#[test]
fn mask_bits_match_rdma_core() {
    assert_eq!(M::STATE.0, 1);
    assert_eq!(M::AV.0, 1 << 7);
    assert_eq!(M::MAX_DEST_RD_ATOMIC.0, 1 << 17);
    assert_eq!(M::DEST_QPN.0, 1 << 20);
    assert_eq!(M::RATE_LIMIT.0, 1 << 25);
    assert_eq!(M::ALL.0, 0x001f_ffff | 1 << 25);
    assert_eq!(M::ALL.names().count(), 22);
    assert!((M::AV | M::PORT).contains(M::PORT));
    assert!(!M::AV.contains(M::AV | M::PORT));
}

#[test]
fn debug_lists_names() {
    assert_eq!(
        format!("{:?}", M::STATE | M::PORT | M::RATE_LIMIT),
        "QpAttrMask(STATE | PORT | RATE_LIMIT)"
    );
    assert_eq!(format!("{:?}", M::EMPTY), "QpAttrMask(empty)");
    assert_eq!(
        format!("{:?}", M::QKEY | QpAttrMask(1 << 21)),
        "QpAttrMask(QKEY | 0x200000)"
    );
}

#[test]
fn lifecycles() {
    use QpType::*;
    #[rustfmt::skip]
    let steps: &[(QpType, QpState, QpState, M)] = &[
        (Rc, RESET, INIT, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Rc, INIT, RTR, M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER),
        (Rc, RTR, RTS, M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC),
        (Rc, RTS, SQD, M::EN_SQD_ASYNC_NOTIFY),
        (Rc, SQD, SQD, M::TIMEOUT | M::AV | M::PORT),
        (Rc, SQD, RTS, M::EMPTY),
        (Rc, RTS, ERR, M::EMPTY),
        (Rc, ERR, RESET, M::EMPTY),
        (Uc, RESET, INIT, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Uc, INIT, RTR, M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN),
        (Uc, RTR, RTS, M::SQ_PSN),
        (Uc, SQE, RTS, M::CUR_STATE | M::ACCESS_FLAGS),
        (Ud, RESET, INIT, M::PKEY_INDEX | M::PORT | M::QKEY),
        (Ud, INIT, RTR, M::EMPTY),
        (Ud, RTR, RTS, M::SQ_PSN | M::QKEY),
        (Ud, SQE, RTS, M::CUR_STATE | M::QKEY),
        (Ud, SQE, ERR, M::EMPTY),
    ];
    for &(t, from, to, mask) in steps {
        assert_eq!(
            go(t, from, to, good(), mask),
            Ok(to),
            "{t:?} {from:?}->{to:?} {mask:?}"
        );
    }
}

#[test]
fn no_state_bit_means_stay() {
    let l = limits();
    let a = QpAttr {
        qp_state: ERR,
        cur_qp_state: RTS,
        ..good()
    };
    // RTS→RTS row; qp_state is ignored without STATE.
    assert_eq!(
        check_modify(QpType::Rc, RTS, &a, M::ACCESS_FLAGS | M::MIN_RNR_TIMER, &l),
        Ok(RTS)
    );
    assert_eq!(check_modify(QpType::Rc, RTS, &a, M::CUR_STATE, &l), Ok(RTS));
    assert_eq!(check_modify(QpType::Ud, INIT, &a, M::QKEY, &l), Ok(INIT));
    assert_eq!(check_modify(QpType::Rc, RESET, &a, M::EMPTY, &l), Ok(RESET));
    // There is no RTR→RTR row, nor does RESET→RESET allow anything.
    assert_eq!(
        reason(check_modify(QpType::Rc, RTR, &a, M::ACCESS_FLAGS, &l)),
        "illegal QP state transition"
    );
    assert_eq!(
        reason(check_modify(QpType::Rc, RESET, &a, M::PORT, &l)),
        "attribute not allowed in this transition: PORT"
    );
}

/// The whole table, both ways: every listed transition takes exactly its required
/// mask plus any one optional bit; every unlisted pair is illegal.
#[test]
fn every_pair_against_the_table() {
    for t in TYPES {
        for from in STATES {
            for to in STATES {
                let Some((req, opt)) = transition(t, from, to) else {
                    assert_eq!(
                        reason(go(t, from, to, good(), M::EMPTY)),
                        "illegal QP state transition"
                    );
                    continue;
                };
                assert_eq!(
                    go(t, from, to, good(), req),
                    Ok(to),
                    "{t:?} {from:?}->{to:?}"
                );
                for &(bit, name, ..) in ATTR_INFO {
                    let r = go(t, from, to, good(), req | bit);
                    if bit == M::STATE {
                        assert_eq!(r, Ok(to));
                    } else if bit == M::ALT_PATH && opt.contains(bit) {
                        assert_eq!(reason(r), "alternate paths are not supported on RoCE");
                    } else if opt.contains(bit) || req.contains(bit) {
                        assert_eq!(r, Ok(to), "{t:?} {from:?}->{to:?} +{name}");
                    } else if bit == M::CUR_STATE && !matches!(from, RTR | RTS | SQD | SQE) {
                        let why = "cur_qp_state may only be given in RTR, RTS, SQD or SQE";
                        assert_eq!(reason(r), why);
                    } else {
                        let why = format!("attribute not allowed in this transition: {name}");
                        assert_eq!(reason(r), why, "{t:?} {from:?}->{to:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn each_required_attribute_missing() {
    use QpType::*;
    #[rustfmt::skip]
    let cases: &[(QpType, QpState, QpState, &[M])] = &[
        (Rc, RESET, INIT, &[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]),
        (Rc, INIT, RTR, &[M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN, M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER]),
        (Rc, RTR, RTS, &[M::TIMEOUT, M::RETRY_CNT, M::RNR_RETRY, M::SQ_PSN, M::MAX_QP_RD_ATOMIC]),
        (Uc, RESET, INIT, &[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]),
        (Uc, INIT, RTR, &[M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN]),
        (Uc, RTR, RTS, &[M::SQ_PSN]),
        (Ud, RESET, INIT, &[M::PKEY_INDEX, M::PORT, M::QKEY]),
        (Ud, RTR, RTS, &[M::SQ_PSN]),
    ];
    for &(t, from, to, bits) in cases {
        let all = bits.iter().fold(M::EMPTY, |m, b| m | *b);
        assert_eq!(go(t, from, to, good(), all), Ok(to));
        for &bit in bits {
            let name = bit.names().next().unwrap();
            let r = go(t, from, to, good(), all.difference(bit));
            assert_eq!(
                reason(r),
                format!("required attribute missing: {name}"),
                "{t:?} {from:?}->{to:?}"
            );
        }
    }
}

#[test]
fn unexpected_attributes() {
    use QpType::*;
    let rc_init = M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    #[rustfmt::skip]
    let cases: &[(QpType, QpState, QpState, M, &str)] = &[
        (Rc, RESET, INIT, rc_init | M::QKEY, "QKEY"),
        (Ud, RESET, INIT, M::PKEY_INDEX | M::PORT | M::QKEY | M::ACCESS_FLAGS, "ACCESS_FLAGS"),
        (Ud, INIT, RTR, M::AV, "AV"),
        (Uc, RTR, RTS, M::SQ_PSN | M::MIN_RNR_TIMER, "MIN_RNR_TIMER"),
        (Uc, SQD, SQD, M::PORT, "PORT"),
        (Rc, RTS, SQD, M::ACCESS_FLAGS, "ACCESS_FLAGS"),
        (Rc, RTS, SQD, M::CUR_STATE, "CUR_STATE"),
        (Rc, RTS, ERR, M::ACCESS_FLAGS, "ACCESS_FLAGS"),
        (Rc, RTS, RTS, M::CAP, "CAP"),
        (Rc, RTS, RTS, M::RATE_LIMIT, "RATE_LIMIT"),
        (Rc, RTS, RTS, M::SQ_PSN, "SQ_PSN"),
    ];
    for &(t, from, to, mask, name) in cases {
        let why = format!("attribute not allowed in this transition: {name}");
        assert_eq!(
            reason(go(t, from, to, good(), mask)),
            why,
            "{t:?} {from:?}->{to:?}"
        );
    }
}

#[test]
fn illegal_transitions() {
    use QpType::*;
    #[rustfmt::skip]
    let cases: &[(QpType, QpState, QpState)] = &[
        (Rc, RESET, RTS),
        (Rc, RESET, RTR),
        (Rc, RESET, ERR),
        (Ud, RESET, ERR),
        (Rc, INIT, RTS),
        (Rc, INIT, SQD),
        (Rc, RTR, SQD),
        (Rc, RTR, INIT),
        (Rc, RTS, RTR),
        (Rc, RTS, SQE),
        (Rc, SQD, RTR),
        (Rc, SQE, RTS),
        (Uc, SQE, SQD),
        (Ud, ERR, RTS),
        (Ud, ERR, INIT),
    ];
    for &(t, from, to) in cases {
        assert_eq!(
            reason(go(t, from, to, good(), M::EMPTY)),
            "illegal QP state transition",
            "{t:?} {from:?}->{to:?}"
        );
    }
}

#[test]
fn cur_state_rules() {
    let l = limits();
    let rtr_rts = M::STATE | M::CUR_STATE | M::SQ_PSN;
    // Matching, from a state where the kernel accepts it.
    let a = QpAttr {
        qp_state: RTS,
        cur_qp_state: RTR,
        ..good()
    };
    assert_eq!(check_modify(QpType::Ud, RTR, &a, rtr_rts, &l), Ok(RTS));
    // Mismatch.
    let a = QpAttr {
        qp_state: RTS,
        cur_qp_state: SQE,
        ..good()
    };
    assert_eq!(
        reason(check_modify(QpType::Ud, RTR, &a, rtr_rts, &l)),
        "cur_qp_state does not match the QP's current state"
    );
    // Matching, but outside RTR/RTS/SQD/SQE.
    for cur in [RESET, INIT, ERR] {
        let a = QpAttr {
            qp_state: cur,
            cur_qp_state: cur,
            ..good()
        };
        assert_eq!(
            reason(check_modify(
                QpType::Rc,
                cur,
                &a,
                M::STATE | M::CUR_STATE,
                &l
            )),
            "cur_qp_state may only be given in RTR, RTS, SQD or SQE"
        );
    }
}

#[test]
fn unknown_mask_bits_are_not_supported() {
    let a = QpAttr {
        qp_state: RESET,
        ..good()
    };
    for bit in [21, 24, 26, 31] {
        let e = check_modify(
            QpType::Rc,
            RESET,
            &a,
            M::STATE | QpAttrMask(1 << bit),
            &limits(),
        )
        .unwrap_err();
        assert_eq!(
            (e.errno, e.reason),
            (Errno::NotSupported, "unknown attribute mask bits")
        );
    }
}

type Set = fn(&mut QpAttr);

#[test]
fn out_of_range_values() {
    use QpType::*;
    let rc_init = M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    let rc_rtr =
        M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    let rc_rts = M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    // (type, from, to, mask, at the limit, one past it, reason)
    #[rustfmt::skip]
    let cases: &[(QpType, QpState, QpState, M, Set, Set, &str)] = &[
        (Rc, RESET, INIT, rc_init, |a| a.port_num = 1, |a| a.port_num = 2, "port_num must be 1"),
        (Rc, RESET, INIT, rc_init, |a| a.port_num = 1, |a| a.port_num = 0, "port_num must be 1"),
        (Rc, RESET, INIT, rc_init, |a| a.pkey_index = 0, |a| a.pkey_index = 1, "pkey_index beyond the P_Key table"),
        (Rc, RESET, INIT, rc_init, |a| a.qp_access_flags = Access(0xf), |a| a.qp_access_flags = Access(0x10), "qp_access_flags has unknown bits"),
        (Rc, INIT, RTR, rc_rtr, |a| a.path_mtu = Mtu::M1024, |a| a.path_mtu = Mtu::M2048, "path_mtu exceeds the port's active MTU"),
        (Rc, INIT, RTR, rc_rtr, |a| a.min_rnr_timer = 31, |a| a.min_rnr_timer = 32, "min_rnr_timer exceeds 31"),
        (Rc, INIT, RTR, rc_rtr, |a| a.rq_psn = 0xff_ffff, |a| a.rq_psn = 1 << 24, "rq_psn exceeds 24 bits"),
        (Rc, INIT, RTR, rc_rtr, |a| a.dest_qp_num = 0xff_ffff, |a| a.dest_qp_num = 1 << 24, "dest_qp_num exceeds 24 bits"),
        (Rc, INIT, RTR, rc_rtr, |a| a.max_dest_rd_atomic = 128, |a| a.max_dest_rd_atomic = 129, "max_dest_rd_atomic exceeds the device's max_qp_rd_atom"),
        (Rc, INIT, RTR, rc_rtr, |a| a.ah_attr = Some(ah()), |a| a.ah_attr = None, "AV given without ah_attr"),
        (Rc, INIT, RTR, rc_rtr, |a| a.ah_attr.as_mut().unwrap().port_num = 1, |a| a.ah_attr.as_mut().unwrap().port_num = 2, "ah_attr.port_num must be 1"),
        (Rc, INIT, RTR, rc_rtr, |a| a.ah_attr.as_mut().unwrap().av.sgid_index = 3, |a| a.ah_attr.as_mut().unwrap().av.sgid_index = 4, "ah_attr.sgid_index beyond the GID table"),
        (Rc, RTR, RTS, rc_rts, |a| a.timeout = 31, |a| a.timeout = 32, "timeout exceeds 31"),
        (Rc, RTR, RTS, rc_rts, |a| a.retry_cnt = 7, |a| a.retry_cnt = 8, "retry_cnt exceeds 7"),
        (Rc, RTR, RTS, rc_rts, |a| a.rnr_retry = 7, |a| a.rnr_retry = 8, "rnr_retry exceeds 7"),
        (Rc, RTR, RTS, rc_rts, |a| a.sq_psn = 0xff_ffff, |a| a.sq_psn = 1 << 24, "sq_psn exceeds 24 bits"),
        (Rc, RTR, RTS, rc_rts, |a| a.max_rd_atomic = 128, |a| a.max_rd_atomic = 129, "max_rd_atomic exceeds the device's max_qp_init_rd_atom"),
        (Ud, RESET, INIT, M::PKEY_INDEX | M::PORT | M::QKEY, |a| a.pkey_index = 0, |a| a.pkey_index = u16::MAX, "pkey_index beyond the P_Key table"),
        (Uc, SQD, SQD, M::AV, |a| a.ah_attr = Some(ah()), |a| a.ah_attr = None, "AV given without ah_attr"),
        (Rc, INIT, RTR, rc_rtr | M::ALT_PATH, |_| {}, |_| {}, "alternate paths are not supported on RoCE"),
    ];
    for (i, &(t, from, to, mask, at, past, why)) in cases.iter().enumerate() {
        let mut a = good();
        at(&mut a);
        if why != "alternate paths are not supported on RoCE" {
            assert_eq!(go(t, from, to, a, mask), Ok(to), "case {i}: at the limit");
        }
        past(&mut a);
        assert_eq!(reason(go(t, from, to, a, mask)), why, "case {i}");
    }
}

#[test]
fn cap_limits() {
    let l = ModifyLimits::default();
    let max = QpCap {
        max_send_wr: 1 << 20,
        max_recv_wr: 1 << 20,
        max_send_sge: 32,
        max_recv_sge: 32,
        max_inline_data: 512,
    };
    assert_eq!(check_cap(&max, false, &l), Ok(()));
    #[rustfmt::skip]
    let cases: &[(Set2, &str)] = &[
        (|c| c.max_send_wr += 1, "cap.max_send_wr exceeds the device's max_qp_wr"),
        (|c| c.max_recv_wr += 1, "cap.max_recv_wr exceeds the device's max_qp_wr"),
        (|c| c.max_send_sge += 1, "cap.max_send_sge exceeds the device's max_send_sge"),
        (|c| c.max_recv_sge += 1, "cap.max_recv_sge exceeds the device's max_recv_sge"),
        (|c| c.max_inline_data += 1, "cap.max_inline_data exceeds the device's max_inline_data"),
    ];
    for &(bump, why) in cases {
        let mut c = max;
        bump(&mut c);
        let e = check_cap(&c, false, &l).unwrap_err();
        assert_eq!(
            (e.verb, e.errno, e.reason),
            ("modify_qp", Errno::Inval, why)
        );
    }
    // With an SRQ the receive sizes are not the QP's.
    let srq = QpCap {
        max_recv_wr: u32::MAX,
        max_recv_sge: u32::MAX,
        ..max
    };
    assert_eq!(check_cap(&srq, true, &l), Ok(()));
}

type Set2 = fn(&mut QpCap);

#[test]
fn default_cap_is_usable_and_errors_say_the_numbers() {
    let c = QpCap::default();
    assert_eq!(
        (c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge),
        (1024, 1024, 4, 4)
    );
    assert_eq!(c.max_inline_data, 256);
    assert_eq!(check_cap(&c, false, &ModifyLimits::default()), Ok(()));
    // A zeroed ibv_qp_attr keeps zero caps.
    assert_eq!(QpAttr::default().cap.max_send_sge, 0);
    let big = QpCap {
        max_send_sge: 33,
        ..c
    };
    let e = check_cap(&big, false, &ModifyLimits::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "modify_qp failed (errno 22): cap.max_send_sge exceeds the device's \
         max_send_sge (33 SGEs, the device takes at most 32)"
    );
}

#[test]
fn rxe_defaults() {
    let l = ModifyLimits::default();
    assert_eq!((l.max_qp_rd_atom, l.max_qp_init_rd_atom), (128, 128));
    assert_eq!((l.pkey_table_len, l.gid_table_len), (1, 1024));
    assert_eq!(Some(l.active_mtu), Mtu::from_netdev_mtu(1500));
}

#[test]
fn required_masks_of_the_connection_path() {
    use QpAttrMask as M;
    use QpType::{Rc, Uc, Ud};
    let q = |t, f, to| required(t, f, to).unwrap();
    assert_eq!(
        q(Rc, RESET, INIT),
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
    );
    assert_eq!(
        q(Ud, RESET, INIT),
        M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY
    );
    assert_eq!(
        q(Rc, INIT, RTR),
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER
    );
    assert_eq!(
        q(Uc, INIT, RTR),
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN
    );
    assert_eq!(q(Ud, INIT, RTR), M::STATE);
    assert_eq!(
        q(Rc, RTR, RTS),
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
    );
    assert_eq!(q(Uc, RTR, RTS), M::STATE | M::SQ_PSN);
    assert!(required(Rc, RESET, RTS).is_none());
}
