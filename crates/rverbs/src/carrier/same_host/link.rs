//! The same-host carrier's links: finding the peer (abstract `AF_UNIX` listeners), the
//! hello that hands a ring over, doorbells, and the housekeeping thread that watches
//! every link for its end. See the parent module for the whole carrier.

use super::ring::*;
use crate::sys::mem::SharedMap;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Counts of a context's same-host carrier ([`crate::Context::same_host_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SameHostStats {
    /// Rings this context opened to other contexts (connections made).
    pub links_out: u64,
    /// Rings other contexts opened to this one (connections accepted).
    pub links_in: u64,
    /// Datagrams written into outbound rings.
    pub tx_datagrams: u64,
    /// Datagrams read from inbound rings.
    pub rx_datagrams: u64,
    /// Of those, datagrams whose payload the engine placed straight from the ring
    /// into its region (one copy on the receiving side; none while a capture or
    /// fault injection needs whole datagrams).
    pub rx_in_place: u64,
    /// Datagrams dropped because their ring was full (the transport retransmits).
    pub tx_ring_full: u64,
    /// Doorbells written (the receiver slept).
    pub doorbells: u64,
    /// Connections refused: another user's process, or a malformed hello or ring.
    pub refused: u64,
    /// Inbound rings ended because their contents broke the format.
    pub corrupt_links: u64,
}

#[derive(Default)]
struct Stats {
    links_out: AtomicU64,
    links_in: AtomicU64,
    tx: AtomicU64,
    rx: AtomicU64,
    in_place: AtomicU64,
    full: AtomicU64,
    doorbells: AtomicU64,
    refused: AtomicU64,
    corrupt: AtomicU64,
}

/// An inbound ring and its connection.
pub(crate) struct InLink {
    pub(crate) reader: Reader,
    fd: OwnedFd,
    /// The local address the peer connected to (the records' destination).
    pub(crate) local: IpAddr,
    /// The peer closed the connection: read the ring to its end, then drop it.
    pub(crate) closed: AtomicBool,
}

/// An outbound ring and its connection.
struct OutLink {
    writer: Writer,
    fd: OwnedFd,
    /// Set by the housekeeping thread when the peer closed the connection.
    dead: Arc<AtomicBool>,
    /// The receiver's doorbell (its eventfd), once its answer to the hello came.
    bell: Option<OwnedFd>,
}

impl OutLink {
    /// Takes the answer to the hello (the receiver's doorbell) if it came.
    fn take_bell(&mut self) {
        if self.bell.is_some() {
            return;
        }
        let mut m = [0u8; BELL.len() + 1];
        match crate::sys::unix::recv_with_fds(&self.fd, &mut m) {
            Ok((n, mut fds)) if n == BELL.len() && &m[..n] == BELL && fds.len() == 1 => {
                self.bell = fds.pop();
            }
            // The peer closed: the link ends (the housekeeping thread sees it too).
            Ok((0, _)) => self.dead.store(true, Ordering::Release),
            _ => {}
        }
    }

    /// Rings the receiver's doorbell, first picking up the answer to the hello that
    /// carries it if not done yet (without it, the receiver is woken by its
    /// housekeeping thread when it takes the link, and by its sleep's bound).
    fn ring(&mut self) -> bool {
        self.take_bell();
        match &self.bell {
            Some(b) => crate::sys::eventfd_signal(b),
            None => return false,
        }
        true
    }
}

enum Out {
    Up(Box<OutLink>),
    /// No rverbs context listens there (or the last link ended): UDP until `retry`.
    Absent {
        retry: u64,
    },
}

/// The outbound rings by destination, looked up on every send (three times per
/// batch): hashed with [`AddrHasher`], not SipHash, whose cost showed in the
/// spinning ping-pong's profile (about 600 instructions per round trip).
type OutMap = HashMap<IpAddr, Out, std::hash::BuildHasherDefault<AddrHasher>>;

