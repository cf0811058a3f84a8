//! The event channel (`struct rdma_event_channel`): the queue of CM events the IDs on it
//! deliver, with a descriptor that is readable while one waits.

use super::*;

pub(super) struct RawEvent {
    pub(super) kind: EventKind,
    pub(super) id: Arc<IdInner>,
    pub(super) listen_id: Option<Arc<IdInner>>,
    pub(super) status: i32,
    pub(super) private_data: Vec<u8>,
    pub(super) ud: Option<UdParam>,
}

impl RawEvent {
    pub(super) fn new(
        kind: EventKind,
        id: Arc<IdInner>,
        status: i32,
        private_data: Vec<u8>,
    ) -> Self {
        RawEvent {
            kind,
            id,
            listen_id: None,
            status,
            private_data,
            ud: None,
        }
    }
}

pub(super) struct ChanInner {
    pub(super) q: Mutex<VecDeque<RawEvent>>,
    pub(super) cv: Condvar,
    pub(super) fd: OwnedFd,
    /// The system's CM channel behind it, once an ID on a system device uses it.
    pub(super) sys: Mutex<Option<Arc<crate::sys::ibv::CmChannel>>>,
}

impl ChanInner {
    /// Queues an event. The descriptor is signalled and drained under the queue's
    /// lock, so it is readable exactly while an event waits (a poller never wakes to an
    /// empty queue, and a blocking descriptor is never read at zero).
    pub(super) fn push(&self, e: RawEvent) {
        let mut q = lock(&self.q);
        q.push_back(e);
        crate::sys::eventfd_signal(&self.fd);
        drop(q);
        self.cv.notify_all();
    }
}

/// An ID's way to its channel. Weak: a queued event holds its ID, so a strong link
/// back would keep both alive forever once the program dropped them; events for a
/// channel that is gone are dropped. Behind a lock, as `rdma_migrate_id` moves an ID
/// to another channel; a clone (a new ID of a listener) starts on the same channel.
pub(super) struct ChanRef(Mutex<std::sync::Weak<ChanInner>>);

impl Clone for ChanRef {
    fn clone(&self) -> Self {
        ChanRef(Mutex::new(lock(&self.0).clone()))
    }
}

impl ChanRef {
    pub(super) fn new(c: &EventChannel) -> Self {
        ChanRef(Mutex::new(Arc::downgrade(&c.inner)))
    }

    pub(super) fn get(&self) -> Option<Arc<ChanInner>> {
        lock(&self.0).upgrade()
    }

    pub(super) fn push(&self, e: RawEvent) {
        if let Some(c) = self.get() {
            c.push(e);
        }
    }

    /// Takes the events queued for `me` (or for a listener `me`, its requests) off
    /// the channel, for the caller to drop outside the queue's lock.
    pub(super) fn purge(&self, me: &Arc<IdInner>) -> Vec<RawEvent> {
        let Some(c) = self.get() else {
            return Vec::new();
        };
        let mut q = lock(&c.q);
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(|e| {
            Arc::ptr_eq(&e.id, me) || e.listen_id.as_ref().is_some_and(|l| Arc::ptr_eq(l, me))
        });
        *q = rest;
        if q.is_empty() && !mine.is_empty() {
            crate::sys::eventfd_drain(&c.fd);
        }
        mine.into_iter().collect()
    }

    /// Points the ID `me` at `to`, moving the events for it still queued on its old
    /// channel along (as the kernel's `ucma_migrate_id` moves them).
    pub(super) fn migrate(&self, me: &Arc<IdInner>, to: &EventChannel) {
        let old = std::mem::replace(&mut *lock(&self.0), Arc::downgrade(&to.inner));
        let Some(old) = old.upgrade() else { return };
        if Arc::ptr_eq(&old, &to.inner) {
            return;
        }
        let moved: Vec<RawEvent> = {
            let mut q = lock(&old.q);
            let (mine, rest): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(|e| {
                Arc::ptr_eq(&e.id, me) || e.listen_id.as_ref().is_some_and(|l| Arc::ptr_eq(l, me))
            });
            *q = rest;
            if q.is_empty() && !mine.is_empty() {
                crate::sys::eventfd_drain(&old.fd);
            }
            mine.into_iter().collect()
        };
        for e in moved {
            to.inner.push(e);
        }
    }
}

/// An event channel (`struct rdma_event_channel`). Cheap to clone.
#[derive(Clone)]
pub struct EventChannel {
    pub(super) inner: Arc<ChanInner>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("queued", &lock(&self.inner.q).len())
            .finish()
    }
}

impl EventChannel {
    /// A new channel (`rdma_create_event_channel`).
    pub fn new() -> Result<EventChannel> {
        let fd = crate::sys::eventfd().map_err(|e| Error::io("creating an eventfd", e))?;
        Ok(EventChannel {
            inner: Arc::new(ChanInner {
                q: Mutex::new(VecDeque::new()),
                cv: Condvar::new(),
                fd,
                sys: Mutex::new(None),
            }),
        })
    }

    /// The next event, waiting up to `timeout` (forever with `None`)
    /// (`rdma_get_cm_event`; the event needs no acknowledgement).
    pub fn get_event(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        // Events of destroyed IDs, dropped after the queue's lock (a queue is a leaf).
        let mut stale = Vec::new();
        let mut q = lock(&self.inner.q);
        let raw = loop {
            if let Some(e) = q.pop_front() {
                // rdma_destroy_id drops the events of the ID (and the requests to a
                // listener) not yet delivered (ucma: `ucma_cleanup_ctx_events`); a
                // dropped request's new ID is rejected.
                if e.id.is_destroyed() || e.listen_id.as_ref().is_some_and(|l| l.is_destroyed()) {
                    if q.is_empty() {
                        crate::sys::eventfd_drain(&self.inner.fd);
                    }
                    stale.push(e);
                    continue;
                }
                break e;
            }
            match deadline {
                None => q = self.inner.cv.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    q = self
                        .inner
                        .cv
                        .wait_timeout(q, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        };
        if q.is_empty() {
            crate::sys::eventfd_drain(&self.inner.fd);
        }
        drop(q);
        Some(self.deliver(raw))
    }

    /// The next event if one waits (never blocks).
    pub fn try_get_event(&self) -> Option<CmEvent> {
        self.get_event(Some(Duration::ZERO))
    }

    /// Waits asynchronously for the next event (feature `tokio`; needs a tokio
    /// runtime with I/O enabled).
    #[cfg(feature = "tokio")]
    pub async fn get_event_async(&self) -> std::io::Result<CmEvent> {
        // A duplicate of the eventfd per call: tokio registers each fd once.
        let afd = crate::sys::async_fd(self.inner.fd.try_clone()?)?;
        loop {
            if let Some(e) = self.try_get_event() {
                return Ok(e);
            }
            let mut guard = afd.readable().await?;
            if lock(&self.inner.q).is_empty() {
                guard.clear_ready();
            }
        }
    }

    pub(super) fn deliver(&self, raw: RawEvent) -> CmEvent {
        if raw.kind == EventKind::ConnectRequest {
            // Taken by the consumer: its place in the backlog is free.
            let (port, id) = {
                let s = lock(&raw.id.st);
                (s.port.clone(), s.cm)
            };
            if let (Some(p), Some(id)) = (port, id) {
                p.taken(id);
            }
        }
        CmEvent {
            kind: raw.kind,
            id: CmId::hold(raw.id),
            listen_id: raw.listen_id.map(CmId::hold),
            status: raw.status,
            private_data: raw.private_data,
            ud: raw.ud,
        }
    }
}

impl AsFd for EventChannel {
    /// Readable while an event waits.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}
