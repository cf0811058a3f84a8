//! The rest of what librdmacm exports that programs bind at load time (pyverbs'
//! `cmid` module imports them all, so a program that never calls them still needs
//! them): ECE and multicast.
//!
//! * ECE (enhanced connection establishment) is optional: a peer that offers none is
//!   answered with none. This CM carries no ECE in its REQ / REP, so a local ECE is
//!   checked and accepted as librdmacm checks it, and the remote one is always none
//!   (zeros), which is what librdmacm reports for a peer without ECE.
//! * Multicast joins need the CM's multicast (SA joins / RoCE groups), which
//!   `rverbs::cm` does not have: EOPNOTSUPP, and leaving a group never joined is
//!   EADDRNOTAVAIL, as librdmacm answers it.

use super::*;
use std::ffi::c_void;

/// # Safety
/// `id` is NULL or an ID of this library.
unsafe fn id_qp(id: *mut rdma_cm_id) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: the caller's promise; an ID starts with its rdma_cm_id.
    Ok(unsafe { arg(id) }?.qp)
}

unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and ECE.
        let (qp, e) = unsafe { (id_qp(id)?, arg(ece)?) };
        // librdmacm: before the QP exists, a vendor, no extension bits.
        if !qp.is_null() || e.vendor_id == 0 || e.comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        Ok(0)
    })
}
export!(rdma_set_local_ece, "RDMACM_1.3");

unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and out-pointer.
        let (qp, e) = unsafe { (id_qp(id)?, out(ece)?) };
        if !qp.is_null() {
            return Err(libc::EINVAL);
        }
        *e = ibv_ece::default();
        Ok(0)
    })
}
export!(rdma_get_remote_ece, "RDMACM_1.3");

unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    _context: *mut c_void,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and address.
        unsafe { (id_qp(id)?, sockaddr_in(addr)?) };
        Err(libc::EOPNOTSUPP)
    })
}
export!(rdma_join_multicast, "RDMACM_1.0");

unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    _context: *mut c_void,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and attributes.
        unsafe { (id_qp(id)?, arg(attr)?) };
        Err(libc::EOPNOTSUPP)
    })
}
export!(rdma_join_multicast_ex, "RDMACM_1.1");

unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and address.
        unsafe { (id_qp(id)?, sockaddr_in(addr)?) };
        Err(libc::EADDRNOTAVAIL)
    })
}
export!(rdma_leave_multicast, "RDMACM_1.0");
