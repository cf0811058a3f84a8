//! An open device: the engine, its UDP sockets and the driver thread that keeps
//! receiving, acknowledging and retransmitting while the application is busy.
//!
//! **Progress model.** One driver thread per context waits in `poll(2)` on the sockets
//! and an eventfd, with the engine's next deadline as timeout; it feeds received
//! datagrams to the engine and sends what the engine produces. Verbs that create work
//! (`post_send`, `modify_qp`, ...) run the engine on the caller's thread and send its
//! packets at once, so a request leaves without a thread hop; they wake the driver
//! only when its deadline moved earlier. A thread that polls an empty CQ receives and
//! runs timers itself, and the driver then stays off the sockets (`progress.rs`). The
//! engine sits behind one mutex; datagrams are received only under it, so they reach
//! the engine in socket order whichever thread reads them.
//!
//! **Batching.** Datagrams are received `recvmmsg` at a time (as many buffers as came
//! last time, doubling while full receives follow each other: a ping-pong's receive is
//! a plain `recvmsg` of one buffer, see `PollBatch`) and everything the engine
//! has to send after a verb or a received batch leaves in one `sendmmsg` (a lone
//! datagram in one `sendto`, with no message headers to copy in; one ACK per
//! batch: ACKs coalesce). On the loopback device, trains of same-size datagrams to one
//! peer go as one `UDP_SEGMENT` buffer and arrive whole (`UDP_GRO`), so a 64 KiB
//! message costs the kernel one pass, not sixteen (see `Shared::gso` for why only
//! there). With `RVERBS_FAULTS` every datagram goes out on its own; `RVERBS_PCAP`
//! records each datagram of a train as it is sent.

use crate::capture::PcapWriter;
use crate::conn_tx::{body_of, ConnTx, Meta, Path};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::faults::{FaultState, FaultStats, Faults};
use crate::gid::GidTable;
use crate::sys::{self, IpMeta};
use rverbs_engine::{AckPolicy, Body, Config, Datagram, Engine, Lent, Memory, Nanos, Transmit};
use rverbs_wire::opcode::Opcode;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

/// The RoCE v2 UDP port.
pub const ROCE_PORT: u16 = 4791;

/// Bytes per received buffer: a whole UDP payload, which holds the largest RoCE v2
/// packet and a coalesced (`UDP_GRO`) train of them; anything longer arrives cut and
/// fails its ICRC.
const RX_SLOT: usize = 65536;
/// Buffers one `recvmmsg` takes.
const RX_BATCH: usize = 16;
/// Most datagrams in one `UDP_SEGMENT` train (the kernel's `UDP_MAX_SEGMENTS` is 64 or
/// more) and most bytes (one IP packet).
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65_000;

struct RxBatch {
    buf: Vec<u8>,
    got: Vec<sys::Received>,
    /// The `recvmmsg` headers, reused.
    hdrs: sys::RecvScratch,
    /// Scratch of the UD flow-steering classifier (`ud_steer.rs`).
    steer: (Vec<u8>, rverbs_flow::classify::Verdict),
    /// Buffers the sleeping receive asks for (`sleep_receive`): 1 while traffic comes
    /// one datagram at a time (a ping-pong), [`RX_BATCH`] while more follow a wake-up
    /// (a stream).
    wake_batch: usize,
    /// The last sleeping receive took one buffer; the next `receive` tells whether
    /// more were queued behind it.
    after_wake: bool,
    /// Per socket (by position in the list): the buffers a non-sleeping receive
    /// (`receive`: polls, the driver) asks for, and whether the last one filled them
    /// all. See [`PollBatch`].
    poll: Vec<PollBatch>,
    /// The socket list `receive` reads, and the `Shared::sockets_gen` it was taken
    /// at: a poll that finds the list unchanged (one atomic load) takes neither the
    /// list's lock nor a reference count. `SocketsMut` replaces it when it can, so a
    /// removed socket closes as soon as it did when receivers took their own copy.
    socks: Arc<SocketList>,
    socks_gen: u64,
    /// The same-host carrier's inbound rings `receive` reads, and the list's
    /// generation then.
    links: Arc<Vec<Arc<crate::same_host::InLink>>>,
    links_gen: u64,
}

/// How many buffers a non-sleeping receive asks one socket for. With more buffers
/// than datagrams waiting, `recvmmsg` makes another pass through the socket before it
/// returns (0.2-0.4 µs), and sets up every header first: a ping-pong asks for one.
/// The count doubles while full receives follow each other back to back (a stream),
/// up to [`RX_BATCH`], and falls to what came when fewer came.
#[derive(Debug, Clone, Copy)]
struct PollBatch {
    want: usize,
    /// The last receive filled all `want` buffers: if the next one finds datagrams
    /// too, they are a stream.
    full: bool,
}

impl Default for PollBatch {
    fn default() -> Self {
        PollBatch {
            want: 1,
            full: false,
        }
    }
}

impl PollBatch {
    /// Buffers to ask for.
    fn want(&self) -> usize {
        self.want.clamp(1, RX_BATCH)
    }

    /// Learns from a receive that asked for `want()` buffers and got `n`.
    fn got(&mut self, n: usize) {
        let want = self.want();
        if n == 0 {
            self.full = false;
        } else if n >= want {
            if std::mem::replace(&mut self.full, true) {
                self.want = (want * 2).min(RX_BATCH);
            }
        } else {
            self.want = n;
            self.full = false;
        }
    }

    /// One non-blocking receive of up to `want()` datagrams from `sock` into `buf`
    /// (slots of [`RX_SLOT`] bytes), learning from what came: `None` when the socket
    /// had nothing (or failed). An empty socket ends a stream too: datagrams that
    /// arrive one per poll are a ping-pong, whatever the polls found in between.
    fn recv(
        &mut self,
        sock: &Socket,
        buf: &mut [u8],
        list: &mut Vec<sys::Received>,
        hdrs: &mut sys::RecvScratch,
    ) -> Option<usize> {
        list.clear();
        let want = self.want();
        match sys::recv_batch(sock, &mut buf[..want * RX_SLOT], RX_SLOT, list, hdrs) {
            Ok(n) => {
                self.got(n);
                Some(n)
            }
            Err(_) => {
                self.got(0);
                None
            }
        }
    }
}

/// The packets of `msgs` (indices into the batch, through `order`), in order.
fn packets<'a>(msgs: &'a [sys::Outgoing], order: &'a [usize]) -> impl Iterator<Item = usize> + 'a {
    msgs.iter()
        .flat_map(move |m| order[m.first..m.first + m.count].iter().copied())
}

/// Whether two handles name the same memory region (by address: two handles of one
/// region may carry different vtable pointers).
fn same_region(a: &Arc<dyn Memory>, b: &Arc<dyn Memory>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// A packet's bytes in one piece (for the paths that cannot send pieces: captures and
/// datagrams with control messages); `body` as for [`Transmit::parts`].
fn whole<'a>(t: &'a Transmit, body: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
    match t.parts(body) {
        [p, [], []] => std::borrow::Cow::Borrowed(p),
        parts => std::borrow::Cow::Owned(parts.concat()),
    }
}

/// A device's sockets: its addresses' and its multicast groups'.
pub(crate) type SocketList = Vec<(IpAddr, Arc<Socket>)>;

/// What `flush` sends, and the scratch of `send_all`, kept from call to call so a
/// flush allocates nothing.
#[derive(Default)]
struct TxBatch {
    queue: Vec<Transmit>,
    plan: TxPlan,
    /// The peers' connected sockets (`conn_tx.rs`).
    conn: crate::conn_tx::ConnTx,
    /// Datagrams the same-host carrier took (`same_host.rs`), and the queue's rest:
    /// reused.
    carried: Vec<Transmit>,
    rest: Vec<Transmit>,
}

#[derive(Default)]
struct TxPlan {
    /// Indices (into the queue) of one socket's datagrams.
    mine: Vec<usize>,
    /// Their order in the trains (an ACK may swap places with the request after it).
    order: Vec<usize>,
    /// The messages: runs of `order`.
    msgs: Vec<sys::Outgoing>,
    scratch: sys::SendScratch,
}

pub(crate) struct Shared {
    /// The same-host carrier (`same_host.rs`), unless off or in raw mode. (First:
    /// fields drop in order, and its listeners must close before the sockets do, or
    /// a context that binds the address meanwhile finds its name taken and its peers
    /// reach this one.)
    pub(crate) same_host: Option<crate::same_host::SameHost>,
    pub(crate) engine: Mutex<Engine>,
    /// Completion channels and the async event queue (fed by `flush`).
    pub(crate) hub: crate::channel::EventHub,
    /// One socket per local address, bound to `address:4791`, and one per joined
    /// multicast group. The driver's address re-scan and the multicast verbs change
    /// the list (write lock); senders take the read lock.
    /// (Shared as one `Arc`, so a receiver takes a snapshot with one reference
    /// count instead of copying the list on every poll.)
    sockets: RwLock<Arc<SocketList>>,
    /// Bumped (under the write lock) whenever `sockets` may have changed, so
    /// `receive` knows when its snapshot (`RxBatch::socks`) is stale.
    sockets_gen: std::sync::atomic::AtomicU64,
    /// Set when a verb changed `sockets` (a multicast group joined): the driver
    /// re-reads the list.
    pub(crate) sockets_changed: AtomicBool,
    /// Users of the received datagrams' TTL / TOS / flow label (UD QPs, whose
    /// receives carry a GRH, and MAD agents), and whether the unicast sockets ask the
    /// kernel for them now (also always with a capture, which records them).
    recv_meta_users: std::sync::atomic::AtomicUsize,
    recv_meta_on: AtomicBool,
    /// The port's GID table (see `gid.rs`); the engine holds a copy of its GIDs.
    pub(crate) gid_table: Mutex<GidTable>,
    /// The receive buffers of whichever thread receives (always under the engine lock).
    rx: Mutex<RxBatch>,
    /// Send trains of same-size datagrams with `UDP_SEGMENT`. Only on the loopback
    /// device: the kernel numbers the IPv4 IDs of a train's datagrams 0, 1, 2, ... while
    /// their ICRCs assume 0 (as every datagram from an unconnected socket has). An
    /// rverbs receiver recovers the ID from the ICRC and never sees the difference —
    /// over loopback it even receives the train whole (`UDP_GRO`) — but a peer that
    /// checks the ICRC against the real header (rxe) would drop all but the first.
    gso: bool,
    /// With `gso`: an ACK may swap places with the request after it to ride in its
    /// train (`send_all`). Only when the receiver gets trains whole (`UDP_GRO` took
    /// on every socket of ours; the peers, loopback contexts on the same kernel, set
    /// it as we do): it restores the order within a train, not across datagrams.
    swap_acks: bool,
    /// The engine leaves RoCE v2 ICRCs to us (`Config::sender_fills_icrc`): every send
    /// path fills them for the port and IPv4 ID the datagram leaves with. (Not in raw
    /// RoCE v2 mode, whose frames the engine completes itself.)
    fills_icrc: bool,
    /// Datagrams collected by `flush` for one `sendmmsg`, and the sender's reused
    /// scratch (under the engine lock).
    tx: Mutex<TxBatch>,
    /// When an application thread last made progress itself (`progress.rs`; 0: never,
    /// in the future: it sleeps on the sockets until then).
    pub(crate) app_poll_at: std::sync::atomic::AtomicU64,
    /// Received datagrams were handled but what the engine answers was not sent yet
    /// (deferred acknowledgements, `progress.rs`; engine-lock protected writes).
    /// (0: none; otherwise when the first deferred datagram was handled.)
    pub(crate) flush_pending: std::sync::atomic::AtomicU64,
    /// The receive buffer (bytes) last read for each loopback RC peer GID
    /// ([`peer_rcvbuf`]), so the QPs left sharing it can be given wider windows when
    /// one leaves, without asking the kernel under the engine lock.
    pub(crate) peer_rcvbufs: Mutex<std::collections::HashMap<rverbs_wire::grh::Gid, usize>>,
    /// When the driver thread will wake up on its own (engine-lock protected writes).
    pub(crate) driver_wake_at: std::sync::atomic::AtomicU64,
    /// The driver thread sleeps in its stand-off (`progress::Standoff`).
    pub(crate) driver_standoff: AtomicBool,
    /// Some CQ may be armed (`Cq::req_notify` sets it; the driver clears it under the
    /// engine lock when none is).
    pub(crate) cq_armed: AtomicBool,
    wake: OwnedFd,
    /// Set by `poll_wait` when only a same-host doorbell woke it: the next `receive`
    /// leaves the sockets alone.
    skip_sockets_once: AtomicBool,
    epoch: Instant,
    shutdown: AtomicBool,
    pub(crate) info: DeviceInfo,
    pub(crate) faults: Option<Mutex<FaultState>>,
    pub(crate) pcap: Option<Mutex<PcapWriter>>,
    /// Bumped (under the engine lock) after every engine activity that can complete
    /// work: a poller that found its CQ empty need not take the lock again until it
    /// changes, so busy-polling applications do not starve the driver thread.
    pub(crate) activity: std::sync::atomic::AtomicU64,
    /// Raw mode (RAW_PACKET QPs and flows), when opened with
    /// [`OpenOptions::raw_interface`].
    pub(crate) raw: Option<crate::raw::RawMode>,
    /// Flows on UD QPs (see `ud_steer.rs`).
    pub(crate) ud_steering: crate::ud_steer::UdSteering,
    /// Destructions requested inside `Mr::with`, where taking the engine lock could
    /// deadlock: run, in order, by the next thread that takes the lock.
    deferred: Mutex<Vec<Deferred>>,
}

