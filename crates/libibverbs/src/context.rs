//! Contexts: what every object points back to (`Ctx`), `ibv_close_device` and
//! asynchronous events. `ibv_open_device`, which fills the ops tables of every other
//! module into a new context, is the `open` module's, above them all.

use crate::*;
use rverbs_ibverbs::consts::*;
use rverbs_ibverbs::types::*;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex};

/// A context: the `verbs_context` a program points into, the rverbs context, and
/// the maps from the device's handles back to the C objects (events name CQs, QPs and
/// SRQs by handle).
#[repr(C)]
pub(crate) struct Ctx {
    pub vctx: verbs_context,
    pub rs: rverbs::Context,
    pub cqs: Handles,
    pub qps: Handles,
    pub srqs: Handles,
    /// PDs, CQs and channels still open, and whether `ibv_close_device` was called:
    /// the context is freed when both say so (an object destroyed after the close
    /// still finds its context).
    pub life: Mutex<(usize, bool)>,
    /// The device's name (the key of [`SHARED`]).
    pub name: String,
    /// What the program sees as `async_fd` (see [`crate::evfd`]).
    pub async_ev: crate::evfd::EventFd,
}

/// The rverbs context of each device open in this process, with the number of C
/// contexts on it. Every `ibv_open_device` of one device shares it, as the contexts of
/// one kernel device share its port and GID table: programs that open a device twice
/// (rdma-core's tests put both players in one process) expect the same GIDs in both,
/// and a non-loopback device can bind its address only once per process.
/// The maps from handles (CQ, QP number, SRQ) to C objects are shared the same way:
/// an event names an object of any C context on the rverbs context.
static SHARED: Mutex<Vec<Shared>> = Mutex::new(Vec::new());

/// Handle → C object (its address).
pub(crate) type Handles = Arc<Mutex<HashMap<u32, usize>>>;

struct Shared {
    name: String,
    rs: rverbs::Context,
    maps: [Handles; 3],
    users: usize,
}

/// The devices open in this process, in the order they were first opened.
pub(crate) fn open_devices() -> Vec<String> {
    let l = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    l.iter().map(|e| e.name.clone()).collect()
}

pub(crate) fn acquire(info: &rverbs::DeviceInfo) -> Result<(rverbs::Context, [Handles; 3]), c_int> {
    let mut l = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = l.iter_mut().find(|e| e.name == info.name) {
        e.users += 1;
        return Ok((e.rs.clone(), e.maps.clone()));
    }
    let rs = info.open().map_err(|e| errno_of(&e))?;
    let maps: [Handles; 3] = Default::default();
    l.push(Shared {
        name: info.name.clone(),
        rs: rs.clone(),
        maps: maps.clone(),
        users: 1,
    });
    Ok((rs, maps))
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if self.vctx.context.cmd_fd >= 0 {
            // SAFETY: the descriptor ibv_open_device opened for this context.
            unsafe { libc::close(self.vctx.context.cmd_fd) };
        }
        unacquire(&self.name);
    }
}

/// Undoes one [`acquire`] of the device `name`.
pub(crate) fn unacquire(name: &str) {
    let mut l = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = l.iter().position(|e| e.name == name) {
        l[i].users -= 1;
        if l[i].users == 0 {
            l.remove(i);
        }
    }
}

impl Ctx {
    /// # Safety
    /// `c` is NULL or a context this library opened and has not closed.
    pub(crate) unsafe fn from_c<'a>(c: *mut ibv_context) -> Result<&'a Ctx, c_int> {
        if c.is_null() {
            return Err(libc::EINVAL);
        }
        let off = std::mem::offset_of!(verbs_context, context);
        // SAFETY: `c` is `&ctx.vctx.context` of a live Ctx, whose first field is vctx.
        Ok(unsafe { &*((c as *mut u8).sub(off) as *const Ctx) })
    }

    pub(crate) fn c(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }

    /// One more object (PD, CQ, channel) of this context.
    pub(crate) fn hold(&self) {
        self.life.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
    }

    /// One object fewer; frees the context if it was closed and this was the last.
    ///
    /// # Safety
    /// `ctx` is a live context of this library; the caller's object was counted by
    /// [`Ctx::hold`] and no longer uses the context after this call.
    pub(crate) unsafe fn release(ctx: &Ctx) {
        let free = {
            let mut l = ctx.life.lock().unwrap_or_else(|e| e.into_inner());
            l.0 = l.0.saturating_sub(1);
            l.0 == 0 && l.1
        };
        if free {
            // SAFETY: made by Box::into_raw in ibv_open_device; closed, and this was
            // its last object.
            drop(unsafe { Box::from_raw(ctx as *const Ctx as *mut Ctx) });
        }
    }
}

