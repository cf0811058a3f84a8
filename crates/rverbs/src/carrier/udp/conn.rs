//! Connected send sockets: one UDP socket per (local address, peer address, TTL / hop
//! limit, TOS / traffic class), connected to the peer's port 4791, through which
//! the UDP carrier's batched sends leave.
//!
//! **Why.** `sendmsg` on an unconnected socket looks the route up for every datagram;
//! a connected socket keeps it. On loopback that is 0.4 µs of kernel time per
//! datagram, a tenth of a small ping-pong's hop (`bench/kernel_floor.sh`, DESIGN §3).
//!
//! **The IPv4 Identification.** The ICRC covers the IPv4 header's Identification
//! (IBTA A17.3.3 masks only TOS, TTL and the checksum). Linux gives a datagram from an
//! unconnected socket with DF the ID 0, but numbers those of a connected socket from a
//! random per-socket start, one per datagram (`ip_select_ident_segs` in
//! include/net/ip.h: `atomic_add_return(1, &inet_id)` for every skb, a `UDP_SEGMENT`
//! train included; the segments of a train that is cut up later get that ID plus
//! their index, `inet_gso_segment`). So the ICRC can only be right if we know the
//! counter. We learn it once per socket with a probe: the socket sends one datagram to
//! a local socket of ours (an explicit destination does not change the numbering,
//! which follows the socket's connected state) with a copy of what it sent looped back
//! to its error queue (`SO_TIMESTAMPING`, [`sys::set_tx_loop`]), whose IPv4 header
//! holds the ID. From then on the ID of each datagram is the last one plus one, and
//! [`ConnTx::send`] rewrites each packet's ICRC for the socket's own source port and
//! that ID before the send. A refused message makes the counter uncertain: the send
//! stops there, that message and the rest leave through the device's unconnected
//! socket, and the next send probes again. A socket whose probe fails is not used; its
//! peer's datagrams leave through the unconnected socket, as before.
//!
//! IPv6 has no Identification: its connected sockets need no probe.
//!
//! **How many.** At most [`MAX_CONNECTED`] paths have a socket; when all are taken, a
//! new path takes the slot of one unused for [`IDLE_BATCHES`] sends (closing its
//! socket), and otherwise sends through the unconnected socket.

use crate::sys;
use rverbs_engine::net::fill_icrc_cached_parts;
use rverbs_engine::Transmit;
use rverbs_wire::icrc;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The RoCE v2 UDP port, the peers' destination port.
const ROCE_PORT: u16 = 4791;

/// Most connected sockets one device keeps (a UD QP talking to thousands of peers
/// sends to the rest through the unconnected socket).
pub(crate) const MAX_CONNECTED: usize = 64;

/// When all [`MAX_CONNECTED`] slots are taken, a path that has not been used for this
/// many sends (one per path a flush sends along, [`ConnTx::send`]) gives its slot
/// (and closes its socket) to a new one. Paths in use keep theirs: more peers than slots, all active, send the rest
/// through the unconnected socket rather than make and probe a socket per batch.
pub(crate) const IDLE_BATCHES: u64 = 4096;

/// How long a probe waits for its own datagram (it comes back over loopback at once).
const PROBE_WAIT: Duration = Duration::from_millis(50);

/// One peer's connected socket.
struct Link {
    local: IpAddr,
    peer: IpAddr,
    /// The TTL / hop limit and TOS / traffic class the socket sends with (set on the
    /// socket; the ICRC masks both).
    meta: Meta,
    /// `None`: the socket could not be set up (or its IPv4 ID not learned); the peer's
    /// datagrams use the unconnected socket.
    sock: Option<Socket>,
    /// The socket's local (source) port, which the ICRC covers.
    port: u16,
    /// IPv4: the Identification the kernel gives the socket's next datagram, once
    /// known (`None`: probe before the next send). IPv6: unused.
    next_id: Option<u16>,
    /// Probes in a row that could not be sent (see [`REFUSED_PROBES`]).
    refused_probes: u8,
    /// [`ConnTx::batches`] when the path was last sent along.
    used: u64,
}

/// Probes in a row whose datagrams the socket refused (a full send buffer, a pending
/// error) before its peer gives it up for the unconnected socket; until then each
/// batch the socket cannot probe for leaves through the unconnected one.
const REFUSED_PROBES: u8 = 8;

/// Why a probe learned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeError {
    /// The socket refused every probe datagram: try again with the next batch.
    Refused,
    /// The counter cannot be learned through this socket.
    Unusable,
}

/// A datagram's TTL / hop limit (0: the default, 64) and TOS / traffic class: part of a
/// link's key, since a connected socket sends all its datagrams with the same ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
}

impl Meta {
    /// The meta of an outgoing packet, its hop limit 0 read as the unicast default.
    pub(crate) fn of(t: &Transmit) -> Meta {
        Meta {
            hop_limit: if t.hop_limit == 0 { 64 } else { t.hop_limit },
            traffic_class: t.traffic_class,
        }
    }

    /// What a socket does with no option set.
    pub(crate) fn is_default(self) -> bool {
        self.hop_limit == 64 && self.traffic_class == 0
    }
}

/// Where a batch goes: from `local` to `peer` with `meta`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Path {
    pub(crate) local: IpAddr,
    pub(crate) peer: IpAddr,
    pub(crate) meta: Meta,
}

