//! Shared set-up for engine tests: connected QP pairs on a simulated network.
#![allow(dead_code)]

use rverbs_engine::modify::{required, AhAttr, QpAttr, QpCap};
use rverbs_engine::sim::Sim;
use rverbs_engine::*;
use rverbs_wire::grh::Gid;
use std::sync::Arc;

pub const MS: Nanos = 1_000_000;
pub const SEC: Nanos = 1_000_000_000;

/// One end of a connection.
pub struct End {
    pub engine: usize,
    pub pd: PdId,
    pub cq: CqId,
    pub qpn: u32,
    pub mem: Arc<VecMemory>,
    pub keys: MrKeys,
    pub base: u64,
}

pub struct PairOpts {
    pub qp_type: QpType,
    pub mem_len: usize,
    pub access: Access,
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub cap: QpCap,
    pub cqe: u32,
    pub psn: [u32; 2],
}

impl Default for PairOpts {
    fn default() -> Self {
        PairOpts {
            qp_type: QpType::Rc,
            mem_len: 1 << 16,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            mtu: Mtu::M1024,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            cap: QpCap {
                max_send_wr: 4096,
                max_recv_wr: 4096,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            cqe: 65536,
            psn: [0x11_1111, 0xff_fff0],
        }
    }
}

pub fn end(sim: &mut Sim, i: usize, o: &PairOpts) -> End {
    let e = &mut sim.engines[i];
    let pd = e.alloc_pd();
    let cq = e.create_cq(o.cqe).unwrap();
    let mem = Arc::new(VecMemory::zeroed(o.mem_len));
    let base = 0x10_0000 * (i as u64 + 1);
    let keys = e.reg_mr(pd, mem.clone(), base, o.access).unwrap();
    let qpn = e
        .create_qp(QpInit {
            pd,
            qp_type: o.qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: o.cap,
            sq_sig_all: false,
        })
        .unwrap();
    End {
        engine: i,
        pd,
        cq,
        qpn,
        mem,
        keys,
        base,
    }
}

pub fn av_to(sim: &Sim, peer: usize) -> AddressVector {
    AddressVector {
        dgid: net::ip_to_gid(sim.addr(peer)),
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
}

/// Moves a QP of engine `i` to RTS towards `peer_qpn` on engine `peer`.
pub fn connect(
    sim: &mut Sim,
    i: usize,
    qpn: u32,
    peer: usize,
    peer_qpn: u32,
    o: &PairOpts,
    me: usize,
) {
    let av = av_to(sim, peer);
    let now = sim.now;
    let e = &mut sim.engines[i];
    let attr = QpAttr {
        port_num: 1,
        qp_access_flags: o.access,
        qkey: 0x1111_1111,
        path_mtu: o.mtu,
        dest_qp_num: peer_qpn,
        rq_psn: o.psn[1 - me],
        max_dest_rd_atomic: o.max_rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
        ah_attr: Some(AhAttr { av, port_num: 1 }),
        sq_psn: o.psn[me],
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
        ..Default::default()
    };
    // Each step sets exactly the attributes Linux requires for it.
    let path = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts];
    for w in path.windows(2) {
        let mask = required(o.qp_type, w[0], w[1]).unwrap();
        e.modify_qp(
            qpn,
            &QpAttr {
                qp_state: w[1],
                ..attr
            },
            mask,
            now,
        )
        .unwrap();
    }
}

/// Two engines with one connected QP each.
pub fn pair(sim: &mut Sim, o: &PairOpts) -> (End, End) {
    let a = end(sim, 0, o);
    let b = end(sim, 1, o);
    connect(sim, 0, a.qpn, 1, b.qpn, o, 0);
    connect(sim, 1, b.qpn, 0, a.qpn, o, 1);
    (a, b)
}

/// Posts a receive of one scatter entry (`len` bytes at `off` of `e`'s region) to
/// `e`'s QP, at time `now`.
pub fn post_recv1(sim: &mut Sim, e: &End, wr_id: u64, off: u64, len: u32, now: Nanos) {
    sim.engines[e.engine]
        .post_recv(
            e.qpn,
            RecvWr {
                wr_id,
                sg_list: vec![sge(e, off, len)].into(),
            },
            now,
        )
        .unwrap();
}

pub fn sge(e: &End, off: u64, len: u32) -> Sge {
    Sge {
        addr: e.base + off,
        length: len,
        lkey: e.keys.lkey,
    }
}

pub fn wr(wr_id: u64, opcode: WrOpcode, sg: Vec<Sge>) -> SendWr {
    SendWr {
        opcode,
        ..SendWr::send(wr_id, sg)
    }
}

/// Polls every completion of `e`'s CQ.
pub fn drain(sim: &mut Sim, e: &End) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut buf = [Wc::default(); 64];
    loop {
        let n = sim.engines[e.engine].poll_cq(e.cq, &mut buf).unwrap();
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return out;
        }
    }
}

/// Runs until `n` completions have accumulated on `e`, collecting them.
pub fn wait_wcs(sim: &mut Sim, e: &End, n: usize, limit: Nanos) -> Vec<Wc> {
    let mut got = Vec::new();
    let deadline = sim.now + limit;
    sim.run_until(deadline, |s| {
        got.extend(drain(s, e));
        got.len() >= n
    });
    got
}

pub fn fill(e: &End, off: usize, data: &[u8]) {
    e.mem.write(off, data);
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub fn zero_gid() -> Gid {
    Gid::ZERO
}