pub(crate) unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context.
        let ctx = unsafe { Ctx::from_c(context) }?;
        let free = {
            let mut l = ctx.life.lock().unwrap_or_else(|e| e.into_inner());
            l.1 = true;
            l.0 == 0
        };
        if free {
            // SAFETY: made by Box::into_raw in ibv_open_device; the caller gives it up
            // and no object of it is left. (With objects left, the last one's destroy
            // frees it: `Ctx::release`.)
            drop(unsafe { Box::from_raw(ctx as *const Ctx as *mut Ctx) });
        }
        Ok(0)
    })
}
export!(ibv_close_device, "IBVERBS_1.1");

// ---- asynchronous events -----------------------------------------------------------

unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context and event buffer.
        let (ctx, ev) = unsafe { (Ctx::from_c(context)?, out(event)?) };
        // Waits unless the program made `async_fd` non-blocking: then -1 with EAGAIN
        // when no event waits (libibverbs' read(2) of it; UCX drains events so).
        let nonblocking = ctx.async_ev.nonblocking();
        loop {
            let e = if nonblocking {
                ctx.rs.try_get_async_event()
            } else {
                ctx.rs.get_async_event(None)
            };
            let Some(e) = e else {
                if nonblocking {
                    return Err(libc::EAGAIN);
                }
                continue;
            };
            let find =
                |m: &Handles, k: u32| m.lock().unwrap_or_else(|e| e.into_inner()).get(&k).copied();
            use rverbs::AsyncEvent as A;
            let (ty, el) = match e {
                A::CqErr { cq } => match find(&ctx.cqs, cq) {
                    Some(p) => (
                        IBV_EVENT_CQ_ERR,
                        ibv_async_event_element { cq: p as *mut _ },
                    ),
                    None => continue,
                },
                A::QpFatal { qpn }
                | A::CommEst { qpn }
                | A::SqDrained { qpn }
                | A::QpLastWqeReached { qpn } => {
                    let ty = match e {
                        A::QpFatal { .. } => IBV_EVENT_QP_FATAL,
                        A::CommEst { .. } => IBV_EVENT_COMM_EST,
                        A::SqDrained { .. } => IBV_EVENT_SQ_DRAINED,
                        _ => IBV_EVENT_QP_LAST_WQE_REACHED,
                    };
                    match find(&ctx.qps, qpn) {
                        Some(p) => (ty, ibv_async_event_element { qp: p as *mut _ }),
                        None => continue,
                    }
                }
                A::SrqLimitReached { srq } => match find(&ctx.srqs, srq) {
                    Some(p) => (
                        IBV_EVENT_SRQ_LIMIT_REACHED,
                        ibv_async_event_element { srq: p as *mut _ },
                    ),
                    None => continue,
                },
                #[allow(unreachable_patterns)]
                _ => continue,
            };
            *ev = ibv_async_event {
                element: el,
                event_type: ty,
            };
            return Ok(0);
        }
    })
}
export!(ibv_get_async_event, "IBVERBS_1.1");

unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    ret_void(|| {
        // SAFETY: the event ibv_get_async_event filled.
        let Some(ev) = (unsafe { event.as_ref() }) else {
            return;
        };
        // SAFETY: the element is the object the event named, still alive (a program
        // acknowledges before destroying it); the counters are under its mutex.
        unsafe {
            match ev.event_type {
                IBV_EVENT_CQ_ERR => {
                    let cq = ev.element.cq;
                    bump(
                        &mut (*cq).mutex,
                        &mut (*cq).cond,
                        &mut (*cq).async_events_completed,
                    );
                }
                IBV_EVENT_SRQ_LIMIT_REACHED => {
                    let s = ev.element.srq;
                    bump(&mut (*s).mutex, &mut (*s).cond, &mut (*s).events_completed);
                }
                IBV_EVENT_QP_FATAL
                | IBV_EVENT_COMM_EST
                | IBV_EVENT_SQ_DRAINED
                | IBV_EVENT_QP_LAST_WQE_REACHED => {
                    let q = ev.element.qp;
                    bump(&mut (*q).mutex, &mut (*q).cond, &mut (*q).events_completed);
                }
                _ => {}
            }
        }
    })
}
export!(ibv_ack_async_event, "IBVERBS_1.1");

/// Adds one to an event counter of a C object under its mutex and signals its cond.
///
/// # Safety
/// The three point into one live object whose mutex and cond were initialised.
pub(crate) unsafe fn bump(
    m: *mut libc::pthread_mutex_t,
    c: *mut libc::pthread_cond_t,
    n: *mut u32,
) {
    // SAFETY: the caller's promise.
    unsafe {
        libc::pthread_mutex_lock(m);
        *n = (*n).wrapping_add(1);
        libc::pthread_cond_signal(c);
        libc::pthread_mutex_unlock(m);
    }
}