/// The connected sockets of a device, with the probe's receiving socket and the ICRC
/// prefix cache of the rewritten packets (used under the device's send lock).
#[derive(Default)]
pub(crate) struct ConnTx {
    links: Vec<Link>,
    /// Where probes arrive: an IPv4 socket on an ephemeral port of every local address.
    prober: Option<UdpSocket>,
    cache: icrc::PrefixCache,
    /// Told apart from a stale probe that came back after its sender gave up.
    nonce: u64,
    /// Probe datagrams sent (two learn and check one socket's IPv4 counter); read by
    /// the tests.
    pub(crate) probes: u64,
    /// Calls of [`ConnTx::send`] so far (the clock of [`IDLE_BATCHES`]).
    batches: u64,
    /// A probe's copy never came back (the kernel does not loop sent data back to this
    /// process: `net.core.tstamp_allow_data` = 0 without CAP_NET_RAW): IPv4 peers get
    /// no connected socket, and no probe waits again.
    no_loop: bool,
    /// The network namespace of the device (`None`: not known, or a test's): sockets
    /// are made only on a thread inside it. A context belongs to the namespace it was
    /// opened in, and any thread may post to it; a socket made from a thread elsewhere
    /// would send into that thread's namespace (where the same loopback addresses
    /// exist).
    netns: Option<(u64, u64)>,
    /// Tests: one more datagram leaves between the two probes, as if the kernel
    /// numbered in steps of two.
    #[cfg(test)]
    skew_probes: bool,
}

impl ConnTx {
    /// The connected sockets of a device opened on this thread: made only in this
    /// thread's network namespace.
    pub(crate) fn for_this_netns() -> ConnTx {
        ConnTx {
            netns: current_netns(),
            ..ConnTx::default()
        }
    }

    /// Whether this thread may make the device's sockets.
    fn in_device_netns(&self) -> bool {
        self.netns.is_none() || current_netns() == self.netns
    }

    /// Sends `msgs` (all along `path`; the packets of message `m` are
    /// `ts[order[m.first ..][..m.count]]`) through the path's connected socket, first
    /// rewriting each packet's ICRC for that socket's source port and IPv4 ID. Returns
    /// that port and how many of `msgs`, from the first, left through it: the send stops
    /// at a refused message, and the caller sends it and the rest through the
    /// unconnected socket. `None`, having sent nothing, when the peer has no usable
    /// connected socket.
    pub(crate) fn send(
        &mut self,
        path: Path,
        msgs: &[sys::Outgoing],
        order: &[usize],
        ts: &mut [Transmit],
        bodies: &[&[u8]],
        scratch: &mut sys::SendScratch,
    ) -> Option<(u16, usize)> {
        let Path { local, peer, meta } = path;
        let i = self.link(local, peer, meta)?;
        if peer.is_ipv4() && self.links[i].next_id.is_none() {
            match self.probe(i) {
                Ok(id) => {
                    self.links[i].next_id = Some(id);
                    self.links[i].refused_probes = 0;
                }
                Err(ProbeError::Refused) if self.links[i].refused_probes + 1 < REFUSED_PROBES => {
                    // (A buffer still full from the send that made the counter
                    // uncertain, say.) This batch leaves through the unconnected
                    // socket; the next one probes again.
                    self.links[i].refused_probes += 1;
                    return None;
                }
                Err(_) => {
                    // The counter cannot be learned: never use this socket again.
                    self.links[i].sock = None;
                    return None;
                }
            }
        }
        let first_id = self.links[i].next_id.unwrap_or(0);
        self.fill(i, first_id, msgs, order, ts, bodies);
        let link = &mut self.links[i];
        let sock = link.sock.as_ref()?;
        // Stops at the first refused message (`named` false).
        let parts = |k: usize| ts[order[k]].parts(body_of(bodies, order[k]));
        let sent = sys::send_batch(sock, msgs, &parts, scratch, false);
        link.next_id = if sent == msgs.len() {
            Some(first_id.wrapping_add(sent as u16))
        } else {
            // Whether the refused message took an ID depends on where the kernel
            // refused it (a pending ICMP error or a full buffer: before; a netfilter
            // drop: after): the next send learns the counter again. The messages
            // after it, whose ICRCs assumed it took none, are not sent from here.
            None
        };
        Some((link.port, sent))
    }