/// A multiply-rotate hash over the key's bytes. The keys are the destinations
/// this context's own QPs address, so no peer can choose them to collide.
#[derive(Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.0 =
                (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// What the housekeeping thread and the context share.
struct Common {
    inbound: RwLock<Arc<Vec<Arc<InLink>>>>,
    /// Bumped whenever `inbound` changes.
    gen: AtomicU64,
    /// `inbound`'s length (read on every spinning poll, without the lock).
    inbound_len: AtomicUsize,
    stats: Stats,
    /// Outbound connections to watch (a duplicate of each descriptor).
    watch_out: Mutex<Vec<(OwnedFd, Arc<AtomicBool>)>>,
    stop: AtomicBool,
    /// Wakes the housekeeping thread.
    poke: OwnedFd,
    /// Wakes the context's driver thread (a duplicate of its eventfd).
    driver: OwnedFd,
    /// The doorbell of all of this context's inbound rings (an eventfd its writers
    /// get in the answer to their hello), and whether the last sleep found it rung.
    bell: OwnedFd,
    bell_rung: AtomicBool,
}

impl Common {
    fn set_inbound(&self, f: impl FnOnce(&mut Vec<Arc<InLink>>)) {
        let mut g = self.inbound.write().unwrap_or_else(|e| e.into_inner());
        f(Arc::make_mut(&mut g));
        self.inbound_len.store(g.len(), Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }
}

/// A context's same-host carrier: its listeners (through the housekeeping thread),
/// its outbound rings and its inbound ones.
pub(crate) struct SameHost {
    common: Arc<Common>,
    /// The network namespace the context was opened in: connections are made only
    /// from threads in it (an abstract name is looked up in the caller's namespace),
    /// as the connected UDP sockets are (`conn_tx.rs`).
    netns: Option<(u64, u64)>,
    out: Mutex<OutMap>,
    keeper: Option<std::thread::JoinHandle<()>>,
}

/// The abstract socket name of the context bound to `a`.
fn name_of(a: IpAddr) -> String {
    format!("rverbs-roce-v2:{}", a.to_canonical())
}

/// A listener for `a` (`None` when another context of this namespace has it).
fn listen(a: IpAddr) -> Option<OwnedFd> {
    crate::sys::unix::listen_abstract(name_of(a).as_bytes(), 64).ok()
}

/// A new ring in a sealed memfd: its descriptor and its writer.
fn new_ring() -> io::Result<(OwnedFd, Writer)> {
    let len = HEADER + DATA_BYTES;
    // The reader maps it only when its size can no longer change.
    let fd = crate::sys::mem::sealed_memfd(c"rverbs-same-host-ring", len)?;
    let mem = SharedMap::map_sealed(&fd, len)?;
    let ring = Ring::new(mem).ok_or_else(|| io::Error::other("ring size"))?;
    Ok((fd, Writer::new(ring)))
}

/// Connects to the context bound to `dst` and hands it a new ring.
fn connect(dst: IpAddr) -> io::Result<OutLink> {
    let sock = crate::sys::unix::connect_abstract(name_of(dst).as_bytes())?;
    // Abstract names have no permissions: whoever bound the name first listens
    // there. Only a process of our own user gets our datagrams.
    if !peer_is_our_user(&sock) {
        return Err(io::Error::other("the listener is another user's process"));
    }
    let (memfd, writer) = new_ring()?;
    let mut hello = [0u8; HELLO];
    hello[..8].copy_from_slice(MAGIC);
    hello[8..].copy_from_slice(&(DATA_BYTES as u64).to_le_bytes());
    crate::sys::unix::send_with_fd(&sock, &hello, &memfd)?;
    let mut l = OutLink {
        writer,
        fd: sock,
        dead: Arc::new(AtomicBool::new(false)),
        bell: None,
    };
    // The peer's housekeeping thread answers at once with its doorbell. A peer that
    // refused the ring (closed the connection), does not answer in time, or whose
    // doorbell is not an eventfd that cannot block us gets UDP instead (`writer_for`
    // tries again after `RETRY_NS`).
    let mut ready = Vec::new();
    let _ = crate::sys::poll_readable(&[l.fd.as_raw_fd()], BELL_WAIT_MS, &mut ready);
    l.take_bell();
    match &l.bell {
        Some(b) if crate::sys::event::is_nonblocking_eventfd(b) => Ok(l),
        _ => Err(io::Error::other(
            "the peer did not answer with its doorbell",
        )),
    }
}

/// Whether the process at the other end of `sock` runs as our user (`SO_PEERCRED`).
fn peer_is_our_user(sock: &OwnedFd) -> bool {
    crate::sys::unix::peer_uid(sock).is_ok_and(|u| u == crate::sys::misc::uid())
}

/// Takes a connection's hello: the peer's ring, mapped, if all is well.
fn accept_ring(conn: &OwnedFd) -> Result<Reader, &'static str> {
    if !peer_is_our_user(conn) {
        return Err("another user's process");
    }
    // The hello follows the connect at once; wait a little for it.
    let mut ready = Vec::new();
    let _ = crate::sys::poll_readable(&[conn.as_raw_fd()], 1000, &mut ready);
    let mut hello = [0u8; HELLO + 1];
    let (n, mut fds) = crate::sys::unix::recv_with_fds(conn, &mut hello).map_err(|_| "no hello")?;
    if n != HELLO || &hello[..8] != MAGIC || fds.len() != 1 {
        return Err("a malformed hello");
    }
    let cap = u64::from_le_bytes(hello[8..16].try_into().unwrap());
    if !(4096..=(64 << 20)).contains(&cap) || !cap.is_power_of_two() {
        return Err("a ring of a bad size");
    }
    let memfd = fds.swap_remove(0);
    let len = HEADER + cap as usize;
    let mem = SharedMap::map_sealed(&memfd, len).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidData {
            "a ring whose size is not sealed"
        } else {
            "a ring that cannot be mapped"
        }
    })?;
    Ring::new(mem)
        .map(Reader::new)
        .ok_or("a ring of a bad size")
}

