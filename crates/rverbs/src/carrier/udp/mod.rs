//! The UDP carrier: RoCE v2 datagrams through the kernel's UDP sockets, as to any
//! peer on the network (rxe, a NIC, another host).
//!
//! **Receiving.** Datagrams are received `recvmmsg` at a time (as many buffers as came
//! last time, doubling while full receives follow each other: a ping-pong's receive is
//! a plain `recvmsg` of one buffer, [`socket::PollBatch`]). A thread with nothing else
//! to do may sleep in `recvmmsg` itself (`sleep_receive`): one system call per
//! wake-up instead of `poll` and `recvmmsg`.
//!
//! **Sending.** Everything a flush hands over leaves in one `sendmmsg` per peer,
//! through the peer's connected socket (`conn.rs`; else the device's socket), a lone
//! datagram in one `sendto`. On the loopback device, trains of same-size datagrams to
//! one peer go as one `UDP_SEGMENT` buffer and arrive whole (`UDP_GRO`), so a 64 KiB
//! message costs the kernel one pass, not sixteen (see `UdpConfig::gso` for why only
//! there); how a batch forms trains is the engine's rule (`rverbs_engine::train`).
//! Payloads left in their memory region (`Transmit::body`) are sent from there.

pub(crate) mod conn;
pub(crate) mod socket;

