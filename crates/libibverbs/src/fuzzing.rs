//! A safe handle on the C entry points for the fuzz oracle of the QP attribute path
//! (`fuzz/oracles/libibverbs.rs`, replayed by `tests/fuzz_seeds.rs`): a QP on the
//! loopback soft device that takes `ibv_modify_qp` with any bytes as its
//! `struct ibv_qp_attr` and any mask, as a C caller may pass them. Not an API.

use rverbs_ibverbs::types::*;
use std::ffi::{c_int, CStr};
use std::ptr::null_mut;

/// A QP of one type with its PD and CQ, on its own context of `rv_lo`.
pub struct QpHarness {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
}

/// `sizeof(struct ibv_qp_attr)`: the bytes [`QpHarness::modify`] reads.
pub const QP_ATTR_LEN: usize = std::mem::size_of::<ibv_qp_attr>();

impl QpHarness {
    /// A QP of C type `qp_type` (`IBV_QPT_*`) with `cap`; the errno when the
    /// library refuses it.
    pub fn new(qp_type: u32, cap: [u32; 5]) -> Result<QpHarness, c_int> {
        // SAFETY: the library's own entry points called as a C program calls them;
        // every pointer passed is NULL, one the library returned, or a local.
        unsafe {
            let mut n = 0;
            let list = crate::device::ibv_get_device_list(&mut n);
            if list.is_null() {
                return Err(libc::ENODEV);
            }
            let mut ctx = null_mut();
            for i in 0..n.max(0) as usize {
                let d = *list.add(i);
                if CStr::from_ptr(crate::device::ibv_get_device_name(d)).to_bytes() == b"rv_lo" {
                    ctx = crate::open::ibv_open_device(d);
                }
            }
            crate::device::ibv_free_device_list(list);
            if ctx.is_null() {
                return Err(libc::ENODEV);
            }
            let mut h = QpHarness {
                ctx,
                pd: null_mut(),
                cq: null_mut(),
                qp: null_mut(),
            };
            h.pd = crate::pd::ibv_alloc_pd(ctx);
            if h.pd.is_null() {
                return Err(libc::ENOMEM);
            }
            h.cq = crate::cq::ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0);
            if h.cq.is_null() {
                return Err(libc::ENOMEM);
            }
            let mut init = ibv_qp_init_attr {
                qp_context: null_mut(),
                send_cq: h.cq,
                recv_cq: h.cq,
                srq: null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: cap[0],
                    max_recv_wr: cap[1],
                    max_send_sge: cap[2],
                    max_recv_sge: cap[3],
                    max_inline_data: cap[4],
                },
                qp_type,
                sq_sig_all: 0,
            };
            h.qp = crate::qp::ibv_create_qp(h.pd, &mut init);
            if h.qp.is_null() {
                return Err(*libc::__errno_location());
            }
            Ok(h)
        }
    }

    /// `ibv_modify_qp(qp, attr, mask)` with `attr` read from the first
    /// [`QP_ATTR_LEN`] bytes of `bytes` (zeros after its end): every byte pattern is a
    /// valid `ibv_qp_attr`, whose fields are all integers.
    pub fn modify(&mut self, bytes: &[u8], mask: c_int) -> c_int {
        let mut raw = [0u8; QP_ATTR_LEN];
        let n = bytes.len().min(QP_ATTR_LEN);
        raw[..n].copy_from_slice(&bytes[..n]);
        // SAFETY: `raw` holds QP_ATTR_LEN initialised bytes and ibv_qp_attr is plain
        // integers (and a union of integers) with no invalid values.
        let mut a: ibv_qp_attr = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        // SAFETY: the live QP this harness created and a local attribute.
        unsafe { crate::qp::ibv_modify_qp(self.qp, &mut a, mask) }
    }

    /// The state `ibv_query_qp` reports, and `ibv_qp.state` (which libibverbs keeps
    /// current on a successful modify).
    pub fn state(&self) -> (u32, u32) {
        // SAFETY: plain data out-parameters and the live QP.
        unsafe {
            let mut a: ibv_qp_attr = std::mem::zeroed();
            let mut i: ibv_qp_init_attr = std::mem::zeroed();
            let r = crate::qp::ibv_query_qp(self.qp, &mut a, 1, &mut i);
            assert_eq!(r, 0, "ibv_query_qp of a live QP");
            (a.qp_state, (*self.qp).state)
        }
    }

    /// The number the device gave the QP.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the live QP.
        unsafe { (*self.qp).qp_num }
    }
}

impl Drop for QpHarness {
    fn drop(&mut self) {
        // SAFETY: objects this harness created, destroyed once, in order.
        unsafe {
            if !self.qp.is_null() {
                crate::qp::ibv_destroy_qp(self.qp);
            }
            if !self.cq.is_null() {
                crate::cq::ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                crate::pd::ibv_dealloc_pd(self.pd);
            }
            crate::context::ibv_close_device(self.ctx);
        }
    }
}
