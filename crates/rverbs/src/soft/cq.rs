//! A completion queue of the soft device: polling that receives on the caller's
//! thread when the CQ is empty (`progress.rs`), and the spin-then-sleep wait.

use super::Shared;
use crate::device::guard::check_not_in_with;
use crate::device::ops::{DeviceChannel, DeviceCq};
use crate::error::Result;
use rverbs_engine::{CqId, Nanos, Wc};
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, TryLockError, Weak};
use std::time::Duration;

pub(crate) struct SoftCq {
    shared: Arc<Shared>,
    id: CqId,
    /// The context's activity count when a poll last found this CQ empty.
    empty_at: AtomicU64,
    /// A RoCE QP (RC/UC/UD, not RAW_PACKET) was created with this CQ: on a raw-mode
    /// context, an empty poll then reads the RoCE socket itself. A CQ that only RAW_PACKET
    /// QPs use leaves RoCE traffic to the driver thread, so a raw packet poller pays no
    /// system call per empty poll.
    pub(crate) roce: AtomicBool,
}

impl SoftCq {
    pub(crate) fn new(shared: Arc<Shared>, id: CqId) -> Self {
        SoftCq {
            shared,
            id,
            empty_at: AtomicU64::new(0),
            roce: AtomicBool::new(false),
        }
    }

    /// The soft CQ behind `cq` (a CQ of another device is none of ours).
    pub(crate) fn of(cq: &dyn DeviceCq) -> Option<&SoftCq> {
        cq.as_any().downcast_ref::<SoftCq>()
    }

    /// True if a RoCE QP (not RAW_PACKET) uses this CQ.
    fn carries_roce(&self) -> bool {
        self.roce.load(Ordering::Relaxed)
    }

    /// The completions already in the CQ (no receiving).
    fn poll_ready(&self, out: &mut [Wc]) -> Result<usize> {
        // Before the shortcut below: the receive that follows an empty poll
        // (`poll_progress`) may write into a region this thread holds in `Mr::with`.
        check_not_in_with("poll_cq")?;
        let shared = &self.shared;
        // Nothing happened since the last empty poll: no completion can have arrived
        // (every path that adds one bumps `activity` afterwards, under the lock).
        let seen = shared.activity.load(Ordering::Acquire);
        if seen != self.empty_at.load(Ordering::Relaxed) {
            let n = shared.lock_verb("poll_cq")?.poll_cq(self.id, out)?;
            if n > 0 {
                return Ok(n);
            }
            self.empty_at.store(seen, Ordering::Relaxed);
        }
        Ok(0)
    }

    /// Receives and runs timers on this thread, then polls the CQ (`now`: a fresh
    /// clock reading, [`Shared::now`]). Callers check [`check_not_in_with`] first
    /// ([`SoftCq::poll_ready`] does).
    fn poll_progress(&self, out: &mut [Wc], now: Nanos) -> Result<usize> {
        let shared = &self.shared;
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
        let n = e.poll_cq(self.id, out)?;
        if n == 0 {
            // Nothing for this caller to answer: send the deferred ACKs now.
            shared.flush_deferred(&mut e);
            self.empty_at.store(seen, Ordering::Relaxed);
        }
        Ok(n)
    }
}

impl Drop for SoftCq {
    fn drop(&mut self) {
        let id = self.id;
        self.shared.destroy(move |s, e| {
            let _ = e.destroy_cq(id);
            // After the engine let the number go, under its lock: no new event for
            // this CQ can be dispatched to the channel any more.
            s.hub.unbind(id);
        });
    }
}

impl DeviceCq for SoftCq {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn handle(&self) -> CqId {
        self.id
    }

    fn bind(&self, owner: Weak<dyn Any + Send + Sync>, channel: Option<&dyn DeviceChannel>) {
        let channel = channel
            .and_then(|c| c.as_any().downcast_ref::<super::channel::SoftChannel>())
            .map(|c| &c.inner);
        self.shared.hub.bind(self.id, owner, channel)
    }

    fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let shared = &self.shared;
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
            let n = e.poll_cq(self.id, out)?;
            if n > 0 {
                return Ok(n);
            }
            if !self.carries_roce() || !shared.receive_raw_net(&mut e, shared.now()) {
                return Ok(0);
            }
            let now = shared.now();
            shared.flush(&mut e, now);
            return Ok(e.poll_cq(self.id, out)?);
        }
        let n = self.poll_ready(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.poll_progress(out, shared.now())
    }

    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let shared = &self.shared;
        shared
            .lock_verb("req_notify_cq")?
            .req_notify_cq(self.id, solicited_only)?;
        // The event needs the driver thread to receive: end its stand-off (the other
        // half of the handshake is in `progress::Standoff::until`).
        shared.cq_armed.store(true, Ordering::SeqCst);
        if shared.driver_standoff.load(Ordering::SeqCst) {
            shared.wake();
        }
        Ok(())
    }

    fn wait(&self, out: &mut [Wc], spin: Duration, timeout: Duration) -> Result<usize> {
        let shared = &self.shared;
        let as_ns = |d: Duration| d.as_nanos().min(u128::from(u64::MAX)) as Nanos;
        let (spin, timeout) = (as_ns(spin), as_ns(timeout));
        // One clock read per pass, which the pass's receive uses too (the first pass
        // reuses the start's): a ping-pong waits once per message, and clock reads
        // showed in its profile.
        let start = shared.now();
        let mut now = start;
        let seen = shared.activity.load(Ordering::Acquire);
        loop {
            let n = self.poll_ready(out)?;
            if n > 0 {
                return Ok(n);
            }
            let waited = now - start;
            // The spin ends with the timeout: a caller that also watches memory (a
            // WRITE ping-pong's marker) waits at most `timeout` between its looks.
            if waited < spin.min(timeout) {
                let n = self.poll_progress(out, now)?;
                if n > 0 {
                    return Ok(n);
                }
                // Datagrams that completed nothing (an incoming RDMA WRITE, received
                // here or by the driver thread) end the wait, as they end the sleep
                // below.
                if shared.activity.load(Ordering::Acquire) != seen {
                    return Ok(0);
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
                let mut fds = Vec::new();
                if self.carries_roce() {
                    shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
                    shared.watch_fds(&mut fds);
                }
                let mut woke = Vec::new();
                let _ = crate::sys::poll_readable_ns(&fds, Some(sleep), &mut woke);
                return self.poll(out);
            }
            shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
            // With no timer due sooner, sleep in recvmmsg itself (one system call
            // per wake-up); otherwise, or when another thread is receiving, in
            // poll(2), which returns at once when a datagram is already waiting.
            if sleep < super::progress::SLEEP_RECV_NS || shared.sleep_receive().is_none() {
                let mut ready = Vec::new();
                let mut fds = Vec::new();
                shared.watch_fds(&mut fds);
                // (To the nanosecond: the engine's next timer may be a 200 µs probe.)
                let _ = shared.poll_wait(&fds, sleep.min(crate::sys::MAX_POLL_NS), &mut ready);
            }
            return self.poll(out);
        }
    }
}
