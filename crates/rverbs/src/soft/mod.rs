//! The soft device: the engine, the carriers that move its packets, and the threads
//! that keep it going while the application is busy. It implements the device
//! interface (`crate::device::ops`) in `device.rs` (the context-level verbs, channels,
//! MADs), `cq.rs`, `qp.rs`, `raw_qp.rs` (RAW_PACKET QPs: a second `DeviceQp` over the
//! raw device) and `flow.rs`; the verbs types see only those traits.
//!
//! **Progress model.** One driver thread per device (`driver.rs`) waits in `poll(2)`
//! on the carriers' descriptors and an eventfd, with the engine's next deadline as
//! timeout; it feeds received datagrams to the engine and sends what the engine
//! produces. Verbs that create work (`post_send`, `modify_qp`, ...) run the engine on
//! the caller's thread and send its packets at once, so a request leaves without a
//! thread hop; they wake the driver only when its deadline moved earlier. A thread
//! that polls an empty CQ receives and runs timers itself, and the driver then stays
//! off the sockets (`progress.rs`). The engine sits behind one mutex; datagrams are
//! received only under it, so they reach the engine in arrival order whichever thread
//! reads them.
//!
//! **Carriers.** Everything the engine has to send after a verb or a received batch
//! goes to the carrier stack in one queue (`crate::carrier`: same-host rings, the raw
//! device, UDP; wrapped by `crate::tap` for faults and capture); received datagrams
//! come back through a [`Sink`] that feeds the engine.
//!
//! ```text
//!  verbs ─► device::ops ─► SoftDevice, SoftCq, SoftQp, SoftRawQp
//!                               │ Shared: engine + hub + carrier stack
//!                               │ flush / receive / wait
//!                                   tap::Faulty ─ tap::Captured ─ carrier::Chain
//! ```

pub(crate) mod channel;
pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod driver;
pub(crate) mod events;
pub(crate) mod flow;
pub(crate) mod open;
pub(crate) mod progress;
pub(crate) mod qp;
pub(crate) mod raw_qp;
pub(crate) mod window;

use crate::carrier::udp::Udp;
use crate::carrier::{Arrival, Carrier, Sink, TxQueue, Waker};
use crate::device::DeviceInfo;
use crate::error::Result;
use crate::gid::GidTable;
use crate::sys;
use crate::tap::faults::FaultState;
pub(crate) use device::SoftDevice;
use rverbs_engine::{Engine, Nanos};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// A destruction waiting for the engine lock.
type Deferred = Box<dyn FnOnce(&Shared, &mut Engine) + Send>;