/// A destruction waiting for the engine lock.
type Deferred = Box<dyn FnOnce(&Shared, &mut Engine) + Send>;

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
        if let Err(e) = crate::verbs::check_not_in_with("a verb") {
            panic!("{e}");
        }
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Destroys an object with `f` (from a `Drop`): at once, or, on a thread inside
    /// [`crate::Mr::with`], later on the driver thread — never a deadlock or a panic.
    /// Destructions keep their order either way.
    pub(crate) fn destroy(&self, f: impl FnOnce(&Shared, &mut Engine) + Send + 'static) {
        if crate::verbs::check_not_in_with("destroy").is_err() {
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
        crate::verbs::check_not_in_with(verb)?;
        Ok(self.engine.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Sends everything the engine has to send, and wakes event waiters.
    pub(crate) fn flush(&self, engine: &mut Engine, now: Nanos) {
        self.flush_pending.store(0, Ordering::Relaxed);
        // Raw-mode RoCE v2 leaves frame by frame through the raw device (`rawnet.rs`),
        // and with faults datagram by datagram through the fault injector.
        if self.faults.is_some() || self.net().is_some() {
            while let Some(mut t) = engine.poll_transmit(now) {
                self.send(&mut t);
                engine.recycle(t.payload);
            }
        } else {
            // The fast path: everything the engine has goes out in one sendmmsg per
            // socket.
            let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            let TxBatch {
                queue,
                plan,
                conn,
                carried,
                rest,
            } = &mut *tx;
            while let Some(t) = engine.poll_transmit(now) {
                queue.push(t);
            }
            if let Some(sh) = self.same_host.as_ref().filter(|_| !queue.is_empty()) {
                self.send_same_host(sh, now, queue, carried, rest);
                for t in carried.drain(..) {
                    engine.recycle(t.payload);
                }
            }
            if !queue.is_empty() {
                self.send_all(queue, plan, conn);
                for t in queue.drain(..) {
                    engine.recycle(t.payload);
                }
            }
        }
        // Work requests completed since the last flush are freed now, after the
        // packets left (`Engine::reclaim`): a ping-pong's reply does not wait for them.
        engine.reclaim();
        self.activity.fetch_add(1, Ordering::Release);
        self.dispatch(engine);
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
        known.is_some_and(|b| share_peer_buffer(engine, dgid, b).is_ok())
    }

    /// Builds the deferred answers (`progress.rs`) into the send queue without sending
    /// them: the next flush sends them together with what it adds, as it would have
    /// built them. A ping-pong reposts its receive between the round trips, so the
    /// ACK it owes the peer is ready when its next request is posted instead of being
    /// built on that request's way out. (Fast path only; `flush_pending` stays set, so
    /// the deferral keeps its bound.)
    pub(crate) fn prebuild(&self, engine: &mut Engine) {
        if self.faults.is_some() || self.net().is_some() {
            return;
        }
        let now = self.now();
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(t) = engine.poll_transmit(now) {
            tx.queue.push(t);
        }
    }

    fn send(&self, t: &mut Transmit) {
        // Every path from here needs the packet in one piece (`send_all` sends the
        // payloads left in memory regions).
        t.materialize();
        if self.fills_icrc && !t.roce_v1 {
            // The engine left the ICRC to us (`sender_fills_icrc`): this datagram leaves
            // from the device's socket, port 4791, ID 0.
            rverbs_engine::net::fill_icrc(t.src, t.dst, ROCE_PORT, &mut t.payload);
        }
        if t.roce_v1 {
            // RoCE v1 leaves through the raw device (`raw.rs`, `rawnet.rs`).
            self.v1_send(t);
            return;
        }
        if self.raw_v2() {
            // Raw-mode RoCE v2 (`rawnet.rs`), unless it is for the UDP socket.
            if self.net_send_v2(t) {
                return;
            }
            // The socket sends from port 4791, which the ICRC must then cover (the
            // engine computed it for the QP's entropy port).
            let mut t2 = Transmit {
                payload: t.payload.clone(),
                src_port: ROCE_PORT,
                body: None,
                ..*t
            };
            rverbs_engine::net::fill_icrc(t2.src, t2.dst, ROCE_PORT, &mut t2.payload);
            return self.send_udp(&t2);
        }
        self.send_udp(t)
    }

    /// Moves the datagrams of `queue` whose destination is another rverbs context of
    /// this host into its ring (`same_host.rs`), and into `carried`; the rest stay in
    /// `queue`, in order. (`rest`: scratch.)
    fn send_same_host(
        &self,
        sh: &crate::same_host::SameHost,
        now: Nanos,
        queue: &mut Vec<Transmit>,
        carried: &mut Vec<Transmit>,
        rest: &mut Vec<Transmit>,
    ) {
        let mut ring: Option<(IpAddr, Option<crate::same_host::Handle<'_>>)> = None;
        for t in queue.drain(..) {
            if t.dst.is_multicast() || t.roce_v1 {
                rest.push(t);
                continue;
            }
            // One ring locked per run of datagrams to one peer.
            if ring.as_ref().map(|(d, _)| *d) != Some(t.dst) {
                // (The last run's ring first: it holds the carrier's lock.)
                drop(ring.take());
                ring = Some((t.dst, sh.writer_for(t.dst, now)));
            }
            let Some((_, Some(h))) = &mut ring else {
                rest.push(t);
                continue;
            };
            // Written straight into the ring (a body from its region), then its
            // ICRC as from the device's socket (port 4791, IPv4 ID 0).
            let ip = Self::carried_meta(IpMeta {
                hop_limit: t.hop_limit,
                traffic_class: t.traffic_class,
                flow_label: t.flow_label,
            });
            let meta = crate::same_host::RecordMeta {
                src: t.src,
                src_port: ROCE_PORT,
                ip,
            };
            h.push_with(&meta, t.len(), |slot| {
                t.write_into(slot);
                if self.fills_icrc {
                    rverbs_engine::net::fill_icrc(t.src, t.dst, ROCE_PORT, slot);
                }
                self.record(t.src, t.dst, ROCE_PORT, ip, slot);
            });
            carried.push(t);
        }
        drop(ring);
        std::mem::swap(queue, rest);
    }

    /// What a datagram from the device's socket carries of `meta`: the socket's
    /// default TTL for 0, no flow label (`send_raw`).
    fn carried_meta(meta: IpMeta) -> IpMeta {
        IpMeta {
            hop_limit: if meta.hop_limit == 0 {
                64
            } else {
                meta.hop_limit
            },
            flow_label: 0,
            ..meta
        }
    }

    /// Writes one datagram into a same-host ring, with its capture record, carrying
    /// what a datagram from the device's socket would (port 4791, the socket's
    /// default TTL for 0, no flow label).
    fn carry(
        &self,
        h: &mut crate::same_host::Handle<'_>,
        src: IpAddr,
        dst: IpAddr,
        meta: IpMeta,
        bytes: &[u8],
    ) {
        let ip = Self::carried_meta(meta);
        self.record(src, dst, ROCE_PORT, ip, bytes);
        let meta = crate::same_host::RecordMeta {
            src,
            src_port: ROCE_PORT,
            ip,
        };
        h.push_with(&meta, bytes.len(), |slot| slot.copy_from_slice(bytes));
    }

    fn send_udp(&self, t: &Transmit) {
        let meta = IpMeta {
            hop_limit: t.hop_limit,
            traffic_class: t.traffic_class,
            flow_label: t.flow_label,
        };
        let Some(faults) = &self.faults else {
            self.send_raw(t.src, t.dst, meta, &t.payload);
            return;
        };
        let mut bytes = t.payload.clone();
        let mut f = faults.lock().unwrap_or_else(|e| e.into_inner());
        let v = f.judge(&mut bytes, true);
        for _ in 0..v.copies {
            if v.delay_ns == 0 {
                self.send_raw(t.src, t.dst, meta, &bytes);
            } else {
                f.hold(self.now() + v.delay_ns, t.src, t.dst, meta, bytes.clone());
            }
        }
        if v.delay_ns > 0 {
            drop(f);
            self.wake();
        }
    }

    /// Sends a batch: datagrams that need TTL/TOS control messages one by one
    /// (`send`), the rest with one `sendmmsg` per peer through its connected socket
    /// (`conn_tx.rs`; else per local socket), trains of same-size ones to one peer as
    /// `UDP_SEGMENT` buffers on the loopback device.
    fn send_all(&self, ts: &mut [Transmit], plan: &mut TxPlan, conn: &mut ConnTx) {
        // Unicast RoCE v2 leaves in batches, whatever its TTL and TOS (a connected
        // socket carries them; the unconnected fallback sends such datagrams one by
        // one with control messages).
        let plain = |t: &Transmit| !t.dst.is_multicast() && !t.roce_v1;
        for t in ts.iter_mut().filter(|t| !plain(t)) {
            self.send(t);
        }
        // Payloads left in their memory regions (`Transmit::body`, large requests and
        // READ responses) are hashed into the ICRC and sent from there: one region is
        // lent for the whole batch (locked until the sends return; lending it twice
        // would deadlock), which spares copying every payload into its datagram
        // (7% of a 64 KiB WRITE stream's sender in profiles). `bodies[k]` is packet
        // k's body (empty for a batch without bodies, as a ping-pong's).
        let mut regions: Vec<Arc<dyn Memory>> = Vec::new();
        for b in ts.iter().filter_map(|t| t.body.as_ref()) {
            if !regions.iter().any(|r| same_region(r, b.memory())) {
                regions.push(b.memory().clone());
            }
        }
        if regions.len() > 1 {
            // Never two region locks at once: an application thread may hold one
            // region in `Mr::with` while it reads another (which `with` allows), and
            // holding the second while waiting for the first would deadlock it with
            // us, the engine lock included. The bodies of all regions but one are
            // copied in first, one region lock at a time, then that one is lent.
            let keep = regions[0].clone();
            for t in ts.iter_mut() {
                if t.body
                    .as_ref()
                    .is_some_and(|b| !same_region(&keep, b.memory()))
                {
                    t.materialize();
                }
            }
            regions.truncate(1);
        }
        let lent: Vec<Option<Lent<'_>>> = regions.iter().map(|r| r.lend()).collect();
        let lent_of = |b: &Body| {
            regions
                .iter()
                .position(|r| same_region(r, b.memory()))
                .and_then(|i| lent[i].as_deref())
        };
        let bodies: Vec<&[u8]> = if regions.is_empty() {
            Vec::new()
        } else {
            for t in ts.iter_mut() {
                if t.body.as_ref().is_some_and(|b| lent_of(b).is_none()) {
                    // A region that cannot lend (not ours): copied in.
                    t.materialize();
                }
            }
            ts.iter()
                .map(|t| match (&t.body, t.body.as_ref().and_then(lent_of)) {
                    (Some(b), Some(bytes)) => b.bytes(bytes),
                    _ => &[],
                })
                .collect()
        };
        let body = |k: usize| body_of(&bodies, k);
        let socks = self.sockets.read().unwrap_or_else(|e| e.into_inner());
        for (i, (addr, sock)) in socks.iter().enumerate() {
            if addr.is_multicast() {
                continue;
            }
            // Datagrams from this socket's address (or, from the first socket of the
            // family, those from an address no socket has, as `send_raw` does).
            let first_of_family = socks
                .iter()
                .position(|(a, _)| a.is_ipv6() == addr.is_ipv6() && !a.is_multicast())
                == Some(i);
            let mine = |t: &Transmit| {
                plain(t)
                    && (t.src == *addr
                        || (first_of_family
                            && t.dst.is_ipv6() == addr.is_ipv6()
                            && !socks.iter().any(|(a, _)| *a == t.src)))
            };
            plan.mine.clear();
            plan.mine.extend(
                ts.iter()
                    .enumerate()
                    .filter(|(_, t)| mine(t))
                    .map(|(k, _)| k),
            );
            // With trains, an ACK followed by a request to the same peer that is at
            // least as long (a ping-pong's deferred ACK and its reply) swaps places
            // with it, so the ACK rides as the last segment of the request's buffer:
            // one skb, one wake-up of the peer, not two. The receiver handles an ACK
            // that follows requests before them (`ingest_batch`), restoring the order;
            // should a swapped ACK not join its request's buffer, the batch goes
            // unswapped. Only behind a request: a response (READ RESPONSE, ATOMIC
            // ACKNOWLEDGE) is in the ACK's own stream, in the responder's PSN order,
            // which neither side may change (an ACK seen ahead of a READ's response
            // is an implied NAK, IBTA 9.7.5.1.3).
            if !Shared::trains(self.gso, ts, plan, self.swap_acks) {
                Shared::trains(self.gso, ts, plan, false);
            }
            // Runs of messages to one peer leave through its connected socket; when
            // it has none, through this socket.
            let TxPlan {
                order,
                msgs,
                scratch,
                ..
            } = plan;
            let mut at = 0;
            while at < msgs.len() {
                // (A message's packets share their destination and meta, `trains`.)
                let key = |m: &sys::Outgoing| (m.dst, Meta::of(&ts[order[m.first]]));
                let (dst, meta) = key(&msgs[at]);
                let end = at
                    + msgs[at..]
                        .iter()
                        .take_while(|m| key(m) == (dst, meta))
                        .count();
                let run = &msgs[at..end];
                let ip_meta = IpMeta {
                    hop_limit: meta.hop_limit,
                    traffic_class: meta.traffic_class,
                    flow_label: 0,
                };
                let path = Path {
                    local: *addr,
                    peer: dst.ip(),
                    meta,
                };
                // What the connected socket did not send (none, or the messages
                // from a refused one on) leaves through this socket.
                let (port, done) = conn
                    .send(path, run, order, ts, &bodies, scratch)
                    .unwrap_or((ROCE_PORT, 0));
                let rest = &run[done..];
                if !rest.is_empty() {
                    if self.fills_icrc {
                        for k in packets(rest, order) {
                            conn.fill_unconnected(&mut ts[k], body(k));
                        }
                    }
                    if meta.is_default() {
                        let parts = |k: usize| ts[order[k]].parts(body(order[k]));
                        sys::send_batch(&**sock, rest, &parts, scratch, true);
                    } else {
                        // One by one, each with its TTL / TOS control messages. A
                        // send error is a lost packet, as in `send_raw`. In the
                        // engine's order (`mine`'s, ascending), not the trains': an
                        // ACK swapped behind its request (`trains`) arrives as a
                        // datagram of its own, which the receiver handles as it comes;
                        // only inside a train does it go first (`TrainOrder`).
                        let mut ks: Vec<usize> = packets(rest, order).collect();
                        ks.sort_unstable();
                        for k in ks {
                            let bytes = whole(&ts[k], body(k));
                            let _ = sys::send_with_meta(sock, &bytes, dst, ip_meta);
                        }
                    }
                }
                if self.pcap.is_some() {
                    // As sent: from this socket's address and the port it left from.
                    for (j, m) in run.iter().enumerate() {
                        let port = if j < done { port } else { ROCE_PORT };
                        for k in packets(std::slice::from_ref(m), order) {
                            let bytes = whole(&ts[k], body(k));
                            self.record(*addr, ts[k].dst, port, ip_meta, &bytes);
                        }
                    }
                }
                at = end;
            }
        }
    }

    /// Groups one socket's datagrams (`plan.mine`) into `UDP_SEGMENT` trains when
    /// `gso` (loopback device only, see `Shared::gso`) in `plan.msgs` / `plan.order`,
    /// swapping an ACK behind the request (never a response) that follows it when
    /// `swap` (see `send_all`). False when a swapped ACK did not join that request's
    /// train.
    fn trains(gso: bool, ts: &[Transmit], plan: &mut TxPlan, swap: bool) -> bool {
        let is_ack = |t: &Transmit| t.payload.first() == Some(&Opcode::RC_ACKNOWLEDGE.0);
        let is_req = |t: &Transmit| t.payload.first().is_some_and(|&o| is_request(o));
        let TxPlan {
            mine, order, msgs, ..
        } = plan;
        order.clear();
        msgs.clear();
        let mut i = 0;
        while i < mine.len() {
            let t = &ts[mine[i]];
            let pair = if swap && is_ack(t) {
                mine.get(i + 1).copied().filter(|&u| {
                    let u = &ts[u];
                    u.dst == t.dst && Meta::of(u) == Meta::of(t) && is_req(u) && u.len() >= t.len()
                })
            } else {
                None
            };
            let group = match pair {
                Some(u) => {
                    i += 2;
                    [u, mine[i - 2]]
                }
                None => {
                    i += 1;
                    [mine[i - 1], usize::MAX]
                }
            };
            for (k, &at) in group.iter().enumerate() {
                if at == usize::MAX {
                    break;
                }
                let t = &ts[at];
                let dst = SocketAddr::new(t.dst, ROCE_PORT);
                let len = t.len();
                order.push(at);
                if let Some(last) = msgs.last_mut() {
                    let seg = last.first_len;
                    if gso
                        && last.dst == dst
                        && Meta::of(&ts[order[last.first]]) == Meta::of(t)
                        && last.last_len == seg
                        && len <= seg
                        && last.count < GSO_MAX_SEGMENTS
                        && last.bytes + len <= GSO_MAX_BYTES
                        && seg <= usize::from(u16::MAX)
                    {
                        last.count += 1;
                        last.last_len = len;
                        last.bytes += len;
                        last.segment = seg as u16;
                        continue;
                    }
                }
                if k == 1 {
                    // The swapped ACK would travel alone, after its request.
                    return false;
                }
                msgs.push(sys::Outgoing {
                    dst,
                    first: order.len() - 1,
                    count: 1,
                    segment: 0,
                    first_len: len,
                    last_len: len,
                    bytes: len,
                });
            }
        }
        true
    }

    fn record(&self, src: IpAddr, dst: IpAddr, src_port: u16, meta: IpMeta, bytes: &[u8]) {
        if let Some(p) = &self.pcap {
            p.lock().unwrap_or_else(|e| e.into_inner()).write(
                src,
                dst,
                (src_port, ROCE_PORT),
                meta,
                bytes,
            );
        }
    }

    /// Writes one raw-path frame to the `RVERBS_PCAP` capture.
    pub(crate) fn record_frame(&self, frame: &[u8]) {
        if let Some(p) = &self.pcap {
            p.lock()
                .unwrap_or_else(|e| e.into_inner())
                .write_frame(frame);
        }
    }

    fn send_raw(&self, src: IpAddr, dst: IpAddr, meta: IpMeta, bytes: &[u8]) {
        if let Some(sh) = self.same_host.as_ref().filter(|_| !dst.is_multicast()) {
            if let Some(mut h) = sh.writer_for(dst, self.now()) {
                self.carry(&mut h, src, dst, meta, bytes);
                return;
            }
        }
        let socks = self.sockets.read().unwrap_or_else(|e| e.into_inner());
        let Some((_, sock)) = socks.iter().find(|(a, _)| *a == src).or_else(|| {
            socks
                .iter()
                .find(|(a, _)| a.is_ipv6() == dst.is_ipv6() && !a.is_multicast())
        }) else {
            return;
        };
        // The socket sends from port 4791 with the AV's TTL / hop limit and TOS /
        // traffic class (a hop limit of 0 means the socket default: 64, or 1 to a
        // multicast group).
        let wire = IpMeta {
            hop_limit: match meta.hop_limit {
                0 if dst.is_multicast() => 1,
                0 => 64,
                h => h,
            },
            flow_label: 0,
            ..meta
        };
        self.record(src, dst, ROCE_PORT, wire, bytes);
        // A send error (no route, buffer full) is a lost packet: the transport's
        // retransmission covers it, as on a real link.
        let to = crate::mcast::scoped(SocketAddr::new(dst, ROCE_PORT), self.info.ifindex);
        let _ = sys::send_with_meta(sock, bytes, to, meta);
    }

    /// Sends held (delayed) datagrams that are due; returns when the next one is.
    fn send_due(&self, now: Nanos) -> Option<Nanos> {
        let faults = self.faults.as_ref()?;
        loop {
            let mut f = faults.lock().unwrap_or_else(|e| e.into_inner());
            match f.due(now) {
                Some(crate::faults::Held::Datagram(src, dst, m, bytes)) => {
                    drop(f);
                    let meta = IpMeta {
                        hop_limit: m.0,
                        traffic_class: m.1,
                        flow_label: m.2,
                    };
                    self.send_raw(src, dst, meta, &bytes);
                }
                Some(crate::faults::Held::Frame(frame)) => {
                    drop(f);
                    if let Some(net) = self.net() {
                        self.net_wire(net, &frame);
                    }
                }
                None => return f.next_due(),
            }
        }
    }

    /// Feeds up to `budget` datagrams waiting on the sockets to the engine (the caller
    /// holds the engine lock, so datagrams reach it in socket order whichever thread
    /// receives) and sends what it answers. Returns how many were received.
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
        // A thread asleep in `sleep_receive` holds the buffers: it feeds what it gets
        // to the engine as soon as it has the engine lock, and datagrams behind it
        // must wait for that (socket order).
        let mut rx = match self.rx.try_lock() {
            Ok(rx) => rx,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return 0,
        };
        let RxBatch {
            buf,
            got: list,
            hdrs,
            steer,
            wake_batch,
            after_wake,
            poll,
            socks,
            socks_gen,
            links,
            links_gen,
        } = &mut *rx;
        // The generation first, then the list: a change made after the load is
        // seen next time at the latest.
        let gen = self.sockets_gen.load(Ordering::Acquire);
        if gen != *socks_gen {
            *socks = Arc::clone(&self.sockets.read().unwrap_or_else(|e| e.into_inner()));
            *socks_gen = gen;
        }
        let socks = &**socks;
        let buf = &mut buf[..];
        let mut got = 0;
        let skip_sockets = self.skip_sockets_once.load(Ordering::Relaxed)
            && self.skip_sockets_once.swap(false, Ordering::Relaxed);
        // Datagrams queued right after a one-buffer sleeping receive: a stream, whose
        // wake-ups should take a whole batch.
        let check_stream = std::mem::take(after_wake);
        poll.resize(socks.len(), PollBatch::default());
        for ((local, sock), pb) in socks.iter().zip(poll.iter_mut()) {
            while got < budget && !skip_sockets {
                let Some(n) = pb.recv(sock, buf, list, hdrs) else {
                    break;
                };
                got += n;
                if check_stream && n > 0 {
                    *wake_batch = RX_BATCH;
                }
                self.ingest_batch(engine, now, *local, list, buf, steer);
                if n < RX_BATCH {
                    if defer && n > 0 {
                        self.defer_answers(now);
                    } else {
                        self.flush(engine, now);
                    }
                    break;
                }
                // One flush per batch: the responder's ACKs for the whole batch
                // coalesce into one (cumulative, `queue_ack`).
                self.flush(engine, now);
            }
        }
        if let Some(sh) = &self.same_host {
            let gen = sh.inbound_gen();
            if gen != *links_gen {
                (*links, *links_gen) = sh.inbound();
            }
            // The rings have a budget of their own: a flood on the sockets must not
            // leave them unread (nor they the sockets, which come first).
            let mut from_rings = 0;
            for link in links.iter() {
                if from_rings >= budget {
                    break;
                }
                let closed = link.closed.load(Ordering::Acquire);
                // (Each ring a share, so one busy ring does not starve the others.)
                let share = (budget / links.len()).max(RX_BATCH);
                let r = link
                    .reader
                    .drain(share.min(budget - from_rings), buf, |m, bytes| {
                        self.ingest_from(
                            engine, now, m.src, m.src_port, link.local, m.ip, bytes, steer,
                        )
                    });
                let n = match r {
                    Ok(n) => n,
                    Err(_) => {
                        sh.remove(link, true);
                        continue;
                    }
                };
                sh.count_rx(n);
                from_rings += n;
                got += n;
                if n > 0 {
                    // As for a socket's batch (above).
                    if defer && n < RX_BATCH {
                        self.defer_answers(now);
                    } else {
                        self.flush(engine, now);
                    }
                }
                if closed && !link.reader.pending() {
                    sh.remove(link, false);
                }
            }
        }
        got
    }

    /// Sleeps in `poll(2)` on `fds` and on the doorbells of the same-host carrier's
    /// inbound rings (marked asleep meanwhile: `same_host.rs`), for at most `ms` —
    /// not at all when records already wait. `ready` says which of `fds` are.
    pub(crate) fn poll_wait(
        &self,
        fds: &[i32],
        ms: i32,
        ready: &mut Vec<bool>,
    ) -> std::io::Result<()> {
        let Some(sh) = &self.same_host else {
            return sys::poll_readable(fds, ms, ready);
        };
        let links = sh.inbound().0;
        if links.is_empty() {
            return sys::poll_readable(fds, ms, ready);
        }
        let ms = if sh.arm(&links) { 0 } else { ms };
        let mut all = Vec::with_capacity(fds.len() + 1);
        all.extend_from_slice(fds);
        all.push(sh.bell_fd());
        let r = sys::poll_readable(&all, ms, ready);
        let rung = ready.get(fds.len()).copied().unwrap_or(false);
        sh.disarm(&links, rung);
        ready.truncate(fds.len());
        // None of `fds` was readable (the doorbell, records already waiting, or the
        // time woke us): the next receive need not ask the sockets (one system call
        // less on the wake-up's path; a datagram that came since is taken by the
        // receive after).
        if r.is_ok() && !ready.contains(&true) {
            self.skip_sockets_once.store(true, Ordering::Relaxed);
        }
        r
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
            if planned > now + crate::progress::STANDOFF_NS {
                self.wake();
            }
        }
    }

    /// Feeds one `recv_batch` worth of buffers to the engine, cutting coalesced
    /// (`UDP_GRO`) trains back into their datagrams. (Kept out of line, once per
    /// batch: `bench/hop_cost.sh` counts a round trip's receive work here.)
    #[inline(never)]
    fn ingest_batch(
        &self,
        engine: &mut Engine,
        now: Nanos,
        local: IpAddr,
        list: &[sys::Received],
        buf: &mut [u8],
        steer: &mut (Vec<u8>, rverbs_flow::classify::Verdict),
    ) {
        for r in list {
            let mut order = TrainOrder::new(r.offset, r.len, r.segment);
            while let Some(d) = order.next(buf) {
                self.ingest(engine, now, local, *r, &mut buf[d], steer);
            }
        }
    }

    /// Sleeps in `recvmmsg` on the device's socket until a datagram arrives or the
    /// socket's receive timeout ([`crate::progress::SLEEP_RECV_NS`]) passes, then feeds
    /// what came to the engine (answers deferred, as [`Shared::progress`] does): one
    /// system call per wake-up instead of `poll` and `recvmmsg`. Called without the
    /// engine lock. Returns `None`, having done nothing, when it does not apply (a
    /// device with several sockets, or another thread already receiving): the caller
    /// then sleeps in `poll(2)`.
    pub(crate) fn sleep_receive(&self) -> Option<usize> {
        // Same-host rings wake their sleepers through `poll_wait`.
        if self.same_host.as_ref().is_some_and(|s| s.has_inbound()) {
            return None;
        }
        let (local, sock) = {
            let socks = self.sockets.read().unwrap_or_else(|e| e.into_inner());
            match socks.as_slice() {
                [(a, s)] if !a.is_multicast() => (*a, s.clone()),
                _ => return None,
            }
        };
        // Holding the buffers while asleep keeps other receivers (which only try the
        // lock) off the socket, so what this thread gets reaches the engine first:
        // lock order rx -> engine here, and never engine -> waiting for rx.
        let mut rx = self.rx.try_lock().ok()?;
        let RxBatch {
            buf,
            got: list,
            hdrs,
            steer,
            wake_batch,
            after_wake,
            ..
        } = &mut *rx;
        list.clear();
        // While datagrams come one per wake-up (a ping-pong), ask for one buffer: with
        // more, `MSG_WAITFORONE` makes the kernel try for a second (another pass
        // through recvmsg, 0.2-0.4 µs here) before it returns, on the critical path of
        // every round trip. When a whole batch was asked for and one came, go back to
        // one; when datagrams were queued behind a one-buffer wake-up (the next
        // `receive` sees them), take batches again: streams keep their one system call
        // per batch.
        let want = (*wake_batch).clamp(1, RX_BATCH);
        let n = sys::recv_batch_wait(&*sock, &mut buf[..want * RX_SLOT], RX_SLOT, list, hdrs)
            .unwrap_or(0);
        if n == 0 {
            return Some(0);
        }
        if n == 1 {
            *wake_batch = 1;
            *after_wake = true;
        }
        let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.now();
        self.app_poll_at.store(now.max(1), Ordering::Relaxed);
        self.ingest_batch(&mut engine, now, local, list, &mut buf[..], steer);
        if n < RX_BATCH {
            // Deferred like `receive(.., defer)`, with the same bound: the driver may
            // be asleep in poll(2) for up to a second (not in its stand-off: this
            // thread took the datagram that would have woken it), so it is woken when
            // it would not look soon.
            self.defer_answers(now);
        } else {
            self.flush(&mut engine, now);
        }
        self.activity.fetch_add(1, Ordering::Release);
        self.dispatch(&mut engine);
        Some(n)
    }

    /// One received datagram: capture, fault injection, the engine.
    fn ingest(
        &self,
        engine: &mut Engine,
        now: Nanos,
        local: IpAddr,
        r: sys::Received,
        bytes: &mut [u8],
        steer: &mut (Vec<u8>, rverbs_flow::classify::Verdict),
    ) {
        let dst = r.meta.dst.unwrap_or(local);
        self.ingest_from(
            engine,
            now,
            r.from.ip(),
            r.from.port(),
            dst,
            r.meta.ip(),
            bytes,
            steer,
        );
    }

    /// One received datagram (from a socket or a same-host ring): capture, fault
    /// injection, the engine.
    #[allow(clippy::too_many_arguments)]
    fn ingest_from(
        &self,
        engine: &mut Engine,
        now: Nanos,
        src: IpAddr,
        src_port: u16,
        dst: IpAddr,
        ip: IpMeta,
        bytes: &mut [u8],
        steer: &mut (Vec<u8>, rverbs_flow::classify::Verdict),
    ) {
        self.record(src, dst, src_port, ip, bytes);
        let copies = match &self.faults {
            Some(f) => {
                f.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .judge(bytes, false)
                    .copies
            }
            None => 1,
        };
        for _ in 0..copies {
            let d = Datagram {
                src,
                dst,
                src_port,
                hop_limit: ip.hop_limit,
                traffic_class: ip.traffic_class,
                flow_label: ip.flow_label,
                ipv4_id: None,
                roce_v1: false,
                icrc_checked: false,
                payload: bytes,
            };
            // Through the UD flow-steering classifier (`ud_steer.rs`), then the engine.
            self.handle_datagram(engine, now, &d, steer);
        }
    }

    /// Whether the context has a socket for address or group `a`.
    pub(crate) fn has_socket(&self, a: IpAddr) -> bool {
        self.sockets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(b, _)| *b == a)
    }

    /// The addresses and groups the context has sockets for.
    pub(crate) fn socket_addrs(&self) -> Vec<IpAddr> {
        self.sockets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(a, _)| *a)
            .collect()
    }

    /// Silences a new UDP socket of a raw-mode context for what the raw device
    /// receives (`rawnet.rs`).
    pub(crate) fn quiet_socket(&self, s: &Socket) -> std::io::Result<()> {
        if self.raw_v2() {
            sys::drop_from_interface(s, self.info.ifindex)?;
        }
        Ok(())
    }

    /// The sockets' descriptors.
    pub(crate) fn socket_fds(&self) -> Vec<i32> {
        self.sockets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, s)| s.as_raw_fd())
            .collect()
    }

    /// The device's sockets, for changing them (write lock).
    pub(crate) fn sockets(&self) -> SocketsMut<'_> {
        SocketsMut(
            self.sockets.write().unwrap_or_else(|e| e.into_inner()),
            self,
        )
    }

    /// Counts a user of the received datagrams' TTL / TOS / flow label in (`add`) or
    /// out, and turns the unicast sockets' control messages for them on while there
    /// is one (or a capture). Without users those fields read as 0, which only UD
    /// receives (their GRH) and MADs show; RC and UC never do, and the ICRC masks
    /// them. Datagrams already queued when they are turned on arrive without them.
    pub(crate) fn recv_meta_user(&self, add: bool) {
        // Under the sockets' write lock, so the address re-scan adds a socket either
        // before (and is switched here) or after (and reads the new state).
        let socks = self.sockets();
        let n = if add {
            self.recv_meta_users.fetch_add(1, Ordering::AcqRel) + 1
        } else {
            self.recv_meta_users
                .fetch_sub(1, Ordering::AcqRel)
                .saturating_sub(1)
        };
        self.apply_recv_meta(&socks, n > 0 || self.pcap.is_some());
    }

    fn apply_recv_meta(&self, socks: &SocketList, on: bool) {
        if self.recv_meta_on.swap(on, Ordering::AcqRel) == on {
            return;
        }
        for (a, s) in socks.iter() {
            // Multicast sockets exist only for UD QPs and always ask (`mcast.rs`).
            if !a.is_multicast() {
                let _ = sys::set_recv_meta(s, a.is_ipv6(), on);
            }
        }
    }

    /// Tells the driver thread to re-read the engine's deadline.
    pub(crate) fn wake(&self) {
        sys::eventfd_signal(&self.wake);
    }
}

