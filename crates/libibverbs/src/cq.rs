//! Completion queues (also as `ibv_cq_ex`), completion channels and CQ events.
//!
//! A completion channel's `fd` is readable exactly while an event waits, so a program may `poll(2)` it before `ibv_get_cq_event`. Events are
//! counted per CQ (`comp_events_completed` on `ibv_ack_cq_events`), as libibverbs does.
//! `ibv_get_cq_event` waits for an event unless the program set `O_NONBLOCK` on the
//! channel's `fd` (then EAGAIN, as libibverbs; see [`crate::evfd`]).

use crate::context::Ctx;
use crate::*;
use rverbs_ibverbs::types::*;
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

#[repr(C)]
pub(crate) struct ChanObj {
    pub c: ibv_comp_channel,
    pub rs: rverbs::CompChannel,
    /// What the program sees as `fd` (see [`crate::evfd`]).
    pub fd: crate::evfd::EventFd,
    pub users: AtomicUsize,
}

pub(crate) unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    ret_ptr(|| {
        // SAFETY: the caller's context.
        let ctx = unsafe { Ctx::from_c(context) }?;
        let rs = ctx.rs.create_comp_channel().map_err(|e| errno_of(&e))?;
        let fd = crate::evfd::EventFd::over(rs.as_fd())?;
        ctx.hold();
        let b = Box::new(ChanObj {
            c: ibv_comp_channel {
                context,
                fd: fd.raw(),
                refcnt: 0,
            },
            rs,
            fd,
            users: AtomicUsize::new(0),
        });
        Ok(Box::into_raw(b) as *mut ibv_comp_channel)
    })
}
export!(ibv_create_comp_channel, "IBVERBS_1.0");

pub(crate) unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's channel.
        let ch = unsafe { arg(channel as *const ChanObj) }?;
        if ch.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: the channel's context, kept by its count.
        let ctx = unsafe { Ctx::from_c(ch.c.context) }? as *const Ctx;
        // SAFETY: made by Box::into_raw above; unused by any CQ (checked).
        drop(unsafe { Box::from_raw(channel as *mut ChanObj) });
        // SAFETY: the channel was counted in its context and is gone.
        unsafe { Ctx::release(&*ctx) };
        Ok(0)
    })
}
export!(ibv_destroy_comp_channel, "IBVERBS_1.0");

/// What an `ibv_cq_ex` poll is at: the completions taken from the device and not yet
/// read, the current one first.
#[derive(Default)]
pub(crate) struct ExPoll {
    pub pending: VecDeque<rverbs::Wc>,
    pub cur: Option<rverbs::Wc>,
}

#[repr(C)]
pub(crate) struct CqObj {
    pub c: ibv_cq_ex,
    pub rs: rverbs::Cq,
    pub chan: *const ChanObj,
    pub users: AtomicUsize,
    pub ex: Mutex<ExPoll>,
    /// When `ibv_poll_cq` last found the CQ empty after a completion ([`mono_ns`]; 0:
    /// the last poll found one).
    pub empty_since: AtomicU64,
    /// How long `ibv_poll_cq` spins on this CQ before it yields (adaptive, up to
    /// [`SPIN_MAX_NS`]).
    pub spin_ns: AtomicU64,
}

impl CqObj {
    /// # Safety
    /// `p` is NULL or a CQ this library created and has not destroyed.
    pub(crate) unsafe fn from_c<'a>(p: *mut ibv_cq) -> Result<&'a CqObj, c_int> {
        // SAFETY: the caller's promise; CqObj starts with its ibv_cq(_ex).
        unsafe { arg(p as *const CqObj) }
    }
}

