//! Completion channels and asynchronous events on the device side: queues of events
//! with an eventfd that is readable exactly while the queue is not empty, so they can
//! sit in an `epoll` set (or a tokio `AsyncFd`) next to the application's other file
//! descriptors.
//!
//! The engine reports completion events and asynchronous events under its lock; every
//! path that runs the engine ends in `Shared::flush`, which hands them to
//! [`EventHub::dispatch`]: a completion event goes to the channel of its CQ, an
//! asynchronous event to the context's async queue. The verbs' handles
//! (the `channel` module) wrap them.

use super::Shared;
use crate::error::{Error, Result};
use crate::sys;
use rverbs_engine::{CqId, Engine};
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A FIFO of events and an eventfd whose readability mirrors "not empty".
pub(crate) struct EventQueue<T> {
    pub(crate) q: Mutex<VecDeque<T>>,
    pub(crate) fd: OwnedFd,
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(EventQueue {
            q: Mutex::new(VecDeque::new()),
            fd: sys::eventfd()?,
        })
    }

    /// Queues `v`; the fd becomes readable. (Signalled under the queue lock, so the fd
    /// is readable if and only if the queue is not empty.)
    pub(crate) fn push(&self, v: T) {
        let mut q = lock(&self.q);
        q.push_back(v);
        if q.len() == 1 {
            sys::eventfd_signal(&self.fd);
        }
    }

    /// The oldest event, if any; the fd stops being readable once the queue is empty.
    pub(crate) fn try_pop(&self) -> Option<T> {
        let mut q = lock(&self.q);
        let v = q.pop_front();
        if v.is_some() && q.is_empty() {
            sys::eventfd_drain(&self.fd);
        }
        v
    }

    /// Removes the queued events `drop_it` selects.
    pub(crate) fn remove_if(&self, mut drop_it: impl FnMut(&T) -> bool) {
        let mut q = lock(&self.q);
        let before = q.len();
        q.retain(|v| !drop_it(v));
        if before > 0 && q.is_empty() {
            sys::eventfd_drain(&self.fd);
        }
    }

    /// The oldest event, waiting up to `timeout` (forever with `None`) for one.
    pub(crate) fn pop_wait(&self, timeout: Option<Duration>) -> Option<T> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut ready = Vec::with_capacity(1);
        loop {
            if let Some(v) = self.try_pop() {
                return Some(v);
            }
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    // Round up: waking early would only loop once more.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
            };
            if sys::poll_readable(&[self.fd.as_raw_fd()], ms, &mut ready).is_err() {
                // poll(2) on one valid eventfd does not fail but for EINTR (handled
                // inside); back off rather than spin if it ever does.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Whether no event is queued.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn is_empty(&self) -> bool {
        lock(&self.q).is_empty()
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The state of one completion channel.
pub(crate) struct ChannelInner {
    pub(crate) events: EventQueue<CqId>,
    /// The CQs bound to the channel (the verbs' CQ handles, which the soft device does
    /// not name), to hand back the CQ of each event.
    cqs: Mutex<HashMap<CqId, Weak<dyn Any + Send + Sync>>>,
}

impl ChannelInner {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(ChannelInner {
            events: EventQueue::new()
                .map_err(|e| Error::io("creating a completion channel's eventfd", e))?,
            cqs: Mutex::new(HashMap::new()),
        }))
    }

    fn next(&self, timeout: Option<Duration>) -> Option<Arc<dyn Any + Send + Sync>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let id = self.events.pop_wait(left)?;
            if let Some(cq) = self.cq_of(id) {
                return Some(cq);
            }
            // The CQ went away with the event queued: not an event any more.
        }
    }

    /// `ChannelInner::next` for a channel of `shared`'s context that receives on the
    /// waiting thread: it sleeps in `poll(2)` on the channel's eventfd and the device's
    /// sockets, and when a datagram comes it runs the engine itself
    /// (`Shared::progress`), as [`Cq::wait`] does, instead of waiting for the driver
    /// thread to receive it and wake this one: one wake-up per event instead of two. The
    /// driver stands off meanwhile. (Raw-mode contexts wait for the driver.)
    pub(crate) fn next_receiving(
        &self,
        shared: &Shared,
        timeout: Option<Duration>,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        use std::sync::atomic::Ordering;
        if shared.net.is_some() {
            return self.next(timeout);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut fds = Vec::new();
        let mut ready = Vec::new();
        // No longer asleep on the sockets (the driver may take them at once).
        let awake = || {
            shared
                .app_poll_at
                .fetch_min(shared.now().max(1), Ordering::Relaxed)
        };
        loop {
            if let Some(cq) = self.try_next() {
                awake();
                return Some(cq);
            }
            let left = match deadline {
                None => super::progress::STANDOFF_NS,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        awake();
                        return None;
                    }
                    left.as_nanos().min(u128::from(u64::MAX)) as u64
                }
            };
            let now = shared.now();
            let sleep = shared.plan_sleep(now, left);
            shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
            fds.clear();
            fds.push(self.events.fd.as_raw_fd());
            shared.watch_fds(&mut fds);
            if shared
                .poll_wait(&fds, sleep.min(sys::MAX_POLL_NS), &mut ready)
                .is_err()
            {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            if ready.first() == Some(&true) {
                continue;
            }
            let mut e = shared.lock();
            shared.progress(&mut e, shared.now());
        }
    }

    pub(crate) fn try_next(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        loop {
            let id = self.events.try_pop()?;
            if let Some(cq) = self.cq_of(id) {
                return Some(cq);
            }
        }
    }

    fn cq_of(&self, id: CqId) -> Option<Arc<dyn Any + Send + Sync>> {
        lock(&self.cqs).get(&id)?.upgrade()
    }
}