/// The device's socket list under its write lock ([`Shared::sockets`]): changing it
/// copies it first if a receiver still holds a snapshot.
pub(crate) struct SocketsMut<'a>(std::sync::RwLockWriteGuard<'a, Arc<SocketList>>, &'a Shared);

impl Drop for SocketsMut<'_> {
    /// Marks `receive`'s snapshot stale (still under the write lock), and replaces it
    /// at once unless a receive is running (it then refreshes it next time): a
    /// removed socket does not stay open in it.
    fn drop(&mut self) {
        let shared = self.1;
        shared.sockets_gen.fetch_add(1, Ordering::AcqRel);
        // (try_lock: the lock order is rx -> sockets in `receive`.)
        if let Ok(mut rx) = shared.rx.try_lock() {
            rx.socks = Arc::clone(&self.0);
            rx.socks_gen = shared.sockets_gen.load(Ordering::Acquire);
        }
    }
}

impl std::ops::Deref for SocketsMut<'_> {
    type Target = SocketList;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for SocketsMut<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        Arc::make_mut(&mut self.0)
    }
}

/// Counts of a raw-mode context's RoCE v1 path ([`Context::roce_v1_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoceV1Stats {
    /// EtherType 0x8915 frames received.
    pub rx_frames: u64,
    /// Of those, dropped as malformed (GRH, BTH or lengths).
    pub rx_malformed: u64,
    /// Of those, dropped for a wrong ICRC.
    pub rx_icrc_errors: u64,
    /// RoCE v1 frames sent.
    pub tx_frames: u64,
    /// Frames not sent because the destination GID's neighbour was not found: ARP /
    /// Neighbor Discovery went unanswered (or the frame could not be built, or its
    /// neighbour's queue overflowed); the transport's retransmission retries them.
    pub tx_no_neighbour: u64,
}

