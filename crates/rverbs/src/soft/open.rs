//! Opening a soft device: its carriers (UDP sockets, same-host rings, the raw device)
//! stacked under the taps, the engine configured for them, the driver thread.

use super::Shared;
use crate::carrier::raw::RawNet;
use crate::carrier::same_host::Rings;
use crate::carrier::udp::socket::{loopback_socket, loopback_v6_socket, udp_socket};
use crate::carrier::udp::{Udp, UdpConfig};
use crate::carrier::{Carrier, Chain, Waker, ROCE_PORT};
use crate::device::options::Resolved;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::gid::GidTable;
use crate::sys;
use crate::tap::capture::PcapWriter;
use crate::tap::faults::{FaultState, Faults};
use crate::tap::{Captured, Faulty, FrameTaps};
use rverbs_engine::{Config, Engine};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Opens the soft device `info` with `opts` (the driver thread not started yet).
pub(crate) fn open(info: DeviceInfo, opts: &Resolved) -> Result<Arc<Shared>> {
    let mut sockets = Vec::new();
    // Every receiving socket takes UDP_SEGMENT trains whole (loopback device).
    let mut gro = false;
    if info.is_loopback() {
        gro = true;
        sockets.push(loopback_socket()?);
        // IPv6 has no 127/8. A context takes the first IPv6 address an
        // administrator added to lo whose port 4791 is free; `::1` only with
        // `OpenOptions::loopback_ipv6_localhost` (RVERBS_LOOPBACK_IPV6=1), as it is one
        // address for the whole host: which context got it would otherwise depend on
        // timing.
        if let Some(v6) = loopback_v6_socket(&info.addrs, opts.loopback_ipv6_localhost) {
            sockets.push(v6);
        }
        // Trains sent with UDP_SEGMENT by loopback contexts (this one included)
        // arrive whole only at a socket with UDP_GRO: at any other the kernel
        // cuts them into their datagrams before queueing them
        // (`udp_unexpected_gso`, include/linux/udp.h; `udp_queue_rcv_skb`,
        // net/ipv4/udp.c; `udpv6_queue_rcv_skb`, net/ipv6/udp.c): slower, and an
        // ACK swapped behind its request would be handled after it. So on every
        // socket that receives them, IPv6 included.
        for (_, s) in &sockets {
            gro &= sys::set_udp_gro(s).is_ok();
        }
    } else {
        for &a in &info.addrs {
            let s = udp_socket(a).map_err(|e| {
                Error::io(
                    "binding the device's RoCE v2 port 4791 (another process may have this \
                     device open: one context per address and port; the loopback device \
                     rv_lo takes any number)",
                    e,
                )
            })?;
            sockets.push((a, s));
        }
        if sockets.is_empty() {
            return Err(Error::NoDevice(format!("{} has no address", info.name)));
        }
    }
    let (raw, ports) = match &opts.raw_interface {
        // RoCE v2 moves onto the raw device only when it is the device's own
        // interface (its addresses are the device's GIDs).
        Some(ifname) => {
            let (mode, ports) =
                crate::raw::RawMode::open(ifname, !info.is_loopback() && *ifname == info.ifname)?;
            (Some(mode), ports)
        }
        None => (None, None),
    };
    let raw_v2 = ports.as_ref().is_some_and(|(_, n)| n.v2);
    let raw_frames = raw.as_ref().is_some_and(|r| r.dev.is_some());
    if raw_v2 {
        for (_, s) in &sockets {
            sys::drop_from_interface(s, info.ifindex)
                .map_err(|e| Error::io("filtering the UDP sockets of raw mode", e))?;
        }
    }
    let bound: Vec<IpAddr> = sockets.iter().map(|(a, _)| *a).collect();
    // A raw-mode device that can send frames has RoCE v1 entries beside the v2 ones.
    let roce_v1 = ports.is_some();
    let gid_table = GidTable::with_types(1, info.ifindex, info.default_gid(), &bound, roce_v1);
    let seed = seed();
    let same_host = opts.same_host && raw.is_none();
    // Over loopback the peer is this machine, with this machine's buffers;
    // elsewhere, rxe's window and whole READs (a remote peer's buffers are
    // unknown; rxe and adapters take READ bursts in their rings). With the same-host
    // carrier, what a loopback peer sends us (READ responses above all) waits in our
    // inbound ring, not in the socket's buffer.
    let (window, read_piece) = if info.is_loopback() {
        super::window::window_for(
            &sockets,
            same_host.then_some(crate::carrier::same_host::RING_ROOM),
        )
    } else {
        (rverbs_engine::MAX_UNACKED_PSNS, 0)
    };
    let gso = info.is_loopback() && opts.udp_trains;
    let mut cfg = Config {
        gids: gid_table.engine_gids(),
        gid_roce_v1: gid_table.engine_gid_roce_v1(),
        seed,
        // QPNs start at a random point so a restarted process does not reuse the
        // numbers its peers may still be retransmitting to.
        first_qpn: first_qpn(seed),
        // The carriers fill ICRCs for the port a datagram leaves from (the device
        // socket's 4791, a connected socket's own). Raw-mode frames leave from the QP's
        // entropy port, as rxe does, with the engine's ICRC.
        src_port: if raw_v2 { None } else { Some(ROCE_PORT) },
        sender_fills_icrc: !raw_v2,
        // Large payloads leave from their memory region (the UDP carrier).
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
        selective_repeat: opts.selective_repeat,
        ack_policy: opts.ack_policy,
        ..Config::default()
    };
    cfg.limits.active_mtu = info.active_mtu();
    let mut engine = Engine::new(cfg);
    set_identity(&mut engine, &info);
    let waker = Waker(Arc::new(
        sys::eventfd().map_err(|e| Error::io("creating the driver's eventfd", e))?,
    ));
    let epoch = Instant::now();
    let pcap = match &opts.pcap {
        Some(p) => Some(Arc::new(Mutex::new(
            PcapWriter::create(p, raw_frames)
                .map_err(|e| Error::io("creating the RVERBS_PCAP capture file", e))?,
        ))),
        None => None,
    };
    let faults = opts
        .faults
        .filter(|f| {
            *f != Faults {
                seed: f.seed,
                ..Faults::default()
            }
        })
        .map(|f| Arc::new(Mutex::new(FaultState::new(f))));
    // The carriers, in the order a datagram is offered to them: the same-host rings
    // (another context of this host), the raw device (frames on the interface), UDP
    // (everything left).
    let udp = Arc::new(Udp::new(
        sockets,
        UdpConfig {
            gso,
            gro,
            ifindex: info.ifindex,
            quiet_on_interface: raw_v2,
            // A capture records every datagram's TTL / TOS.
            always_meta: pcap.is_some(),
        },
    ));
    let mut chain: Vec<Box<dyn Carrier>> = Vec::new();
    let rings = if same_host {
        let sh = crate::carrier::same_host::SameHost::start(&bound, &waker.0)
            .map_err(|e| Error::io("starting the same-host carrier", e))?;
        let r = Arc::new(Rings::new(sh, pcap.is_some() || faults.is_some()));
        chain.push(Box::new(r.clone()));
        Some(r)
    } else {
        None
    };
    let net = ports.map(|(v1, port)| {
        let taps = FrameTaps {
            pcap: pcap.clone(),
            faults: faults.clone(),
        };
        Arc::new(RawNet::new(
            port,
            Some(v1),
            Box::new(taps),
            udp.clone(),
            waker.clone(),
            epoch,
        ))
    });
    if let Some(n) = &net {
        chain.push(Box::new(n.clone()));
    }
    chain.push(Box::new(udp.clone()));
    // The taps over the chain: the capture nearest the wire.
    let mut carrier: Box<dyn Carrier> = Box::new(Chain { carriers: chain });
    if let Some(p) = &pcap {
        carrier = Box::new(Captured::new(carrier, p.clone()));
    }
    if let Some(f) = &faults {
        carrier = Box::new(Faulty::new(carrier, f.clone(), waker.clone()));
    }
    Ok(Arc::new(Shared {
        carrier,
        rings,
        net,
        udp,
        engine: Mutex::new(engine),
        hub: crate::soft::events::EventHub::new()?,
        gid_table: Mutex::new(gid_table),
        tx: Mutex::new(crate::carrier::TxQueue {
            udp: crate::carrier::udp::Tx::for_this_netns(),
            ..Default::default()
        }),
        app_poll_at: AtomicU64::new(0),
        flush_pending: AtomicU64::new(0),
        peer_rcvbufs: Mutex::new(std::collections::HashMap::new()),
        driver_wake_at: AtomicU64::new(0),
        driver_standoff: AtomicBool::new(false),
        cq_armed: AtomicBool::new(false),
        waker,
        epoch,
        shutdown: AtomicBool::new(false),
        info,
        faults,
        activity: AtomicU64::new(1),
        raw,
        ud_steering: Default::default(),
        deferred: Mutex::new(Vec::new()),
    }))
}

