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
mod tests;