/// Options for [`Context::open_with`].
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Faults to inject into the device's traffic (default: none, or `RVERBS_FAULTS`
    /// with [`Context::open`]).
    pub faults: Option<Faults>,
    /// Write every datagram sent and received to this pcap file (default: none, or
    /// `RVERBS_PCAP` with [`Context::open`]).
    pub pcap: Option<std::path::PathBuf>,
    /// Raw mode: bind the context to this Ethernet interface (in the calling thread's
    /// network namespace) for RAW_PACKET QPs and flow steering ([`crate::Qp::create_flow`]),
    /// as on a NIC. With CAP_NET_RAW the context opens an `AF_PACKET` socket on the
    /// interface at once (an unknown interface fails the open), speaks RoCE v1 through
    /// it, and — when it is the device's own interface — RoCE v2 too, with its own
    /// Ethernet/IP/UDP headers, exact ICRC checks and ARP / Neighbor Discovery
    /// ([`Context::raw_net_stats`]; the README's "RoCE v2 on the raw device"). Without
    /// the capability the context opens with RoCE v2 on its UDP sockets, and creating a
    /// RAW_PACKET QP or a flow fails with EPERM, as in the kernel. Default: none (or
    /// `RVERBS_RAW_IF` with [`Context::open`]).
    pub raw_interface: Option<String>,
    /// When the context's RC requesters ask for ACKs (BTH AckReq): coalesced, the
    /// default, or on every message as kernel rxe does (see
    /// [`AckPolicy`]). Default: [`AckPolicy::Coalesce`] (or
    /// `RVERBS_ACK_POLICY=coalesce|every-message` with [`Context::open`]).
    pub ack_policy: AckPolicy,
    /// Whether a multi-packet RC WRITE without immediate leaves as WRITE ONLY pieces,
    /// each with its own RETH (`rverbs_engine::Config::write_pieces`; the README's
    /// "WRITEs as WRITE ONLY pieces over loopback"). `None`, the default: the device
    /// decides (on for the loopback device when it sends `UDP_SEGMENT` trains, off
    /// elsewhere); `Some` forces it (or `RVERBS_WRITE_PIECES=1|0` with
    /// [`Context::open`]).
    pub write_pieces: Option<bool>,
    /// Whether datagrams to other rverbs contexts of this host (and network
    /// namespace) travel through shared memory instead of the kernel's UDP path (the
    /// README's "Same-host carrier"; [`Context::same_host_stats`]). `None`, the
    /// default: `RVERBS_SAME_HOST` (on when unset; `0` turns it off). Never in raw
    /// mode.
    pub same_host: Option<bool>,
}

