//! Completion queues ([`Cq`]): polling, notification, and waiting with a
//! spin-then-sleep policy (the device's: `crate::device::ops::DeviceCq`).

use super::*;
use crate::device::ops::DeviceCq;
use crate::error::Result;
use rverbs_engine::Wc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

pub(crate) struct CqInner {
    /// The device's CQ (first: it is destroyed before the context may close).
    pub(crate) dev: Box<dyn DeviceCq>,
    pub(crate) ctx: Context,
    /// Completion events handed out, and acknowledged.
    pub(crate) events: AtomicU32,
    pub(crate) acked: AtomicU32,
}

impl CqInner {
    pub(crate) fn count_event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
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
    pub(crate) fn from_inner(inner: Arc<CqInner>) -> Self {
        Cq { inner }
    }

    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out` and returns how
    /// many (0 when the CQ is empty). Nothing is allocated per completion: reuse one
    /// buffer of `Wc`s across calls.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        self.inner.dev.poll(out)
    }

    /// Arms the CQ for one completion event (`ibv_req_notify_cq`): the next completion
    /// (with `solicited_only`, the next solicited or error completion) queues an event
    /// on the CQ's channel ([`CompChannel::get_cq_event`], or
    /// [`Context::get_cq_event`] for a CQ made without a channel).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.inner.dev.req_notify(solicited_only)
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
        self.inner.dev.handle().raw()
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
    /// thread) for up to `spin` (at most `timeout`), then sleeps once in `poll(2)` on
    /// the device's sockets until a datagram arrives, the engine's next timer is due or
    /// `timeout` passes, and polls again. Returns how many completions were written to
    /// `out`; 0 means nothing completed in that time (datagrams that completed nothing,
    /// such as an incoming RDMA WRITE, also end the spin or the sleep), so callers loop.
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
        self.inner.dev.wait(out, spin, timeout)
    }
}
