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
//! **Batching.** Datagrams are received `recvmmsg` at a time and everything the engine
//! has to send after a verb or a received batch leaves in one `sendmmsg` (one ACK per
//! batch: ACKs coalesce). On the loopback device, trains of same-size datagrams to one
//! peer go as one `UDP_SEGMENT` buffer and arrive whole (`UDP_GRO`), so a 64 KiB
//! message costs the kernel one pass, not sixteen (see `Shared::gso` for why only
//! there). With `RVERBS_FAULTS` or `RVERBS_PCAP` every datagram goes out on its own.

use crate::capture::PcapWriter;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::faults::{FaultState, FaultStats, Faults};
use crate::sys;
use rverbs_engine::{Config, Datagram, Engine, Nanos, Transmit};
use rverbs_wire::grh::Gid;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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
}

pub(crate) struct Shared {
    pub(crate) engine: Mutex<Engine>,
    /// Signalled (with the engine lock) when completion events may be pending.
    pub(crate) events: Condvar,
    sockets: Vec<(IpAddr, UdpSocket)>,
    /// The receive buffers of whichever thread receives (always under the engine lock).
    rx: Mutex<RxBatch>,
    /// Send trains of same-size datagrams with `UDP_SEGMENT`. Only on the loopback
    /// device: the kernel numbers the IPv4 IDs of a train's datagrams 0, 1, 2, ... while
    /// their ICRCs assume 0 (as every datagram from an unconnected socket has). An
    /// rverbs receiver recovers the ID from the ICRC and never sees the difference —
    /// over loopback it even receives the train whole (`UDP_GRO`) — but a peer that
    /// checks the ICRC against the real header (rxe) would drop all but the first.
    gso: bool,
    /// Datagrams collected by `flush` for one `sendmmsg` (under the engine lock).
    tx: Mutex<Vec<Transmit>>,
    /// When an application thread last made progress itself (`progress.rs`).
    pub(crate) app_poll_at: std::sync::atomic::AtomicU64,
    /// Received datagrams were handled but what the engine answers was not sent yet
    /// (deferred acknowledgements, `progress.rs`; engine-lock protected writes).
    /// (0: none; otherwise when the first deferred datagram was handled.)
    pub(crate) flush_pending: std::sync::atomic::AtomicU64,
    /// When the driver thread will wake up on its own (engine-lock protected writes).
    pub(crate) driver_wake_at: std::sync::atomic::AtomicU64,
    wake: OwnedFd,
    epoch: Instant,
    shutdown: AtomicBool,
    pub(crate) info: DeviceInfo,
    faults: Option<Mutex<FaultState>>,
    pcap: Option<Mutex<PcapWriter>>,
    /// Bumped (under the engine lock) after every engine activity that can complete
    /// work: a poller that found its CQ empty need not take the lock again until it
    /// changes, so busy-polling applications do not starve the driver thread.
    pub(crate) activity: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub(crate) fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends everything the engine has to send, and wakes event waiters.
    pub(crate) fn flush(&self, engine: &mut Engine, now: Nanos) {
        self.flush_pending.store(0, Ordering::Relaxed);
        if self.faults.is_some() || self.pcap.is_some() {
            while let Some(t) = engine.poll_transmit(now) {
                self.send(&t);
                engine.recycle(t.payload);
            }
        } else {
            // The fast path: everything the engine has goes out in one sendmmsg per
            // socket.
            let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(t) = engine.poll_transmit(now) {
                tx.push(t);
            }
            if !tx.is_empty() {
                self.send_all(&tx);
                for t in tx.drain(..) {
                    engine.recycle(t.payload);
                }
            }
        }
        self.activity.fetch_add(1, Ordering::Release);
        if engine.has_completion_events() {
            self.events.notify_all();
        }
    }

