//! Who moves the packets: the wake-up policy between the application's threads and
//! the context's driver thread.
//!
//! **Progress on poll.** A thread that polls a CQ and finds it empty receives the
//! device's pending datagrams and runs its due timers itself, under the engine lock,
//! instead of waiting for the driver thread to be scheduled: a busy-polling
//! application then gets its completions with no thread hop, and on a machine with
//! few cores the spinning thread does the work instead of competing with the thread
//! that would. Receiving always happens under the engine lock, so datagrams are handed
//! to the engine in the order the socket delivered them whichever thread reads them.
//!
//! **Driver stand-off.** While an application thread has polled within
//! [`STANDOFF_NS`], the driver thread does not wait on the sockets (only on its eventfd
//! and the next deadline, capped at the stand-off): it would only be woken to find the
//! datagram already taken. When polling stops, it resumes within the stand-off.
//!
//! **Deferred acknowledgements.** What the engine answers to datagrams received on
//! an application thread (ACKs, mostly) leaves with the application's next verb — a
//! ping-pong's reply then carries its ACK in the same system call (on the loopback
//! device in the same `UDP_SEGMENT` buffer, the ACK as its last segment, which the
//! receiver handles first), and the peer wakes once instead of twice — or, when the
//! poll found no completion, at once. If the application makes no further call, the
//! driver thread sends it when it next looks (it sleeps at most [`DEFER_NS`] while it
//! knows of one — rounded up to `poll(2)`'s millisecond — and at most the stand-off
//! otherwise). ACKs are cumulative (IBTA 9.7.5.1.1 allows coalescing them), so a
//! late ACK only delays the requester's completions, never loses anything.
//!
//! **Sleeping in the receive.** [`crate::Cq::wait`] on a device with one socket
//! sleeps in the receive itself (`recvmsg` for one buffer, `recvmmsg` for more; a
//! blocking socket with a receive timeout; every other
//! call passes `MSG_DONTWAIT`): one system call per wake-up, as a TCP `read`. While
//! datagrams come one per wake-up (a ping-pong) it asks for one buffer, so the kernel
//! returns with the first instead of trying for a second; once datagrams are found
//! queued behind it (a stream) it takes whole batches again. The driver thread leaves
//! the socket to it meanwhile.
//!
//! **Wake-ups on demand.** A verb that creates work wakes the driver only when the
//! engine's next deadline is earlier than the time the driver will wake up anyway
//! (published under the engine lock as `driver_wake_at`), not on every post.

use crate::context::Shared;
use rverbs_engine::{Engine, Nanos};
use std::sync::atomic::Ordering;

/// Longest a deferred acknowledgement waits for the application before the driver
/// thread sends it (50 µs).
pub(crate) const DEFER_NS: Nanos = 50_000;

/// How long after an application's last poll the driver thread leaves the sockets to
/// it (2 ms).
pub(crate) const STANDOFF_NS: Nanos = 2_000_000;

/// Longest one sleep in `recvmmsg` ([`Shared::sleep_receive`]) lasts: the device
/// sockets' receive timeout (500 µs).
pub(crate) const SLEEP_RECV_NS: Nanos = 500_000;

/// Most datagrams one poll takes from the sockets before returning (bounded so a
/// poller under a flood still returns to its caller).
const POLL_BUDGET: usize = 64;

impl Shared {
    /// Receives pending datagrams and fires due timers on the calling thread (the
    /// caller holds the engine lock). Returns true if the engine did anything.
    ///
    /// What the engine answers to the datagrams (ACKs) is deferred: the caller flushes
    /// it when it found no completion ([`Shared::flush_deferred`]), and otherwise the
    /// application's next verb sends it, usually together with the reply it posts.
    /// `now` is the caller's fresh clock reading ([`Shared::now`]).
    pub(crate) fn progress(&self, engine: &mut Engine, now: Nanos) -> bool {
        self.app_poll_at.store(now, Ordering::Relaxed);
        if self.flush_pending.load(Ordering::Relaxed) != 0 {
            self.flush(engine, now);
        }
        let mut did = self.receive(engine, now, POLL_BUDGET, true) > 0;
        if engine.poll_timeout().is_some_and(|t| t <= now) {
            engine.handle_timeout(now);
            self.flush(engine, now);
            did = true;
        }
        if did {
            self.activity.fetch_add(1, Ordering::Release);
            // Event waiters on other CQs need not wait for the deferred flush.
            self.hub.dispatch(engine);
        }
        did
    }

