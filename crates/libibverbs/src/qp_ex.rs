//! The extended QP: `ibv_create_qp_ex` with the `ibv_qp_ex` work-request builders
//! (`ibv_wr_start` ... `ibv_wr_complete`, inlines that call the pointers filled here).
//! The extended CQ is `cq_ex`'s.

use crate::pd::AhObj;
use crate::qp::{new_qp, Build, QpObj};
use crate::*;
use rverbs::Error;
use rverbs_engine::{Errno, SendFlags, SendWr, SgList, Sge, UdDest, VerbError, WrOpcode};
use rverbs_ibverbs::types::*;
use std::ffi::{c_int, c_void};

/// `enum ibv_qp_create_send_ops_flags` the builders support: RDMA WRITE (with
/// immediate), SEND (with immediate, with invalidate), RDMA READ, the two atomics,
/// LOCAL_INV and BIND_MW.
pub(crate) const SEND_OPS_SUPPORTED: u64 = 0x3ff;

/// `IBV_QP_INIT_ATTR_PD`, `_CREATE_FLAGS`, `_SEND_OPS_FLAGS`.
const QP_INIT_ATTR_PD: u32 = 1;
const QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// `verbs_context.create_qp_ex`.
pub(crate) unsafe extern "C" fn create_qp_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    ret_ptr(|| {
        // SAFETY: the caller's attributes.
        let a = unsafe { arg(attr) }?;
        if a.comp_mask & QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        let known = QP_INIT_ATTR_PD | QP_INIT_ATTR_CREATE_FLAGS | QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & !known != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let ops = if a.comp_mask & QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            if a.send_ops_flags & !SEND_OPS_SUPPORTED != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            a.send_ops_flags
        } else {
            0
        };
        let base = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let p = new_qp(a.pd, &base)?;
        // SAFETY: just made, and not yet handed to the caller, who alone reads these.
        fill_qp_ex(unsafe { &mut (*p).c }, ops);
        Ok(p as *mut ibv_qp)
    })
}

/// The QP's `ibv_qp_ex`, or NULL for a QP that `ibv_create_qp` made (libibverbs: only
/// an extended QP has one).
unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: NULL or the caller's QP; `wr_start` was set before the QP was returned.
    match unsafe { QpObj::from_c(qp) } {
        Ok(o) if o.c.wr_start.is_some() => qp as *mut ibv_qp_ex,
        _ => std::ptr::null_mut(),
    }
}
export!(ibv_qp_to_qp_ex, "IBVERBS_1.6");

pub(crate) fn fill_qp_ex(c: &mut ibv_qp_ex, _send_ops: u64) {
    c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    c.wr_rdma_read = Some(wr_rdma_read);
    c.wr_rdma_write = Some(wr_rdma_write);
    c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    c.wr_send = Some(wr_send);
    c.wr_send_imm = Some(wr_send_imm);
    c.wr_send_inv = Some(wr_send_inv);
    c.wr_bind_mw = Some(wr_bind_mw);
    c.wr_local_inv = Some(wr_local_inv);
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
}

/// Runs `f` on the QP's build state (a void builder: failures are kept for
/// `ibv_wr_complete`).
fn with_build(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpObj, &mut Build)) {
    ret_void(|| {
        // SAFETY: the caller's QP (every QP here is a QpObj).
        let Ok(q) = (unsafe { QpObj::from_c(qp as *mut ibv_qp) }) else {
            return;
        };
        let mut b = q.build.lock().unwrap_or_else(|e| e.into_inner());
        f(q, &mut b)
    })
}

fn fail(b: &mut Build, why: &'static str) {
    if b.err.is_none() {
        b.err = Some(VerbError::new("wr_complete", Errno::Inval, why).into());
    }
}

