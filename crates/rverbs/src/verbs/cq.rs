//! Completion queues ([`Cq`]): polling, notification, and waiting with a
//! spin-then-sleep policy.

use super::*;
use crate::error::Result;
use crate::soft::Shared;
use rverbs_engine::{CqId, Wc};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::soft::guard::check_not_in_with;

pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) id: CqId,
    /// The context's activity count when a poll last found this CQ empty.
    pub(crate) empty_at: AtomicU64,
    /// Completion events handed out, and acknowledged.
    pub(crate) events: AtomicU32,
    pub(crate) acked: AtomicU32,
    /// A RoCE QP (RC/UC/UD, not RAW_PACKET) was created with this CQ: on a raw-mode
    /// context, an empty poll then reads the RoCE socket itself. A CQ that only RAW_PACKET
    /// QPs use leaves RoCE traffic to the driver thread, so a raw packet poller pays no
    /// system call per empty poll.
    pub(crate) roce: std::sync::atomic::AtomicBool,
}

impl CqInner {
    pub(crate) fn id(&self) -> CqId {
        self.id
    }

    pub(crate) fn count_event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let s = self.ctx.shared();
        let id = self.id;
        s.destroy(move |s, e| {
            let _ = e.destroy_cq(id);
            // After the engine let the number go, under its lock: no new event for
            // this CQ can be dispatched to the channel any more.
            s.hub.unbind(id);
        });
    }
}

