//! Synchronous endpoints: `rdma_create_ep`, `rdma_destroy_ep` and `rdma_get_request`
//! (rdma_server / rdma_client). Their IDs have channels of their own, and each call
//! waits for the event it causes, as librdmacm's.

use super::id::*;
use super::*;
use rverbs::cm::{CmId, EventChannel, EventKind};
use std::time::Duration;

/// `rdma_create_ep`: a synchronous ID for an address from `rdma_getaddrinfo`: bound
/// (`RAI_PASSIVE`; the QP attributes kept for each `rdma_get_request`), or resolved
/// with its QP made when attributes are given.
unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret_neg(|| {
        init();
        // SAFETY: the caller's out-pointer and address info.
        let out = unsafe { out(id) }?;
        // SAFETY: as above.
        let r = unsafe { arg(res) }?;
        let ps = match r.ai_port_space as u32 {
            0 if r.ai_qp_type == 4 => RDMA_PS_UDP,
            0 => RDMA_PS_TCP,
            p => p,
        };
        // librdmacm's rdma_create_ep takes the QP type from the address info.
        // SAFETY: NULL or the caller's attributes.
        if let Some(a) = unsafe { qp_init_attr.as_mut() } {
            a.qp_type = r.ai_qp_type as ibv_qp_type;
        }
        let tmp = EventChannel::new().map_err(|e| io_errno(&e))?;
        let rs = CmId::create(&tmp, port_space(ps)?).map_err(|e| io_errno(&e))?;
        let p = new_id(rs, std::ptr::null_mut(), std::ptr::null_mut(), ps)?;
        // SAFETY: just made.
        let o = unsafe { &mut *p };
        let r2 = (|| -> Result<(), c_int> {
            if r.ai_flags & RAI_PASSIVE != 0 {
                // SAFETY: the address info's source address (or NULL).
                let a = unsafe { sockaddr_in(r.ai_src_addr) }?;
                o.rs.bind_addr(a).map_err(|e| io_errno(&e))?;
                refresh(o);
                // SAFETY: NULL or the caller's attributes.
                if let Some(a) = unsafe { qp_init_attr.as_ref() } {
                    o.ep_qp = Some((*a, pd));
                }
                return Ok(());
            }
            let src = if r.ai_src_addr.is_null() {
                None
            } else {
                // SAFETY: the address info's source address.
                Some(unsafe { sockaddr_in(r.ai_src_addr) }?.ip())
            };
            // SAFETY: the address info's destination address.
            let dst = unsafe { sockaddr_in(r.ai_dst_addr) }?;
            o.rs.resolve_addr(src, dst, Duration::from_secs(2))
                .map_err(|e| io_errno(&e))?;
            complete(o)?;
            o.rs.resolve_route(Duration::from_secs(2))
                .map_err(|e| io_errno(&e))?;
            complete(o)?;
            // SAFETY: NULL or the caller's attributes.
            if let Some(a) = unsafe { qp_init_attr.as_mut() } {
                create_qp(o, pd, &ex_of(a))?;
                a.send_cq = o.c.send_cq;
                a.recv_cq = o.c.recv_cq;
            }
            Ok(())
        })();
        if let Err(e) = r2 {
            destroy_qp(o);
            // SAFETY: the ID just made.
            unsafe { rdma_destroy_id(p as *mut rdma_cm_id) };
            return Err(e);
        }
        *out = p as *mut rdma_cm_id;
        Ok(0)
    })
}
export!(rdma_create_ep, "RDMACM_1.0");

unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    ret_void(|| {
        // SAFETY: the caller's ID.
        if let Ok(o) = unsafe { id_obj(id) } {
            destroy_qp(o);
            // SAFETY: as above.
            unsafe { rdma_destroy_id(id) };
        }
    })
}
export!(rdma_destroy_ep, "RDMACM_1.0");

/// `rdma_get_request`: the next connect request of a synchronous listener, as a
/// synchronous ID (with a QP when `rdma_create_ep` was given attributes).
unsafe extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's listener and out-pointer.
        let l = unsafe { id_obj(listen) }?;
        // SAFETY: as above.
        let out = unsafe { out(id) }?;
        let ch = l.sync.as_ref().map(|s| s.rs.clone()).ok_or(libc::EINVAL)?;
        loop {
            let e = ch.get_event(None).ok_or(libc::EIO)?;
            if e.kind != EventKind::ConnectRequest {
                // Only connect requests reach a listener.
                continue;
            }
            let ev = make_event(e, None)?;
            // SAFETY: just made; its ID is the new synchronous one.
            let child = unsafe { &mut *((*ev).c.id as *mut IdObj) };
            child.last = ev;
            // SAFETY: as above.
            child.c.event = unsafe { &mut (*ev).c };
            if let Some((a, pd)) = l.ep_qp {
                if let Err(e) = create_qp(child, pd, &ex_of(&a)) {
                    let _ = child.rs.reject(&[]);
                    // SAFETY: the child just made, given to nobody.
                    unsafe { rdma_destroy_id(&mut child.c) };
                    return Err(e);
                }
            }
            *out = &mut child.c;
            return Ok(0);
        }
    })
}
export!(rdma_get_request, "RDMACM_1.0");
