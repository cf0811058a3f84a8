//! One `AF_PACKET` socket on one interface ([`RawPort`]): whole Ethernet frames in and
//! out, VLAN tags the driver stripped put back, classic BPF filters.

use crate::sys;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// `SOL_PACKET` option number of `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, 4.20+).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// An `AF_PACKET` socket bound to one interface: sends and receives whole Ethernet
/// frames (destination MAC first, no FCS).
pub struct RawPort {
    pub(crate) sock: Socket,
    ifindex: u32,
    name: String,
}

impl std::fmt::Debug for RawPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawPort({} #{})", self.name, self.ifindex)
    }
}

impl RawPort {
    /// Opens interface `ifname`. Fails with EPERM (`io::ErrorKind::PermissionDenied`)
    /// without CAP_NET_RAW, as the kernel's `packet_create` does.
    pub fn open(ifname: &str) -> io::Result<Self> {
        let ifindex = sys::if_index(ifname)?;
        let proto = Protocol::from(i32::from((libc::ETH_P_ALL as u16).to_be()));
        let sock = Socket::new(Domain::PACKET, Type::RAW, Some(proto))?;
        sys::bind_packet(&sock, ifindex)?;
        // Older kernels lack the option; then our own sends come back and are steered
        // like received frames, which the caller can see but not break anything.
        let _ = sys::set_packet_opt(&sock, PACKET_IGNORE_OUTGOING, 1);
        // VLAN tags the driver stripped (rx VLAN offload, veth included) come back in
        // the auxiliary data; recv puts them back into the frame, like libpcap.
        sys::set_packet_opt(&sock, sys::PACKET_AUXDATA, 1)?;
        Ok(Self {
            sock,
            ifindex,
            name: ifname.to_string(),
        })
    }

    /// Opens interface `ifname` with the classic BPF socket filter `prog`
    /// (`SO_ATTACH_FILTER`, `socket(7)`) attached before the socket is bound, so it
    /// never queues a frame the filter rejects, and non-blocking: [`RawPort::recv`]
    /// then fails with `WouldBlock` when nothing is queued. For a reader that takes a
    /// few kinds of frames inline, beside other sockets it polls. EPERM without
    /// CAP_NET_RAW; EINVAL from the kernel for a malformed program.
    pub fn open_filtered(ifname: &str, prog: &[SockFilter]) -> io::Result<Self> {
        let ifindex = sys::if_index(ifname)?;
        // Protocol 0: no frame is queued until `bind` names one (`packet(7)`).
        let sock = Socket::new(Domain::PACKET, Type::RAW, None)?;
        sys::attach_filter(&sock, prog)?;
        let _ = sys::set_packet_opt(&sock, PACKET_IGNORE_OUTGOING, 1);
        sys::set_packet_opt(&sock, sys::PACKET_AUXDATA, 1)?;
        sock.set_nonblocking(true)?;
        sys::bind_packet(&sock, ifindex)?;
        Ok(Self {
            sock,
            ifindex,
            name: ifname.to_string(),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Sends one whole frame.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let n = self.sock.send(frame)?;
        if n == frame.len() {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::WriteZero, "short frame send"))
        }
    }

    /// Receives one frame into `buf` (blocking up to the read timeout). The frame is
    /// `buf[r.start..r.start + r.len]` for the returned `r`; a VLAN tag the driver
    /// stripped is re-inserted (so `buf` needs 4 spare bytes), and a frame longer than
    /// the rest of `buf` is cut to it with [`Received::truncated`] set.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        if buf.len() <= VLAN_ROOM {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let room = buf.len() - VLAN_ROOM;
        let (n, aux) = sys::recv_with_aux(&self.sock, &mut buf[VLAN_ROOM..])?;
        let truncated = n > room;
        let n = n.min(room);
        let aux = aux.unwrap_or_default();
        let csum_ok = aux.status & (TP_STATUS_CSUM_VALID | TP_STATUS_CSUMNOTREADY) != 0;
        if aux.status & TP_STATUS_VLAN_VALID != 0 && n >= 12 {
            let tpid = if aux.status & TP_STATUS_VLAN_TPID_VALID != 0 {
                aux.vlan_tpid
            } else {
                0x8100
            };
            buf.copy_within(VLAN_ROOM..VLAN_ROOM + 12, 0);
            buf[12..14].copy_from_slice(&tpid.to_be_bytes());
            buf[14..16].copy_from_slice(&aux.vlan_tci.to_be_bytes());
            return Ok(Received {
                start: 0,
                len: n + VLAN_ROOM,
                csum_ok,
                truncated,
            });
        }
        Ok(Received {
            start: VLAN_ROOM,
            len: n,
            csum_ok,
            truncated,
        })
    }

    /// Sets the receive timeout (`None`: block).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(t)
    }

    /// Sets the socket receive buffer size (`SO_RCVBUF`).
    pub fn set_recv_buffer_size(&self, bytes: usize) -> io::Result<()> {
        self.sock.set_recv_buffer_size(bytes)
    }
}

impl AsRawFd for RawPort {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }
}

/// Attaches the classic BPF program `prog` to any socket `fd` (`SO_ATTACH_FILTER`,
/// `socket(7)`): the kernel then queues only what the program accepts.
pub fn attach_socket_filter(fd: &impl AsRawFd, prog: &[SockFilter]) -> io::Result<()> {
    sys::attach_filter(fd, prog)
}

/// One classic BPF instruction (`struct sock_filter`, linux/filter.h) of a program
/// for [`RawPort::open_filtered`] or [`attach_socket_filter`].
pub use rverbs_sys::packet::SockFilter;

/// Where [`RawPort::recv`] put a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Offset of the frame in the buffer.
    pub start: usize,
    /// Frame length.
    pub len: usize,
    /// The kernel validated the frame's checksums (`TP_STATUS_CSUM_VALID`) or they are
    /// not final because the frame was made on this host (`TP_STATUS_CSUMNOTREADY`).
    pub csum_ok: bool,
    /// The frame was longer than the buffer: only its start is there.
    pub truncated: bool,
}

/// Bytes kept free at the start of a receive buffer for a re-inserted VLAN tag.
pub(crate) const VLAN_ROOM: usize = 4;
/// `TP_STATUS_VLAN_VALID` (linux/if_packet.h).
pub(crate) const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
/// `TP_STATUS_VLAN_TPID_VALID`.
pub(crate) const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
/// `TP_STATUS_CSUMNOTREADY`: made on this host, checksum to be filled by offload.
pub(crate) const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
/// `TP_STATUS_CSUM_VALID`.
pub(crate) const TP_STATUS_CSUM_VALID: u32 = 1 << 7;
