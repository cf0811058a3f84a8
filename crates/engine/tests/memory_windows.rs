//! Memory windows (IBTA 10.6.7; rxe `rxe_mw.c`): binds by work request, remote access
//! through a window's R_Key checked against its range and rights, invalidation
//! (LOCAL_INV, SEND with invalidate, dealloc), rebinding, and the bind errors.

mod common;
use common::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;

const MEM: usize = 1 << 16;
/// The window: 0x200 bytes from offset 0x100 of B's region.
const WIN_OFF: u64 = 0x100;
const WIN_LEN: u64 = 0x200;

fn setup(mr_access: Access) -> (Sim, End, End) {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 5);
    let o = PairOpts {
        psn: [10, 700],
        mem_len: MEM,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    // B's region for the windows: registered with `mr_access` (the QPs allow every
    // remote operation; what the MR and the window grant decides).
    let mem = std::sync::Arc::new(VecMemory::zeroed(MEM));
    let base = 0x50_0000;
    let keys = sim.engines[1]
        .reg_mr(b.pd, mem.clone(), base, mr_access)
        .unwrap();
    let b = End {
        mem,
        keys,
        base,
        ..b
    };
    fill(&a, 0, &pattern(MEM, 1));
    fill(&b, 0, &pattern(MEM, 2));
    (sim, a, b)
}

fn mw_access() -> Access {
    Access::LOCAL_WRITE | Access::MW_BIND
}

fn bind_wr(id: u64, mw: MwId, key: u8, e: &End, off: u64, len: u64, access: Access) -> SendWr {
    let mut w = wr(
        id,
        WrOpcode::BindMw(MwBind {
            mw,
            key,
            mr_lkey: e.keys.lkey,
            addr: e.base + off,
            length: len,
            access,
        }),
        vec![],
    );
    w.flags = SendFlags::SIGNALED;
    w
}

/// Posts `w` on `e` and waits for its one completion.
fn run(sim: &mut Sim, e: &End, w: SendWr) -> Wc {
    let now = sim.now;
    sim.engines[e.engine].post_send(e.qpn, w, now).unwrap();
    let wcs = wait_wcs(sim, e, 1, 100 * MS);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0]
}

fn remote(id: u64, op: WrOpcode, local: Sge, va: u64, rkey: u32) -> SendWr {
    let mut w = wr(id, op, vec![local]);
    w.remote_addr = va;
    w.rkey = rkey;
    w.flags = SendFlags::SIGNALED;
    w
}

/// A type-2 window of B bound over the window range through B's QP: its R_Key.
fn bound_type2(sim: &mut Sim, b: &End, access: Access) -> (MwId, u32) {
    let (mw, first) = sim.engines[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    let key = (first as u8).wrapping_add(1);
    let wc = run(sim, b, bind_wr(7, mw, key, b, WIN_OFF, WIN_LEN, access));
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::Success, WcOpcode::BindMw)
    );
    let rkey = sim.engines[1].mw_rkey(mw).unwrap();
    assert_eq!(
        rkey,
        (first & !0xff) | u32::from(key),
        "index << 8 | the new key"
    );
    (mw, rkey)
}

#[test]
fn write_and_read_through_a_type2_window_in_range() {
    let (mut sim, a, b) = setup(mw_access());
    let (_, rkey) = bound_type2(&mut sim, &b, Access::REMOTE_WRITE | Access::REMOTE_READ);
    // The MR itself grants no remote right: the window does.
    let va = b.base + WIN_OFF + WIN_LEN - 64;
    let wc = run(
        &mut sim,
        &a,
        remote(1, WrOpcode::RdmaWrite, sge(&a, 0, 64), va, rkey),
    );
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let got = b.mem.snapshot();
    assert_eq!(
        &got[(WIN_OFF + WIN_LEN - 64) as usize..][..64],
        &pattern(MEM, 1)[..64]
    );
    let wc = run(
        &mut sim,
        &a,
        remote(
            2,
            WrOpcode::RdmaRead,
            sge(&a, 4096, WIN_LEN as u32),
            b.base + WIN_OFF,
            rkey,
        ),
    );
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    let ours = a.mem.snapshot();
    assert_eq!(
        &ours[4096..4096 + WIN_LEN as usize],
        &b.mem.snapshot()[WIN_OFF as usize..(WIN_OFF + WIN_LEN) as usize]
    );
}