pub(crate) fn new_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut CqObj, c_int> {
    // SAFETY: the caller's context.
    let ctx = unsafe { Ctx::from_c(context) }?;
    if cqe <= 0 || comp_vector < 0 || comp_vector >= ctx.vctx.context.num_comp_vectors {
        return Err(libc::EINVAL);
    }
    let max = ctx.rs.query_device().map_err(|e| errno_of(&e))?.max_cqe;
    if cqe as u32 > max {
        return Err(libc::EINVAL);
    }
    // SAFETY: NULL or the caller's channel.
    let chan = unsafe { (channel as *const ChanObj).as_ref() };
    let rs = match chan {
        Some(ch) => ctx.rs.create_cq_on(cqe as u32, &ch.rs),
        None => ctx.rs.create_cq(cqe as u32),
    }
    .map_err(|e| errno_of(&e))?;
    // SAFETY: ibv_cq_ex is plain data (pointers, integers, nullable fns, mutex/cond set
    // up below).
    let mut c: ibv_cq_ex = unsafe { std::mem::zeroed() };
    c.context = context;
    c.channel = channel;
    c.cq_context = cq_context;
    c.handle = rs.handle();
    c.cqe = cqe;
    if let Some(ch) = chan {
        ch.users.fetch_add(1, Ordering::AcqRel);
    }
    ctx.hold();
    let p = Box::into_raw(Box::new(CqObj {
        c,
        rs,
        chan: channel as *const ChanObj,
        users: AtomicUsize::new(0),
        ex: Mutex::default(),
        empty_since: AtomicU64::new(0),
        spin_ns: AtomicU64::new(SPIN_MAX_NS),
    }));
    // SAFETY: just made.
    unsafe { init_sync(&mut (*p).c.mutex, &mut (*p).c.cond) };
    ctx.cqs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(unsafe { (*p).c.handle }, p as usize);
    Ok(p)
}

pub(crate) unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    ret_ptr(|| new_cq(context, cqe, cq_context, channel, comp_vector).map(|p| p as *mut ibv_cq))
}
export!(ibv_create_cq, "IBVERBS_1.1");

pub(crate) unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's CQ.
        let o = unsafe { CqObj::from_c(cq) }?;
        if o.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: the CQ's context is alive while the CQ is.
        let ctx = unsafe { Ctx::from_c(o.c.context) }?;
        ctx.cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&o.c.handle);
        // SAFETY: NULL or the channel the CQ counted itself in.
        if let Some(ch) = unsafe { o.chan.as_ref() } {
            ch.users.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: made by Box::into_raw in new_cq; unused (checked above).
        drop(unsafe { Box::from_raw(cq as *mut CqObj) });
        // SAFETY: the CQ was counted in its context and is gone.
        unsafe { Ctx::release(ctx) };
        Ok(())
    })
}
export!(ibv_destroy_cq, "IBVERBS_1.1");

unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's CQ.
        unsafe { CqObj::from_c(cq) }?;
        let _ = cqe;
        // The device keeps a CQ's size for its life (no RESIZE_MAX_WR capability):
        // what libibverbs returns when a provider has no resize_cq.
        Err(libc::EOPNOTSUPP)
    })
}
export!(ibv_resize_cq, "IBVERBS_1.1");