    /// Rewrites the ICRC of each packet of `msgs` for link `i`'s port and the IPv4 IDs
    /// its datagrams get from `first_id` on.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &mut self,
        i: usize,
        first_id: u16,
        msgs: &[sys::Outgoing],
        order: &[usize],
        ts: &mut [Transmit],
        bodies: &[&[u8]],
    ) {
        let (local, peer, port) = (self.links[i].local, self.links[i].peer, self.links[i].port);
        // Each message is one skb: one ID; a train's segment k gets that ID plus k
        // when it is cut up (`inet_gso_segment`), which is what a receiver that checks
        // the real header sees (an rverbs receiver recovers any ID).
        for (j, m) in msgs.iter().enumerate() {
            let id = first_id.wrapping_add(j as u16);
            for k in 0..m.count {
                let t = order[m.first + k];
                fill_icrc_cached_parts(
                    &mut self.cache,
                    local,
                    peer,
                    id.wrapping_add(k as u16),
                    port,
                    &mut ts[t],
                    body_of(bodies, t),
                );
            }
        }
    }

    /// Fills the ICRC of a packet that leaves from the device's unconnected socket:
    /// port 4791, IPv4 ID 0 (DF), as [`rverbs_engine::net::fill_icrc`] does, from the
    /// cached header prefix.
    /// `body`: the packet's body bytes ([`rverbs_engine::Body::bytes`]; empty without).
    pub(crate) fn fill_unconnected(&mut self, t: &mut Transmit, body: &[u8]) {
        let (src, dst) = (t.src, t.dst);
        fill_icrc_cached_parts(&mut self.cache, src, dst, 0, ROCE_PORT, t, body);
    }

    /// The index of `peer`'s link from `local`, set up on first use; `None` when it
    /// has no usable socket.
    fn link(&mut self, local: IpAddr, peer: IpAddr, meta: Meta) -> Option<usize> {
        self.batches += 1;
        if let Some(i) = self
            .links
            .iter()
            .position(|l| l.peer == peer && l.local == local && l.meta == meta)
        {
            self.links[i].used = self.batches;
            return self.links[i].sock.is_some().then_some(i);
        }
        if (peer.is_ipv4() && self.no_loop) || !self.in_device_netns() {
            // (A thread in another namespace does not decide for the device's: the
            // link is not recorded, and a thread inside it makes it later.)
            return None;
        }
        // A free slot, or the longest-idle path's if it has been idle long enough
        // (its socket closes; used again, it is set up again like a new path).
        let slot = if self.links.len() < MAX_CONNECTED {
            None
        } else {
            let (j, l) = self.links.iter().enumerate().min_by_key(|(_, l)| l.used)?;
            if self.batches - l.used < IDLE_BATCHES {
                return None;
            }
            Some(j)
        };
        let (sock, port) = match connected_socket(local, peer, meta) {
            Ok(x) => (Some(x.0), x.1),
            Err(_) => (None, 0),
        };
        let link = Link {
            local,
            peer,
            meta,
            sock,
            port,
            next_id: None,
            refused_probes: 0,
            used: self.batches,
        };
        let i = match slot {
            Some(j) => {
                self.links[j] = link;
                j
            }
            None => {
                self.links.push(link);
                self.links.len() - 1
            }
        };
        self.links[i].sock.is_some().then_some(i)
    }

    /// Learns the IPv4 ID the kernel gives link `i`'s next datagram: sends one probe
    /// through it to our own probe socket with the sent copy looped back to the
    /// socket's error queue (`sys::set_tx_loop`), and reads the ID in its header.
    fn probe(&mut self, i: usize) -> Result<u16, ProbeError> {
        let unusable = ProbeError::Unusable;
        let (local, port) = (self.links[i].local, self.links[i].port);
        let IpAddr::V4(l4) = local else {
            return Err(unusable);
        };
        if self.prober.is_none() && self.in_device_netns() {
            self.prober = probe_socket().ok();
        }
        let prober = self.prober.as_ref().ok_or(unusable)?;
        let to_port = prober.local_addr().map_err(|_| unusable)?.port();
        let sock = self.links[i].sock.as_ref().ok_or(unusable)?;
        sys::set_tx_loop(sock, true).map_err(|_| unusable)?;
        let (mut found, mut sent) = (None, false);
        let dst = SockAddr::from(SocketAddr::new(local, to_port));
        // Two tries: a socket may hold an error from an ICMP message (the peer's port
        // was closed), which the first send reports instead of sending.
        for _ in 0..2 {
            self.nonce = self.nonce.wrapping_add(1);
            self.probes += 1;
            let probe = probe_datagram(self.nonce);
            if sock.send_to(&probe, &dst).is_err() {
                continue;
            }
            sent = true;
            found = looped_id(sock, l4, port, to_port, &probe);
            if found.is_none() {
                // Sent, but no copy came back: none will (no second wait).
                self.no_loop = true;
            }
            break;
        }
        if let Some(id) = found {
            self.no_loop = false;
            // A second probe checks the model the prediction rests on: the next
            // datagram takes the next ID. A kernel that numbers otherwise (a constant
            // ID, steps of more than one) gets no connected socket.
            self.nonce = self.nonce.wrapping_add(1);
            self.probes += 1;
            let probe = probe_datagram(self.nonce);
            #[cfg(test)]
            if self.skew_probes {
                let _ = sock.send_to(&probe_datagram(0), &dst);
            }
            match sock.send_to(&probe, &dst) {
                Ok(_) => {
                    let next = looped_id(sock, l4, port, to_port, &probe);
                    found = (next == Some(id.wrapping_add(1))).then_some(id.wrapping_add(1));
                }
                // Refused (full buffer, pending error): try again with a later batch.
                Err(_) => (found, sent) = (None, false),
            }
        }
        let off = sys::set_tx_loop(sock, false);
        // The other copies (one per timestamp kind), and the probes themselves, are of
        // no further use.
        let mut sink = [0u8; 256];
        while sys::recv_error_queue(sock, &mut sink).is_ok() {}
        while prober.recv(&mut sink).is_ok() {}
        // Were the loop-back still on, every datagram would be copied: not used then.
        off.map_err(|_| unusable)?;
        match found {
            // The probe took ID `id`; the next datagram gets the one after it.
            Some(id) => Ok(id.wrapping_add(1)),
            None if !sent => Err(ProbeError::Refused),
            None => Err(unusable),
        }
    }

    /// How many peers have a usable connected socket.
    #[cfg(test)]
    pub(crate) fn connected(&self) -> usize {
        self.links.iter().filter(|l| l.sock.is_some()).count()
    }
}

/// The calling thread's network namespace: the device and inode numbers of its
/// `/proc/thread-self/ns/net` (two namespaces are the same when both are; see
/// namespaces(7)). `None` when it cannot be read.
/// Packet `k`'s body bytes in a batch's `bodies` (empty when it has none: `bodies` is
/// empty for a batch without bodies).
pub(crate) fn body_of<'a>(bodies: &[&'a [u8]], k: usize) -> &'a [u8] {
    bodies.get(k).copied().unwrap_or(&[])
}

pub(crate) fn current_netns() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/thread-self/ns/net").ok()?;
    Some((m.dev(), m.ino()))
}