/// NodeInfo / NodeDescription of a context: the NodeGUID is the EUI-64 of the default
/// GID, made unique per context on loopback (whose contexts share one interface) by
/// its 127.0.0.x address; the description is "<hostname> <device>" as the kernel's
/// `node_desc` default.
fn set_identity(e: &mut rverbs_engine::Engine, info: &DeviceInfo) {
    let gids = e.config().gids.clone();
    let mut guid = info.default_gid().interface_id();
    if info.is_loopback() {
        if let Some(v4) = gids.iter().find_map(|g| g.to_ipv4_mapped()) {
            guid ^= u64::from(u32::from(v4)) << 8;
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    e.mad_port_mut().node = rverbs_engine::mad::NodeIdentity {
        node_guid: guid,
        description: format!("{} {}", host.trim(), info.name),
        ..rverbs_engine::mad::NodeIdentity::default()
    };
}

/// The context's random seed (memory keys, PSNs, the first QPN). Keys must not be
/// guessable by peers, and two contexts of one process, opened in the same instant,
/// must differ in every bit: the clock, the pid, a per-process counter and an address
/// of the stack (ASLR) go through splitmix64's finaliser, so a one-bit change of any
/// of them changes about half of the output's bits (the high ones too, which
/// [`first_qpn`] uses).
fn seed() -> u64 {
    use rverbs_engine::rng::mix64;
    static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let local = 0u8;
    let addr = &local as *const u8 as u64;
    let mut h = mix64(t ^ u64::from(std::process::id()).rotate_left(32));
    h = mix64(h ^ n.wrapping_mul(rverbs_engine::rng::GOLDEN));
    mix64(h ^ addr)
}

/// The first QPN a context hands out: from the seed's high bits, above the reserved
/// QPNs 0..=0x10, so a restarted process does not reuse the numbers its peers may
/// still be retransmitting to.
fn first_qpn(seed: u64) -> u32 {
    0x11 + (seed >> 40) as u32 % 0xf0_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_of_one_process_get_different_first_qpns() {
        let qpns: Vec<u32> = (0..8).map(|_| first_qpn(seed())).collect();
        for (i, a) in qpns.iter().enumerate() {
            assert!((0x11..0xf0_0011).contains(a), "{a:#x}");
            for b in &qpns[i + 1..] {
                assert_ne!(a, b, "{qpns:x?}");
            }
        }
    }

    #[test]
    fn the_mix_spreads_close_inputs_to_the_high_bits() {
        // Inputs one apart (as two opens in one instant were) differ in the QPN bits.
        for x in [0u64, 1, 0x1234_5678_9abc_def0, u64::MAX - 1] {
            let (a, b) = (
                rverbs_engine::rng::mix64(x),
                rverbs_engine::rng::mix64(x + 1),
            );
            assert_ne!(a >> 40, b >> 40, "{x:#x}");
            assert!((a ^ b).count_ones() > 16, "{x:#x}: {a:#x} {b:#x}");
        }
    }
}