impl SameHost {
    /// The carrier of a context bound to `locals` (its unicast addresses); `driver`
    /// is its driver's eventfd.
    pub(crate) fn start(locals: &[IpAddr], driver: &OwnedFd) -> io::Result<SameHost> {
        let listeners: Vec<(IpAddr, OwnedFd)> = locals
            .iter()
            .filter(|a| !a.is_multicast())
            .filter_map(|&a| listen(a).map(|fd| (a, fd)))
            .collect();
        let common = Arc::new(Common {
            inbound: RwLock::new(Arc::new(Vec::new())),
            inbound_len: AtomicUsize::new(0),
            gen: AtomicU64::new(0),
            stats: Stats::default(),
            watch_out: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            poke: crate::sys::eventfd()?,
            driver: driver.try_clone()?,
            bell: crate::sys::eventfd()?,
            bell_rung: AtomicBool::new(false),
        });
        let c = Arc::clone(&common);
        let keeper = std::thread::Builder::new()
            .name("rverbs-same-host".into())
            .spawn(move || keep(&c, listeners))?;
        Ok(SameHost {
            common,
            netns: crate::carrier::udp::conn::current_netns(),
            out: Mutex::new(OutMap::default()),
            keeper: Some(keeper),
        })
    }

    pub(crate) fn stats(&self) -> SameHostStats {
        let s = &self.common.stats;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SameHostStats {
            links_out: l(&s.links_out),
            links_in: l(&s.links_in),
            tx_datagrams: l(&s.tx),
            rx_datagrams: l(&s.rx),
            rx_in_place: l(&s.in_place),
            tx_ring_full: l(&s.full),
            doorbells: l(&s.doorbells),
            refused: l(&s.refused),
            corrupt_links: l(&s.corrupt),
        }
    }