    /// After a verb that may have completed work but rarely sends anything: lets
    /// pollers and event waiters see it, and flushes unless answers are deferred
    /// (they then leave with the next flush, already built: see
    /// [`Shared::prebuild`]).
    pub(crate) fn settle(&self, engine: &mut Engine, now: Nanos) {
        if self.flush_pending.load(Ordering::Relaxed) == 0 {
            self.flush(engine, now);
        } else {
            self.prebuild(engine);
            self.activity.fetch_add(1, Ordering::Release);
            self.hub.dispatch(engine);
        }
    }

    /// Sends what [`Shared::progress`] deferred.
    pub(crate) fn flush_deferred(&self, engine: &mut Engine) {
        if self.flush_pending.load(Ordering::Relaxed) != 0 {
            self.flush(engine, self.now());
        }
    }

    /// True while an application thread is making progress itself.
    pub(crate) fn app_polling(&self, now: Nanos) -> bool {
        now.saturating_sub(self.app_poll_at.load(Ordering::Relaxed)) < STANDOFF_NS
    }

    /// True while an application thread sleeps in [`crate::Cq::wait`] on the
    /// device's sockets (it set `app_poll_at` to the end of its sleep).
    pub(crate) fn app_sleeping(&self, now: Nanos) -> bool {
        self.app_poll_at.load(Ordering::Relaxed) > now
    }

    /// Wakes the driver thread if the engine now needs it earlier than it planned to
    /// wake up (call with the engine lock held, after the verb ran).
    pub(crate) fn wake_if_needed(&self, engine: &Engine) {
        let planned = self.driver_wake_at.load(Ordering::Acquire);
        if engine.poll_timeout().is_some_and(|t| t < planned) {
            self.wake();
        }
    }
}

impl crate::Cq {
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
        let as_ns = |d: std::time::Duration| d.as_nanos().min(u128::from(u64::MAX)) as Nanos;
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
            let left = timeout - waited;
            let due = {
                let mut e = shared.lock();
                // Answers deferred for this thread must not wait for its sleep.
                shared.flush_deferred(&mut e);
                e.poll_timeout()
                    .map_or(left, |t| t.saturating_sub(now).min(left))
            };
            // Keep the driver thread off the sockets while this thread sleeps on them
            // (both would wake for the same datagram), for at most one stand-off.
            let sleep = due.min(STANDOFF_NS / 2);
            if let Some(net) = shared.net() {
                // Raw mode: the engine's packets come from the RoCE socket (the UDP
                // sockets only carry this host's own traffic); `poll` reads it. A CQ
                // of RAW_PACKET QPs only leaves the sockets to the driver thread.
                let ms = sleep.div_ceil(1_000_000) as i32;
                let mut fds = Vec::new();
                if self.carries_roce() {
                    shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
                    fds = shared.socket_fds();
                    fds.push(net.rx_fd());
                }
                let mut woke = Vec::new();
                let _ = crate::sys::poll_readable(&fds, ms, &mut woke);
                return self.poll(out);
            }
            shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
            // With no timer due sooner, sleep in recvmmsg itself (one system call
            // per wake-up); otherwise, or when another thread is receiving, in
            // poll(2), which returns at once when a datagram is already waiting.
            if sleep < SLEEP_RECV_NS || shared.sleep_receive().is_none() {
                let ms = sleep.div_ceil(1_000_000) as i32;
                let mut ready = Vec::new();
                let _ = crate::sys::poll_readable(&shared.socket_fds(), ms, &mut ready);
            }
            return self.poll(out);
        }
    }
}