/// Starts a new request from the QP's `wr_id` / `wr_flags`.
fn begin(qp: *mut ibv_qp_ex, opcode: WrOpcode, f: impl FnOnce(&mut SendWr)) {
    // SAFETY: the caller's QP; `wr_id` / `wr_flags` are what it set before the call.
    let (wr_id, flags) = match unsafe { qp.as_ref() } {
        Some(q) => (q.wr_id, q.wr_flags),
        None => return,
    };
    with_build(qp, |q, b| {
        let ok = match q.rs.qp_type() {
            rverbs::QpType::Ud => matches!(opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            rverbs::QpType::Uc => matches!(
                opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::BindMw(_)
                    | WrOpcode::LocalInv
            ),
            _ => true,
        };
        if !ok {
            fail(b, "opcode not supported on this QP type");
        }
        if flags & !0x1f != 0 {
            fail(b, "unknown send flags");
        }
        let mut w = SendWr {
            wr_id,
            opcode,
            sg_list: SgList::new(),
            flags: SendFlags(flags & 0xf),
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
        };
        f(&mut w);
        b.wrs.push(w);
        b.inline.push(None);
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_build(qp, |_, b| *b = Build::default())
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_build(qp, |_, b| *b = Build::default())
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's QP.
        let q = unsafe { QpObj::from_c(qp as *mut ibv_qp) }?;
        let b = std::mem::take(&mut *q.build.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(e) = b.err {
            return Err(errno_of(&e));
        }
        let wrs = b.wrs.into_iter().zip(b.inline).map(|(mut w, data)| {
            if let Some(d) = data {
                w.flags = w.flags | SendFlags::INLINE;
                w.sg_list = inline_sge(q, &d)?;
            }
            Ok(w)
        });
        rverbs::ffi::post_send(&q.rs, wrs).map_err(|(_, e)| errno_of(&e))
    })
}

/// Puts INLINE bytes in the QP's scratch region (just before the engine copies them).
fn inline_sge(q: &QpObj, d: &[u8]) -> Result<SgList, Error> {
    let inval = |why| -> Error { VerbError::new("wr_complete", Errno::Inval, why).into() };
    let Some(s) = &q.scratch else {
        return if d.is_empty() {
            Ok(SgList::new())
        } else {
            Err(inval("inline data above max_inline_data"))
        };
    };
    s.mem.with(|b| {
        if d.len() > b.len() {
            return Err(inval("inline data above max_inline_data"));
        }
        b[..d.len()].copy_from_slice(d);
        Ok(())
    })?;
    Ok([Sge {
        addr: 0,
        length: d.len() as u32,
        lkey: s.mr.lkey(),
    }]
    .into())
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    begin(qp, WrOpcode::Send, |_| {})
}
unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    begin(qp, WrOpcode::SendWithImm, |w| {
        w.imm_data = u32::from_be(imm)
    })
}
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, WrOpcode::SendWithInv, |w| w.rkey = rkey)
}
unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, WrOpcode::LocalInv, |w| w.rkey = rkey)
}
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: the caller's bind information, window and MR (NULL or this library's).
    let bind = match unsafe { info.as_ref() } {
        Some(i) => unsafe { crate::mw::bind_of(mw, rkey, i) },
        None => Err(VerbError::new("wr_bind_mw", Errno::Inval, "no bind information").into()),
    };
    match bind {
        Ok(b) => begin(qp, WrOpcode::BindMw(b), |_| {}),
        Err(e) => with_build(qp, |_, b| {
            if b.err.is_none() {
                b.err = Some(e);
            }
        }),
    }
}
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(qp, WrOpcode::RdmaWrite, |w| {
        (w.rkey, w.remote_addr) = (rkey, addr)
    })
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    begin(qp, WrOpcode::RdmaWriteWithImm, |w| {
        (w.rkey, w.remote_addr, w.imm_data) = (rkey, addr, u32::from_be(imm))
    })
}
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(qp, WrOpcode::RdmaRead, |w| {
        (w.rkey, w.remote_addr) = (rkey, addr)
    })
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(qp, WrOpcode::AtomicCmpAndSwp, |w| {
        (w.rkey, w.remote_addr, w.compare_add, w.swap) = (rkey, addr, compare, swap)
    })
}
unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    begin(qp, WrOpcode::AtomicFetchAndAdd, |w| {
        (w.rkey, w.remote_addr, w.compare_add) = (rkey, addr, add)
    })
}

/// Runs `f` on the request being built (a setter before any `ibv_wr_<op>` is recorded
/// as an error for `ibv_wr_complete`).
fn with_cur(
    qp: *mut ibv_qp_ex,
    f: impl FnOnce(&QpObj, &mut SendWr, &mut Option<Vec<u8>>) -> Result<(), &'static str>,
) {
    with_build(qp, |q, b| {
        let r = match (b.wrs.last_mut(), b.inline.last_mut()) {
            (Some(w), Some(i)) => f(q, w, i),
            _ => Err("a setter before any ibv_wr_<opcode>"),
        };
        if let Err(why) = r {
            fail(b, why);
        }
    })
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    with_cur(qp, |_, w, _| {
        w.sg_list = [Sge { addr, length, lkey }].into();
        Ok(())
    })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg: *const ibv_sge) {
    with_cur(qp, |_, w, _| {
        if num_sge > 0 && sg.is_null() {
            return Err("sg_list is NULL");
        }
        if num_sge > 1 << 12 {
            return Err("num_sge out of range");
        }
        w.sg_list = if num_sge == 0 {
            SgList::new()
        } else {
            // SAFETY: the caller's list of `num_sge` SGEs.
            unsafe { std::slice::from_raw_parts(sg, num_sge) }
                .iter()
                .map(|g| Sge {
                    addr: g.addr,
                    length: g.length,
                    lkey: g.lkey,
                })
                .collect()
        };
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    with_cur(qp, |q, _, i| {
        if length > q.cap.max_inline_data as usize {
            return Err("inline data above max_inline_data");
        }
        if length > 0 && addr.is_null() {
            return Err("inline data at NULL");
        }
        let d = if length == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's `length` readable bytes, copied now (INLINE).
            unsafe { std::slice::from_raw_parts(addr as *const u8, length) }.to_vec()
        };
        *i = Some(d);
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    with_cur(qp, |q, _, i| {
        if n > 0 && list.is_null() {
            return Err("buf_list is NULL");
        }
        let bufs = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's `n` buffers.
            unsafe { std::slice::from_raw_parts(list, n) }
        };
        let mut d = Vec::new();
        for b in bufs {
            if d.len() + b.length > q.cap.max_inline_data as usize {
                return Err("inline data above max_inline_data");
            }
            if b.length > 0 {
                if b.addr.is_null() {
                    return Err("inline data at NULL");
                }
                // SAFETY: the caller's readable buffer.
                d.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(b.addr as *const u8, b.length)
                });
            }
        }
        *i = Some(d);
        Ok(())
    })
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    with_cur(qp, |_, w, _| {
        // SAFETY: NULL or the caller's AH.
        let a =
            unsafe { (ah as *const AhObj).as_ref() }.ok_or("UD send without an address handle")?;
        w.ud = Some(UdDest {
            ah: rverbs::ffi::ah_id(&a.rs),
            remote_qpn,
            remote_qkey,
        });
        Ok(())
    })
}