/// `RVERBS_SAME_HOST`: `1` (or unset/empty) or `0`.
fn same_host_from_env() -> Result<bool> {
    match std::env::var("RVERBS_SAME_HOST").as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(other) => Err(bad_env("reading RVERBS_SAME_HOST", other, "\"1\" or \"0\"")),
    }
}

/// `RVERBS_ACK_POLICY`: `coalesce` (or unset/empty) or `every-message`.
fn ack_policy_from_env() -> Result<AckPolicy> {
    match std::env::var("RVERBS_ACK_POLICY").as_deref() {
        Err(_) | Ok("") | Ok("coalesce") => Ok(AckPolicy::Coalesce),
        Ok("every-message") => Ok(AckPolicy::EveryMessage),
        Ok(other) => Err(bad_env(
            "reading RVERBS_ACK_POLICY",
            other,
            "\"coalesce\" or \"every-message\"",
        )),
    }
}

/// The error of an environment variable set to `value`, which is not one of `expected`
/// (`what`: "reading" and the variable's name).
fn bad_env(what: &'static str, value: &str, expected: &str) -> Error {
    Error::io(
        what,
        std::io::Error::other(format!("{value:?}: expected {expected}")),
    )
}

/// `RVERBS_WRITE_PIECES`: `1` or `0` forces WRITE pieces on or off; unset or empty
/// leaves the device's default (`None`).
fn write_pieces_from_env() -> Result<Option<bool>> {
    match std::env::var("RVERBS_WRITE_PIECES").as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("1") => Ok(Some(true)),
        Ok("0") => Ok(Some(false)),
        Ok(other) => Err(bad_env(
            "reading RVERBS_WRITE_PIECES",
            other,
            "\"1\" or \"0\"",
        )),
    }
}

/// `RVERBS_PCAP` for the n-th context a process opens: the path itself for the first,
/// then `name.2.pcap`, `name.3.pcap`, ... so contexts never share a file.
fn pcap_path_from_env() -> Option<std::path::PathBuf> {
    static OPENED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let base = std::path::PathBuf::from(std::env::var_os("RVERBS_PCAP")?);
    let n = OPENED.fetch_add(1, Ordering::SeqCst) + 1;
    if n == 1 {
        return Some(base);
    }
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = base
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pcap".into());
    Some(base.with_file_name(format!("{stem}.{n}.{ext}")))
}

/// Owns the driver thread; the last handle to go stops it.
pub(crate) struct ContextInner {
    pub(crate) shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Deferred answers leave before the sockets close (not from inside
        // `Mr::with`, where the engine lock may not be taken).
        if crate::verbs::check_not_in_with("close").is_ok() {
            self.shared.flush_deferred(&mut self.shared.lock());
        }
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.wake();
        // Inside `Mr::with` the driver may be waiting for that region: let it finish
        // on its own (it holds the shared state) instead of waiting for it here.
        if crate::verbs::check_not_in_with("close").is_err() {
            return;
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// An open soft RoCE v2 device (`struct ibv_context`). Cheap to clone; the device
/// closes when the context and every object made from it are dropped.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// for dev in rverbs::devices()? {
///     println!("{} on {}", dev.name, dev.ifname);
/// }
/// let ctx = rverbs::device(Some("rv_lo"))?.open()?;
/// let attr = ctx.query_device()?;
/// let port = ctx.query_port(1)?;
/// println!("max_qp {} active_mtu {:?} gids {:?}", attr.max_qp, port.active_mtu, ctx.gids());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

fn udp_socket(addr: IpAddr) -> std::io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
        sys::set_udp_no_check6_rx(&s)?;
    } else {
        sys::set_pmtudisc_do(&s)?;
    }
    let _ = s.set_recv_buffer_size(4 << 20);
    // Batched senders (sendmmsg, UDP_SEGMENT trains) can outrun a receiver that is
    // not scheduled for a moment: a long READ response is thousands of packets at
    // once. Room for 256 MiB (allocated only as used) when the process may raise the
    // limit.
    let _ = sys::force_recv_buffer(&s, 256 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&SockAddr::from(SocketAddr::new(addr, ROCE_PORT)))?;
    // Blocking, with a receive timeout: every call passes MSG_DONTWAIT except the
    // sleeping receive of `Shared::sleep_receive`, which the timeout bounds.
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(std::time::Duration::from_nanos(
        crate::progress::SLEEP_RECV_NS,
    )))?;
    // Bound to one address, so the destination is known without IP_PKTINFO. The
    // TTL / TOS control messages are asked for only while something reads them
    // (`Shared::recv_meta_user`).
    Ok(s)
}

/// The RC requester's window (`Config::max_unacked_psns`) for a device with these
/// sockets, from the smallest receive buffer (ours stands in for the peer's: over
/// loopback the peer is this machine, with this machine's limit, `net.core.rmem_max`
/// unless root forced it; this is for the loopback device only):
/// - up to 512 PSNs when it holds 16 windows of 4 KiB packets: with rxe's 128 (eight
///   64 KiB messages), a stream stalls whenever an ACK is late; 512 lets it run
///   further ahead (measured: 3% more 64 KiB bandwidth, the 64-byte message rate with
///   a post list 1.5 → 2.2 M msg/s);
/// - rxe's 128 down to a window in three quarters of the buffer: an unprivileged
///   process on a machine with the default `net.core.rmem_max` (208 KiB) gets
///   416 KiB, where a 128-PSN burst of 4 KiB packets overflowed it and went back N
///   (7,000–34,000 packets resent in three seconds of 64 KiB SENDs or WRITEs); 78 PSNs
///   fit (none resent, the bandwidth of 128 without the resends: 27.2 / 24.5 Gb/s
///   SEND / WRITE; half the buffer, 52 PSNs, 23.5 / 22.4). READs are then asked for
///   in pieces of a window (`Config::read_piece_psns`): a 1 MiB READ's 256 responses
///   as one burst overflowed the buffer every time.
///
/// Returns the window and the READ piece (0: whole READs).
fn window_for(sockets: &[(IpAddr, Socket)], cap: Option<usize>) -> (u32, u32) {
    // (No size known: rxe's window and whole READs.)
    sockets
        .iter()
        .filter_map(|(_, s)| s.recv_buffer_size().ok())
        .min()
        .map_or((rverbs_engine::MAX_UNACKED_PSNS, 0), |b| {
            window_for_bytes(
                b.min(cap.unwrap_or(usize::MAX)),
                rverbs_engine::MIN_UNACKED_PSNS,
            )
        })
}

/// The receive buffer (bytes) of the socket of GID `dgid` (port 4791) on this
/// machine's loopback, the peer of an RC QP there; `None` when the kernel shows no such
/// socket. See [`peer_window`].
pub(crate) fn peer_rcvbuf(dgid: rverbs_wire::grh::Gid) -> Option<usize> {
    let peer = SocketAddr::new(rverbs_engine::net::gid_to_ip(dgid), ROCE_PORT);
    sys::udp_rcvbuf_of(peer).map(|bytes| bytes as usize)
}

/// The RC requester's window for each of `sharers` QPs of this context connected to a
/// loopback peer whose socket has `rcvbuf` bytes of receive buffer ([`peer_rcvbuf`]):
/// the window [`window_for`] gives ours, of an equal share of that buffer, so that
/// their bursts together fit it as one QP's does. An unprivileged peer beside a root
/// process (416 KiB against 256 MiB of buffer under the default `net.core.rmem_max`)
/// took 512-PSN bursts and went back N all the time (28,000–44,000 packets resent in
/// 3 s of 64 KiB WRITEs or SENDs). One QP gets at least
/// [`rverbs_engine::MIN_UNACKED_PSNS`], as our own buffer's window; a share goes down
/// to [`rverbs_engine::MIN_QP_WINDOW`], so up to 19 QPs to a 416 KiB peer fit it
/// together (with the 16-PSN floor 8 already overflowed it).
pub(crate) fn peer_window(rcvbuf: usize, sharers: usize) -> u32 {
    let floor = if sharers > 1 {
        rverbs_engine::MIN_QP_WINDOW
    } else {
        rverbs_engine::MIN_UNACKED_PSNS
    };
    window_for_bytes(rcvbuf / sharers.max(1), floor).0
}

/// Sets the window of every RC QP of this context connected to the loopback peer
/// `dgid` for an equal share of its receive buffer of `rcvbuf` bytes
/// ([`peer_window`]); a share no tighter than the engine's own window gives the
/// engine's back. Called when a QP connects to the peer and when one leaves it.
pub(crate) fn share_peer_buffer(
    e: &mut Engine,
    dgid: rverbs_wire::grh::Gid,
    rcvbuf: usize,
) -> Result<()> {
    let (own, piece) = (e.config().max_unacked_psns, e.config().read_piece_psns);
    let sharers = e.rc_qps_to(dgid);
    let window = Some(peer_window(rcvbuf, sharers.len()))
        .filter(|&p| p < own)
        .map(|p| (p, piece));
    for q in sharers {
        e.set_qp_window(q, window)?;
    }
    Ok(())
}