    /// The inbound rings now, and the generation of the list.
    pub(crate) fn inbound(&self) -> (Arc<Vec<Arc<InLink>>>, u64) {
        let gen = self.common.gen.load(Ordering::Acquire);
        let l = self
            .common
            .inbound
            .read()
            .unwrap_or_else(|e| e.into_inner());
        (Arc::clone(&l), gen)
    }

    pub(crate) fn inbound_gen(&self) -> u64 {
        self.common.gen.load(Ordering::Acquire)
    }

    /// Counts `n` datagrams read, `placed` of them placed from the ring.
    pub(crate) fn count_rx(&self, n: usize, placed: usize) {
        let s = &self.common.stats;
        s.rx.fetch_add(n as u64, Ordering::Relaxed);
        if placed > 0 {
            s.in_place.fetch_add(placed as u64, Ordering::Relaxed);
        }
    }

    /// Ends an inbound ring (read to its end, or corrupt).
    pub(crate) fn remove(&self, link: &Arc<InLink>, corrupt: bool) {
        if corrupt {
            self.common.stats.corrupt.fetch_add(1, Ordering::Relaxed);
        }
        link.closed.store(true, Ordering::Release);
        self.common
            .set_inbound(|v| v.retain(|l| !Arc::ptr_eq(l, link)));
        // The housekeeping thread lets go of it too.
        crate::sys::eventfd_signal(&self.common.poke);
    }

    /// The ring to the context bound to `dst`, locked for a batch of writes
    /// (published, and its reader rung, when the handle drops): the link made now if
    /// none is known or the last one ended; `None` (send over UDP) when nobody there
    /// takes a ring, until [`RETRY_NS`] after the last try.
    pub(crate) fn writer_for(&self, dst: IpAddr, now: u64) -> Option<Handle<'_>> {
        use std::collections::hash_map::Entry;
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let key = dst.to_canonical();
        let other_netns =
            || self.netns.is_some() && crate::carrier::udp::conn::current_netns() != self.netns;
        let link = match out.entry(key) {
            Entry::Occupied(e) => match e.get() {
                // Taken out of the map while the handle holds the lock (nobody sees it
                // missing): one lookup per batch, not one per datagram.
                Out::Up(l) if !l.dead.load(Ordering::Acquire) => match e.remove() {
                    Out::Up(l) => Some(l),
                    Out::Absent { .. } => None,
                },
                // (An ended link is replaced at once: a new context may have taken the
                // address; without one, UDP until the retry.)
                Out::Absent { retry } if *retry > now => None,
                // (Another namespace's thread: UDP, and no verdict on the address.)
                _ if other_netns() => None,
                _ => match connect(key) {
                    Ok(l) => {
                        self.register(&l);
                        e.remove();
                        Some(Box::new(l))
                    }
                    Err(_) => {
                        *e.into_mut() = Out::Absent {
                            retry: now + RETRY_NS,
                        };
                        None
                    }
                },
            },
            Entry::Vacant(_) if other_netns() => None,
            Entry::Vacant(v) => match connect(key) {
                Ok(l) => {
                    self.register(&l);
                    Some(Box::new(l))
                }
                Err(_) => {
                    v.insert(Out::Absent {
                        retry: now + RETRY_NS,
                    });
                    None
                }
            },
        };
        link.map(|link| Handle {
            out,
            key,
            link: Some(link),
            sh: self,
            pushed: 0,
        })
    }

    fn register(&self, l: &OutLink) {
        self.common.stats.links_out.fetch_add(1, Ordering::Relaxed);
        if let Ok(dup) = l.fd.try_clone() {
            self.common
                .watch_out
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((dup, Arc::clone(&l.dead)));
            crate::sys::eventfd_signal(&self.common.poke);
        }
    }

    /// Whether other contexts write to this one through rings (its sleepers then wait
    /// in `poll` on the doorbell, not in `recvmmsg`).
    pub(crate) fn has_inbound(&self) -> bool {
        self.common.inbound_len.load(Ordering::Acquire) != 0
    }
}

