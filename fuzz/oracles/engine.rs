// The engine's receive path under arbitrary datagrams (shared by the `engine` fuzz
// target and `crates/engine/tests/fuzz_seeds.rs`). An engine with live RC, UC and UD
// QPs (and RC work in flight) takes a stream of datagrams cut from the input; each gets
// a valid ICRC so the fuzzer reaches the transport, and most are aimed at a live QP.
// Checks: no panic, bounded output per input, time always moves forward, and the
// engine stays usable (a fresh QP can still be created afterwards).

use rverbs_engine::modify::{required, AhAttr, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::net::{fill_icrc_for, ip_to_gid};
use rverbs_engine::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

const ALL: Access = Access(
    Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0,
);

/// (RESET →) RTS towards the fake peer, receives posted, and for RC some requests in
/// flight so responses have something to match. Used at set-up and whenever the input
/// has driven a QP into the error state, so the rest of the input still reaches a live QP.
fn bring_up(e: &mut Engine, qpn: u32, qp_type: QpType, lkey: u32, now: Nanos) {
    let av = AddressVector { dgid: ip_to_gid(PEER), sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 };
    let attr = QpAttr {
        port_num: 1,
        qp_access_flags: ALL,
        qkey: 0x1111_1111,
        path_mtu: Mtu::M1024,
        dest_qp_num: 0x99,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ah_attr: Some(AhAttr { av, port_num: 1 }),
        timeout: 1,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 4,
        ..Default::default()
    };
    if e.qp_state(qpn) != Some(QpState::Reset) {
        let reset = QpAttr { qp_state: QpState::Reset, ..attr };
        e.modify_qp(qpn, &reset, QpAttrMask::STATE, now).unwrap();
    }
    let path = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts];
    for w in path.windows(2) {
        let mask = required(qp_type, w[0], w[1]).unwrap();
        e.modify_qp(qpn, &QpAttr { qp_state: w[1], ..attr }, mask, now).unwrap();
    }
    for i in 0..8 {
        let sg = vec![Sge { addr: 0x1000 + i * 2048, length: 2048, lkey }];
        e.post_recv(qpn, RecvWr { wr_id: i, sg_list: sg.into() }, now).unwrap();
    }
    if qp_type == QpType::Rc {
        for (i, op) in [WrOpcode::Send, WrOpcode::RdmaWrite, WrOpcode::RdmaRead, WrOpcode::AtomicFetchAndAdd].into_iter().enumerate() {
            let len = if op == WrOpcode::AtomicFetchAndAdd { 8 } else { 3000 };
            let mut wr = SendWr::send(i as u64, vec![Sge { addr: 0x9000 + 8 * i as u64, length: len, lkey }]);
            wr.opcode = op;
            wr.remote_addr = 0x2000;
            wr.rkey = 0x1234;
            e.post_send(qpn, wr, now).unwrap();
        }
    }
}

const TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

fn setup() -> (Engine, Vec<u32>, MrKeys, CqId) {
    let mut e = Engine::new(Config { gids: vec![ip_to_gid(LOCAL)], seed: 1, ..Config::default() });
    let pd = e.alloc_pd();
    let cq = e.create_cq(64).unwrap();
    let mem = Arc::new(VecMemory::zeroed(1 << 16));
    let keys = e.reg_mr(pd, mem, 0x1000, ALL).unwrap();
    let cap = QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 };
    let mut qpns = Vec::new();
    for qp_type in TYPES {
        let qpn = e.create_qp(QpInit { pd, qp_type, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: true }).unwrap();
        bring_up(&mut e, qpn, qp_type, keys.lkey, 0);
        qpns.push(qpn);
    }
    (e, qpns, keys, cq)
}

/// Feeds the datagrams cut from `data`.
pub fn engine(data: &[u8]) {
    run(data);
}

/// [`engine`], returning the engine's counters (for tests that check the input reached
/// the transport rather than dying at the ICRC or the parser).
pub fn run(data: &[u8]) -> Counters {
    let (mut e, qpns, keys, cq0) = setup();
    let rkey = keys.rkey;
    let mut now: Nanos = 0;
    let mut rest = data;
    let mut wcs = [Wc::default(); 16];
    let mut sent = 0usize;
    while rest.len() >= 3 {
        let ctl = rest[0];
        let len = usize::from(rest[1]) * 8 + usize::from(rest[2] & 7);
        // Bit 3 of the length byte: the datagram arrived as RoCE v1 (0x8915 frame).
        let roce_v1 = rest[2] & 0x08 != 0;
        rest = &rest[3..];
        let take = len.min(rest.len());
        let mut payload = rest[..take].to_vec();
        rest = &rest[take..];
        if payload.len() >= 16 {
            // Aim at a live QP unless the control byte says otherwise; patch R_Keys
            // into RETH/AtomicETH positions sometimes so checks pass more often.
            if ctl & 0x80 == 0 {
                // The QP of the opcode's transport (RC, UC, UD), else one by `ctl`.
                let qpn = match payload[0] >> 5 {
                    0 => qpns[0],
                    1 => qpns[1],
                    3 => qpns[2],
                    _ => qpns[usize::from(ctl) % qpns.len()],
                };
                payload[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
                // Requests mostly get the PSN the responder expects, so they reach
                // execution instead of stopping at the sequence check.
                let request = !matches!(payload[0] & 0x1f, 0x0d..=0x12);
                if ctl & 0x08 == 0 && request {
                    if let Ok(a) = e.query_qp(qpn) {
                        payload[9..12].copy_from_slice(&a.rq_psn.to_be_bytes()[1..]);
                    }
                }
            }
            if ctl & 0x40 != 0 && payload.len() >= 28 {
                payload[20..24].copy_from_slice(&rkey.to_be_bytes());
            }
            payload[1] &= 0xf0; // TVer 0
            payload[2] = 0xff;
            payload[3] = 0xff; // default P_Key
        }
        if payload.len() >= 16 && ctl & 0x20 == 0 {
            fill_icrc_for(roce_v1, PEER, LOCAL, 0xc000, &mut payload);
        }
        let d = Datagram {
            src: PEER,
            dst: LOCAL,
            src_port: 0xc000,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            ipv4_id: Some(0),
            roce_v1,
            icrc_checked: false,
            payload: &payload,
        };
        e.handle_datagram(now, &d);
        let mut out = 0;
        while e.poll_transmit(now).is_some() {
            out += 1;
            assert!(out <= 20_000, "unbounded output for one datagram");
        }
        sent += out;
        if ctl & 0x10 != 0 {
            now += 1 << (ctl & 0x0f).min(30);
            if let Some(t) = e.poll_timeout() {
                assert!(t >= now.saturating_sub(1 << 31) || t <= now, "deadline in the far past");
            }
            e.handle_timeout(now);
            while e.poll_transmit(now).is_some() {}
        }
        for (&qpn, qp_type) in qpns.iter().zip(TYPES) {
            if e.qp_state(qpn) == Some(QpState::Err) {
                bring_up(&mut e, qpn, qp_type, keys.lkey, now);
            }
        }
        while let Ok(n) = e.poll_cq(cq0, &mut wcs) {
            if n == 0 {
                break;
            }
        }
        while e.poll_event().is_some() {}
    }
    let _ = sent;
    // Still usable.
    let pd = e.alloc_pd();
    let cq = e.create_cq(4).unwrap();
    let cap = QpCap { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    e.create_qp(QpInit { pd, qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: false }).unwrap();
    e.counters().clone()
}