/// The order in which the datagrams of one received buffer (a coalesced `UDP_GRO`
/// train, or one datagram) are handled: the train's order, but for an ACK right behind
/// a run of requests, which goes first: the peer may have swapped it behind the request
/// it queued after it (`Shared::trains`). Requests and responses are independent
/// streams (IBTA 9.7.5.1), so that is an order the peer could have sent. Never past a
/// response, though: READ RESPONSEs, ATOMIC ACKNOWLEDGEs, ACKs and NAKs are one stream
/// in the responder's PSN order, and an ACK handled before the READ RESPONSE of a lower
/// PSN reads as an implied NAK (IBTA 9.7.5.1.3): the READ is redone after a
/// retransmit timeout.
struct TrainOrder {
    /// The next datagram in the train's order, and the buffer's end.
    at: usize,
    end: usize,
    /// The datagrams' size (the last may be shorter; a lone datagram's own size).
    seg: usize,
    /// The end of the run of requests last looked through for an ACK behind it.
    scanned: usize,
    /// Where the ACK handled ahead of its run is (skipped when its turn comes).
    hoisted: Option<usize>,
}

impl TrainOrder {
    /// The buffer of `len` bytes at `offset`, a train of `segment`-byte datagrams
    /// (0: one datagram).
    fn new(offset: usize, len: usize, segment: usize) -> TrainOrder {
        TrainOrder {
            at: offset,
            end: offset + len,
            seg: if segment > 0 { segment } else { len.max(1) },
            scanned: offset,
            hoisted: None,
        }
    }

    /// Where the next datagram to handle is in `buf` (the receive buffer, which may
    /// change between calls only inside the datagrams already returned).
    fn next(&mut self, buf: &[u8]) -> Option<std::ops::Range<usize>> {
        let step = |k: usize| (k + self.seg).min(self.end);
        loop {
            let at = self.at;
            if at >= self.end {
                return None;
            }
            if self.hoisted == Some(at) {
                self.hoisted = None;
                self.at = step(at);
                continue;
            }
            if at >= self.scanned && is_request(buf[at]) {
                let mut k = step(at);
                while k < self.end && is_request(buf[k]) {
                    k = step(k);
                }
                self.scanned = k;
                if k < self.end && buf[k] == Opcode::RC_ACKNOWLEDGE.0 {
                    // The run's requests follow it (`at` again, not scanned twice).
                    self.hoisted = Some(k);
                    return Some(k..step(k));
                }
            }
            self.at = step(at);
            return Some(at..self.at);
        }
    }
}

/// Whether a packet with this BTH opcode is a request (SEND, WRITE, READ request,
/// atomics, ... of any transport; a MAD is a UD SEND). Responses (READ RESPONSE, ATOMIC
/// ACKNOWLEDGE, ACKNOWLEDGE), CNPs and opcodes rverbs does not know are not.
fn is_request(opcode: u8) -> bool {
    Opcode(opcode).info().is_some_and(|i| i.is_request)
}

/// [`window_for`] of a receive buffer of `smallest` bytes, a small buffer's window at
/// least `floor` PSNs.
fn window_for_bytes(smallest: usize, floor: u32) -> (u32, u32) {
    const MTU_BYTES: usize = 4096;
    let roomy = (smallest / 16 / MTU_BYTES) as u32;
    if roomy >= rverbs_engine::MAX_UNACKED_PSNS {
        (roomy.min(512), 0)
    } else {
        let w =
            ((smallest / 4 * 3 / MTU_BYTES) as u32).clamp(floor, rverbs_engine::MAX_UNACKED_PSNS);
        (w, w)
    }
}

/// Binds a free loopback address 127.0.0.x:4791 (x in 2..=254), so that any number of
/// processes on one machine each get their own RoCE address with no setup and no root.
fn loopback_socket() -> Result<(IpAddr, Socket)> {
    let start = (std::process::id() % 253) as u8;
    let mut last = None;
    for i in 0..253u8 {
        let x = 2 + (start.wrapping_add(i) % 253);
        let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, x));
        match udp_socket(addr) {
            // (`UDP_GRO` is set by `Context::open_with`, as on the IPv6 socket.)
            Ok(s) => return Ok((addr, s)),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::io(
        "binding a free 127.0.0.x:4791 (all 253 loopback addresses are taken)",
        last.unwrap_or_else(|| std::io::Error::other("no address")),
    ))
}

/// Binds the first IPv6 address of `addrs` (lo's) whose port 4791 is free: `::1` only
/// when `localhost` is set, after the others.
fn loopback_v6_socket(addrs: &[IpAddr], localhost: bool) -> Option<(IpAddr, Socket)> {
    let lo6 = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    addrs
        .iter()
        .filter(|a| a.is_ipv6() && **a != lo6)
        .chain(localhost.then_some(&lo6))
        .find_map(|&a| udp_socket(a).ok().map(|s| (a, s)))
}

impl Context {
    /// Opens a device: binds its UDP port 4791 and starts the driver thread.
    ///
    /// The loopback device binds a free `127.0.0.x` per context (any number of
    /// processes may open it); other devices bind each of their addresses, so only one
    /// process at a time can open them (port 4791 can be bound once per address).
    pub fn open(info: DeviceInfo) -> Result<Context> {
        let faults = Faults::from_env()
            .map_err(|e| Error::io("reading RVERBS_FAULTS", std::io::Error::other(e)))?;
        Context::open_with(
            info,
            &OpenOptions {
                faults,
                pcap: pcap_path_from_env(),
                raw_interface: std::env::var("RVERBS_RAW_IF")
                    .ok()
                    .filter(|s| !s.is_empty()),
                ack_policy: ack_policy_from_env()?,
                write_pieces: write_pieces_from_env()?,
                same_host: None,
            },
        )
    }

    /// Opens a device with explicit options (see [`OpenOptions`]); [`Context::open`]
    /// takes them from the environment.
    pub fn open_with(info: DeviceInfo, opts: &OpenOptions) -> Result<Context> {
        let mut sockets = Vec::new();
        // Every receiving socket takes UDP_SEGMENT trains whole (loopback device).
        let mut gro = false;
        if info.is_loopback() {
            gro = true;
            sockets.push(loopback_socket()?);
            // IPv6 has no 127/8. A context takes the first IPv6 address an
            // administrator added to lo whose port 4791 is free; `::1` only with
            // RVERBS_LOOPBACK_IPV6=1, as it is one address for the whole host: which
            // context got it would otherwise depend on timing (README, GIDs).
            let with_v6_localhost = std::env::var("RVERBS_LOOPBACK_IPV6").is_ok_and(|v| v == "1");
            if let Some(v6) = loopback_v6_socket(&info.addrs, with_v6_localhost) {
                sockets.push(v6);
            }
            // Trains sent with UDP_SEGMENT by loopback contexts (this one included)
            // arrive whole only at a socket with UDP_GRO: at any other the kernel
            // cuts them into their datagrams before queueing them
            // (`udp_unexpected_gso`, include/linux/udp.h; `udp_queue_rcv_skb`,
            // net/ipv4/udp.c; `udpv6_queue_rcv_skb`, net/ipv6/udp.c): slower, and an
            // ACK swapped behind its request (`send_all`) would be handled after it.
            // So on every socket that receives them, IPv6 included.
            for (_, s) in &sockets {
                gro &= sys::set_udp_gro(s).is_ok();
            }
        } else {
            for &a in &info.addrs {
                let s = udp_socket(a)
                    .map_err(|e| Error::io("binding the device's RoCE v2 port 4791", e))?;
                sockets.push((a, s));
            }
            if sockets.is_empty() {
                return Err(Error::NoDevice(format!("{} has no address", info.name)));
            }
        }
        let raw = match &opts.raw_interface {
            // RoCE v2 moves onto the raw device only when it is the device's own
            // interface (its addresses are the device's GIDs).
            Some(ifname) => Some(crate::raw::RawMode::open(
                ifname,
                !info.is_loopback() && *ifname == info.ifname,
            )?),
            None => None,
        };
        let raw_v2 = raw
            .as_ref()
            .and_then(|r| r.net.as_ref())
            .is_some_and(|n| n.v2);
        let raw_frames = raw.as_ref().is_some_and(|r| r.dev.is_some());
        if raw_v2 {
            for (_, s) in &sockets {
                sys::drop_from_interface(s, info.ifindex)
                    .map_err(|e| Error::io("filtering the UDP sockets of raw mode", e))?;
            }
        }
        let bound: Vec<IpAddr> = sockets.iter().map(|(a, _)| *a).collect();
        // A raw-mode device that can send frames has RoCE v1 entries beside the v2 ones.
        let roce_v1 = raw.as_ref().is_some_and(|r| r.v1.is_some());
        let gid_table = GidTable::with_types(1, info.ifindex, info.default_gid(), &bound, roce_v1);
        let seed = seed();
        // Over loopback the peer is this machine, with this machine's buffers;
        // elsewhere, rxe's window and whole READs (a remote peer's buffers are
        // unknown; rxe and adapters take READ bursts in their rings).
        let same_host = match opts.same_host {
            Some(on) => on,
            None => same_host_from_env()?,
        } && raw.is_none();
        // With the same-host carrier, what a loopback peer sends us (READ responses
        // above all) waits in our inbound ring, not in the socket's buffer.
        let (window, read_piece) = if info.is_loopback() {
            window_for(&sockets, same_host.then_some(crate::same_host::RING_ROOM))
        } else {
            (rverbs_engine::MAX_UNACKED_PSNS, 0)
        };
        let gso = info.is_loopback() && std::env::var_os("RVERBS_NO_GSO").is_none();
        let mut cfg = Config {
            gids: gid_table.engine_gids(),
            gid_roce_v1: gid_table.engine_gid_roce_v1(),
            seed,
            // QPNs start at a random point so a restarted process does not reuse the
            // numbers its peers may still be retransmitting to.
            first_qpn: 0x11 + (seed >> 40) as u32 % 0xf0_0000,
            // The engine fills ICRCs for the device socket's port 4791; batched sends
            // through a peer's connected socket rewrite them for its own port
            // (`conn_tx.rs`). Raw-mode frames leave from the QP's entropy port, as rxe
            // does.
            src_port: if raw_v2 { None } else { Some(ROCE_PORT) },
            sender_fills_icrc: !raw_v2,
            // Large payloads leave from their memory region (`send_all`).
            lend_payloads: !raw_v2,
            max_unacked_psns: window,
            read_piece_psns: read_piece,
            // Sends go as UDP_SEGMENT trains over loopback (`gso`): a multi-packet
            // WRITE as equal-sized WRITE ONLY pieces rides one train, where its longer
            // FIRST would start one of its own (64 KiB WRITEs: 1.13-1.29x the
            // bandwidth in alternating `rverbs perf write bw -s 65536 -t 128` runs).
            // `OpenOptions::write_pieces` (`RVERBS_WRITE_PIECES=1` / `=0`) forces it on
            // or off (on: to check a remote responder with them, as
            // `interop/perftest.sh` does with rxe).
            write_pieces: opts.write_pieces.unwrap_or(gso),
            // Go-back-N after a loss resends within half what was outstanding (the
            // engine's `Config::loss_window`): host paths are bandwidth-bound.
            loss_window: true,
            ack_policy: opts.ack_policy,
            ..Config::default()
        };
        cfg.limits.active_mtu = info.active_mtu();
        let mut engine = Engine::new(cfg);
        crate::mad::set_identity(&mut engine, &info);
        let wake = sys::eventfd().map_err(|e| Error::io("creating the driver's eventfd", e))?;
        let same_host = if same_host {
            Some(
                crate::same_host::SameHost::start(&bound, &wake)
                    .map_err(|e| Error::io("starting the same-host carrier", e))?,
            )
        } else {
            None
        };
        let shared = Arc::new(Shared {
            engine: Mutex::new(engine),
            hub: crate::channel::EventHub::new()?,
            sockets: RwLock::new(Arc::new(
                sockets.into_iter().map(|(a, s)| (a, Arc::new(s))).collect(),
            )),
            sockets_gen: std::sync::atomic::AtomicU64::new(0),
            sockets_changed: AtomicBool::new(false),
            recv_meta_users: std::sync::atomic::AtomicUsize::new(0),
            recv_meta_on: AtomicBool::new(false),
            gid_table: Mutex::new(gid_table),
            rx: Mutex::new(RxBatch {
                buf: vec![0u8; RX_SLOT * RX_BATCH],
                got: Vec::with_capacity(RX_BATCH),
                hdrs: sys::RecvScratch::new(RX_BATCH),
                wake_batch: RX_BATCH,
                after_wake: false,
                poll: Vec::new(),
                socks: Arc::new(Vec::new()),
                socks_gen: u64::MAX,
                links: Arc::new(Vec::new()),
                links_gen: u64::MAX,
                steer: (Vec::new(), rverbs_flow::classify::Verdict::default()),
            }),
            gso,
            // The peers are loopback contexts on this kernel: where ours took
            // UDP_GRO, theirs did.
            swap_acks: gso && gro,
            fills_icrc: !raw_v2,
            // The connected sockets are made in the namespace of the thread that
            // opens the device, as its own sockets are.
            tx: Mutex::new(TxBatch {
                conn: ConnTx::for_this_netns(),
                ..TxBatch::default()
            }),
            app_poll_at: std::sync::atomic::AtomicU64::new(0),
            flush_pending: std::sync::atomic::AtomicU64::new(0),
            peer_rcvbufs: Mutex::new(std::collections::HashMap::new()),
            driver_wake_at: std::sync::atomic::AtomicU64::new(0),
            driver_standoff: AtomicBool::new(false),
            cq_armed: AtomicBool::new(false),
            wake,
            same_host,
            skip_sockets_once: AtomicBool::new(false),
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            info,
            activity: std::sync::atomic::AtomicU64::new(1),
            raw,
            ud_steering: Default::default(),
            deferred: Mutex::new(Vec::new()),
            pcap: match &opts.pcap {
                Some(p) => Some(Mutex::new(
                    PcapWriter::create(p, raw_frames)
                        .map_err(|e| Error::io("creating the RVERBS_PCAP capture file", e))?,
                )),
                None => None,
            },
            faults: opts
                .faults
                .filter(|f| {
                    *f != Faults {
                        seed: f.seed,
                        ..Faults::default()
                    }
                })
                .map(|f| Mutex::new(FaultState::new(f))),
        });
        if shared.pcap.is_some() {
            // A capture records every datagram's TTL / TOS.
            let socks = shared.sockets();
            shared.apply_recv_meta(&socks, true);
        }
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("rverbs-{}", shared.info.name))
            .spawn(move || driver(s2))
            .map_err(|e| Error::io("starting the driver thread", e))?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                shared,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The device this context opened.
    pub fn device(&self) -> &DeviceInfo {
        &self.inner.shared.info
    }