/// An outbound ring, locked for a batch of writes; publishes (and rings) on drop.
pub(crate) struct Handle<'a> {
    out: std::sync::MutexGuard<'a, OutMap>,
    key: IpAddr,
    /// The link, out of the map until the handle drops (always `Some` until then).
    link: Option<Box<OutLink>>,
    sh: &'a SameHost,
    pushed: u64,
}

impl Handle<'_> {
    /// Writes one `len`-byte datagram, which `fill` writes in place; false when the
    /// ring was full (dropped, counted).
    pub(crate) fn push_with(
        &mut self,
        m: &RecordMeta,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let Some(l) = self.link.as_mut() else {
            return false;
        };
        if l.writer.push_with(m, len, fill) {
            self.pushed += 1;
            true
        } else {
            self.sh.common.stats.full.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        let Some(mut l) = self.link.take() else {
            return;
        };
        if self.pushed > 0 {
            let stats = &self.sh.common.stats;
            stats.tx.fetch_add(self.pushed, Ordering::Relaxed);
            if l.writer.publish() && l.ring() {
                stats.doorbells.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.out.insert(self.key, Out::Up(l));
    }
}

impl Drop for SameHost {
    fn drop(&mut self) {
        self.common.stop.store(true, Ordering::Release);
        crate::sys::eventfd_signal(&self.common.poke);
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
    }
}

impl SameHost {
    /// Before a sleep on the inbound rings `links`: resets the doorbell if the last
    /// sleep found it rung, marks the rings asleep, and tells whether records (or a
    /// closed link's end) already wait: then sleep for 0.
    pub(crate) fn arm(&self, links: &[Arc<InLink>]) -> bool {
        if self.common.bell_rung.swap(false, Ordering::Relaxed) {
            crate::sys::eventfd_drain(&self.common.bell);
        }
        let mut pending = false;
        for l in links {
            pending |= l.reader.arm() || l.closed.load(Ordering::Acquire);
        }
        pending
    }

    /// After the sleep: marks the rings awake; `rung`: `poll` found the doorbell
    /// readable (it is reset before the next sleep, off the wake-up's path).
    pub(crate) fn disarm(&self, links: &[Arc<InLink>], rung: bool) {
        for l in links {
            l.reader.disarm();
        }
        if rung {
            self.common.bell_rung.store(true, Ordering::Relaxed);
        }
    }

    /// The doorbell's descriptor, for a sleeper's `poll`.
    pub(crate) fn bell_fd(&self) -> RawFd {
        self.common.bell.as_raw_fd()
    }
}

/// The housekeeping thread: accepts connections to `listeners`, watches every
/// connection for its end.
fn keep(c: &Common, listeners: Vec<(IpAddr, OwnedFd)>) {
    // The inbound links this thread watches (it drops its reference when the link is
    // removed from the shared list, or when the peer closed).
    let mut mine: Vec<Arc<InLink>> = Vec::new();
    let mut outs: Vec<(OwnedFd, Arc<AtomicBool>)> = Vec::new();
    let mut pfds: Vec<libc::pollfd> = Vec::new();
    let pollfd = |fd: RawFd, events: libc::c_short| libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    while !c.stop.load(Ordering::Acquire) {
        outs.append(&mut c.watch_out.lock().unwrap_or_else(|e| e.into_inner()));
        // Outbound links their sender dropped need no watching.
        outs.retain(|(_, dead)| Arc::strong_count(dead) > 1 && !dead.load(Ordering::Relaxed));
        mine.retain(|l| !l.closed.load(Ordering::Acquire));
        pfds.clear();
        pfds.push(pollfd(c.poke.as_raw_fd(), libc::POLLIN));
        pfds.extend(
            listeners
                .iter()
                .map(|(_, fd)| pollfd(fd.as_raw_fd(), libc::POLLIN)),
        );
        // (Events 0: only the end of the connection, POLLHUP / POLLERR.)
        pfds.extend(mine.iter().map(|l| pollfd(l.fd.as_raw_fd(), 0)));
        pfds.extend(outs.iter().map(|(fd, _)| pollfd(fd.as_raw_fd(), 0)));
        if !matches!(crate::sys::poll::poll(&mut pfds, 1000), Ok(n) if n > 0) {
            continue;
        }
        if pfds[0].revents != 0 {
            crate::sys::eventfd_drain(&c.poke);
        }
        let ended =
            |p: &libc::pollfd| p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0;
        let n_l = listeners.len();
        let mut woke_driver = false;
        for (k, l) in mine.iter().enumerate() {
            if ended(&pfds[1 + n_l + k]) {
                // Read to the end by the receivers, then dropped.
                l.closed.store(true, Ordering::Release);
                woke_driver = true;
            }
        }
        for (k, (_, dead)) in outs.iter().enumerate() {
            if ended(&pfds[1 + n_l + mine.len() + k]) {
                dead.store(true, Ordering::Release);
            }
        }
        for (k, (local, lfd)) in listeners.iter().enumerate() {
            if pfds[1 + k].revents == 0 {
                continue;
            }
            while let Ok(conn) = crate::sys::unix::accept(lfd) {
                // The ring, then our doorbell for its writer.
                match accept_ring(&conn).and_then(|r| {
                    crate::sys::unix::send_with_fd(&conn, BELL, &c.bell)
                        .map(|()| r)
                        .map_err(|_| "the peer left")
                }) {
                    Ok(reader) => {
                        let link = Arc::new(InLink {
                            reader,
                            fd: conn,
                            local: *local,
                            closed: AtomicBool::new(false),
                        });
                        c.stats.links_in.fetch_add(1, Ordering::Relaxed);
                        c.set_inbound(|v| v.push(Arc::clone(&link)));
                        mine.push(link);
                        woke_driver = true;
                    }
                    // Closing the connection tells the peer (it falls back to UDP).
                    Err(_) => {
                        c.stats.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        if woke_driver {
            // A new link or an ended one: the driver and every sleeper look again.
            crate::sys::eventfd_signal(&c.driver);
            crate::sys::eventfd_signal(&c.bell);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::IpMeta;

    fn meta(port: u16) -> RecordMeta {
        RecordMeta {
            src: "127.0.0.9".parse().unwrap(),
            src_port: port,
            ip: IpMeta {
                hop_limit: 64,
                traffic_class: 2,
                flow_label: 0,
            },
            no_icrc: port % 2 == 1,
        }
    }

    /// A writer and a reader over two mappings of one ring memfd (as in two
    /// processes).
    fn pair(cap: usize) -> (Writer, Reader) {
        let len = HEADER + cap;
        let fd = crate::sys::mem::sealed_memfd(c"rverbs-ring-test", len).unwrap();
        let map = || Ring::new(SharedMap::map_sealed(&fd, len).unwrap()).unwrap();
        (Writer::new(map()), Reader::new(map()))
    }

    fn read_all(r: &Reader) -> Result<Vec<(RecordMeta, Vec<u8>)>, Corrupt> {
        let mut buf = vec![0u8; MAX_PAYLOAD];
        let mut got = Vec::new();
        r.drain(usize::MAX, &mut buf, false, |m, p, _| {
            got.push((*m, p.to_vec()))
        })?;
        Ok(got)
    }

    #[test]
    fn records_arrive_in_order_across_the_end_of_the_ring() {
        let (mut w, r) = pair(8192);
        let mut sent = 0u32;
        let mut read = 0u32;
        // Sizes that leave odd leftovers at the end, many times round the ring.
        for round in 0..400u32 {
            for k in 0..3u32 {
                let len = ((round * 7 + k * 131) % 900) as usize;
                let body = vec![(sent % 251) as u8; len];
                let mut m = meta(sent as u16);
                m.src = if sent % 2 == 0 {
                    "::1".parse().unwrap()
                } else {
                    m.src
                };
                assert!(w.push(&m, &body), "room for record {sent}");
                sent += 1;
            }
            w.publish();
            for (m, p) in read_all(&r).unwrap() {
                assert_eq!(m.src_port, read as u16);
                assert_eq!(m.src.is_ipv6(), read % 2 == 0);
                assert!(p.iter().all(|&b| b == (read % 251) as u8));
                read += 1;
            }
        }
        assert_eq!(read, sent);
        assert!(!r.pending());
    }

    #[test]
    fn a_full_ring_refuses_until_the_reader_moves() {
        let (mut w, _r) = pair(4096);
        let body = [7u8; 1000];
        let mut n = 0;
        while w.push(&meta(1), &body) {
            n += 1;
        }
        // (A quarter of a 4 KiB ring is reserved for acknowledgements.)
        assert_eq!(n, (4096 - 1024) / (REC + 1000));
        let (mut w, r) = pair(1 << 20);
        let mut n = 0;
        while w.push(&meta(1), &body) {
            n += 1;
        }
        assert_eq!(n, ((1 << 20) - RESERVE as usize) / (REC + 1000));
        // Acknowledgements still fit.
        let ack = [0u8; 20];
        let mut acks = 0;
        while w.push(&meta(1), &ack) {
            acks += 1;
        }
        assert!(acks >= RESERVE as usize / (REC + 24), "{acks}");
        w.publish();
        assert_eq!(read_all(&r).unwrap().len(), n + acks);
        assert!(w.push(&meta(1), &body), "room again once read");
        assert!(
            !w.push(&meta(1), &[0u8; MAX_PAYLOAD + 1]),
            "too long for any ring"
        );
    }

    #[test]
    fn a_doorbell_is_asked_for_only_while_the_reader_sleeps() {
        let (mut w, r) = pair(4096);
        w.push(&meta(1), b"x");
        assert!(!w.publish(), "awake: no doorbell");
        read_all(&r).unwrap();
        assert!(!r.arm(), "nothing waits");
        w.push(&meta(1), b"y");
        assert!(w.publish(), "asleep: ring once");
        w.push(&meta(1), b"z");
        assert!(!w.publish(), "already rung");
        // A second thread goes to sleep meanwhile: records wait, it does not; the
        // first one's wake-up does not take the doorbell from the second.
        assert!(r.arm(), "records wait: do not sleep");
        r.disarm();
        read_all(&r).unwrap();
        assert!(!r.arm());
        r.disarm(); // (the first sleeper wakes: one still sleeps)
        w.push(&meta(1), b"v");
        assert!(w.publish(), "the one still asleep is rung");
        r.disarm();
        w.push(&meta(1), b"w");
        assert!(!w.publish(), "nobody sleeps");
    }

    /// Writes raw bytes into the ring's memory (as a misbehaving writer would).
    fn poke(w: &mut Writer, off: usize, bytes: &[u8]) {
        w.ring.mem.write(off, bytes).unwrap();
    }

    #[test]
    fn a_corrupt_ring_is_reported_not_trusted() {
        // A head far beyond the tail.
        let (mut w, r) = pair(4096);
        poke(&mut w, HEAD, &(1u64 << 40).to_le_bytes());
        assert!(read_all(&r).is_err());
        // A record longer than what was published.
        let (mut w, r) = pair(4096);
        w.push(&meta(1), &[1u8; 100]);
        w.publish();
        poke(&mut w, HEADER, &4000u32.to_le_bytes());
        assert!(read_all(&r).is_err());
        // An unknown address family.
        let (mut w, r) = pair(4096);
        w.push(&meta(1), &[1u8; 8]);
        w.publish();
        poke(&mut w, HEADER + 4, &9u32.to_le_bytes());
        assert!(read_all(&r).is_err());
        // A skip marker past the head.
        let (mut w, r) = pair(4096);
        w.push(&meta(1), &[1u8; 8]);
        w.publish();
        poke(&mut w, HEADER, &SKIP.to_le_bytes());
        assert!(read_all(&r).is_err());
        // A head that is not a record boundary (7 bytes of a record).
        let (mut w, r) = pair(4096);
        poke(&mut w, HEAD, &7u64.to_le_bytes());
        assert!(read_all(&r).is_err());
    }

    /// A RC SEND ONLY to QP `qpn` with `len` payload bytes (padded), its ICRC left 0.
    fn send_only(qpn: u32, len: usize) -> Vec<u8> {
        let pad = (4 - len % 4) % 4;
        let mut p = vec![0x04, (pad as u8) << 4, 0xff, 0xff, 0];
        p.extend_from_slice(&qpn.to_be_bytes()[1..]);
        p.extend_from_slice(&[0, 0, 0, 1]);
        p.extend((0..len).map(|i| (i % 253) as u8));
        p.resize(p.len() + pad + 4, 0xee);
        p
    }

    #[test]
    fn long_payloads_stay_in_the_ring_for_the_engine_to_place() {
        let (mut w, r) = pair(1 << 20);
        let elided = meta(1);
        let sealed = meta(2);
        let long = send_only(0x11, 3001);
        w.push(&elided, &long);
        w.push(&elided, &send_only(0x11, 100));
        w.push(&elided, &send_only(1, 3000));
        w.push(&sealed, &long);
        w.publish();
        let mut buf = vec![0x77u8; MAX_PAYLOAD];
        let mut seen = Vec::new();
        r.drain(usize::MAX, &mut buf, true, |_, p, src| {
            let Some(src) = src else {
                seen.push((false, p.to_vec() == long));
                return;
            };
            // Headers and trailer copied, the payload left where it was.
            assert_eq!(p.len(), long.len());
            assert_eq!(p[..64], long[..64]);
            assert_eq!(p[12 + 3001..], long[12 + 3001..]);
            assert!(p[64..12 + 3001].iter().all(|&b| b == 0x77));
            let mut whole = vec![0u8; p.len()];
            src.copy_to(0, &mut whole);
            assert_eq!(whole, long);
            let mut part = [0u8; 10];
            src.copy_to(12 + 2991, &mut part);
            assert_eq!(part[..], long[12 + 2991..12 + 3001]);
            // Past the datagram: zeros, never other bytes of the ring.
            let mut past = [1u8; 8];
            src.copy_to(p.len() - 4, &mut past);
            assert_eq!(past, [0u8; 8]);
            seen.push((true, true));
        })
        .unwrap();
        // Short, to the GSI QP, or sealed with its ICRC: copied whole.
        assert_eq!(
            seen,
            [(true, true), (false, false), (false, false), (false, true)]
        );
        // Without in-place placement, every record is copied whole.
        let (mut w, r) = pair(1 << 20);
        w.push(&elided, &long);
        w.publish();
        let got = read_all(&r).unwrap();
        assert_eq!(got[0].1, long);
        // A writer that is gone (its process ended: its mapping and descriptor
        // closed) leaves its records readable, in place too: the reader's own
        // mapping keeps the ring.
        let (mut w, r) = pair(1 << 20);
        w.push(&elided, &long);
        w.publish();
        drop(w);
        let mut placed = 0;
        r.drain(usize::MAX, &mut buf, true, |_, p, src| {
            let mut whole = vec![0u8; p.len()];
            src.expect("placed from the ring").copy_to(0, &mut whole);
            assert_eq!(whole, long);
            placed += 1;
        })
        .unwrap();
        assert_eq!(placed, 1);
    }

    #[test]
    fn the_fuzz_entry_survives_junk() {
        let mut junk = vec![0xffu8; HEADER + 4096];
        assert_eq!(fuzz_ring(&junk), 0);
        junk[..8].copy_from_slice(&64u64.to_le_bytes());
        junk[HEADER..HEADER + 4].copy_from_slice(&8u32.to_le_bytes());
        junk[HEADER + 4..HEADER + 8].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(fuzz_ring(&junk), 8);
        assert_eq!(fuzz_ring(&[]), 0);
    }
}
