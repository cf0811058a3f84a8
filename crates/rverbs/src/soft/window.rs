//! The RC requester's window over loopback: how many PSNs a QP may have in flight so
//! that a burst fits the receiver's socket buffer (or ring), shared among the QPs that
//! send to one peer.

use crate::error::Result;
use crate::sys;
use rverbs_engine::Engine;
use socket2::Socket;
use std::net::{IpAddr, SocketAddr};

use crate::carrier::ROCE_PORT;

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
pub(crate) fn window_for(sockets: &[(IpAddr, Socket)], cap: Option<usize>) -> (u32, u32) {
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

/// [`window_for`] of a receive buffer of `smallest` bytes, a small buffer's window at
/// least `floor` PSNs.
pub(crate) fn window_for_bytes(smallest: usize, floor: u32) -> (u32, u32) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Type};
    use std::net::Ipv4Addr;

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
            Some(crate::carrier::same_host::RING_ROOM),
        );
        assert!(piece > 0, "READs in pieces");
        assert!((w.max(piece) as usize) * 4096 <= crate::carrier::same_host::RING_ROOM);
        assert_eq!(
            window_for(&[small, big], None),
            (24, 24),
            "the smallest counts"
        );
        assert_eq!(window_for(&[], None), (128, 0), "no size known");
    }
}