    /// The interface the context is bound to in raw mode
    /// ([`OpenOptions::raw_interface`]), if any.
    pub fn raw_interface(&self) -> Option<&str> {
        self.shared().raw.as_ref().map(|r| r.ifname.as_str())
    }

    /// Counts of the RoCE v1 path of a raw-mode context (`None` without raw mode or
    /// without CAP_NET_RAW, when the device has no RoCE v1 GID entries).
    pub fn roce_v1_stats(&self) -> Option<RoceV1Stats> {
        let v1 = self.shared().raw.as_ref()?.v1.as_ref()?;
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        Some(RoceV1Stats {
            rx_frames: l(&v1.stats.rx_frames),
            rx_malformed: l(&v1.stats.rx_malformed),
            rx_icrc_errors: l(&v1.stats.rx_icrc_errors),
            tx_frames: l(&v1.stats.tx_frames),
            tx_no_neighbour: l(&v1.stats.tx_no_neighbour),
        })
    }

    /// Counts of the raw-mode RoCE v2 path and of neighbour resolution (`None` without
    /// raw mode on the device's own interface, or without CAP_NET_RAW).
    pub fn raw_net_stats(&self) -> Option<crate::rawnet::RawNetStats> {
        self.shared().net().map(|n| n.stats())
    }

    /// The raw device's counts (frames received, delivered, dropped by a rule, not
    /// steered, lost for want of a posted receive, ...), in raw mode with CAP_NET_RAW.
    pub fn raw_stats(&self) -> Option<rverbs_raw::RawStats> {
        self.shared().raw.as_ref()?.dev.as_ref().map(|d| d.stats())
    }

    /// Counts of the same-host carrier (`None` when it is off: `RVERBS_SAME_HOST=0`,
    /// [`OpenOptions::same_host`], raw mode).
    pub fn same_host_stats(&self) -> Option<crate::SameHostStats> {
        self.shared().same_host.as_ref().map(|s| s.stats())
    }

    /// What the fault injector did so far (all zero without `RVERBS_FAULTS`).
    pub fn fault_stats(&self) -> FaultStats {
        self.shared()
            .faults
            .as_ref()
            .map_or_else(FaultStats::default, |f| {
                f.lock().unwrap_or_else(|e| e.into_inner()).stats
            })
    }

    /// Port counters (traffic, and a counter per drop reason).
    /// Deferred acknowledgements (`progress.rs`) are sent first, so the counters say
    /// what a device that answers at once would have sent.
    pub fn counters(&self) -> rverbs_engine::Counters {
        let mut e = self.shared().lock();
        self.shared().flush_deferred(&mut e);
        e.counters().clone()
    }
}

fn seed() -> u64 {
    // Keys must not be guessable by peers: seed from the clock, the pid and an address
    // of the stack (ASLR).
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    t ^ (u64::from(std::process::id()) << 32) ^ (&local as *const u8 as u64).rotate_left(17)
}

/// How often a device re-reads its interface's addresses.
const RESCAN_NS: Nanos = 1_000_000_000;

/// While the engine has had a timer running within the last `BUSY_NS` (1 s), the
/// driver thread, watching the sockets, sleeps at most `BUSY_SLEEP_NS` (10 ms) between
/// looks. A verb whose deadline comes before the driver's planned look wakes it
/// (`Shared::wake_if_needed`): on a QP that keeps going idle (an event-driven
/// ping-pong: every ACK stops the retransmit timer, every post starts it again) that
/// was a wake-up of the driver per post; with looks at most 10 ms apart, the
/// retransmit deadline of the usual timeouts (14 and up: 67 ms) is never earlier.
const BUSY_NS: Nanos = 1_000_000_000;
pub(crate) const BUSY_SLEEP_NS: Nanos = 10_000_000;

/// Re-reads the interface's addresses: binds sockets for new ones, updates the GID
/// table (entries in use stay until released, `gid.rs`) and the engine's copy of it,
/// and closes the sockets of addresses whose entry is gone.
fn rescan(shared: &Shared) {
    crate::mcast::prune_groups(shared);
    if let Some(net) = shared.net() {
        net.refresh_prefixes();
    }
    if shared.info.is_loopback() {
        return;
    }
    let Ok(now_addrs) = crate::device::interface_addrs(&shared.info.ifname) else {
        return;
    };
    // Lock order, as everywhere: engine, then sockets, then the GID table (senders
    // hold the engine while they take the sockets' read lock).
    let mut engine = shared.lock();
    let mut socks = shared.sockets();
    for a in &now_addrs {
        if !socks.iter().any(|(b, _)| b == a) {
            if let Ok(s) = udp_socket(*a) {
                let meta = !shared.recv_meta_on.load(Ordering::Acquire)
                    || sys::set_recv_meta(&s, a.is_ipv6(), true).is_ok();
                if meta && shared.quiet_socket(&s).is_ok() {
                    socks.push((*a, Arc::new(s)));
                }
            }
        }
    }
    let usable: Vec<IpAddr> = now_addrs
        .iter()
        .copied()
        .filter(|a| socks.iter().any(|(b, _)| b == a))
        .collect();
    let mut table = shared.gid_table.lock().unwrap_or_else(|e| e.into_inner());
    if table.update(&usable, |i| engine.sgid_in_use(i)) {
        let gids = table.engine_gids();
        socks
            .retain(|(a, _)| a.is_multicast() || gids.contains(&rverbs_engine::net::ip_to_gid(*a)));
        engine.set_gids(gids);
        engine.set_gid_roce_v1(table.engine_gid_roce_v1());
    }
}

