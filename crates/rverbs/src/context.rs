//! An open device: the engine, its UDP sockets and the driver thread that keeps
//! receiving, acknowledging and retransmitting while the application is busy.
//!
//! **Progress model.** One driver thread per context waits in `poll(2)` on the sockets
//! and an eventfd, with the engine's next deadline as timeout; it feeds every received
//! datagram to the engine and sends what the engine produces. Verbs that create work
//! (`post_send`, `modify_qp`, ...) run the engine on the caller's thread and send its
//! packets at once, so a request leaves without a thread hop; they then wake the
//! driver so it re-reads the deadline. The engine sits behind one mutex.

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
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

/// The RoCE v2 UDP port.
pub const ROCE_PORT: u16 = 4791;

pub(crate) struct Shared {
    pub(crate) engine: Mutex<Engine>,
    /// Completion channels and the async event queue (fed by `flush`).
    pub(crate) hub: crate::channel::EventHub,
    sockets: Vec<(IpAddr, UdpSocket)>,
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
        while let Some(t) = engine.poll_transmit(now) {
            self.send(&t);
        }
        self.activity.fetch_add(1, Ordering::Release);
        self.hub.dispatch(engine);
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
            Ok(s) => return Ok((addr, s)),
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
        let shared = Arc::new(Shared {
            engine: Mutex::new(engine),
            hub: crate::channel::EventHub::new()?,
            sockets,
            wake: sys::eventfd().map_err(|e| Error::io("creating the driver's eventfd", e))?,
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            info,
            activity: std::sync::atomic::AtomicU64::new(1),
            deferred: Mutex::new(Vec::new()),
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
    pub fn counters(&self) -> rverbs_engine::Counters {
        self.shared().lock().counters().clone()
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
    let mut buf = vec![0u8; 65536];
    while !shared.shutdown.load(Ordering::SeqCst) {
        if let Some(p) = &shared.pcap {
            p.lock().unwrap_or_else(|e| e.into_inner()).flush();
        }
        let next_due = shared.send_due(shared.now());
        let timeout_ms = {
            let e = shared.lock();
            let deadline = match (e.poll_timeout(), next_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match deadline {
                None => 1000,
                Some(t) => {
                    let now = shared.now();
                    if t <= now {
                        0
                    } else {
                        ((t - now).div_ceil(1_000_000)).min(1000) as i32
                    }
                }
            }
        };
        if sys::poll_readable(&fds, timeout_ms, &mut ready).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        if ready.last() == Some(&true) {
            sys::eventfd_drain(&shared.wake);
        }
        let mut engine = shared.lock();
        shared.run_deferred(&mut engine);
        let now = shared.now();
        for (i, (local, sock)) in shared.sockets.iter().enumerate() {
            if !ready.get(i).copied().unwrap_or(false) {
                continue;
            }
            // Drain what is queued (bounded, so timers still run under load).
            for _ in 0..256 {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    break;
                };
                shared.record(from.ip(), *local, from.port(), &buf[..n]);
                let copies = match &shared.faults {
                    Some(f) => {
                        f.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .judge(&mut buf[..n], false)
                            .copies
                    }
                    None => 1,
                };
                for _ in 0..copies {
                    let d = Datagram {
                        src: from.ip(),
                        dst: *local,
                        src_port: from.port(),
                        hop_limit: 64,
                        traffic_class: 0,
                        flow_label: 0,
                        ipv4_id: None,
                        payload: &buf[..n],
                    };
                    engine.handle_datagram(now, &d);
                    shared.flush(&mut engine, now);
                }
            }
        }
        if engine.poll_timeout().is_some_and(|t| t <= now) {
            engine.handle_timeout(now);
        }
        shared.flush(&mut engine, now);
    }
}