#[test]
fn access_outside_the_window_or_its_rights_is_a_remote_access_error() {
    // One byte past the end, one before the start, and a right the window lacks.
    let cases: [(WrOpcode, u64, u32); 3] = [
        (WrOpcode::RdmaWrite, WIN_OFF + WIN_LEN - 63, 64),
        (WrOpcode::RdmaWrite, WIN_OFF - 1, 16),
        (WrOpcode::RdmaRead, WIN_OFF, 16),
    ];
    for (op, off, len) in cases {
        let (mut sim, a, b) = setup(mw_access());
        let (_, rkey) = bound_type2(&mut sim, &b, Access::REMOTE_WRITE);
        let before = b.mem.snapshot();
        let wc = run(
            &mut sim,
            &a,
            remote(1, op, sge(&a, 0, len), b.base + off, rkey),
        );
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{op:?} at {off:#x}");
        assert!(b.mem.snapshot() == before, "memory changed");
        assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
    }
}

#[test]
fn local_invalidate_then_rebind() {
    let (mut sim, a, b) = setup(mw_access());
    let (mw, rkey) = bound_type2(&mut sim, &b, Access::REMOTE_WRITE);
    // A bound type-2 window cannot be bound again before it is invalidated.
    let (mut sim2, _, b2) = setup(mw_access());
    let (mw2, _) = bound_type2(&mut sim2, &b2, Access::REMOTE_WRITE);
    let wc = run(
        &mut sim2,
        &b2,
        bind_wr(8, mw2, 9, &b2, 0, 64, Access::REMOTE_WRITE),
    );
    assert_eq!(wc.status, WcStatus::MwBindErr);
    assert_eq!(sim2.engines[1].qp_state(b2.qpn), Some(QpState::Err));

    let mut inv = wr(3, WrOpcode::LocalInv, vec![]);
    inv.rkey = rkey;
    inv.flags = SendFlags::SIGNALED;
    let wc = run(&mut sim, &b, inv);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    // Rebound with a new key: the old key grants nothing, the new one does.
    let wc = run(
        &mut sim,
        &b,
        bind_wr(4, mw, 0x5a, &b, WIN_OFF, WIN_LEN, Access::REMOTE_WRITE),
    );
    assert_eq!(wc.status, WcStatus::Success);
    let new = sim.engines[1].mw_rkey(mw).unwrap();
    assert_eq!(new & 0xff, 0x5a);
    let va = b.base + WIN_OFF;
    let wc = run(
        &mut sim,
        &a,
        remote(5, WrOpcode::RdmaWrite, sge(&a, 0, 8), va, new),
    );
    assert_eq!(wc.status, WcStatus::Success);
    let wc = run(
        &mut sim,
        &a,
        remote(6, WrOpcode::RdmaWrite, sge(&a, 0, 8), va, rkey),
    );
    assert_eq!(wc.status, WcStatus::RemAccessErr);
}

#[test]
fn local_invalidate_then_write_fails() {
    let (mut sim, a, b) = setup(mw_access());
    let (_, rkey) = bound_type2(&mut sim, &b, Access::REMOTE_WRITE);
    let mut inv = wr(3, WrOpcode::LocalInv, vec![]);
    inv.rkey = rkey;
    inv.flags = SendFlags::SIGNALED;
    assert_eq!(run(&mut sim, &b, inv).status, WcStatus::Success);
    let wc = run(
        &mut sim,
        &a,
        remote(
            1,
            WrOpcode::RdmaWrite,
            sge(&a, 0, 8),
            b.base + WIN_OFF,
            rkey,
        ),
    );
    assert_eq!(wc.status, WcStatus::RemAccessErr);
}

#[test]
fn send_with_invalidate_frees_the_window() {
    let (mut sim, a, b) = setup(mw_access());
    let (_, rkey) = bound_type2(&mut sim, &b, Access::REMOTE_WRITE);
    let now = sim.now;
    post_recv1(&mut sim, &b, 20, 0x8000, 64, now);
    let mut w = wr(21, WrOpcode::SendWithInv, vec![sge(&a, 0, 16)]);
    w.rkey = rkey;
    w.flags = SendFlags::SIGNALED;
    assert_eq!(run(&mut sim, &a, w).status, WcStatus::Success);
    let r = wait_wcs(&mut sim, &b, 1, 100 * MS);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].wr_id, r[0].status), (20, WcStatus::Success));
    assert!(r[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(r[0].imm_data, rkey);
    let wc = run(
        &mut sim,
        &a,
        remote(
            22,
            WrOpcode::RdmaWrite,
            sge(&a, 0, 8),
            b.base + WIN_OFF,
            rkey,
        ),
    );
    assert_eq!(wc.status, WcStatus::RemAccessErr);
}

#[test]
fn send_with_invalidate_of_a_type1_window_fails_the_receive() {
    let (mut sim, a, b) = setup(mw_access());
    let (mw, _) = sim.engines[1].alloc_mw(b.pd, MwType::Type1).unwrap();
    let wc = run(
        &mut sim,
        &b,
        bind_wr(1, mw, 3, &b, WIN_OFF, WIN_LEN, Access::REMOTE_WRITE),
    );
    assert_eq!(wc.status, WcStatus::Success);
    let rkey = sim.engines[1].mw_rkey(mw).unwrap();
    let now = sim.now;
    post_recv1(&mut sim, &b, 20, 0x8000, 64, now);
    let mut w = wr(21, WrOpcode::SendWithInv, vec![sge(&a, 0, 16)]);
    w.rkey = rkey;
    w.flags = SendFlags::SIGNALED;
    assert_eq!(run(&mut sim, &a, w).status, WcStatus::RemInvReqErr);
    let r = wait_wcs(&mut sim, &b, 1, 100 * MS);
    assert_eq!((r[0].wr_id, r[0].status), (20, WcStatus::RemInvReqErr));
}

#[test]
fn type1_window_bind_unbind_and_dealloc() {
    let (mut sim, a, b) = setup(mw_access());
    let (mw, _) = sim.engines[1].alloc_mw(b.pd, MwType::Type1).unwrap();
    let wc = run(
        &mut sim,
        &b,
        bind_wr(1, mw, 3, &b, WIN_OFF, WIN_LEN, Access::REMOTE_WRITE),
    );
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    let rkey = sim.engines[1].mw_rkey(mw).unwrap();
    let va = b.base + WIN_OFF;
    let wc = run(
        &mut sim,
        &a,
        remote(2, WrOpcode::RdmaWrite, sge(&a, 0, 8), va, rkey),
    );
    assert_eq!(wc.status, WcStatus::Success);
    // The MR stays while a window is bound to it.
    let e = sim.engines[1].dereg_mr(b.keys.lkey).unwrap_err();
    assert_eq!(e.errno, Errno::Busy);
    // A type-1 window cannot be invalidated by LOCAL_INV (a new QP pair: the error
    // moves the QP to ERR).
    let (mut sim2, _, b2) = setup(mw_access());
    let (mw2, _) = sim2.engines[1].alloc_mw(b2.pd, MwType::Type1).unwrap();
    assert_eq!(
        run(
            &mut sim2,
            &b2,
            bind_wr(1, mw2, 3, &b2, 0, 64, Access::REMOTE_WRITE)
        )
        .status,
        WcStatus::Success
    );
    let mut inv = wr(2, WrOpcode::LocalInv, vec![]);
    inv.rkey = sim2.engines[1].mw_rkey(mw2).unwrap();
    inv.flags = SendFlags::SIGNALED;
    assert_eq!(run(&mut sim2, &b2, inv).status, WcStatus::LocQpOpErr);
    // Bound with length 0: the key grants nothing, and the MR may go.
    let wc = run(&mut sim, &b, bind_wr(3, mw, 4, &b, 0, 0, Access::NONE));
    assert_eq!(wc.status, WcStatus::Success);
    let rkey0 = sim.engines[1].mw_rkey(mw).unwrap();
    let wc = run(
        &mut sim,
        &a,
        remote(4, WrOpcode::RdmaWrite, sge(&a, 0, 8), va, rkey0),
    );
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    sim.engines[1].dealloc_mw(mw).unwrap();
    assert_eq!(
        sim.engines[1].dealloc_mw(mw).unwrap_err().errno,
        Errno::Inval
    );
    sim.engines[1].dereg_mr(b.keys.lkey).unwrap();
}

#[test]
fn dealloc_of_a_bound_window_revokes_its_key() {
    let (mut sim, a, b) = setup(mw_access());
    let (mw, rkey) = bound_type2(&mut sim, &b, Access::REMOTE_WRITE);
    sim.engines[1].dealloc_mw(mw).unwrap();
    let wc = run(
        &mut sim,
        &a,
        remote(
            1,
            WrOpcode::RdmaWrite,
            sge(&a, 0, 8),
            b.base + WIN_OFF,
            rkey,
        ),
    );
    assert_eq!(wc.status, WcStatus::RemAccessErr);
}

#[test]
fn bad_binds_are_mw_bind_errors() {
    type Case = (&'static str, Access, u64, u64, Access);
    let cases: [Case; 5] = [
        (
            "MR without MW_BIND",
            Access::LOCAL_WRITE,
            WIN_OFF,
            WIN_LEN,
            Access::REMOTE_WRITE,
        ),
        (
            "type 2 with length 0",
            mw_access(),
            0,
            0,
            Access::REMOTE_WRITE,
        ),
        (
            "outside the MR",
            mw_access(),
            MEM as u64 - 8,
            16,
            Access::REMOTE_WRITE,
        ),
        (
            "zero-based",
            mw_access(),
            WIN_OFF,
            WIN_LEN,
            Access::REMOTE_WRITE | Access::ZERO_BASED,
        ),
        (
            "write rights over an MR without local write",
            Access::MW_BIND,
            WIN_OFF,
            WIN_LEN,
            Access::REMOTE_WRITE,
        ),
    ];
    for (why, mr_access, off, len, access) in cases {
        let (mut sim, _, b) = setup(mr_access);
        let (mw, rkey) = sim.engines[1].alloc_mw(b.pd, MwType::Type2).unwrap();
        let wc = run(&mut sim, &b, bind_wr(1, mw, 1, &b, off, len, access));
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::MwBindErr, WcOpcode::BindMw),
            "{why}"
        );
        assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Err), "{why}");
        assert_eq!(
            sim.engines[1].mw_rkey(mw),
            Some(rkey),
            "{why}: the key did not change"
        );
    }
}