/// A completion queue (`struct ibv_cq`). Cheap to clone; poll it from any thread.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{Wc, WcStatus};
/// let ctx = rverbs::device(None)?.open()?;
/// let cq = ctx.create_cq(256)?;
/// // One buffer for every poll: no allocation per completion.
/// let mut wcs = [Wc::default(); 32];
/// let n = cq.poll(&mut wcs)?;
/// for wc in &wcs[..n] {
///     if wc.status != WcStatus::Success {
///         eprintln!("work request {} failed: {:?}", wc.wr_id, wc.status);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Cq {
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.inner.ctx.shared()
    }

    pub(crate) fn from_inner(inner: Arc<CqInner>) -> Self {
        Cq { inner }
    }

    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out` and returns how
    /// many (0 when the CQ is empty). Nothing is allocated per completion: reuse one
    /// buffer of `Wc`s across calls.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let shared = self.inner.ctx.shared();
        if shared.raw.is_some() {
            // Raw-mode contexts: RAW_PACKET completions from the raw device's queues;
            // RoCE from its socket, read (as the UDP sockets are) only when the CQ has
            // nothing, and only for a CQ of RoCE QPs: a system call per poll would
            // slow a busy raw packet poller down (the driver thread reads it then).
            let mut e = shared.lock_verb("poll_cq")?;
            if shared.drain_raw_qps(&mut e) {
                let now = shared.now();
                shared.flush(&mut e, now);
            }
            let n = e.poll_cq(self.inner.id, out)?;
            if n > 0 {
                return Ok(n);
            }
            if !self.carries_roce() || !shared.receive_raw_net(&mut e, shared.now()) {
                return Ok(0);
            }
            let now = shared.now();
            shared.flush(&mut e, now);
            return Ok(e.poll_cq(self.inner.id, out)?);
        }
        let n = self.poll_ready(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.poll_progress(out, shared.now())
    }

    /// True if a RoCE QP (not RAW_PACKET) uses this CQ.
    pub(crate) fn carries_roce(&self) -> bool {
        self.inner.roce.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The completions already in the CQ (no receiving).
    pub(crate) fn poll_ready(&self, out: &mut [Wc]) -> Result<usize> {
        use std::sync::atomic::Ordering;
        // Before the shortcut below: the receive that follows an empty poll
        // (`poll_progress`) may write into a region this thread holds in `Mr::with`.
        check_not_in_with("poll_cq")?;
        let shared = self.inner.ctx.shared();
        // Nothing happened since the last empty poll: no completion can have arrived
        // (every path that adds one bumps `activity` afterwards, under the lock).
        let seen = shared.activity.load(Ordering::Acquire);
        if seen != self.inner.empty_at.load(Ordering::Relaxed) {
            let n = shared.lock_verb("poll_cq")?.poll_cq(self.inner.id, out)?;
            if n > 0 {
                return Ok(n);
            }
            self.inner.empty_at.store(seen, Ordering::Relaxed);
        }
        Ok(0)
    }

    /// Receives and runs timers on this thread, then polls the CQ (`now`: a fresh
    /// clock reading, [`crate::soft::Shared::now`]). Callers check
    /// [`check_not_in_with`] first ([`Cq::poll_ready`] does).
    pub(crate) fn poll_progress(&self, out: &mut [Wc], now: rverbs_engine::Nanos) -> Result<usize> {
        use std::sync::atomic::Ordering;
        use std::sync::TryLockError;
        let shared = self.inner.ctx.shared();
        // Receive and run timers on this thread rather than wait for the driver
        // thread (`progress.rs`). If the driver holds the engine it is doing just that.
        // A poisoned engine is used as every other path uses it: treated as busy, a
        // caller that sleeps on the sockets (the driver then leaves them to it) would
        // never receive.
        let mut e = match shared.engine.try_lock() {
            Ok(e) => e,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(0),
        };
        if !shared.progress(&mut e, now) {
            return Ok(0);
        }
        if shared.raw.is_some() && shared.drain_raw_qps(&mut e) {
            let now = shared.now();
            shared.flush(&mut e, now);
        }
        let seen = shared.activity.load(Ordering::Acquire);
        let n = e.poll_cq(self.inner.id, out)?;
        if n == 0 {
            // Nothing for this caller to answer: send the deferred ACKs now.
            shared.flush_deferred(&mut e);
            self.inner.empty_at.store(seen, Ordering::Relaxed);
        }
        Ok(n)
    }

    /// Arms the CQ for one completion event (`ibv_req_notify_cq`): the next completion
    /// (with `solicited_only`, the next solicited or error completion) queues an event
    /// on the CQ's channel ([`CompChannel::get_cq_event`], or
    /// [`Context::get_cq_event`] for a CQ made without a channel).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        use std::sync::atomic::Ordering;
        let shared = self.inner.ctx.shared();
        shared
            .lock_verb("req_notify_cq")?
            .req_notify_cq(self.inner.id, solicited_only)?;
        // The event needs the driver thread to receive: end its stand-off (the other
        // half of the handshake is in `progress::Standoff::until`).
        shared.cq_armed.store(true, Ordering::SeqCst);
        if shared.driver_standoff.load(Ordering::SeqCst) {
            shared.wake();
        }
        Ok(())
    }

    /// `ibv_ack_cq_events`: acknowledges `n` of the events [`CompChannel::get_cq_event`]
    /// returned for this CQ. Acknowledging more than were received is EINVAL.
    ///
    /// (Safety does not depend on it: the `Cq` an event returns is a counted handle,
    /// so no CQ is destroyed under an unacknowledged event. The count is kept for
    /// programs that check it, as `ibv_destroy_cq` does.)
    pub fn ack_events(&self, n: u32) -> Result<()> {
        let got = self.inner.events.load(Ordering::Relaxed);
        self.inner
            .acked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
                a.checked_add(n).filter(|&t| t <= got)
            })
            .map(|_| ())
            .map_err(|_| {
                rverbs_engine::VerbError::new(
                    "ack_cq_events",
                    rverbs_engine::Errno::Inval,
                    "more events acknowledged than received",
                )
                .into()
            })
    }

    /// Completion events received for this CQ and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.inner.events.load(Ordering::Relaxed) - self.inner.acked.load(Ordering::Relaxed)
    }

    /// The CQ's handle number (what [`Context::get_cq_event`] and
    /// [`crate::AsyncEvent::CqErr`] report).
    pub fn handle(&self) -> u32 {
        self.inner.id.raw()
    }

    /// True if `self` and `other` are handles of the same CQ.
    pub fn same_as(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Polls until at least one completion arrives or `timeout` passes (busy-polling
    /// with yields: the latency-first choice).
    pub fn poll_wait(&self, out: &mut [Wc], timeout: std::time::Duration) -> Result<usize> {
        let start = std::time::Instant::now();
        loop {
            let n = self.poll(out)?;
            if n > 0 || start.elapsed() >= timeout {
                return Ok(n);
            }
            std::thread::yield_now();
        }
    }
}

impl Cq {
    /// Waits for completions with a spin-then-sleep policy: polls (receiving on this
    /// thread) for up to `spin`, then sleeps once in `poll(2)` on the device's sockets
    /// until a datagram arrives, the engine's next timer is due or `timeout` passes,
    /// and polls again. Returns how many completions were written to `out`; 0 means
    /// nothing completed in that time (a datagram that completed nothing, such as an
    /// incoming RDMA WRITE, also ends the sleep), so callers loop.
    ///
    /// A spin of zero sleeps at once: the right choice when cores are fewer than busy
    /// threads, where spinning only delays the thread that would produce the
    /// completion. A long spin gives the lowest latency on an idle machine.
    pub fn wait(
        &self,
        out: &mut [rverbs_engine::Wc],
        spin: std::time::Duration,
        timeout: std::time::Duration,
    ) -> crate::Result<usize> {
        let shared = self.shared();
        let as_ns =
            |d: std::time::Duration| d.as_nanos().min(u128::from(u64::MAX)) as rverbs_engine::Nanos;
        let (spin, timeout) = (as_ns(spin), as_ns(timeout));
        // One clock read per pass, which the pass's receive uses too (the first pass
        // reuses the start's): a ping-pong waits once per message, and clock reads
        // showed in its profile.
        let start = shared.now();
        let mut now = start;
        loop {
            let n = self.poll_ready(out)?;
            if n > 0 {
                return Ok(n);
            }
            let waited = now - start;
            if waited < spin {
                let n = self.poll_progress(out, now)?;
                if n > 0 {
                    return Ok(n);
                }
                std::hint::spin_loop();
                now = shared.now();
                continue;
            }
            if waited >= timeout {
                return Ok(0);
            }
            let sleep = shared.plan_sleep(now, timeout - waited);
            if shared.net.is_some() {
                // Raw mode: the engine's packets come from the RoCE socket (the UDP
                // sockets only carry this host's own traffic); `poll` reads it. A CQ
                // of RAW_PACKET QPs only leaves the sockets to the driver thread.
                let ms = crate::sys::poll_ms(sleep);
                let mut fds = Vec::new();
                if self.carries_roce() {
                    shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
                    shared.watch_fds(&mut fds);
                }
                let mut woke = Vec::new();
                let _ = crate::sys::poll_readable(&fds, ms, &mut woke);
                return self.poll(out);
            }
            shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
            // With no timer due sooner, sleep in recvmmsg itself (one system call
            // per wake-up); otherwise, or when another thread is receiving, in
            // poll(2), which returns at once when a datagram is already waiting.
            if sleep < crate::soft::progress::SLEEP_RECV_NS || shared.sleep_receive().is_none() {
                let ms = crate::sys::poll_ms(sleep);
                let mut ready = Vec::new();
                let mut fds = Vec::new();
                shared.watch_fds(&mut fds);
                let _ = shared.poll_wait(&fds, ms, &mut ready);
            }
            return self.poll(out);
        }
    }
}
