//! `ibv_open_device`: a new context with its ops tables.
//!
//! The context is a `verbs_context` whose `abi_compat` is `UINTPTR_MAX` and whose `sz`
//! covers every op, so the inlines (`ibv_query_port`, `ibv_query_device_ex`,
//! `ibv_create_cq_ex`, `ibv_create_qp_ex`...) call the ops filled here; ops left NULL
//! make the inline return what libibverbs returns for an unsupported verb
//! (EOPNOTSUPP / ENOSYS). This module sits above every module whose functions it
//! puts there, so none of them depends on it.

use crate::context::{acquire, unacquire, Ctx};
use crate::device::{dev, DevObj};
use crate::*;
use rverbs_ibverbs::consts::*;
use rverbs_ibverbs::types::*;
use std::ffi::c_void;
use std::sync::Mutex;

fn ops() -> ibv_context_ops {
    // SAFETY: all fields are nullable function pointers.
    let mut o: ibv_context_ops = unsafe { std::mem::zeroed() };
    o.poll_cq = Some(crate::cq::poll_cq);
    o.req_notify_cq = Some(crate::cq::req_notify_cq);
    o.post_send = Some(crate::qp::post_send);
    o.post_recv = Some(crate::qp::post_recv);
    o.post_srq_recv = Some(crate::qp::post_srq_recv);
    o.alloc_mw = Some(crate::mw::alloc_mw);
    o.dealloc_mw = Some(crate::mw::dealloc_mw);
    o.bind_mw = Some(crate::qp::bind_mw);
    o
}

pub(crate) unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    ret_ptr(|| {
        // SAFETY: `device` is NULL or ours.
        let d: &DevObj = unsafe { dev(device) }?;
        let (rs, [cqs, qps, srqs]) = acquire(&d.info)?;
        let async_ev =
            crate::evfd::EventFd::over(rs.async_fd()).inspect_err(|_| unacquire(&d.info.name))?;
        // SAFETY: verbs_context is plain data: integers, nullable pointers, a mutex
        // that pthread_mutex_init sets up below.
        let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
        vctx.query_port = Some(crate::device::query_port);
        vctx.query_device_ex = Some(crate::device::query_device_ex);
        vctx.create_cq_ex = Some(crate::cq_ex::create_cq_ex);
        vctx.create_qp_ex = Some(crate::qp_ex::create_qp_ex);
        vctx.ibv_create_flow = Some(crate::flow::create_flow);
        vctx.ibv_destroy_flow = Some(crate::flow::destroy_flow);
        vctx.sz = std::mem::size_of::<verbs_context>();
        vctx.context.device = device;
        vctx.context.ops = ops();
        // A real descriptor, as programs dup or poll it (rdma-core's tests dup it to
        // import the device elsewhere); no command ever goes to it.
        // SAFETY: open(2) of a constant path; the fd is closed when the context goes.
        vctx.context.cmd_fd =
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        vctx.context.async_fd = async_ev.raw();
        vctx.context.num_comp_vectors = 1;
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
        let b = Box::new(Ctx {
            vctx,
            rs,
            cqs,
            qps,
            srqs,
            life: Mutex::new((0, false)),
            name: d.info.name.clone(),
            async_ev,
        });
        let p = Box::into_raw(b);
        // SAFETY: `p` is the live box just made.
        unsafe { libc::pthread_mutex_init(&mut (*p).vctx.context.mutex, std::ptr::null()) };
        // SAFETY: as above.
        Ok(unsafe { (*p).c() })
    })
}
export!(ibv_open_device, "IBVERBS_1.1");