/// The C `ibv_wc` of a completion (`imm_data` back to the `__be32` libibverbs holds).
pub(crate) fn c_wc(w: &rverbs::Wc) -> ibv_wc {
    let flags = w.wc_flags.0 & 0xf;
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u32,
        opcode: wc_opcode(w.opcode),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm: ibv_wc_imm {
            imm_data: if w.wc_flags.contains(rverbs::WcFlags::WITH_IMM) {
                w.imm_data.to_be()
            } else {
                w.imm_data
            },
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// `enum ibv_wc_opcode` of an engine opcode.
pub(crate) fn wc_opcode(o: rverbs::WcOpcode) -> u32 {
    use rverbs::WcOpcode as O;
    match o {
        O::Send => 0,
        O::RdmaWrite => 1,
        O::RdmaRead => 2,
        O::CompSwap => 3,
        O::FetchAdd => 4,
        O::BindMw => 5,
        O::LocalInv => 6,
        O::Recv => 128,
        O::RecvRdmaWithImm => 129,
    }
}

/// Most an `ibv_poll_cq` caller spins on an empty CQ before yielding: twice an
/// 8-byte ping-pong's round trip on the loopback device. A fixed spin of that length
/// cost a ping-pong whose peer shared its core the whole spin per message (perftest's
/// `ib_send_lat` 25 µs at a load average of 10 on 2 cores, against 8 µs yielding on
/// every empty poll), hence the budget that adapts to what the yields show (see
/// `poll_cq`).
const SPIN_MAX_NS: u64 = 16_000;

/// What a budget grows by besides doubling (so one at 0 grows again).
const SPIN_STEP_NS: u64 = 1_000;

/// A `sched_yield` that took longer than this ran another thread.
const YIELD_RAN_OTHERS_NS: u64 = 5_000;

/// Nanoseconds since the library first asked (never 0).
fn mono_ns() -> u64 {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(std::time::Instant::now);
    (base.elapsed().as_nanos() as u64).max(1)
}

/// `ibv_context.ops.poll_cq`: what the `ibv_poll_cq` inline calls.
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's CQ.
        let o = unsafe { CqObj::from_c(cq) }?;
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return Err(libc::EINVAL);
        }
        let want = num_entries as usize;
        let mut got = 0usize;
        // The buffer fits the poll (a ping-pong's one, perftest's 16): its
        // initialisation was most of this function's own cost per call.
        let (mut one, mut small, mut large);
        let buf: &mut [rverbs::Wc] = if want <= 1 {
            one = [rverbs::Wc::default(); 1];
            &mut one
        } else if want <= 16 {
            small = [rverbs::Wc::default(); 16];
            &mut small
        } else {
            large = [rverbs::Wc::default(); 64];
            &mut large
        };
        while got < want {
            let n = (want - got).min(buf.len());
            let k = o.rs.poll(&mut buf[..n]).map_err(|e| errno_of(&e))?;
            for (i, w) in buf[..k].iter().enumerate() {
                // SAFETY: `wc` has `num_entries` entries; got + i < num_entries.
                unsafe { wc.add(got + i).write(c_wc(w)) };
            }
            got += k;
            if k < n {
                break;
            }
        }
        if got > 0 {
            o.empty_since.store(0, Ordering::Relaxed);
        } else if want > 0 {
            // A program spinning on an empty CQ keeps the CPU from the device's driver
            // thread and the peer process when cores are few (a real HCA works beside
            // the CPU; this device needs it). So once the CQ has been empty for the
            // CQ's spin budget, each empty poll yields, and the budget follows what
            // the yields show: one that gave the CPU to another thread halves it (the
            // core is wanted: a ping-pong peer on it would wait for the whole spin),
            // one that came straight back grows it towards SPIN_MAX_NS (nobody needs
            // the core: spinning sees the next completion without a system call's
            // delay).
            let now = mono_ns();
            let since = o.empty_since.load(Ordering::Relaxed);
            if since == 0 {
                o.empty_since.store(now, Ordering::Relaxed);
            } else if now.saturating_sub(since) >= o.spin_ns.load(Ordering::Relaxed) {
                std::thread::yield_now();
                let budget = o.spin_ns.load(Ordering::Relaxed);
                let next = if mono_ns().saturating_sub(now) > YIELD_RAN_OTHERS_NS {
                    budget / 2
                } else {
                    (budget * 2 + SPIN_STEP_NS).min(SPIN_MAX_NS)
                };
                o.spin_ns.store(next, Ordering::Relaxed);
            }
        }
        Ok(got as c_int)
    })
}

/// `ibv_context.ops.req_notify_cq`.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's CQ.
        let o = unsafe { CqObj::from_c(cq) }?;
        o.rs.req_notify(solicited_only != 0)
            .map_err(|e| errno_of(&e))
    })
}

unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's channel and out-parameters.
        let (ch, cq_out, ctx_out) =
            unsafe { (arg(channel as *const ChanObj)?, out(cq)?, out(cq_context)?) };
        // SAFETY: the channel's context is alive while it is.
        let ctx = unsafe { Ctx::from_c(ch.c.context) }?;
        // Waits for an event unless the program made `fd` non-blocking: then -1 with
        // EAGAIN when none waits, as libibverbs' read(2) of the channel gives.
        let nonblocking = ch.fd.nonblocking();
        loop {
            let got = if nonblocking {
                ch.rs.try_get_cq_event()
            } else {
                ch.rs.get_cq_event(None)
            };
            let Some(got) = got else {
                if nonblocking {
                    return Err(libc::EAGAIN);
                }
                continue;
            };
            let found = ctx
                .cqs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&got.handle())
                .copied();
            let Some(p) = found else {
                // The CQ was destroyed meanwhile: its event is void.
                let _ = got.ack_events(1);
                continue;
            };
            let c = p as *mut ibv_cq;
            *cq_out = c;
            // SAFETY: a live CQ of this context (found in its map).
            *ctx_out = unsafe { (*c).cq_context };
            return Ok(0);
        }
    })
}
export!(ibv_get_cq_event, "IBVERBS_1.1");

unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    ret_void(|| {
        // SAFETY: the caller's CQ.
        let Ok(o) = (unsafe { CqObj::from_c(cq) }) else {
            return;
        };
        let _ = o.rs.ack_events(nevents);
        // SAFETY: the CQ's own mutex, initialised in new_cq.
        unsafe {
            libc::pthread_mutex_lock(&mut (*cq).mutex);
            (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents);
            libc::pthread_cond_signal(&mut (*cq).cond);
            libc::pthread_mutex_unlock(&mut (*cq).mutex);
        }
    })
}
export!(ibv_ack_cq_events, "IBVERBS_1.1");
