//! Completion channels and asynchronous events ([`CompChannel`], [`AsyncEvent`]):
//! the handles over the device's event queues (`crate::device::ops::DeviceChannel`).

use crate::device::ops::DeviceChannel;
use crate::error::Result;
use crate::verbs::Context;
use crate::verbs::{Cq, CqInner};
use std::any::Any;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The CQ handle behind an event (counted as one more unacknowledged event).
fn cq_of(h: Arc<dyn Any + Send + Sync>) -> Option<Cq> {
    let inner = h.downcast::<CqInner>().ok()?;
    inner.count_event();
    Some(Cq::from_inner(inner))
}

/// A completion channel (`struct ibv_comp_channel`): CQs created on it
/// ([`Context::create_cq_on`]) and armed with [`Cq::req_notify`] report their next
/// completion here. Its file descriptor ([`AsFd`]) is readable exactly while an event
/// is waiting, so it can be watched with `epoll`/`poll` or an async runtime.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// let ctx = rverbs::device(None)?.open()?;
/// let ch = ctx.create_comp_channel()?;
/// let cq = ctx.create_cq_on(64, &ch)?;
/// cq.req_notify(false)?;
/// // ... post work, then sleep until a completion arrives:
/// if let Some(cq) = ch.get_cq_event(Some(std::time::Duration::from_secs(1))) {
///     cq.ack_events(1)?;
///     cq.req_notify(false)?; // re-arm, then poll what arrived
///     let mut wc = [rverbs::Wc::default(); 16];
///     let _n = cq.poll(&mut wc)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CompChannel {
    pub(crate) inner: Arc<dyn DeviceChannel>,
    ctx: Context,
}

impl CompChannel {
    /// `ibv_get_cq_event`: waits up to `timeout` (forever with `None`) for the next
    /// completion event and returns its CQ. The CQ is disarmed: call
    /// [`Cq::req_notify`] again for the next event, and [`Cq::ack_events`] for this one.
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Option<Cq> {
        self.inner.get_cq_event(timeout).and_then(cq_of)
    }

    /// The next completion event if one is waiting (never blocks).
    pub fn try_get_cq_event(&self) -> Option<Cq> {
        self.inner.try_get_cq_event().and_then(cq_of)
    }

    /// The context the channel belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Waits asynchronously for the next completion event (feature `tokio`; needs a
    /// tokio runtime with I/O enabled).
    #[cfg(feature = "tokio")]
    pub async fn get_cq_event_async(&self) -> std::io::Result<Cq> {
        // A duplicate of the eventfd per call: tokio registers each fd once, and
        // several tasks may wait on one channel.
        let afd = crate::sys::async_fd(self.inner.fd().try_clone_to_owned()?)?;
        loop {
            if let Some(cq) = self.inner.try_get_cq_event().and_then(cq_of) {
                return Ok(cq);
            }
            let mut guard = afd.readable().await?;
            // Readable means "an event is queued": take it on the next turn; clear the
            // readiness only when the queue turns out empty.
            if self.inner.is_empty() {
                guard.clear_ready();
            }
        }
    }
}

impl AsFd for CompChannel {
    /// Readable while a completion event is waiting.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd()
    }
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.inner.fd().as_raw_fd())
            .finish()
    }
}

/// An asynchronous event (`struct ibv_async_event`), naming its object by the number
/// its handle reports ([`crate::Qp::qp_num`], [`Cq::handle`], [`crate::Srq::handle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// `IBV_EVENT_CQ_ERR`: the CQ overflowed; completions were lost.
    CqErr {
        /// The CQ's handle.
        cq: u32,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP entered the error state because of an error.
    QpFatal {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_COMM_EST`: a QP in RTR received its first packet.
    CommEst {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_SQ_DRAINED`: the send queue of a QP in SQD is empty.
    SqDrained {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: the SRQ holds fewer receives than its armed limit
    /// (the limit is now disarmed; re-arm with [`crate::Srq::arm_limit`]).
    SrqLimitReached {
        /// The SRQ's handle.
        srq: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP attached to an SRQ, in the error state,
    /// will take no more receives from it.
    QpLastWqeReached {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_PORT_ACTIVE`: the port came up (a system device's; the soft device
    /// raises no port events).
    PortActive {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port went down (its netdev lost its link, or was set
    /// down).
    PortErr {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_SM_CHANGE`.
    SmChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_GID_CHANGE`: the port's GID table changed (an address of its netdev
    /// came or went; [`Context::gids`] reads the new table).
    GidChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable.
    DeviceFatal,
}

impl AsyncEvent {
    pub(crate) fn from_engine(e: rverbs_engine::AsyncEvent) -> Self {
        use rverbs_engine::AsyncEvent as E;
        match e {
            E::CqErr(cq) => AsyncEvent::CqErr { cq: cq.raw() },
            E::QpFatal(qpn) => AsyncEvent::QpFatal { qpn },
            E::CommEst(qpn) => AsyncEvent::CommEst { qpn },
            E::SqDrained(qpn) => AsyncEvent::SqDrained { qpn },
            E::SrqLimitReached(s) => AsyncEvent::SrqLimitReached { srq: s.raw() },
            E::QpLastWqeReached(qpn) => AsyncEvent::QpLastWqeReached { qpn },
            E::Port(kind, port) => {
                use rverbs_engine::PortEvent as P;
                match kind {
                    P::Active => AsyncEvent::PortActive { port },
                    P::Err => AsyncEvent::PortErr { port },
                    P::LidChange => AsyncEvent::LidChange { port },
                    P::PkeyChange => AsyncEvent::PkeyChange { port },
                    P::SmChange => AsyncEvent::SmChange { port },
                    P::ClientReregister => AsyncEvent::ClientReregister { port },
                    P::GidChange => AsyncEvent::GidChange { port },
                }
            }
            E::DeviceFatal => AsyncEvent::DeviceFatal,
        }
    }
}

impl Context {
    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        Ok(CompChannel {
            inner: self.dev().create_comp_channel()?,
            ctx: self.clone(),
        })
    }

    /// Waits for the next completion event of a CQ made by [`Context::create_cq`] (the
    /// context's built-in channel; see [`CompChannel`] for CQs on their own channel): a
    /// CQ armed with [`Cq::req_notify`] got a completion. Returns the CQ's handle
    /// number ([`Cq::handle`]), or `None` after `timeout`.
    pub fn get_cq_event(&self, timeout: Duration) -> Option<u32> {
        self.dev().get_cq_event(timeout).and_then(cq_of).map(|cq| {
            // This legacy form returns no handle to acknowledge with.
            let _ = cq.ack_events(1);
            cq.handle()
        })
    }

    /// `ibv_get_async_event`: waits up to `timeout` (forever with `None`) for the next
    /// asynchronous event of this context (no acknowledgement is needed: the event
    /// holds no object).
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.dev()
            .get_async_event(timeout)
            .map(AsyncEvent::from_engine)
    }

    /// The next asynchronous event if one is waiting (never blocks).
    pub fn try_get_async_event(&self) -> Option<AsyncEvent> {
        self.dev()
            .try_get_async_event()
            .map(AsyncEvent::from_engine)
    }

    /// The context's `async_fd`: readable while an asynchronous event is waiting.
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.dev().async_fd()
    }

    pub(crate) fn bind_cq(&self, cq: &Arc<CqInner>, channel: Option<&CompChannel>) {
        let weak: Weak<CqInner> = Arc::downgrade(cq);
        cq.dev.bind(weak, channel.map(|c| &*c.inner))
    }
}
