//! The extended CQ: `verbs_context.create_cq_ex` and `ibv_cq_ex` polling
//! (`ibv_start_poll`, `ibv_next_poll`, `ibv_wc_read_*`: inlines that call the pointers
//! filled here). A CQ made by `ibv_create_cq` has none: libibverbs gives no way from an
//! `ibv_cq` to an `ibv_cq_ex`.

use crate::cq::{c_wc, new_cq, CqObj};
use crate::*;
use rverbs_ibverbs::types::*;
use std::ffi::{c_int, c_uint};

/// `IBV_CQ_INIT_ATTR_MASK_FLAGS` / `_PD` of `enum ibv_cq_init_attr_mask`.
const CQ_INIT_ATTR_MASK_ALL: u32 = 0x3;

/// `verbs_context.create_cq_ex`.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    ret_ptr(|| {
        // SAFETY: the caller's attributes.
        let a = unsafe { arg(attr) }?;
        if a.comp_mask & !CQ_INIT_ATTR_MASK_ALL != 0 {
            return Err(libc::EINVAL);
        }
        if a.wc_flags & !WC_EX_SUPPORTED != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        let vector = c_int::try_from(a.comp_vector).map_err(|_| libc::EINVAL)?;
        let p = new_cq(context, cqe, a.cq_context, a.channel, vector)?;
        // SAFETY: just made, and not yet handed to the caller, who alone reads these.
        fill_cq_ex(unsafe { &mut (*p).c }, a.wc_flags);
        Ok(p as *mut ibv_cq_ex)
    })
}

/// `enum ibv_create_cq_wc_flags` this CQ can report: byte_len, imm, qp_num, src_qp,
/// slid, sl, dlid_path_bits (no timestamps, CVLAN, flow tag or tag matching).
pub(crate) const WC_EX_SUPPORTED: u64 = 0x7f;

pub(crate) fn fill_cq_ex(c: &mut ibv_cq_ex, _wc_flags: u64) {
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// Moves to the next completion: from those already taken, else from the device.
fn advance(cq: *mut ibv_cq_ex) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's CQ (every CQ here is a CqObj).
        let o = unsafe { CqObj::from_c(cq as *mut ibv_cq) }?;
        let mut st = o.ex.lock().unwrap_or_else(|e| e.into_inner());
        if st.pending.is_empty() {
            let mut buf = [rverbs::Wc::default(); 16];
            let n = o.rs.poll(&mut buf).map_err(|e| errno_of(&e))?;
            st.pending.extend(buf[..n].iter().copied());
        }
        let Some(w) = st.pending.pop_front() else {
            st.cur = None;
            return Err(libc::ENOENT);
        };
        st.cur = Some(w);
        // SAFETY: the caller's live CQ; `status` / `wr_id` are what the inlines read.
        unsafe {
            (*cq).status = w.status as u32;
            (*cq).wr_id = w.wr_id;
        }
        Ok(())
    })
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: NULL or the caller's attributes.
    if let Some(a) = unsafe { attr.as_ref() } {
        if a.comp_mask != 0 {
            return libc::EINVAL;
        }
    }
    advance(cq)
}
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    advance(cq)
}
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    ret_void(|| {
        // SAFETY: the caller's CQ.
        if let Ok(o) = unsafe { CqObj::from_c(cq as *mut ibv_cq) } {
            o.ex.lock().unwrap_or_else(|e| e.into_inner()).cur = None;
        }
    })
}

/// The current completion's C view (zeroes when there is none).
fn cur(cq: *mut ibv_cq_ex) -> ibv_wc {
    ret_val(zero_wc(), || {
        // SAFETY: the caller's CQ.
        match unsafe { CqObj::from_c(cq as *mut ibv_cq) } {
            Ok(o) => {
                o.ex.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .cur
                    .as_ref()
                    .map_or_else(zero_wc, c_wc)
            }
            Err(_) => zero_wc(),
        }
    })
}

fn zero_wc() -> ibv_wc {
    // SAFETY: plain data.
    unsafe { std::mem::zeroed() }
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).opcode
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).vendor_err
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).byte_len
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: a u32 union.
    unsafe { cur(cq).imm.imm_data }
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).qp_num
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).src_qp
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    cur(cq).wc_flags
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    u32::from(cur(cq).slid)
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    cur(cq).sl
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    cur(cq).dlid_path_bits
}