    fn send(&self, t: &Transmit) {
        let Some(faults) = &self.faults else {
            self.send_raw(t.src, t.dst, &t.payload);
            return;
        };
        let mut bytes = t.payload.clone();
        let mut f = faults.lock().unwrap_or_else(|e| e.into_inner());
        let v = f.judge(&mut bytes, true);
        for _ in 0..v.copies {
            if v.delay_ns == 0 {
                self.send_raw(t.src, t.dst, &bytes);
            } else {
                f.hold(self.now() + v.delay_ns, t.src, t.dst, bytes.clone());
            }
        }
        if v.delay_ns > 0 {
            drop(f);
            self.wake();
        }
    }

    fn send_all(&self, ts: &[Transmit]) {
        for (i, (addr, sock)) in self.sockets.iter().enumerate() {
            // Datagrams from this socket's address (or, for the first socket, from an
            // address no socket has, as `send_raw` does).
            let mine = |t: &&Transmit| {
                t.src == *addr || (i == 0 && !self.sockets.iter().any(|(a, _)| *a == t.src))
            };
            let mut out: Vec<sys::Outgoing<'_>> = Vec::new();
            for t in ts.iter().filter(mine) {
                let dst = SocketAddr::new(t.dst, ROCE_PORT);
                let len = t.payload.len();
                // Trains of same-size datagrams to one destination leave as one
                // UDP_SEGMENT buffer (loopback device only, see `gso`).
                if let Some(last) = out.last_mut() {
                    let seg = last.bufs[0].len();
                    let total: usize = last.bufs.iter().map(|b| b.len()).sum();
                    if self.gso
                        && last.dst == dst
                        && last.bufs.last().is_some_and(|b| b.len() == seg)
                        && len <= seg
                        && last.bufs.len() < GSO_MAX_SEGMENTS
                        && total + len <= GSO_MAX_BYTES
                        && seg <= usize::from(u16::MAX)
                    {
                        last.bufs.push(&t.payload);
                        last.segment = seg as u16;
                        continue;
                    }
                }
                out.push(sys::Outgoing {
                    bufs: vec![&t.payload],
                    dst,
                    segment: 0,
                });
            }
            if !out.is_empty() {
                sys::send_batch(sock, &out);
            }
        }
    }

    fn record(&self, src: IpAddr, dst: IpAddr, src_port: u16, bytes: &[u8]) {
        if let Some(p) = &self.pcap {
            // The socket sends with its default TTL 64 and TOS 0, and from port 4791.
            p.lock().unwrap_or_else(|e| e.into_inner()).write(
                src,
                dst,
                (src_port, ROCE_PORT),
                bytes,
            );
        }
    }

    fn send_raw(&self, src: IpAddr, dst: IpAddr, bytes: &[u8]) {
        self.record(src, dst, ROCE_PORT, bytes);
        let Some((_, sock)) = self
            .sockets
            .iter()
            .find(|(a, _)| *a == src)
            .or(self.sockets.first())
        else {
            return;
        };
        // A send error (no route, buffer full) is a lost packet: the transport's
        // retransmission covers it, as on a real link.
        let _ = sock.send_to(bytes, SocketAddr::new(dst, ROCE_PORT));
    }