/// An open soft device, shared by every handle made from it.
pub(crate) struct Shared {
    /// The carrier stack (taps over the chain of carriers). First: fields drop in
    /// order, and the same-host carrier's listeners must close before the sockets
    /// do, or a context that binds the address meanwhile finds its name taken and its
    /// peers reach this one.
    pub(crate) carrier: Box<dyn Carrier>,
    /// The same-host carrier, for its counts (unless off or in raw mode), also in the
    /// chain.
    pub(crate) rings: Option<Arc<crate::carrier::same_host::Rings>>,
    /// The raw device's RoCE path (raw mode with CAP_NET_RAW), also in the chain.
    pub(crate) net: Option<Arc<crate::carrier::raw::RawNet>>,
    /// The UDP carrier itself (its sockets: address re-scan, multicast groups, the
    /// received datagrams' metadata), also the chain's last. (After the others: its
    /// sockets close last.)
    pub(crate) udp: Arc<Udp>,
    pub(crate) engine: Mutex<Engine>,
    /// Completion channels and the async event queue (fed by `flush`).
    pub(crate) hub: events::EventHub,
    /// The port's GID table (see `gid.rs`); the engine holds a copy of its GIDs.
    pub(crate) gid_table: Mutex<GidTable>,
    /// What `flush` sends (under the engine lock), reused.
    tx: Mutex<TxQueue>,
    /// When an application thread last made progress itself (`progress.rs`; 0: never,
    /// in the future: it sleeps on the sockets until then).
    pub(crate) app_poll_at: AtomicU64,
    /// Received datagrams were handled but what the engine answers was not sent yet
    /// (deferred acknowledgements, `progress.rs`; engine-lock protected writes).
    /// (0: none; otherwise when the first deferred datagram was handled.)
    pub(crate) flush_pending: AtomicU64,
    /// The receive buffer (bytes) last read for each loopback RC peer GID
    /// (`window::peer_rcvbuf`), so the QPs left sharing it can be given wider windows
    /// when one leaves, without asking the kernel under the engine lock.
    pub(crate) peer_rcvbufs: Mutex<std::collections::HashMap<rverbs_wire::grh::Gid, usize>>,
    /// When the driver thread will wake up on its own (engine-lock protected writes).
    pub(crate) driver_wake_at: AtomicU64,
    /// The driver thread sleeps in its stand-off (`progress::Standoff`).
    pub(crate) driver_standoff: AtomicBool,
    /// Some CQ may be armed (`Cq::req_notify` sets it; the driver clears it under the
    /// engine lock when none is).
    pub(crate) cq_armed: AtomicBool,
    pub(crate) waker: Waker,
    epoch: Instant,
    pub(crate) shutdown: AtomicBool,
    pub(crate) info: DeviceInfo,
    /// The fault injector's state (its counts), when faults are injected.
    pub(crate) faults: Option<Arc<Mutex<FaultState>>>,
    /// Bumped (under the engine lock) after every engine activity that can complete
    /// work: a poller that found its CQ empty need not take the lock again until it
    /// changes, so busy-polling applications do not starve the driver thread.
    pub(crate) activity: AtomicU64,
    /// Raw mode (RAW_PACKET QPs and flows), when opened with
    /// [`crate::OpenOptions::raw_interface`].
    pub(crate) raw: Option<crate::raw::RawMode>,
    /// Flows on UD QPs (see `ud_steer.rs`).
    pub(crate) ud_steering: crate::ud_steer::UdSteering,
    /// Destructions requested inside `Mr::with`, where taking the engine lock could
    /// deadlock: run, in order, by the next thread that takes the lock.
    deferred: Mutex<Vec<Deferred>>,
}

/// Received datagrams into the engine (the caller holds its lock).
struct EngineSink<'a> {
    shared: &'a Shared,
    engine: &'a mut Engine,
    now: Nanos,
    /// Leave what the engine answers to the next flush (`progress.rs`) unless a
    /// batch came in full.
    defer: bool,
}

impl Sink for EngineSink<'_> {
    fn deliver(&mut self, mut a: Arrival<'_>) {
        let s = &self.shared.ud_steering;
        if s.is_active() {
            // (Steering reads and copies whole datagrams.)
            a.materialize();
        }
        let d = a.datagram();
        if let Some(src) = a.source {
            // The payload is placed from where the carrier left it.
            let placing = rverbs_engine::Placing::new(src, d.payload);
            self.engine.handle_datagram_placed(self.now, &d, placing);
            return;
        }
        if a.roce_v1 {
            // (RoCE v1 is not steered: UD flows match RoCE v2's outer headers.)
            self.engine.handle_datagram(self.now, &d);
            return;
        }
        // Through the UD flow-steering classifier (`ud_steer.rs`), then the engine.
        if s.is_active() && s.steer(self.engine, self.now, &d) {
            return;
        }
        self.engine.handle_datagram(self.now, &d);
    }

    fn batch_end(&mut self, _n: usize, more: bool) {
        // One answer per batch: the responder's ACKs for the whole batch coalesce
        // into one (cumulative, `queue_ack`).
        if self.defer && !more {
            self.shared.defer_answers(self.now);
        } else {
            self.shared.flush(self.engine, self.now);
        }
    }
}