use super::{Carrier, Departure, Sink, TxQueue, WithSink, ROCE_PORT};
use crate::sys::{self, IpMeta};
use conn::{body_of, ConnTx, Meta, Path};
use rverbs_engine::train::{self, RxOrder, TrainLimits};
use rverbs_engine::{Body, Lent, Memory, Nanos, Transmit};
use socket::{PollBatch, RX_BATCH, RX_SLOT};
use socket2::Socket;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Most datagrams in one `UDP_SEGMENT` train (the kernel's `UDP_MAX_SEGMENTS` is 64 or
/// more) and most bytes (one IP packet).
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65_000;

/// A device's sockets: its addresses' and its multicast groups'.
pub(crate) type SocketList = Vec<(IpAddr, Arc<Socket>)>;

/// The receive side's buffers (taken by whichever thread receives).
struct Rx {
    buf: Vec<u8>,
    got: Vec<sys::Received>,
    /// The `recvmmsg` headers, reused.
    hdrs: sys::RecvScratch,
    /// Buffers the sleeping receive asks for: 1 while traffic comes one datagram at a
    /// time (a ping-pong), [`RX_BATCH`] while more follow a wake-up (a stream).
    wake_batch: usize,
    /// The last sleeping receive took one buffer; the next `receive` tells whether
    /// more were queued behind it.
    after_wake: bool,
    /// Per socket (by position in the list): the buffers a non-sleeping receive asks
    /// for, and whether the last one filled them all.
    poll: Vec<PollBatch>,
    /// The socket list `receive` reads, and the generation it was taken at: a poll
    /// that finds the list unchanged (one atomic load) takes neither the list's lock
    /// nor a reference count. [`SocketsMut`] replaces it when it can, so a removed
    /// socket closes at once.
    socks: Arc<SocketList>,
    socks_gen: u64,
    /// When a spinning pass last asked the sockets (`Carrier::receive_spinning`).
    spun_at: Nanos,
}

/// The send side's scratch, kept from call to call so a send allocates nothing.
#[derive(Default)]
pub(crate) struct Tx {
    /// Indices (into the queue) of one socket's datagrams.
    mine: Vec<usize>,
    /// Their order in the trains (an ACK may swap places with the request after it).
    order: Vec<usize>,
    trains: Vec<train::Train>,
    /// The trains as messages for `sendmmsg`.
    msgs: Vec<sys::Outgoing>,
    scratch: sys::SendScratch,
    /// The peers' connected sockets (`conn.rs`).
    conn: ConnTx,
}

impl Tx {
    /// The scratch of a device opened on this thread: the connected sockets are made
    /// in this thread's network namespace, as the device's own sockets are.
    pub(crate) fn for_this_netns() -> Tx {
        Tx {
            conn: ConnTx::for_this_netns(),
            ..Tx::default()
        }
    }
}

/// How a [`Udp`] carrier is set up.
pub(crate) struct UdpConfig {
    /// Send `UDP_SEGMENT` trains. Only on the loopback device: the kernel numbers
    /// the IPv4 IDs of a train's datagrams 0, 1, 2, ... while their ICRCs assume 0 (as
    /// every datagram from an unconnected socket has). An rverbs receiver recovers the
    /// ID from the ICRC and never sees the difference — over loopback it even receives
    /// the train whole (`UDP_GRO`) — but a peer that checks the ICRC against the real
    /// header (rxe) would drop all but the first.
    pub(crate) gso: bool,
    /// Every receiving socket took `UDP_GRO` (trains arrive whole).
    pub(crate) gro: bool,
    /// The device's interface (multicast scopes, group joins).
    pub(crate) ifindex: u32,
    /// Raw mode's RoCE v2: the sockets ignore what arrives on the interface (the raw
    /// device receives it).
    pub(crate) quiet_on_interface: bool,
    /// Always ask for the received datagrams' TTL / TOS / flow label (a capture
    /// records them).
    pub(crate) always_meta: bool,
}

/// The UDP carrier.
pub(crate) struct Udp {
    /// One socket per local address, bound to `address:4791`, and one per joined
    /// multicast group. The driver's address re-scan and the multicast verbs change
    /// the list (write lock); senders take the read lock. (Shared as one `Arc`, so a
    /// receiver takes a snapshot with one reference count.)
    sockets: RwLock<Arc<SocketList>>,
    /// Bumped (under the write lock) whenever `sockets` may have changed.
    sockets_gen: AtomicU64,
    /// Set when the list changed: the driver re-reads the descriptors it watches.
    pub(crate) sockets_changed: AtomicBool,
    /// Users of the received datagrams' TTL / TOS / flow label (UD QPs, whose
    /// receives carry a GRH, and MAD agents), and whether the unicast sockets ask the
    /// kernel for them now.
    recv_meta_users: AtomicUsize,
    recv_meta_on: AtomicBool,
    cfg: UdpConfig,
    /// An ACK may swap places with the request after it to ride in its train
    /// (`rverbs_engine::train::plan`): with [`Udp::gso`] and only when the receiver gets
    /// trains whole (`UDP_GRO` took on every socket of ours; the peers, loopback
    /// contexts on the same kernel, set it as we do).
    swap_acks: bool,
    rx: Mutex<Rx>,
    /// Set when a sleep woke with no socket readable (a doorbell of another carrier):
    /// the next receive leaves the sockets alone.
    skip_once: AtomicBool,
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

/// A packet's bytes in one piece (for the paths that cannot send pieces: datagrams
/// with control messages); `body` as for [`Transmit::parts`].
pub(crate) fn whole<'a>(t: &'a Transmit, body: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
    match t.parts(body) {
        [p, [], []] => std::borrow::Cow::Borrowed(p),
        parts => std::borrow::Cow::Owned(parts.concat()),
    }
}

/// The TTL / TOS a datagram from the device's socket carries for `meta`: the socket's
/// default for a hop limit of 0 (64, or 1 to a multicast group), no flow label.
pub(crate) fn wire_meta(dst: IpAddr, meta: IpMeta) -> IpMeta {
    IpMeta {
        hop_limit: match meta.hop_limit {
            0 if dst.is_multicast() => 1,
            0 => 64,
            h => h,
        },
        flow_label: 0,
        ..meta
    }
}

fn meta_of(t: &Transmit) -> IpMeta {
    IpMeta {
        hop_limit: t.hop_limit,
        traffic_class: t.traffic_class,
        flow_label: t.flow_label,
    }
}

impl Udp {
    /// The carrier over `sockets` (bound by [`socket::udp_socket`] and friends).
    pub(crate) fn new(sockets: Vec<(IpAddr, Socket)>, cfg: UdpConfig) -> Udp {
        let swap_acks = cfg.gso && cfg.gro;
        let always_meta = cfg.always_meta;
        let udp = Udp {
            sockets: RwLock::new(Arc::new(
                sockets.into_iter().map(|(a, s)| (a, Arc::new(s))).collect(),
            )),
            sockets_gen: AtomicU64::new(0),
            sockets_changed: AtomicBool::new(false),
            recv_meta_users: AtomicUsize::new(0),
            recv_meta_on: AtomicBool::new(false),
            cfg,
            swap_acks,
            rx: Mutex::new(Rx {
                buf: vec![0u8; RX_SLOT * RX_BATCH],
                got: Vec::with_capacity(RX_BATCH),
                hdrs: sys::RecvScratch::new(RX_BATCH),
                wake_batch: RX_BATCH,
                after_wake: false,
                poll: Vec::new(),
                socks: Arc::new(Vec::new()),
                socks_gen: u64::MAX,
                spun_at: 0,
            }),
            skip_once: AtomicBool::new(false),
        };
        if always_meta {
            let socks = udp.sockets();
            udp.apply_recv_meta(&socks, true);
        }
        udp
    }

    /// Sends one datagram from the device's socket of its source address (or the
    /// first of its family), port 4791, with its TTL / TOS as control messages; its
    /// ICRC must be right for that. A send error (no route, buffer full) is a lost
    /// packet: the transport's retransmission covers it, as on a real link.
    fn send_one(&self, src: IpAddr, dst: IpAddr, meta: IpMeta, bytes: &[u8]) -> Option<Departure> {
        let socks = self.sockets.read().unwrap_or_else(|e| e.into_inner());
        let (_, sock) = socks.iter().find(|(a, _)| *a == src).or_else(|| {
            socks
                .iter()
                .find(|(a, _)| a.is_ipv6() == dst.is_ipv6() && !a.is_multicast())
        })?;
        let to = socket::scoped(SocketAddr::new(dst, ROCE_PORT), self.cfg.ifindex);
        let _ = sys::send_with_meta(sock, bytes, to, meta);
        Some(Departure {
            src,
            src_port: ROCE_PORT,
            ip: wire_meta(dst, meta),
        })
    }

    /// Sends a datagram that cannot ride a batch (multicast, or a sealed one) alone.
    fn send_alone(&self, t: &mut Transmit, sealed: bool) -> Option<Departure> {
        t.materialize();
        if !sealed {
            // This datagram leaves from the device's socket: port 4791, ID 0.
            rverbs_engine::net::fill_icrc(t.src, t.dst, ROCE_PORT, &mut t.payload);
        }
        self.send_one(t.src, t.dst, meta_of(t), &t.payload)
    }

    /// Sends a batch: multicast datagrams one by one, the rest with one `sendmmsg` per
    /// peer through its connected socket (else per local socket), trains of same-size
    /// ones to one peer as `UDP_SEGMENT` buffers on the loopback device. `left[k]`
    /// says how datagram `k` left, when `log`.
    fn send_all(
        &self,
        ts: &mut [Transmit],
        tx: &mut Tx,
        log: bool,
        left: &mut [Option<Departure>],
    ) {
        // Unicast RoCE v2 leaves in batches, whatever its TTL and TOS (a connected
        // socket carries them; the unconnected fallback sends such datagrams one by
        // one with control messages).
        let plain = |t: &Transmit| !t.dst.is_multicast() && !t.roce_v1;
        for (k, t) in ts.iter_mut().enumerate() {
            if !plain(t) {
                let d = self.send_alone(t, false);
                if log {
                    left[k] = d;
                }
            }
        }
        // Payloads left in their memory regions (`Transmit::body`, large requests and
        // READ responses) are hashed into the ICRC and sent from there: one region is
        // lent for the whole batch (locked until the sends return; lending it twice
        // would deadlock), which spares copying every payload into its datagram.
        // `bodies[k]` is packet k's body (empty for a batch without bodies).
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
        let limits = TrainLimits {
            trains: self.cfg.gso,
            max_segments: GSO_MAX_SEGMENTS,
            max_bytes: GSO_MAX_BYTES,
        };
        let socks = self.sockets.read().unwrap_or_else(|e| e.into_inner());
        for (i, (addr, sock)) in socks.iter().enumerate() {
            if addr.is_multicast() {
                continue;
            }
            // Datagrams from this socket's address (or, from the first socket of the
            // family, those from an address no socket has, as `send_one` does).
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
            tx.mine.clear();
            tx.mine.extend(
                ts.iter()
                    .enumerate()
                    .filter(|(_, t)| mine(t))
                    .map(|(k, _)| k),
            );
            if tx.mine.is_empty() {
                continue;
            }
            // Trains as the engine plans them; should a swapped ACK not join its
            // request's train, the batch goes unswapped.
            let Tx {
                mine,
                order,
                trains,
                msgs,
                scratch,
                conn,
            } = tx;
            if !train::plan(ts, mine, Meta::of, limits, self.swap_acks, order, trains) {
                train::plan(ts, mine, Meta::of, limits, false, order, trains);
            }
            msgs.clear();
            msgs.extend(trains.iter().map(|t| sys::Outgoing {
                dst: SocketAddr::new(t.dst, ROCE_PORT),
                first: t.first,
                count: t.count,
                segment: t.segment,
                first_len: t.first_len,
                last_len: t.last_len,
                bytes: t.bytes,
            }));
            // Runs of messages to one peer leave through its connected socket; when
            // it has none, through this socket.
            let mut at = 0;
            while at < msgs.len() {
                // (A message's packets share their destination and meta, `plan`.)
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
                    // (Every datagram's ICRC is filled here for the port it leaves
                    // from: the engine's is for another port in raw mode.)
                    for k in packets(rest, order) {
                        conn.fill_unconnected(&mut ts[k], body(k));
                    }
                    if meta.is_default() {
                        let parts = |k: usize| ts[order[k]].parts(body(order[k]));
                        sys::send_batch(&**sock, rest, &parts, scratch, true);
                    } else {
                        // One by one, each with its TTL / TOS control messages. A
                        // send error is a lost packet. In the engine's order
                        // (`mine`'s, ascending), not the trains': an ACK swapped
                        // behind its request arrives as a datagram of its own,
                        // which the receiver handles as it comes; only inside a
                        // train does it go first (`RxOrder`).
                        let mut ks: Vec<usize> = packets(rest, order).collect();
                        ks.sort_unstable();
                        for k in ks {
                            let bytes = whole(&ts[k], body(k));
                            let _ = sys::send_with_meta(sock, &bytes, dst, ip_meta);
                        }
                    }
                }
                if log {
                    // As sent: from this socket's address and the port it left from.
                    for (j, m) in run.iter().enumerate() {
                        let port = if j < done { port } else { ROCE_PORT };
                        for k in packets(std::slice::from_ref(m), order) {
                            left[k] = Some(Departure {
                                src: *addr,
                                src_port: port,
                                ip: ip_meta,
                            });
                        }
                    }
                }
                at = end;
            }
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

    /// Silences a new socket of a raw-mode context for what the raw device receives.
    fn quiet_socket(&self, s: &Socket) -> std::io::Result<()> {
        if self.cfg.quiet_on_interface {
            sys::drop_from_interface(s, self.cfg.ifindex)?;
        }
        Ok(())
    }

    /// The device's sockets, for changing them (write lock).
    pub(crate) fn sockets(&self) -> SocketsMut<'_> {
        SocketsMut(
            self.sockets.write().unwrap_or_else(|e| e.into_inner()),
            self,
        )
    }

    /// Binds a socket for the new unicast address `a` (the address re-scan); false
    /// when it cannot be used.
    pub(crate) fn add_address(&self, socks: &mut SocketsMut<'_>, a: IpAddr) -> bool {
        let Ok(s) = socket::udp_socket(a) else {
            return false;
        };
        let meta = !self.recv_meta_on.load(Ordering::Acquire)
            || sys::set_recv_meta(&s, a.is_ipv6(), true).is_ok();
        if meta && self.quiet_socket(&s).is_ok() {
            socks.push((a, Arc::new(s)));
            true
        } else {
            false
        }
    }

    /// Joins multicast `group` (a socket bound to it, unless there is one).
    pub(crate) fn join_group(&self, group: IpAddr) -> std::io::Result<()> {
        let mut socks = self.sockets();
        if socks.iter().any(|(a, _)| *a == group) {
            return Ok(());
        }
        let local: Vec<IpAddr> = socks.iter().map(|(a, _)| *a).collect();
        let s = socket::group_socket(group, self.cfg.ifindex, &local)?;
        self.quiet_socket(&s)?;
        socks.push((group, Arc::new(s)));
        drop(socks);
        self.sockets_changed.store(true, Ordering::Release);
        Ok(())
    }

    /// Closes the sockets of the groups `keep` says no longer have members.
    pub(crate) fn prune_groups(&self, keep: impl Fn(IpAddr) -> bool) {
        let mut socks = self.sockets();
        let before = socks.len();
        socks.retain(|(a, _)| !a.is_multicast() || keep(*a));
        if socks.len() != before {
            self.sockets_changed.store(true, Ordering::Release);
        }
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
        self.apply_recv_meta(&socks, n > 0 || self.cfg.always_meta);
    }

    fn apply_recv_meta(&self, socks: &SocketList, on: bool) {
        if self.recv_meta_on.swap(on, Ordering::AcqRel) == on {
            return;
        }
        for (a, s) in socks.iter() {
            // Multicast sockets exist only for UD QPs and always ask.
            if !a.is_multicast() {
                let _ = sys::set_recv_meta(s, a.is_ipv6(), on);
            }
        }
    }

    /// Feeds one `recv_batch` worth of buffers to `sink`, cutting coalesced
    /// (`UDP_GRO`) trains back into their datagrams in the engine's order. (Kept out
    /// of line, once per batch: `bench/hop_cost.sh` counts a round trip's receive
    /// work here.)
    #[inline(never)]
    fn ingest_batch(local: IpAddr, list: &[sys::Received], buf: &mut [u8], sink: &mut dyn Sink) {
        for r in list {
            let mut order = RxOrder::new(r.offset, r.len, r.segment);
            while let Some(d) = order.next(buf) {
                sink.deliver(super::Arrival {
                    src: r.from.ip(),
                    src_port: r.from.port(),
                    dst: r.meta.dst.unwrap_or(local),
                    ip: r.meta.ip(),
                    ipv4_id: None,
                    roce_v1: false,
                    icrc_checked: false,
                    framed: false,
                    bytes: &mut buf[d],
                    source: None,
                });
            }
        }
    }
}

impl Udp {
    /// The receive buffers, unless another thread holds them (a thread asleep in
    /// `sleep_receive`: it feeds what it gets to the engine as soon as it has the
    /// engine lock, and datagrams behind it must wait for that, in socket order).
    fn rx_lock(&self) -> Option<std::sync::MutexGuard<'_, Rx>> {
        match self.rx.try_lock() {
            Ok(rx) => Some(rx),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// [`Carrier::receive`] with the buffers held.
    fn receive_in(&self, rx: &mut Rx, budget: usize, sink: &mut dyn Sink) -> usize {
        let Rx {
            buf,
            got: list,
            hdrs,
            wake_batch,
            after_wake,
            poll,
            socks,
            socks_gen,
            ..
        } = rx;
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
        if self.skip_once.load(Ordering::Relaxed) && self.skip_once.swap(false, Ordering::Relaxed) {
            return 0;
        }
        // Datagrams queued right after a one-buffer sleeping receive: a stream, whose
        // wake-ups should take a whole batch.
        let check_stream = std::mem::take(after_wake);
        poll.resize(socks.len(), PollBatch::default());
        for ((local, sock), pb) in socks.iter().zip(poll.iter_mut()) {
            while got < budget {
                let Some(n) = pb.recv(sock, buf, list, hdrs) else {
                    break;
                };
                got += n;
                if check_stream && n > 0 {
                    *wake_batch = RX_BATCH;
                }
                Udp::ingest_batch(*local, list, buf, sink);
                // One answer per batch: the responder's ACKs for the whole batch
                // coalesce into one (cumulative).
                if n > 0 {
                    sink.batch_end(n, n >= RX_BATCH);
                }
                if n < RX_BATCH {
                    break;
                }
            }
        }
        got
    }
}

impl Carrier for Udp {
    fn seal(&self, t: &mut Transmit) -> super::Seal {
        // Sealed datagrams leave from the device's socket: port 4791, ID 0.
        t.materialize();
        rverbs_engine::net::fill_icrc_for(t.roce_v1, t.src, t.dst, ROCE_PORT, &mut t.payload);
        super::Seal::Datagram
    }

    fn send(&self, q: &mut TxQueue, _now: Nanos) {
        // The last carrier: everything left leaves here (or is lost: no socket).
        // (The send scratch rides in the queue, under the soft device's lock.)
        let tx = &mut q.udp;
        let n = q.queue.len();
        let mut left = vec![None; if q.log { n } else { 0 }];
        if q.sealed {
            for (k, t) in q.queue.iter_mut().enumerate() {
                let d = self.send_alone(t, true);
                if q.log {
                    left[k] = d;
                }
            }
        } else {
            self.send_all(&mut q.queue, tx, q.log, &mut left);
        }
        if q.log {
            q.left.extend(left);
        }
        q.done.append(&mut q.queue);
    }

    fn receive_spinning(&self, budget: usize, sink: &mut dyn Sink, now: Nanos) -> usize {
        let Some(mut rx) = self.rx_lock() else {
            return 0;
        };
        if now.wrapping_sub(rx.spun_at) < super::SPIN_SYSCALL_NS {
            return 0;
        }
        rx.spun_at = now;
        self.receive_in(&mut rx, budget, sink)
    }

    fn receive(&self, budget: usize, sink: &mut dyn Sink) -> usize {
        match self.rx_lock() {
            Some(mut rx) => self.receive_in(&mut rx, budget, sink),
            None => 0,
        }
    }

    fn sleep_receive(&self, with_sink: &mut WithSink<'_>) -> Option<usize> {
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
        let Rx {
            buf,
            got: list,
            hdrs,
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
        // `receive` sees them), take batches again.
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
        with_sink(&mut |sink| {
            Udp::ingest_batch(local, list, &mut buf[..], sink);
            sink.batch_end(n, n >= RX_BATCH);
        });
        Some(n)
    }

    fn watch(&self, fds: &mut Vec<RawFd>) {
        fds.extend(
            self.sockets
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(_, s)| s.as_raw_fd()),
        );
    }

    fn quiet_wake(&self) {
        self.skip_once.store(true, Ordering::Relaxed);
    }
}

/// The device's socket list under its write lock ([`Udp::sockets`]): changing it
/// copies it first if a receiver still holds a snapshot.
pub(crate) struct SocketsMut<'a>(std::sync::RwLockWriteGuard<'a, Arc<SocketList>>, &'a Udp);

impl Drop for SocketsMut<'_> {
    /// Marks `receive`'s snapshot stale (still under the write lock), and replaces it
    /// at once unless a receive is running (it then refreshes it next time): a
    /// removed socket does not stay open in it.
    fn drop(&mut self) {
        let udp = self.1;
        udp.sockets_gen.fetch_add(1, Ordering::AcqRel);
        // (try_lock: the lock order is rx -> sockets in `receive`.)
        if let Ok(mut rx) = udp.rx.try_lock() {
            rx.socks = Arc::clone(&self.0);
            rx.socks_gen = udp.sockets_gen.load(Ordering::Acquire);
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