/// Where the engine's events go: one per context.
pub(crate) struct EventHub {
    /// The channel of each CQ (every CQ has one: its own or the context's default).
    routes: Mutex<HashMap<CqId, Arc<ChannelInner>>>,
    /// The channel of CQs created without one (`Context::get_cq_event`).
    pub(crate) default_channel: Arc<ChannelInner>,
    /// The engine's asynchronous events, as it reported them.
    pub(crate) asyncs: EventQueue<rverbs_engine::AsyncEvent>,
}

impl EventHub {
    pub(crate) fn new() -> Result<Self> {
        Ok(EventHub {
            routes: Mutex::new(HashMap::new()),
            default_channel: ChannelInner::new()?,
            asyncs: EventQueue::new()
                .map_err(|e| Error::io("creating the async event eventfd", e))?,
        })
    }

    /// Moves the engine's pending events to their queues (under the engine lock).
    /// Returns the QPs that entered the error state (their `QpFatal` events).
    pub(crate) fn dispatch(&self, engine: &mut Engine) -> Vec<u32> {
        if engine.has_completion_events() {
            let routes = lock(&self.routes);
            while let Some(cq) = engine.poll_completion_event() {
                if let Some(ch) = routes.get(&cq) {
                    ch.events.push(cq);
                }
            }
        }
        let mut fatal = Vec::new();
        while let Some(ev) = engine.poll_event() {
            if let rverbs_engine::AsyncEvent::QpFatal(qpn) = ev {
                fatal.push(qpn);
            }
            self.asyncs.push(ev);
        }
        fatal
    }

    /// Binds a new CQ `id` (its handle `cq`) to `channel` (the context's default
    /// without one).
    pub(crate) fn bind(
        &self,
        id: CqId,
        cq: Weak<dyn Any + Send + Sync>,
        channel: Option<&Arc<ChannelInner>>,
    ) {
        let ch = channel.map_or_else(|| self.default_channel.clone(), Arc::clone);
        lock(&ch.cqs).insert(id, cq);
        lock(&self.routes).insert(id, ch);
    }

    /// Forgets a CQ being destroyed, with the events still queued for it (its number
    /// may be given to the next CQ).
    pub(crate) fn unbind(&self, cq: CqId) {
        if let Some(ch) = lock(&self.routes).remove(&cq) {
            lock(&ch.cqs).remove(&cq);
            ch.events.remove_if(|c| *c == cq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_readable_exactly_while_not_empty() {
        let q = EventQueue::<u32>::new().unwrap();
        let fd = q.fd.as_raw_fd();
        let mut ready = Vec::new();
        let readable = |ready: &mut Vec<bool>| {
            sys::poll_readable(&[fd], 0, ready).unwrap();
            ready[0]
        };
        assert!(!readable(&mut ready));
        q.push(1);
        q.push(2);
        assert!(readable(&mut ready));
        assert_eq!(q.try_pop(), Some(1));
        assert!(readable(&mut ready), "one event still queued");
        assert_eq!(q.try_pop(), Some(2));
        assert!(!readable(&mut ready));
        assert_eq!(q.try_pop(), None);
        assert_eq!(q.pop_wait(Some(Duration::from_millis(5))), None);
        q.push(3);
        q.remove_if(|v| *v == 3);
        assert!(!readable(&mut ready), "emptied by remove_if");
    }

    #[test]
    fn pop_wait_wakes_on_push_from_another_thread() {
        let q = Arc::new(EventQueue::<u32>::new().unwrap());
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.pop_wait(None));
        std::thread::sleep(Duration::from_millis(20));
        q.push(7);
        assert_eq!(t.join().unwrap(), Some(7));
    }
}