    /// Sends held (delayed) datagrams that are due; returns when the next one is.
    fn send_due(&self, now: Nanos) -> Option<Nanos> {
        let faults = self.faults.as_ref()?;
        loop {
            let mut f = faults.lock().unwrap_or_else(|e| e.into_inner());
            match f.due(now) {
                Some((src, dst, bytes)) => {
                    drop(f);
                    self.send_raw(src, dst, &bytes);
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
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let RxBatch { buf, got: list } = &mut *rx;
        let buf = &mut buf[..];
        let mut got = 0;
        for (local, sock) in &self.sockets {
            while got < budget {
                list.clear();
                let Ok(n) = sys::recv_batch(sock, buf, RX_SLOT, list) else {
                    break;
                };
                got += n;
                for r in list.iter() {
                    // A coalesced train (UDP_GRO) is cut back into its datagrams.
                    let seg = if r.segment > 0 {
                        r.segment
                    } else {
                        r.len.max(1)
                    };
                    let mut at = r.offset;
                    let end = r.offset + r.len;
                    while at < end {
                        let next = (at + seg).min(end);
                        self.ingest(engine, now, *local, r.from, &mut buf[at..next]);
                        at = next;
                    }
                }
                if n < RX_BATCH {
                    if defer && n > 0 {
                        if self.flush_pending.load(Ordering::Relaxed) == 0 {
                            self.flush_pending.store(now.max(1), Ordering::Relaxed);
                        }
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
        got
    }

    /// One received datagram: capture, fault injection, the engine.
    fn ingest(
        &self,
        engine: &mut Engine,
        now: Nanos,
        local: IpAddr,
        from: SocketAddr,
        bytes: &mut [u8],
    ) {
        self.record(from.ip(), local, from.port(), bytes);
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
                src: from.ip(),
                dst: local,
                src_port: from.port(),
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                ipv4_id: None,
                payload: bytes,
            };
            engine.handle_datagram(now, &d);
        }
    }

    /// The sockets' descriptors.
    pub(crate) fn socket_fds(&self) -> Vec<i32> {
        self.sockets.iter().map(|(_, s)| s.as_raw_fd()).collect()
    }

    /// Tells the driver thread to re-read the engine's deadline.
    pub(crate) fn wake(&self) {
        sys::eventfd_signal(&self.wake);
    }
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
        // Deferred answers leave before the sockets close.
        self.shared.flush_deferred(&mut self.shared.lock());
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// An open soft RoCE v2 device (`struct ibv_context`). Cheap to clone; the device
/// closes when the context and every object made from it are dropped.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

fn udp_socket(addr: IpAddr) -> std::io::Result<UdpSocket> {
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
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&SockAddr::from(SocketAddr::new(addr, ROCE_PORT)))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Binds a free loopback address 127.0.0.x:4791 (x in 2..=254), so that any number of
/// processes on one machine each get their own RoCE address with no setup and no root.
fn loopback_socket() -> Result<(IpAddr, UdpSocket)> {
    let start = (std::process::id() % 253) as u8;
    let mut last = None;
    for i in 0..253u8 {
        let x = 2 + (start.wrapping_add(i) % 253);
        let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, x));
        match udp_socket(addr) {
            Ok(s) => {
                // Trains sent with UDP_SEGMENT by other loopback contexts arrive whole;
                // without GRO the kernel cuts them up (slower, same result).
                let _ = sys::set_udp_gro(&s);
                return Ok((addr, s));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Error::io(
        "binding a free 127.0.0.x:4791 (all 253 loopback addresses are taken)",
        last.unwrap_or_else(|| std::io::Error::other("no address")),
    ))
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
            },
        )
    }

    /// Opens a device with explicit options (see [`OpenOptions`]); [`Context::open`]
    /// takes them from the environment.
    pub fn open_with(info: DeviceInfo, opts: &OpenOptions) -> Result<Context> {
        let mut sockets = Vec::new();
        if info.is_loopback() {
            sockets.push(loopback_socket()?);
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
        let mut gids = vec![info.default_gid()];
        gids.extend(
            sockets
                .iter()
                .map(|(a, _)| rverbs_engine::net::ip_to_gid(*a)),
        );
        let seed = seed();
        let mut cfg = Config {
            gids,
            seed,
            // QPNs start at a random point so a restarted process does not reuse the
            // numbers its peers may still be retransmitting to.
            first_qpn: 0x11 + (seed >> 40) as u32 % 0xf0_0000,
            src_port: Some(ROCE_PORT),
            ..Config::default()
        };
        cfg.limits.active_mtu = info.active_mtu();
        let mut engine = Engine::new(cfg);
        crate::mad::set_identity(&mut engine, &info);
        let gso = info.is_loopback() && std::env::var_os("RVERBS_NO_GSO").is_none();
        let shared = Arc::new(Shared {
            engine: Mutex::new(engine),
            events: Condvar::new(),
            sockets,
            rx: Mutex::new(RxBatch {
                buf: vec![0u8; RX_SLOT * RX_BATCH],
                got: Vec::with_capacity(RX_BATCH),
            }),
            tx: Mutex::new(Vec::new()),
            gso,
            app_poll_at: std::sync::atomic::AtomicU64::new(0),
            driver_wake_at: std::sync::atomic::AtomicU64::new(0),
            flush_pending: std::sync::atomic::AtomicU64::new(0),
            wake: sys::eventfd().map_err(|e| Error::io("creating the driver's eventfd", e))?,
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            info,
            activity: std::sync::atomic::AtomicU64::new(1),
            pcap: match &opts.pcap {
                Some(p) => {
                    Some(Mutex::new(PcapWriter::create(p).map_err(|e| {
                        Error::io("creating the RVERBS_PCAP capture file", e)
                    })?))
                }
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

    /// The port's GID table (index 0 is the default GID).
    pub fn gids(&self) -> Vec<Gid> {
        self.shared().lock().config().gids.clone()
    }

    /// The GID at `index`.
    pub fn gid(&self, index: u8) -> Option<Gid> {
        self.gids().get(usize::from(index)).copied()
    }

    /// The index of the first GID of the given IP family (`true` = IPv6).
    pub fn gid_index_for(&self, ipv6: bool) -> Option<u8> {
        self.gids()
            .iter()
            .skip(1)
            .position(|g| g.to_ipv4_mapped().is_none() == ipv6)
            .map(|i| i as u8 + 1)
    }

    /// Waits for the next completion event (`ibv_get_cq_event`): a CQ armed with
    /// [`crate::Cq::req_notify`] got a completion. Returns the CQ's handle number, or
    /// `None` after `timeout`.
    pub fn get_cq_event(&self, timeout: std::time::Duration) -> Option<u32> {
        let s = self.shared();
        let deadline = Instant::now() + timeout;
        let mut e = s.lock();
        loop {
            if let Some(cq) = e.poll_completion_event() {
                return Some(cq.raw());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            e = s
                .events
                .wait_timeout(e, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
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

fn driver(shared: Arc<Shared>) {
    let mut fds: Vec<i32> = shared.sockets.iter().map(|(_, s)| s.as_raw_fd()).collect();
    fds.push(shared.wake.as_raw_fd());
    let mut ready = Vec::new();
    while !shared.shutdown.load(Ordering::SeqCst) {
        if let Some(p) = &shared.pcap {
            p.lock().unwrap_or_else(|e| e.into_inner()).flush();
        }
        let next_due = shared.send_due(shared.now());
        let (timeout_ms, standoff) = {
            let e = shared.lock();
            let now = shared.now();
            let deadline = match (e.poll_timeout(), next_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // While an application thread receives for us, sleep on the eventfd and
            // the deadline only, and look again when the stand-off may have ended.
            let standoff = shared.app_polling(now);
            let mut until = deadline.unwrap_or(now + 1_000_000_000);
            if standoff {
                until = until.min(now + crate::progress::STANDOFF_NS);
            }
            let deferred = shared.flush_pending.load(Ordering::Relaxed);
            if deferred != 0 {
                // A deferred answer waits at most this long for the application.
                until = until.min(deferred + crate::progress::DEFER_NS);
            }
            // Published under the engine lock: a verb that makes the deadline earlier
            // than this wakes us (`Shared::wake_if_needed`).
            shared.driver_wake_at.store(until, Ordering::Release);
            let ms = if until <= now {
                0
            } else {
                ((until - now).div_ceil(1_000_000)).min(1000) as i32
            };
            (ms, standoff)
        };
        let watch = if standoff {
            &fds[fds.len() - 1..]
        } else {
            &fds[..]
        };
        if sys::poll_readable(watch, timeout_ms, &mut ready).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        if ready.last() == Some(&true) {
            sys::eventfd_drain(&shared.wake);
        }
        let mut engine = shared.lock();
        shared.driver_wake_at.store(0, Ordering::Release);
        let now = shared.now();
        let deferred = shared.flush_pending.load(Ordering::Relaxed);
        if deferred != 0 && now >= deferred + crate::progress::DEFER_NS {
            shared.flush(&mut engine, now);
        }
        // Drain what is queued (bounded, so timers still run under load).
        if shared.receive(&mut engine, now, 256, false) == 0
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