/// A socket bound to an ephemeral port of `local`, connected to `peer`'s port 4791,
/// with the device socket's IPv4 settings (DF: the ICRC assumes it) and `meta`'s TTL /
/// hop limit and TOS / traffic class, and its port.
fn connected_socket(local: IpAddr, peer: IpAddr, meta: Meta) -> io::Result<(Socket, u16)> {
    let domain = if local.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    if local.is_ipv4() != peer.is_ipv4() {
        return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
    }
    let s = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
    if local.is_ipv6() {
        s.set_only_v6(true)?;
        if !meta.is_default() {
            s.set_unicast_hops_v6(meta.hop_limit.into())?;
            s.set_tclass_v6(meta.traffic_class.into())?;
        }
    } else {
        sys::set_pmtudisc_do(&s)?;
        if !meta.is_default() {
            s.set_ttl_v4(meta.hop_limit.into())?;
            s.set_tos_v4(meta.traffic_class.into())?;
        }
    }
    let _ = s.set_send_buffer_size(4 << 20);
    // Nothing is received here (peers send to port 4791), but the receive buffer also
    // bounds the error queue, where the probes' copies come back: the default stays.
    s.bind(&SockAddr::from(SocketAddr::new(local, 0)))?;
    s.connect(&SockAddr::from(SocketAddr::new(peer, ROCE_PORT)))?;
    s.set_nonblocking(true)?;
    let port = s
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok((s, port))
}