#[test]
fn a_type2_window_serves_only_the_qp_it_was_bound_through() {
    let (mut sim, a, b) = setup(mw_access());
    // B binds through a second QP of its PD; A's QP reaches B's first QP.
    let o = PairOpts::default();
    let b2 = sim.engines[1]
        .create_qp(QpInit {
            pd: b.pd,
            qp_type: QpType::Rc,
            send_cq: b.cq,
            recv_cq: b.cq,
            srq: None,
            cap: o.cap,
            sq_sig_all: false,
        })
        .unwrap();
    connect(&mut sim, 1, b2, 0, a.qpn, &o, 1);
    let other = End { qpn: b2, ..b };
    let (mw, _) = sim.engines[1].alloc_mw(other.pd, MwType::Type2).unwrap();
    let wc = run(
        &mut sim,
        &other,
        bind_wr(1, mw, 2, &other, WIN_OFF, WIN_LEN, Access::REMOTE_WRITE),
    );
    assert_eq!(wc.status, WcStatus::Success);
    let rkey = sim.engines[1].mw_rkey(mw).unwrap();
    let wc = run(
        &mut sim,
        &a,
        remote(
            2,
            WrOpcode::RdmaWrite,
            sge(&a, 0, 8),
            other.base + WIN_OFF,
            rkey,
        ),
    );
    assert_eq!(wc.status, WcStatus::RemAccessErr);
}

#[test]
fn a_bind_completes_after_the_requests_posted_before_it() {
    let (mut sim, a, b) = setup(mw_access());
    let (mw, _) = sim.engines[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    let now = sim.now;
    let write = remote(
        1,
        WrOpcode::RdmaWrite,
        sge(&b, 0, 4000),
        a.base,
        a.keys.rkey,
    );
    sim.engines[1].post_send(b.qpn, write, now).unwrap();
    let bind = bind_wr(2, mw, 1, &b, WIN_OFF, WIN_LEN, Access::REMOTE_WRITE);
    sim.engines[1].post_send(b.qpn, bind, now).unwrap();
    let wcs = wait_wcs(&mut sim, &b, 2, 100 * MS);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::BindMw)
        ]
    );
    assert_eq!(&a.mem.snapshot()[..4000], &pattern(MEM, 2)[..4000]);
}