fn driver(shared: Arc<Shared>) {
    let mut fds: Vec<i32> = Vec::new();
    let mut socks: Arc<SocketList>;
    let mut ready = Vec::new();
    let mut next_rescan: Nanos = RESCAN_NS;
    let mut reload = true;
    let mut standoff = crate::progress::Standoff::default();
    // When the engine last had a timer running (see `BUSY_SLEEP_NS`).
    let mut busy_at: Nanos = 0;
    while !shared.shutdown.load(Ordering::SeqCst) {
        if shared.now() >= next_rescan {
            rescan(&shared);
            next_rescan = shared.now() + RESCAN_NS;
            reload = true;
        }
        if shared.sockets_changed.swap(false, Ordering::AcqRel) {
            reload = true;
        }
        if reload {
            socks = shared
                .sockets
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            fds = socks.iter().map(|(_, s)| s.as_raw_fd()).collect();
            // Raw mode: the RoCE socket (RoCE v2 / v1, ARP, ND), read inline too.
            fds.extend(shared.net().map(|n| n.rx_fd()));
            fds.push(shared.wake.as_raw_fd());
            reload = false;
        }
        if let Some(p) = &shared.pcap {
            p.lock().unwrap_or_else(|e| e.into_inner()).flush();
        }
        let next_due = match (shared.send_due(shared.now()), shared.net_due(shared.now())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The driver's own next duty (a held datagram, a neighbour probe, the rescan).
        let bound = next_due.map_or(next_rescan, |d| d.min(next_rescan));
        // While an application thread makes progress itself, sleep on the eventfd only,
        // without the engine lock (`progress.rs`, "Driver stand-off"); otherwise watch
        // the sockets too, until the engine's next deadline.
        let (watch, until, standing_off) = match standoff.until(&shared, shared.now(), bound) {
            Some(until) => (&fds[fds.len() - 1..], until, true),
            None => (
                &fds[..],
                plan(&shared, &shared.lock(), bound, &mut busy_at),
                false,
            ),
        };
        let ms = sys::poll_ms(until.saturating_sub(shared.now()));
        let polled = if standing_off {
            sys::poll_readable(watch, ms, &mut ready)
        } else {
            shared.poll_wait(watch, ms, &mut ready)
        };
        if polled.is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        let poked = ready.last() == Some(&true);
        if poked {
            sys::eventfd_drain(&shared.wake);
        } else if standing_off {
            continue;
        }
        // (Poked in the stand-off — a deferred destruction, an armed CQ, ... —: one
        // pass under the lock, then the stand-off is judged again.)
        let mut engine = shared.lock();
        shared.run_deferred(&mut engine);
        shared.driver_wake_at.store(0, Ordering::Release);
        let now = shared.now();
        if shared.drain_raw(&mut engine) {
            shared.flush(&mut engine, now);
        }
        let deferred = shared.flush_pending.load(Ordering::Relaxed);
        if deferred != 0 && now >= deferred + crate::progress::DEFER_NS {
            shared.flush(&mut engine, now);
        }
        // Drain what is queued (bounded, so timers still run under load) — unless an
        // application thread sleeps on the sockets right now (`Cq::wait`): it wakes
        // for the datagram and receives it, and taking it here would leave that
        // thread asleep until its timeout.
        let app_receives = shared.app_sleeping(now);
        if (app_receives || shared.receive(&mut engine, now, 256, false) == 0)
            && shared.flush_pending.load(Ordering::Relaxed) != 0
            && engine.poll_timeout().is_none_or(|t| t > now)
        {
            // Nothing for us: leave the deferred answer to the application.
            continue;
        }
        if engine.poll_timeout().is_some_and(|t| t <= now) {
            engine.handle_timeout(now);
        }
        shared.flush(&mut engine, now);
    }
}

/// When the driver thread, watching the sockets, looks again at the latest: the
/// engine's next timer, a deferred answer's bound, `bound` (its own next duty), and at
/// most [`BUSY_SLEEP_NS`] while timers run (`busy_at`: when one last did). Published
/// under the engine lock `e` holds: a verb that makes the deadline earlier than this
/// wakes the driver (`Shared::wake_if_needed`).
fn plan(shared: &Shared, e: &Engine, bound: Nanos, busy_at: &mut Nanos) -> Nanos {
    if !e.any_cq_armed() {
        shared.cq_armed.store(false, Ordering::SeqCst);
    }
    let now = shared.now();
    let mut until = bound;
    if let Some(t) = e.poll_timeout() {
        until = until.min(t);
        *busy_at = now;
    }
    if now.saturating_sub(*busy_at) < BUSY_NS {
        until = until.min(now + BUSY_SLEEP_NS);
    }
    let deferred = shared.flush_pending.load(Ordering::Relaxed);
    if deferred != 0 {
        // A deferred answer waits at most this long for the application.
        until = until.min(deferred + crate::progress::DEFER_NS);
    }
    shared.driver_wake_at.store(until, Ordering::Release);
    until
}

#[cfg(test)]
mod tests {
    use super::{
        peer_window, window_for, PollBatch, Shared, TrainOrder, TxPlan, RX_BATCH, RX_SLOT,
    };
    use crate::sys;
    use rverbs_engine::Transmit;
    use rverbs_wire::opcode::Opcode;
    use socket2::{Domain, Socket, Type};
    use std::net::{IpAddr, Ipv4Addr};

    /// A ping-pong (one datagram, then an empty socket) keeps asking for one buffer;
    /// back-to-back full receives double the batch up to `RX_BATCH`; a short receive
    /// falls back to what came, an empty one changes nothing.
    #[test]
    fn poll_batch_follows_the_traffic() {
        let mut pb = PollBatch::default();
        for _ in 0..10 {
            assert_eq!(pb.want(), 1);
            pb.got(1);
            pb.got(0);
        }
        assert_eq!(pb.want(), 1);
        pb.got(1);
        assert_eq!(pb.want(), 1, "one full receive is not yet a stream");
        let mut doublings = 0;
        while pb.want() < RX_BATCH {
            let w = pb.want();
            pb.got(w);
            assert_eq!(pb.want(), 2 * w);
            doublings += 1;
        }
        assert_eq!(doublings, RX_BATCH.trailing_zeros());
        pb.got(RX_BATCH);
        assert_eq!(pb.want(), RX_BATCH);
        pb.got(5);
        assert_eq!(pb.want(), 5);
        pb.got(0);
        assert_eq!(pb.want(), 5);
    }

    /// Through real receives on a loopback socket: a ping-pong whose polls find the
    /// socket empty between datagrams keeps asking for one buffer (an empty receive
    /// ends the stream; it once did not, and every third datagram of a ping-pong went
    /// through a two-buffer `recvmmsg` and its second, empty pass); datagrams queued
    /// back to back double the batch.
    #[test]
    fn poll_batch_recv_sees_empty_sockets() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let sock = socket2::Socket::from(rx);
        sock.set_nonblocking(true).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut buf = vec![0u8; RX_BATCH * RX_SLOT];
        let mut list = Vec::new();
        let mut hdrs = sys::RecvScratch::new(RX_BATCH);
        let mut pb = PollBatch::default();
        for i in 0..10u8 {
            tx.send_to(&[i; 24], to).unwrap();
            // Loopback delivers within the send call.
            assert_eq!(pb.recv(&sock, &mut buf, &mut list, &mut hdrs), Some(1));
            assert_eq!(list.len(), 1);
            assert_eq!(&buf[list[0].offset..][..list[0].len], &[i; 24]);
            assert_eq!(pb.recv(&sock, &mut buf, &mut list, &mut hdrs), None);
            assert!(list.is_empty());
            assert_eq!(pb.want(), 1, "round {i}");
        }
        // A backlog: full receives back to back.
        for i in 0..8u8 {
            tx.send_to(&[i; 24], to).unwrap();
        }
        let mut wants = Vec::new();
        while let Some(n) = pb.recv(&sock, &mut buf, &mut list, &mut hdrs) {
            wants.push((n, pb.want()));
        }
        assert_eq!(wants, [(1, 1), (1, 2), (2, 4), (4, 8)]);
    }

    /// QPs sharing a peer's buffer get windows that fit it together: an equal share
    /// each, down to 4 PSNs (one QP alone keeps the 16-PSN floor of our own window).
    #[test]
    fn shared_peer_windows_fit_the_buffer_together() {
        let stock = 416 << 10; // an unprivileged peer's buffer, 78 PSNs of it usable
        assert_eq!(peer_window(stock, 1), 78);
        assert_eq!(peer_window(stock, 0), 78);
        assert_eq!(peer_window(stock, 2), 39);
        assert_eq!(peer_window(stock, 4), 19);
        assert_eq!(peer_window(stock, 8), 9);
        for n in 1..=19 {
            assert!(n as u32 * peer_window(stock, n) <= 78, "{n} sharers");
        }
        assert_eq!(peer_window(stock, 19), 4);
        assert_eq!(peer_window(stock, 1000), rverbs_engine::MIN_QP_WINDOW);
        // A tiny buffer alone: our own window's floor.
        assert_eq!(peer_window(32 << 10, 1), rverbs_engine::MIN_UNACKED_PSNS);
        // Room enough for rxe's window each, or more: unchanged by the sharing.
        assert_eq!(peer_window(256 << 20, 8), 512);
    }

    /// The requester's window follows the smallest receive buffer: one window in three
    /// quarters of a small one (at least 16 PSNs, with READs in pieces of a window),
    /// rxe's 128 PSNs up to 8 MiB, 512 for one that holds 16 windows of 4 KiB packets
    /// (whole READs).
    #[test]
    fn the_window_follows_the_smallest_receive_buffer() {
        let sock = |bytes: usize, force: bool| {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
            s.set_recv_buffer_size(bytes).unwrap();
            if force {
                // (Root only; otherwise the buffer stays at `net.core.rmem_max`.)
                let _ = sys::force_recv_buffer(&s, bytes as libc::c_int);
            }
            (IpAddr::V4(Ipv4Addr::LOCALHOST), s)
        };
        let one = |s: &(IpAddr, Socket)| window_for(std::slice::from_ref(s), None);
        // (The kernel doubles what it is asked for.)
        let small = sock(64 << 10, false);
        assert_eq!(small.1.recv_buffer_size().unwrap(), 128 << 10);
        assert_eq!(one(&small), (24, 24));
        // An unprivileged process under the default `net.core.rmem_max`.
        let stock = sock(208 << 10, false);
        assert_eq!(stock.1.recv_buffer_size().unwrap(), 416 << 10);
        assert_eq!(one(&stock), (78, 78));
        let mid = sock(1 << 20, true);
        if mid.1.recv_buffer_size().unwrap() == 2 << 20 {
            assert_eq!(one(&mid), (128, 128));
        }
        let big = sock(64 << 20, true);
        let got = big.1.recv_buffer_size().unwrap();
        let want = if got >= 512 * 4096 * 16 {
            (512, 0)
        } else if got >= 128 * 4096 * 16 {
            ((got / 16 / 4096) as u32, 0)
        } else {
            let w = (got / 4 * 3 / 4096).min(128) as u32;
            (w, w)
        };
        assert_eq!(one(&big), want);
        // With the same-host carrier the ring bounds both (READ responses in pieces).
        let (w, piece) = window_for(
            std::slice::from_ref(&big),
            Some(crate::same_host::RING_ROOM),
        );
        assert!(piece > 0, "READs in pieces");
        assert!((w.max(piece) as usize) * 4096 <= crate::same_host::RING_ROOM);
        assert_eq!(
            window_for(&[small, big], None),
            (24, 24),
            "the smallest counts"
        );
        assert_eq!(window_for(&[], None), (128, 0), "no size known");
    }

    /// The datagrams of a received buffer (`seg`-byte segments, the last `last` bytes;
    /// segment `i`'s first byte is `ops[i]`) in the order `TrainOrder` hands them out,
    /// by index.
    fn handled(ops: &[Opcode], seg: usize, last: usize) -> Vec<usize> {
        let len = (ops.len() - 1) * seg + last;
        // At an offset, as in a batch buffer.
        let mut buf = vec![0u8; 7 + len];
        for (i, o) in ops.iter().enumerate() {
            buf[7 + i * seg] = o.0;
        }
        let mut order = TrainOrder::new(7, len, if ops.len() > 1 { seg } else { 0 });
        let mut got = Vec::new();
        while let Some(d) = order.next(&buf) {
            assert_eq!(d.len(), if d.end == 7 + len { last } else { seg });
            assert_eq!((d.start - 7) % seg, 0);
            got.push((d.start - 7) / seg);
        }
        got
    }

    /// A train's ACK is handled ahead of the requests right before it (the sender's
    /// swap, undone), never ahead of a response: READ RESPONSE, ATOMIC ACKNOWLEDGE and
    /// ACKNOWLEDGE are one stream in the responder's PSN order (IBTA 9.7.5.1.3).
    #[test]
    fn a_train_s_ack_moves_ahead_of_requests_only() {
        const ACK: Opcode = Opcode::RC_ACKNOWLEDGE;
        const SEND: Opcode = Opcode::RC_SEND_ONLY;
        const WRITE: Opcode = Opcode::RC_RDMA_WRITE_ONLY;
        const READ_REQ: Opcode = Opcode::RC_RDMA_READ_REQUEST;
        const READ_RESP: Opcode = Opcode::RC_RDMA_READ_RESPONSE_ONLY;
        const ATOMIC_ACK: Opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
        // The ping-pong's swapped pair: the ACK first.
        assert_eq!(handled(&[SEND, ACK], 24, 20), [1, 0]);
        assert_eq!(handled(&[READ_REQ, WRITE, ACK], 32, 20), [2, 0, 1]);
        // Responses keep their order: the READ's data before the ACK of the SEND
        // after it (the bug: ACK 1 first, an implied NAK of the READ).
        assert_eq!(handled(&[READ_RESP, ACK], 84, 20), [0, 1]);
        assert_eq!(handled(&[ATOMIC_ACK, ACK], 28, 20), [0, 1]);
        assert_eq!(handled(&[ACK, ACK], 20, 20), [0, 1]);
        // Past requests, not past the response before them.
        assert_eq!(handled(&[READ_RESP, SEND, ACK], 84, 20), [0, 2, 1]);
        assert_eq!(
            handled(&[SEND, ACK, READ_RESP, SEND, WRITE, ACK, SEND], 84, 24),
            [1, 0, 2, 5, 3, 4, 6]
        );
        // A CNP or an opcode not known is no request: nothing moves past it.
        assert_eq!(handled(&[Opcode::CNP, ACK], 32, 20), [0, 1]);
        assert_eq!(handled(&[Opcode(0x1f), ACK], 32, 20), [0, 1]);
        // One datagram; no datagram.
        assert_eq!(handled(&[ACK], 20, 20), [0]);
        let mut none = TrainOrder::new(3, 0, 0);
        assert_eq!(none.next(&[0; 8]), None);
    }

    fn packet(op: Opcode, len: usize) -> Transmit {
        let mut payload = vec![0u8; len];
        payload[0] = op.0;
        Transmit {
            src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            dst: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)),
            src_port: 4791,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            roce_v1: false,
            payload,
            body: None,
        }
    }

    /// The sender swaps an ACK behind the request after it (one buffer, the ACK as its
    /// last segment), never behind a response of its own stream.
    #[test]
    fn an_ack_swaps_places_with_a_request_only() {
        let trains = |ts: &[Transmit]| {
            let mut plan = TxPlan::default();
            plan.mine.extend(0..ts.len());
            assert!(Shared::trains(true, ts, &mut plan, true));
            let counts: Vec<usize> = plan.msgs.iter().map(|m| m.count).collect();
            (plan.order.clone(), counts)
        };
        let ack = || packet(Opcode::RC_ACKNOWLEDGE, 20);
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_SEND_ONLY, 24)]),
            (vec![1, 0], vec![2])
        );
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_RDMA_READ_REQUEST, 32)]),
            (vec![1, 0], vec![2])
        );
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 84)]),
            (vec![0, 1], vec![1, 1])
        );
        assert_eq!(
            trains(&[ack(), packet(Opcode::RC_ATOMIC_ACKNOWLEDGE, 28)]),
            (vec![0, 1], vec![1, 1])
        );
        // A response then its ACK: one train in their order.
        assert_eq!(
            trains(&[packet(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 84), ack()]),
            (vec![0, 1], vec![2])
        );
    }
}