impl Shared {
    pub(crate) fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// The engine, for paths that cannot report an error (drops, accessors).
    ///
    /// # Panics
    /// On a thread inside [`crate::Mr::with`]: the driver may be waiting for that
    /// region's lock while holding the engine's, so waiting here would deadlock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Engine> {
        if let Err(e) = crate::device::guard::check_not_in_with("a verb") {
            panic!("{e}");
        }
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Destroys an object with `f` (from a `Drop`): at once, or, on a thread inside
    /// [`crate::Mr::with`], later on the driver thread — never a deadlock or a panic.
    /// Destructions keep their order either way.
    pub(crate) fn destroy(&self, f: impl FnOnce(&Shared, &mut Engine) + Send + 'static) {
        if crate::device::guard::check_not_in_with("destroy").is_err() {
            self.deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Box::new(f));
            self.wake();
            return;
        }
        let mut e = self.lock();
        self.run_deferred(&mut e);
        f(self, &mut e);
    }

    /// Runs the destructions deferred by [`Shared::destroy`].
    pub(crate) fn run_deferred(&self, engine: &mut Engine) {
        let ops = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        for op in ops {
            op(self, engine);
        }
    }

    /// The engine for `verb`; an error instead of a deadlock inside [`crate::Mr::with`].
    pub(crate) fn lock_verb(&self, verb: &'static str) -> Result<MutexGuard<'_, Engine>> {
        crate::device::guard::check_not_in_with(verb)?;
        Ok(self.engine.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Hands the engine's completion and async events to their waiters. A QP the
    /// engine moved to the error state (retries exhausted, a fatal NAK) leaves the
    /// sharing of its loopback peer's buffer: the QPs still connected there get wider
    /// windows, and the driver thread is woken to send what they let go.
    pub(crate) fn dispatch(&self, engine: &mut Engine) {
        for qpn in self.hub.dispatch(engine) {
            if engine
                .qp_dgid(qpn)
                .is_some_and(|g| self.reshare_peer(engine, g))
            {
                self.wake();
            }
        }
    }

    /// Sets again the windows of the QPs connected to loopback peer `dgid` for the
    /// peer's buffer last read ([`share_peer_buffer`]); false when it was never read.
    pub(crate) fn reshare_peer(&self, engine: &mut Engine, dgid: rverbs_wire::grh::Gid) -> bool {
        let known = self
            .peer_rcvbufs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&dgid)
            .copied();
        known.is_some_and(|b| window::share_peer_buffer(engine, dgid, b).is_ok())
    }

    /// Leaves what the engine answers to the datagrams just received (ACKs) to the next
    /// flush (`progress.rs`): the application's next verb, or the driver. The driver
    /// bounds the deferral only if it wakes soon: in a long sleep (not in its
    /// stand-off, where it publishes 0 and looks within the stand-off) it is woken, so
    /// an application that stops calling verbs cannot hold an ACK back until the peer
    /// gives up.
    fn defer_answers(&self, now: Nanos) {
        if self.flush_pending.load(Ordering::Relaxed) == 0 {
            self.flush_pending.store(now.max(1), Ordering::Relaxed);
            let planned = self.driver_wake_at.load(Ordering::Acquire);
            if planned > now + progress::STANDOFF_NS {
                self.wake();
            }
        }
    }

    /// EINVAL unless `index` holds a valid GID entry (the caller holds the engine
    /// lock, which the address re-scan takes before it reuses a slot).
    pub(crate) fn check_sgid(&self, index: u8, verb: &'static str) -> Result<()> {
        self.gid_table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .check_sgid(index, verb)
    }

    /// Tells the driver thread to re-read the engine's deadline.
    pub(crate) fn wake(&self) {
        self.waker.wake();
    }

    /// Sends everything the engine has to send, and wakes event waiters.
    pub(crate) fn flush(&self, engine: &mut Engine, now: Nanos) {
        self.flush_pending.store(0, Ordering::Relaxed);
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(t) = engine.poll_transmit(now) {
            tx.queue.push(t);
        }
        if !tx.queue.is_empty() {
            self.carrier.send(&mut tx, now);
            for t in tx.done.drain(..) {
                engine.recycle(t.payload);
            }
            tx.left.clear();
        }
        drop(tx);
        // Work requests completed since the last flush are freed now, after the
        // packets left (`Engine::reclaim`): a ping-pong's reply does not wait for them.
        engine.reclaim();
        self.activity.fetch_add(1, Ordering::Release);
        self.dispatch(engine);
    }

    /// Builds the deferred answers (`progress.rs`) into the send queue without sending
    /// them: the next flush sends them together with what it adds, as it would have
    /// built them. A ping-pong reposts its receive between the round trips, so the
    /// ACK it owes the peer is ready when its next request is posted instead of being
    /// built on that request's way out. (`flush_pending` stays set, so the deferral
    /// keeps its bound.)
    pub(crate) fn prebuild(&self, engine: &mut Engine) {
        let now = self.now();
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(t) = engine.poll_transmit(now) {
            tx.queue.push(t);
        }
    }

    /// Feeds up to `budget` datagrams waiting in each carrier to the engine (the
    /// caller holds the engine lock, so datagrams reach it in arrival order whichever
    /// thread receives) and sends what it answers. Returns how many were received.
    ///
    /// With `defer`, what the engine answers is left for the next flush (see
    /// `progress.rs`, deferred acknowledgements) unless a batch comes in full.
    pub(crate) fn receive(
        &self,
        engine: &mut Engine,
        now: Nanos,
        budget: usize,
        defer: bool,
    ) -> usize {
        let mut sink = EngineSink {
            shared: self,
            engine,
            now,
            defer,
        };
        self.carrier.receive(budget, &mut sink)
    }

    /// The descriptors to sleep on for what the carriers receive.
    pub(crate) fn watch_fds(&self, fds: &mut Vec<RawFd>) {
        self.carrier.watch(fds);
    }

    /// Sleeps in `poll(2)` on `fds` and on the carriers' doorbell (the same-host
    /// rings, armed meanwhile), for at most `ms` — not at all when records already
    /// wait. `ready` says which of `fds` are.
    pub(crate) fn poll_wait(
        &self,
        fds: &[RawFd],
        ns: Nanos,
        ready: &mut Vec<bool>,
    ) -> std::io::Result<()> {
        let Some(bell) = self.carrier.bell() else {
            return sys::poll_readable_ns(fds, Some(ns), ready);
        };
        let ns = if self.carrier.arm() { 0 } else { ns };
        let mut all = Vec::with_capacity(fds.len() + 1);
        all.extend_from_slice(fds);
        all.push(bell);
        let r = sys::poll_readable_ns(&all, Some(ns), ready);
        let rung = ready.get(fds.len()).copied().unwrap_or(false);
        self.carrier.disarm(rung);
        ready.truncate(fds.len());
        // None of `fds` was readable (the doorbell, records already waiting, or the
        // time woke us): the next receive need not ask the sockets (one system call
        // less on the wake-up's path; a datagram that came since is taken by the
        // receive after).
        if r.is_ok() && !ready.contains(&true) {
            self.carrier.quiet_wake();
        }
        r
    }

    /// Sleeps in the carrier's `recvmmsg` until a datagram arrives or the socket's
    /// receive timeout (`carrier::udp::socket::SLEEP_RECV_NS`) passes, then feeds what
    /// came to the engine (answers deferred, as [`Shared::progress`] does): one system
    /// call per wake-up instead of `poll` and `recvmmsg`. Called without the engine
    /// lock. Returns `None`, having done nothing, when it does not apply (a device
    /// with several sockets or same-host rings, or another thread already receiving):
    /// the caller then sleeps in `poll(2)`.
    pub(crate) fn sleep_receive(&self) -> Option<usize> {
        self.carrier.sleep_receive(&mut |f| {
            let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
            let now = self.now();
            self.app_poll_at.store(now.max(1), Ordering::Relaxed);
            // Deferred like `receive(.., defer)`, with the same bound: the driver may
            // be asleep in poll(2) for up to a second (not in its stand-off: this
            // thread took the datagram that would have woken it), so it is woken when
            // it would not look soon (`defer_answers`).
            let mut sink = EngineSink {
                shared: self,
                engine: &mut engine,
                now,
                defer: true,
            };
            f(&mut sink);
            self.activity.fetch_add(1, Ordering::Release);
            self.dispatch(&mut engine);
        })
    }

    /// Closes the sockets of the multicast groups no QP of the context is attached to
    /// any more.
    pub(crate) fn prune_groups(&self) {
        let engine = self.lock();
        self.udp
            .prune_groups(|a| engine.mcast_has_members(&rverbs_engine::net::ip_to_gid(a)));
    }

    /// Moves the completions of every raw QP into their CQs (under the engine lock);
    /// true if anything moved.
    pub(crate) fn drain_raw_qps(&self, engine: &mut Engine) -> bool {
        self.raw.as_ref().is_some_and(|r| r.drain_qps(engine))
    }

    /// Receives what waits on the raw device's RoCE socket only (raw mode); true if
    /// the engine got anything (its answers are sent).
    pub(crate) fn receive_raw_net(&self, engine: &mut Engine, now: Nanos) -> bool {
        let Some(net) = &self.net else {
            return false;
        };
        let mut sink = EngineSink {
            shared: self,
            engine,
            now,
            defer: false,
        };
        net.receive(usize::MAX, &mut sink) > 0
    }

    /// Runs the carriers' timers (held datagrams, neighbour probes); when they next
    /// need to run.
    pub(crate) fn poll_carriers(&self, now: Nanos) -> Option<Nanos> {
        self.carrier.poll(now)
    }

    /// Receives pending datagrams and fires due timers on the calling thread (the
    /// caller holds the engine lock). Returns true if the engine did anything.
    ///
    /// What the engine answers to the datagrams (ACKs) is deferred: the caller flushes
    /// it when it found no completion ([`Shared::flush_deferred`]), and otherwise the
    /// application's next verb sends it, usually together with the reply it posts.
    /// `now` is the caller's fresh clock reading ([`Shared::now`]).
    pub(crate) fn progress(&self, engine: &mut Engine, now: Nanos) -> bool {
        self.app_poll_at.store(now.max(1), Ordering::Relaxed);
        if self.flush_pending.load(Ordering::Relaxed) != 0 {
            self.flush(engine, now);
        }
        // (A polling thread: the sockets are asked at most every
        // `carrier::SPIN_SYSCALL_NS` while the same-host rings carry traffic.)
        let mut sink = EngineSink {
            shared: self,
            engine,
            now,
            defer: true,
        };
        let mut did = self
            .carrier
            .receive_spinning(progress::POLL_BUDGET, &mut sink, now)
            > 0;
        if engine.poll_timeout().is_some_and(|t| t <= now) {
            engine.handle_timeout(now);
            self.flush(engine, now);
            did = true;
        }
        if did {
            self.activity.fetch_add(1, Ordering::Release);
            // Event waiters on other CQs need not wait for the deferred flush.
            self.dispatch(engine);
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
            self.dispatch(engine);
        }
    }

    /// Sends what [`Shared::progress`] deferred.
    pub(crate) fn flush_deferred(&self, engine: &mut Engine) {
        if self.flush_pending.load(Ordering::Relaxed) != 0 {
            self.flush(engine, self.now());
        }
    }

    /// Before an application thread sleeps (in [`crate::Cq::wait`] or `get_cq_event`):
    /// sends what it deferred (which must not wait for its sleep) and returns how long
    /// it may sleep: at most `left`, until the engine's next timer, and at most half a
    /// stand-off, so the driver thread, which leaves the sockets to a thread asleep on
    /// them (both would wake for the same datagram), never waits long for it.
    pub(crate) fn plan_sleep(&self, now: Nanos, left: Nanos) -> Nanos {
        let mut e = self.lock();
        self.flush_deferred(&mut e);
        let due = e
            .poll_timeout()
            .map_or(left, |t| t.saturating_sub(now).min(left));
        due.min(progress::STANDOFF_NS / 2)
    }

    /// True while an application thread sleeps on the device's sockets in
    /// [`crate::Cq::wait`] or `get_cq_event` (it set `app_poll_at` to the end of its
    /// sleep).
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