/// The socket probes go to: IPv4, every local address, an ephemeral port (it only
/// drains them).
fn probe_socket() -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A probe: a marker and the nonce (told apart from an older probe's copy).
fn probe_datagram(nonce: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(b"rverbsID");
    p[8..].copy_from_slice(&nonce.to_be_bytes());
    p
}

/// Reads the looped-back copies on `sock`'s error queue (waiting up to [`PROBE_WAIT`])
/// until the one of `probe`, sent from `local:from_port` to `local:to_port`, and returns
/// the IPv4 Identification in its header. The copy starts at the link-layer header, whose
/// length depends on the device: the IPv4 header is found from the end, as the 28
/// header bytes before the probe, and must say what we sent.
fn looped_id(
    sock: &Socket,
    local: Ipv4Addr,
    from_port: u16,
    to_port: u16,
    probe: &[u8; 16],
) -> Option<u16> {
    let deadline = Instant::now() + PROBE_WAIT;
    let mut buf = [0u8; 256];
    loop {
        let n = match sys::recv_error_queue(sock, &mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        let Some(at) = n.checked_sub(28 + probe.len()) else {
            continue;
        };
        let (ip, rest) = buf[at..n].split_at(20);
        let (udp, payload) = rest.split_at(8);
        let ours = ip[0] == 0x45
            && ip[9] == 17
            && ip[12..16] == local.octets()
            && ip[16..20] == local.octets()
            && udp[0..2] == from_port.to_be_bytes()
            && udp[2..4] == to_port.to_be_bytes()
            && payload == probe;
        if ours {
            return Some(u16::from_be_bytes([ip[4], ip[5]]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(local: IpAddr, peer: IpAddr, meta: Meta) -> Path {
        Path { local, peer, meta }
    }

    /// Sends one 8-byte SEND ONLY from `local` to `peer` (default TTL and TOS) through
    /// `conn`.
    fn send_one(
        conn: &mut ConnTx,
        scratch: &mut sys::SendScratch,
        local: IpAddr,
        peer: IpAddr,
    ) -> Option<(u16, usize)> {
        let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
        let one = [msg(peer, 0, &[24])];
        conn.send_whole(to(local, peer, DEF), &one, &[0], &mut ts, scratch)
    }

    /// Checks that `conn` refuses a packet from `local` to `peer` (the caller sends it
    /// through the unconnected socket) without rewriting it.
    fn assert_goes_unconnected(
        conn: &mut ConnTx,
        scratch: &mut sys::SendScratch,
        local: IpAddr,
        peer: IpAddr,
    ) {
        let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
        let before = ts[0].payload.clone();
        let one = [msg(peer, 0, &[24])];
        assert!(conn
            .send_whole(to(local, peer, DEF), &one, &[0], &mut ts, scratch)
            .is_none());
        assert_eq!(ts[0].payload, before, "nothing rewritten");
    }

    const DEF: Meta = Meta {
        hop_limit: 64,
        traffic_class: 0,
    };

    /// A "peer": a UDP socket on a free 127.0.0.x:4791, x at most `top` (the device's
    /// own addresses are 127.0.0.2..=254 too; any free one will do). Tests that free
    /// and take their address again start from their own `top`.
    fn peer_below(top: u8) -> (Ipv4Addr, UdpSocket) {
        for x in (100..=top).rev() {
            let a = Ipv4Addr::new(127, 0, 0, x);
            if let Ok(s) = UdpSocket::bind(SocketAddr::new(IpAddr::V4(a), ROCE_PORT)) {
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                return (a, s);
            }
        }
        panic!("no free 127.0.0.x:4791");
    }

    /// The set-up of most tests: 127.0.0.1 sending to a fresh peer (its address at most
    /// 127.0.0.`top`), an empty `ConnTx` and send scratch.
    fn rig(top: u8) -> (IpAddr, IpAddr, UdpSocket, ConnTx, sys::SendScratch) {
        let (peer_ip, peer_sock) = peer_below(top);
        let (local, peer) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(peer_ip));
        (
            local,
            peer,
            peer_sock,
            ConnTx::default(),
            sys::SendScratch::default(),
        )
    }

    impl ConnTx {
        /// [`ConnTx::send`] of a batch without bodies (every test packet is whole).
        fn send_whole(
            &mut self,
            path: Path,
            msgs: &[sys::Outgoing],
            order: &[usize],
            ts: &mut [Transmit],
            scratch: &mut sys::SendScratch,
        ) -> Option<(u16, usize)> {
            self.send(path, msgs, order, ts, &[], scratch)
        }
    }

    /// A packet as the engine hands it over: a BTH (opcode `op`), `n` payload bytes, an
    /// ICRC for the unconnected socket (port 4791, ID 0) that the send must replace.
    fn packet(local: IpAddr, peer: IpAddr, op: u8, n: usize, fill: u8) -> Transmit {
        let mut payload = vec![fill; 12 + n + 4];
        payload[0] = op;
        payload[1] = 0x40;
        payload[4] = 0;
        rverbs_engine::net::fill_icrc(local, peer, ROCE_PORT, &mut payload);
        Transmit {
            src: local,
            dst: peer,
            src_port: ROCE_PORT,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            roce_v1: false,
            payload,
            body: None,
        }
    }

    fn msg(dst: IpAddr, first: usize, lens: &[usize]) -> sys::Outgoing {
        sys::Outgoing {
            dst: SocketAddr::new(dst, ROCE_PORT),
            first,
            count: lens.len(),
            segment: if lens.len() > 1 { lens[0] as u16 } else { 0 },
            first_len: lens[0],
            last_len: *lens.last().unwrap(),
            bytes: lens.iter().sum(),
        }
    }

    /// The copies looped back to the link's error queue: (IPv4 ID, UDP payload) of each
    /// sent skb, the UDP payload found from its UDP header's length.
    fn looped(conn: &ConnTx, local: IpAddr, peer: IpAddr) -> Vec<(u16, [u8; 28], Vec<u8>)> {
        let link = conn
            .links
            .iter()
            .find(|l| l.local == local && l.peer == peer)
            .unwrap();
        let sock = link.sock.as_ref().unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match sys::recv_error_queue(sock, &mut buf) {
                Ok(n) => {
                    // Ethernet header on loopback, then IPv4 (no options) and UDP.
                    let ip = &buf[14..n];
                    let udp_len = usize::from(u16::from_be_bytes([ip[24], ip[25]]));
                    let mut h = [0u8; 28];
                    h.copy_from_slice(&ip[..28]);
                    out.push((
                        u16::from_be_bytes([ip[4], ip[5]]),
                        h,
                        ip[28..20 + udp_len].to_vec(),
                    ));
                }
                Err(_) if !out.is_empty() => break,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        out
    }

    /// Checks a looped skb: each segment of `seg` bytes carries the ICRC of the real
    /// header with the skb's ID plus the segment's index.
    fn check_icrc(id: u16, h: &[u8; 28], udp_payload: &[u8], seg: usize) {
        for (k, p) in udp_payload.chunks(seg).enumerate() {
            let mut ip = [0u8; 20];
            ip.copy_from_slice(&h[..20]);
            ip[2..4].copy_from_slice(&((28 + p.len()) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
            let mut udp = [0u8; 8];
            udp.copy_from_slice(&h[20..]);
            udp[4..6].copy_from_slice(&((8 + p.len()) as u16).to_be_bytes());
            let n = p.len() - 4;
            let want = icrc::compute_parts(&ip, &udp, &p[..n]).unwrap();
            assert_eq!(
                u32::from_le_bytes(p[n..].try_into().unwrap()),
                want,
                "segment {k} of skb with ID {id}"
            );
        }
    }

    #[test]
    fn sends_carry_the_icrc_of_their_real_ipv4_header() {
        let (local, peer, peer_sock, mut conn, mut scratch) = rig(250);
        // A single datagram, a train of three (24, 24, 20 bytes) and another single.
        let mut ts = vec![
            packet(local, peer, 0x04, 8, 1),
            packet(local, peer, 0x04, 8, 2),
            packet(local, peer, 0x04, 8, 3),
            packet(local, peer, 0x11, 4, 4),
            packet(local, peer, 0x04, 100, 5),
        ];
        let order = [0, 1, 2, 3, 4];
        let first = [msg(peer, 0, &[24])];
        assert!(conn
            .send_whole(to(local, peer, DEF), &first, &order, &mut ts, &mut scratch)
            .is_some());
        assert_eq!(conn.connected(), 1);
        assert_eq!(
            conn.probes, 2,
            "a probe learns the counter, a second confirms it"
        );
        // From here on every sent skb is looped back with its real header.
        let sock = conn.links[0].sock.as_ref().unwrap();
        sys::set_tx_loop(sock, true).unwrap();
        let predicted = conn.links[0].next_id.unwrap();
        let rest = [msg(peer, 1, &[24, 24, 20]), msg(peer, 4, &[116])];
        assert!(conn
            .send_whole(to(local, peer, DEF), &rest, &order, &mut ts, &mut scratch)
            .is_some());
        let got = looped(&conn, local, peer);
        // TX_SCHED and TX_SOFTWARE: each skb may come back twice; keep one per ID.
        let mut skbs: Vec<_> = got.into_iter().collect();
        skbs.dedup_by_key(|(id, _, _)| *id);
        assert_eq!(skbs.len(), 2, "two skbs: the train and the last datagram");
        assert_eq!(skbs[0].0, predicted);
        assert_eq!(skbs[1].0, predicted.wrapping_add(1));
        check_icrc(skbs[0].0, &skbs[0].1, &skbs[0].2, 24);
        check_icrc(skbs[1].0, &skbs[1].1, &skbs[1].2, 116);
        assert_eq!(conn.links[0].next_id, Some(predicted.wrapping_add(2)));
        // The peer got all five datagrams (the train cut up on receipt), from the
        // link's port.
        let mut buf = [0u8; 256];
        let mut lens = Vec::new();
        for _ in 0..5 {
            let (n, from) = peer_sock.recv_from(&mut buf).unwrap();
            assert_eq!(from.port(), conn.links[0].port);
            lens.push(n);
        }
        assert_eq!(lens, [24, 24, 24, 20, 116]);
        // A second probe finds the counter where the sends left it.
        conn.links[0].next_id = None;
        let old = predicted.wrapping_add(2);
        let before = conn.probes;
        assert!(conn
            .send_whole(to(local, peer, DEF), &first, &order, &mut ts, &mut scratch)
            .is_some());
        assert_eq!(conn.probes, before + 2);
        assert_eq!(
            conn.links[0].next_id,
            Some(old.wrapping_add(3)),
            "the probes took IDs {old} and the next, the datagram after them the next"
        );
    }

    #[test]
    fn a_link_per_ttl_and_tos_sends_with_them() {
        let (local, peer, peer_sock, mut conn, mut scratch) = rig(250);
        let hop1 = Meta {
            hop_limit: 1,
            traffic_class: 0x10,
        };
        let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
        let one = [msg(peer, 0, &[24])];
        assert!(conn
            .send_whole(to(local, peer, hop1), &one, &[0], &mut ts, &mut scratch)
            .is_some());
        assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
        assert_eq!(conn.connected(), 2, "one socket per (peer, TTL, TOS)");
        let i = conn.links.iter().position(|l| l.meta == hop1).unwrap();
        sys::set_tx_loop(conn.links[i].sock.as_ref().unwrap(), true).unwrap();
        let predicted = conn.links[i].next_id.unwrap();
        assert!(conn
            .send_whole(to(local, peer, hop1), &one, &[0], &mut ts, &mut scratch)
            .is_some());
        let link = &conn.links[i];
        let sock = link.sock.as_ref().unwrap();
        let mut buf = [0u8; 256];
        let mut got = None;
        for _ in 0..2000 {
            if let Ok(n) = sys::recv_error_queue(sock, &mut buf) {
                got = Some(n);
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let n = got.expect("the copy came back");
        let ip = &buf[14..n];
        assert_eq!((ip[8], ip[1]), (1, 0x10), "TTL 1, TOS 0x10 on the wire");
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), predicted);
        let mut h = [0u8; 28];
        h.copy_from_slice(&ip[..28]);
        check_icrc(predicted, &h, &ip[28..28 + 24], 24);
        let mut b = [0u8; 64];
        for _ in 0..3 {
            peer_sock.recv_from(&mut b).unwrap();
        }
    }

    #[test]
    fn a_refused_send_relearns_the_counter() {
        // (Its address is freed and taken again: away from the other tests' range.)
        let (local, peer, peer_sock, mut conn, mut scratch) = rig(180);
        assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
        // The peer goes away: the next datagram draws an ICMP port unreachable, and
        // the send after it is refused (ECONNREFUSED) without taking an ID.
        drop(peer_sock);
        let mut refused = false;
        for _ in 0..20 {
            assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
            if conn.links[0].next_id.is_none() {
                refused = true;
                break;
            }
        }
        assert!(refused, "a refused send makes the counter unknown");
        // The peer is back; the next send probes again and is right on the wire.
        let _peer_sock = UdpSocket::bind(SocketAddr::new(peer, ROCE_PORT)).unwrap();
        let probes = conn.probes;
        let sock = conn.links[0].sock.as_ref().unwrap();
        sys::set_tx_loop(sock, true).unwrap();
        // (The probe turns the loop-back off when it is done; turn it on again after.)
        assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
        assert!(conn.probes > probes);
        let sock = conn.links[0].sock.as_ref().unwrap();
        sys::set_tx_loop(sock, true).unwrap();
        let predicted = conn.links[0].next_id.unwrap();
        assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
        let got = looped(&conn, local, peer);
        assert_eq!(got[0].0, predicted);
        check_icrc(got[0].0, &got[0].1, &got[0].2, 24);
    }

    /// Waits until `sock` holds a pending error (an ICMP port unreachable), without
    /// taking it: nothing is received on a link's socket, and its error queue is empty
    /// outside probes, so readiness is the error.
    fn error_pending(sock: &Socket) -> bool {
        use std::os::fd::AsRawFd;
        let mut ready = Vec::new();
        sys::poll_readable(&[sock.as_raw_fd()], 500, &mut ready).is_ok() && ready[0]
    }

    #[test]
    fn no_datagram_leaves_after_a_refused_one() {
        // Three messages (one `sendmmsg`), the first of them refused.
        refused_batch_leaves_nothing(150, &[msg_at(0, &[24]), msg_at(1, &[24]), msg_at(2, &[24])]);
    }

    #[test]
    fn a_refused_train_leaves_nothing() {
        // One 3-segment train (gathered into one buffer, one `sendmsg`), refused.
        refused_batch_leaves_nothing(140, &[msg_at(0, &[24, 24, 24])]);
    }

    /// `msg` to the peer `refused_batch_leaves_nothing` fills in.
    fn msg_at(first: usize, lens: &[usize]) -> sys::Outgoing {
        msg(IpAddr::V4(Ipv4Addr::UNSPECIFIED), first, lens)
    }

    /// With an ICMP error pending on the path's socket, `batch` (3 packets of 24
    /// bytes) is refused at its first message: none of it leaves the connected
    /// socket (it would carry ICRCs for guessed IDs), the counter is learned again.
    fn refused_batch_leaves_nothing(top: u8, batch: &[sys::Outgoing]) {
        // (Its address is freed and taken again: away from the other tests' ranges.)
        let (local, peer, peer_sock, mut conn, mut scratch) = rig(top);
        let batch: Vec<_> = batch
            .iter()
            .map(|m| sys::Outgoing {
                dst: SocketAddr::new(peer, ROCE_PORT),
                ..*m
            })
            .collect();
        let mut one = vec![packet(local, peer, 0x04, 8, 1)];
        let single = [msg(peer, 0, &[24])];
        assert!(conn
            .send_whole(to(local, peer, DEF), &single, &[0], &mut one, &mut scratch)
            .is_some());
        // The peer goes away; a datagram to it leaves an ECONNREFUSED pending on the
        // socket, which the next send (the batch's first message) reports without
        // taking an ID.
        drop(peer_sock);
        let mut pending = false;
        for _ in 0..20 {
            conn.send_whole(to(local, peer, DEF), &single, &[0], &mut one, &mut scratch);
            let link = &conn.links[0];
            if link.next_id.is_some() && error_pending(link.sock.as_ref().unwrap()) {
                pending = true;
                break;
            }
        }
        assert!(pending, "an ICMP error is pending on the socket");
        // The peer is back (the error stays pending): every skb that leaves is looped
        // back with its real header.
        let _peer_sock = UdpSocket::bind(SocketAddr::new(peer, ROCE_PORT)).unwrap();
        sys::set_tx_loop(conn.links[0].sock.as_ref().unwrap(), true).unwrap();
        let mut ts: Vec<_> = (0..3)
            .map(|x| packet(local, peer, 0x04, 8, 10 + x))
            .collect();
        let (port, sent) = conn
            .send_whole(
                to(local, peer, DEF),
                &batch,
                &[0, 1, 2],
                &mut ts,
                &mut scratch,
            )
            .unwrap();
        assert_eq!(port, conn.links[0].port);
        assert_eq!(
            sent, 0,
            "the first is refused: it and the rest are the caller's"
        );
        assert_eq!(conn.links[0].next_id, None, "the counter is learned again");
        // Nothing left after the refused message with an ICRC for a guessed ID.
        let sock = conn.links[0].sock.as_ref().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = [0u8; 256];
        let mut left = Vec::new();
        while let Ok(n) = sys::recv_error_queue(sock, &mut buf) {
            let ip = &buf[14..n];
            let mut h = [0u8; 28];
            h.copy_from_slice(&ip[..28]);
            let id = u16::from_be_bytes([ip[4], ip[5]]);
            check_icrc(id, &h, &ip[28..], 24);
            left.push(id);
        }
        assert!(
            left.is_empty(),
            "datagrams left the connected socket: {left:?}"
        );
    }

    #[test]
    fn a_socket_that_refuses_its_probes_is_given_up_only_after_several() {
        let (local, peer, _peer_sock, mut conn, mut scratch) = rig(250);
        let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
        let one = [msg(peer, 0, &[24])];
        assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
        // From now on the socket refuses every datagram (EPIPE), as a full send buffer
        // refuses them for a while; the counter must be learned again.
        let sock = conn.links[0].sock.as_ref().unwrap();
        sock.shutdown(std::net::Shutdown::Write).unwrap();
        conn.links[0].next_id = None;
        for n in 1..REFUSED_PROBES {
            assert!(
                conn.send_whole(to(local, peer, DEF), &one, &[0], &mut ts, &mut scratch)
                    .is_none(),
                "batch {n} goes through the unconnected socket"
            );
            assert_eq!(conn.connected(), 1, "kept after {n} refused probes");
        }
        assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
        assert_eq!(conn.connected(), 0, "given up");
    }

    #[test]
    fn sockets_are_made_only_in_the_devices_namespace() {
        let (peer_ip, _peer_sock) = peer_below(250);
        let (local, peer) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(peer_ip));
        let mut scratch = sys::SendScratch::default();
        // A device of another namespace (no namespace has device and inode 0).
        let mut conn = ConnTx {
            netns: Some((0, 0)),
            ..ConnTx::default()
        };
        assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
        assert_eq!(
            (conn.links.len(), conn.probes),
            (0, 0),
            "nothing made, nothing kept"
        );
        // Back on a thread of the device's namespace, the socket is made.
        conn.netns = current_netns();
        assert!(conn.netns.is_some());
        assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
        assert_eq!(conn.connected(), 1);
    }

    #[test]
    fn a_peer_without_a_socket_goes_through_the_unconnected_one() {
        let mut conn = ConnTx::default();
        let mut scratch = sys::SendScratch::default();
        // IPv4 from an IPv6 address: no connected socket can be made.
        let (local, peer) = (
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        );
        assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
        assert_eq!(conn.connected(), 0);
        // Asked again, it does not try again.
        assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
        assert_eq!(conn.links.len(), 1);
    }

    #[test]
    fn without_looped_copies_ipv4_peers_use_the_unconnected_socket() {
        let (peer_ip, _peer_sock) = peer_below(250);
        let (local, peer) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(peer_ip));
        let mut conn = ConnTx {
            no_loop: true,
            ..ConnTx::default()
        };
        let mut scratch = sys::SendScratch::default();
        assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
        assert_eq!(
            (conn.probes, conn.links.len()),
            (0, 0),
            "no socket, no probe"
        );
    }

    #[test]
    fn at_most_max_connected_peers_get_a_socket() {
        // Peers need not listen for the first datagram: only the cap is checked.
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut conn = ConnTx::default();
        let mut scratch = sys::SendScratch::default();
        let mut connected = 0;
        for x in 0..=MAX_CONNECTED as u8 {
            let peer = IpAddr::V4(Ipv4Addr::new(127, 1, 2, x + 1));
            let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
            let one = [msg(peer, 0, &[24])];
            if conn
                .send_whole(to(local, peer, DEF), &one, &[0], &mut ts, &mut scratch)
                .is_some()
            {
                connected += 1;
            }
        }
        assert_eq!(connected, MAX_CONNECTED);
        assert_eq!(conn.connected(), MAX_CONNECTED);
    }

    /// With every slot taken, a new path gets the slot of one idle for
    /// `IDLE_BATCHES` batches (its socket closed), never that of a path in use; the
    /// evicted path, used again, is set up afresh (a new port, a new probe) and its
    /// packets carry the ICRC of their real header.
    #[test]
    fn an_idle_path_gives_its_slot_to_a_new_one() {
        let (local, hot, hot_sock, mut conn, mut scratch) = rig(250);
        assert!(send_one(&mut conn, &mut scratch, local, hot).is_some());
        let hot_port = conn.links[0].port;
        let idle = |x: u8| IpAddr::V4(Ipv4Addr::new(127, 1, 3, x));
        // The path that comes back has a listener (no ICMP error refuses its sends).
        let back = UdpSocket::bind(SocketAddr::new(idle(1), ROCE_PORT)).unwrap();
        for x in 1..MAX_CONNECTED as u8 {
            let peer = idle(x);
            let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
            let one = [msg(peer, 0, &[24])];
            assert!(conn
                .send_whole(to(local, peer, DEF), &one, &[0], &mut ts, &mut scratch)
                .is_some());
        }
        assert_eq!(conn.connected(), MAX_CONNECTED);
        let newcomer = IpAddr::V4(Ipv4Addr::new(127, 1, 3, 200));
        let one = [msg(newcomer, 0, &[24])];
        let try_newcomer = |conn: &mut ConnTx, scratch: &mut sys::SendScratch| {
            let mut ts = vec![packet(local, newcomer, 0x04, 8, 1)];
            conn.send_whole(to(local, newcomer, DEF), &one, &[0], &mut ts, scratch)
        };
        assert!(
            try_newcomer(&mut conn, &mut scratch).is_none(),
            "every path was used within the last IDLE_BATCHES batches"
        );
        // The hot path stays busy while the others idle.
        let mut b = [0u8; 64];
        for _ in 0..IDLE_BATCHES {
            assert!(send_one(&mut conn, &mut scratch, local, hot).is_some());
            hot_sock.recv_from(&mut b).unwrap();
        }
        let probes = conn.probes;
        assert!(try_newcomer(&mut conn, &mut scratch).is_some());
        assert_eq!(conn.probes, probes + 2, "the new socket was probed");
        assert_eq!(conn.connected(), MAX_CONNECTED);
        assert_eq!(conn.links.len(), MAX_CONNECTED);
        assert!(
            !conn.links.iter().any(|l| l.peer == idle(1)),
            "the longest-idle path gave its slot"
        );
        let h = conn.links.iter().find(|l| l.peer == hot).unwrap();
        assert_eq!(h.port, hot_port, "the path in use kept its socket");
        // The evicted path comes back as a new one (evicting the next idle one), and
        // what it sends is right on the wire.
        assert!(send_one(&mut conn, &mut scratch, local, idle(1)).is_some());
        let i = conn.links.iter().position(|l| l.peer == idle(1)).unwrap();
        assert!(!conn.links.iter().any(|l| l.peer == idle(2)));
        sys::set_tx_loop(conn.links[i].sock.as_ref().unwrap(), true).unwrap();
        let predicted = conn.links[i].next_id.unwrap();
        assert!(send_one(&mut conn, &mut scratch, local, idle(1)).is_some());
        // (TX_SCHED and TX_SOFTWARE: the skb may come back twice.)
        let mut copies = looped(&conn, local, idle(1));
        copies.dedup_by_key(|(id, _, _)| *id);
        assert_eq!(copies.len(), 1);
        let (id, h, body) = &copies[0];
        assert_eq!(*id, predicted);
        check_icrc(*id, h, body, 24);
        for _ in 0..3 {
            assert_eq!(back.recv_from(&mut b).unwrap().0, 24);
        }
    }

    #[test]
    fn a_counter_that_does_not_step_by_one_gets_no_socket() {
        let (local, peer, _peer_sock, mut conn, mut scratch) = rig(250);
        conn.skew_probes = true;
        assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
        assert_eq!((conn.probes, conn.links.len(), conn.connected()), (2, 1, 0));
        // Given up: no further probe for this path.
        assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
        assert_eq!(conn.probes, 2);
    }

    #[test]
    fn ipv6_needs_no_probe() {
        let Ok(peer_sock) = UdpSocket::bind("[::1]:0") else {
            eprintln!("skipped: no IPv6 loopback");
            return;
        };
        // The link connects to port 4791; a socket there may not be free, so this only
        // checks the rewrite and the absence of a probe (the datagram may be refused).
        drop(peer_sock);
        let local = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        let mut conn = ConnTx::default();
        let mut scratch = sys::SendScratch::default();
        let mut ts = vec![packet(local, local, 0x04, 8, 1)];
        let one = [msg(local, 0, &[24])];
        assert!(conn
            .send_whole(to(local, local, DEF), &one, &[0], &mut ts, &mut scratch)
            .is_some());
        assert_eq!(conn.probes, 0);
        let port = conn.links[0].port;
        let n = ts[0].payload.len() - 4;
        let want = icrc::compute_addrs(local, local, 0, port, &ts[0].payload[..n]).unwrap();
        assert_eq!(ts[0].payload[n..], want.to_le_bytes());
    }
}
