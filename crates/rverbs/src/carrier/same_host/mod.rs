//! The same-host carrier: RoCE v2 datagrams between two rverbs contexts of one
//! machine (and one network namespace) through shared memory instead of the kernel's
//! UDP path.
//!
//! The packets are the same: every byte a peer on the network would get (BTH and
//! the rest), the same capture records (`RVERBS_PCAP`) and the same fault injection
//! (`RVERBS_FAULTS`), which both work above the carrier. One thing is left out: the
//! ICRC, which guards against corruption on a wire that memory between two
//! processes of one host does not have (its CRC was two passes over every byte, one
//! per side). A record says whether it carries one (`ring::ELIDED`); a receiver
//! whose capture or fault injection is on computes it before its taps see the
//! datagram and checks it after them, as for UDP, and a sender whose fault injection
//! judged a datagram sends its ICRC (corrupted or not) to be checked.
//!
//! What changes is how a datagram travels to a context of this host: instead of
//! `sendmsg` → the kernel's IP and UDP layers → `recvmsg`, the sender writes it into
//! a ring in memory both processes map and the receiver reads it from there — the
//! way a RoCE NIC loops traffic between two of its own functions without putting it
//! on the wire. An 8-byte ping-pong then costs what rverbs itself costs plus a memory
//! hand-over (and, when the receiver sleeps, one `write(2)` to wake it), not two trips
//! through the kernel's network stack (`bench/kernel_floor.c`, `shm`).
//!
//! **Finding the peer.** Each context listens on an abstract `AF_UNIX` seqpacket
//! socket named after each of its unicast addresses (`rverbs-roce-v2:<address>`;
//! abstract names live in the network namespace, so only contexts that could reach
//! each other over loopback find each other). The first datagram to an address
//! tries to connect there; without a listener (rxe, a NIC, any other program), the
//! datagram goes over UDP as always and the address is tried again after
//! [`RETRY_NS`]. A connection carries one message, the hello (a magic and the ring's
//! size, with the ring's memfd as `SCM_RIGHTS`), and afterwards only doorbells.
//!
//! **The ring** (one per direction and pair of contexts, made by its writer): a
//! 4 KiB header — the writer's position, the reader's position, each on a cache line
//! of its own, and the reader's doorbell word — and [`DATA_BYTES`] of records, each a
//! 32-byte header (payload length, source address, source port, TTL / hop limit,
//! TOS / traffic class, flow label) and the UDP payload, 8-byte aligned. A record
//! never wraps: the writer marks the end's leftover as skipped. The reader trusts
//! nothing in the ring: positions and lengths out of bounds end the link (counted in
//! [`SameHostStats::corrupt_links`]), it copies every record's headers out before it
//! parses them, and it maps the memfd only when the writer sealed its size
//! (`F_SEAL_SHRINK`), so a peer cannot make it fault. A full ring drops the datagram
//! (counted), as a full socket buffer would; the transport retransmits.
//!
//! **One copy per side.** A long SEND, WRITE or READ response payload without an ICRC
//! to check is not copied out with its headers: the engine places it from the ring
//! straight into its destination region (`rverbs_engine::PayloadSource`), so a byte
//! is copied once by the sender (region to ring) and once by the receiver (ring to
//! region), where it was copied twice on the receiving side. The record stays in the
//! ring until the engine is done with it (the reader's position moves after), and
//! the payload is only copied, never interpreted, so a writer that changes it
//! meanwhile changes nothing but the data it sent. Taps see whole datagrams: with a
//! capture or fault injection on, records are copied whole as before. A cross-memory
//! read from the sender's region (`process_vm_readv`, UCX's `cma`) would save the
//! sender's copy, but costs a system call and a page walk per placement: on the
//! 2-core VM the figures were measured on, 1-3 GB/s against 11 GB/s for a copy
//! (`bench/copy_floor.c`, docs/benchmarks.md).
//!
//! **Doorbells.** A receiver about to sleep in `poll(2)` marks every inbound ring
//! asleep and looks once more; a writer that publishes into a ring marked asleep
//! marks it rung and writes one byte on the connection, which wakes the sleeper (who
//! reads it before its next sleep). Spinning receivers never mark rings asleep, so
//! spinning senders make no system call at all.
//!
//! **Endings.** A housekeeping thread per context accepts connections (only from
//! processes of the same user, `SO_PEERCRED`) and watches every connection: when the
//! peer closes it (its process or context ended), an inbound ring is read to its end
//! and dropped, an outbound one is dropped and the address tried afresh (a new
//! context may have taken the address).
//!
//! The carrier is on by default for contexts in UDP-socket mode (never in raw mode);
//! `RVERBS_SAME_HOST=0` (or [`crate::OpenOptions::same_host`]) keeps every datagram
//! on UDP, as a capture of `lo` shows them.
//!
//! As a [`Carrier`]: datagrams to another rverbs context of this host go through its
//! ring (`ring.rs`, `link.rs`); the rest stay in the queue for the next carrier.

pub(crate) mod link;
pub(crate) mod ring;

use super::{Arrival, Carrier, Departure, Sink, TxQueue, ROCE_PORT};
use crate::sys::IpMeta;
pub use link::SameHostStats;
pub(crate) use link::{Handle, InLink, SameHost};
pub(crate) use ring::{RecordMeta, MAX_PAYLOAD, RING_ROOM};
use rverbs_engine::Nanos;
use std::cell::RefCell;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Records taken from one ring per share of a receive's budget, at least.
const MIN_SHARE: usize = 16;

/// The rings' receive side: a record's bytes are copied out here before use.
struct Rx {
    buf: Vec<u8>,
    links: Arc<Vec<Arc<InLink>>>,
    links_gen: u64,
}

/// The same-host carrier.
pub(crate) struct Rings {
    sh: SameHost,
    rx: Mutex<Rx>,
    /// A capture or fault injection wraps this context's carriers: what arrives
    /// without its ICRC gets one before the taps see it.
    taps: bool,
}

thread_local! {
    /// The inbound rings this thread armed before its sleep ([`Carrier::arm`]), to be
    /// disarmed after it: the list may change meanwhile.
    static ARMED: RefCell<Option<Arc<Vec<Arc<InLink>>>>> = const { RefCell::new(None) };
}

impl Rings {
    /// `taps`: a capture or fault injection wraps the carrier.
    pub(crate) fn new(sh: SameHost, taps: bool) -> Rings {
        Rings {
            sh,
            taps,
            rx: Mutex::new(Rx {
                buf: vec![0u8; MAX_PAYLOAD],
                links: Arc::new(Vec::new()),
                links_gen: u64::MAX,
            }),
        }
    }

    /// The carrier's own state (statistics).
    pub(crate) fn same_host(&self) -> &SameHost {
        &self.sh
    }

    /// What a datagram from the device's socket carries of `meta`: the socket's
    /// default TTL for 0, no flow label.
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
}

impl Carrier for Rings {
    fn send(&self, q: &mut TxQueue, now: Nanos) {
        let mut ring: Option<(IpAddr, Option<Handle<'_>>)> = None;
        let queue = std::mem::take(&mut q.queue);
        for t in queue {
            if t.dst.is_multicast() || t.roce_v1 {
                q.rest.push(t);
                continue;
            }
            // One ring locked per run of datagrams to one peer.
            if ring.as_ref().map(|(d, _)| *d) != Some(t.dst) {
                // (The last run's ring first: it holds the carrier's lock.)
                drop(ring.take());
                ring = Some((t.dst, self.sh.writer_for(t.dst, now)));
            }
            let Some((_, Some(h))) = &mut ring else {
                q.rest.push(t);
                continue;
            };
            // Written straight into the ring (a body from its region). Its ICRC is
            // left out (the reader computes one only for its taps): memory between
            // two contexts of this host corrupts nothing it would catch. A sealed
            // datagram (a fault tap judged it, maybe corrupted it) keeps its own,
            // which the reader checks.
            let ip = Rings::carried_meta(IpMeta {
                hop_limit: t.hop_limit,
                traffic_class: t.traffic_class,
                flow_label: t.flow_label,
            });
            let sealed = q.sealed;
            let meta = RecordMeta {
                src: t.src,
                src_port: ROCE_PORT,
                ip,
                no_icrc: !sealed,
            };
            let pushed = h.push_with(&meta, t.len(), |slot| t.write_into(slot));
            let how = pushed.then_some(Departure {
                src: t.src,
                src_port: ROCE_PORT,
                ip,
            });
            let mut t = t;
            if q.log && pushed && !sealed {
                // A capture records the datagram as the ring has it.
                t.materialize();
                rverbs_engine::net::fill_icrc(t.src, t.dst, ROCE_PORT, &mut t.payload);
            }
            q.sent(t, how);
        }
        drop(ring);
        std::mem::swap(&mut q.queue, &mut q.rest);
    }

    fn receive(&self, budget: usize, sink: &mut dyn Sink) -> usize {
        let Ok(mut rx) = self.rx.try_lock() else {
            return 0;
        };
        let Rx {
            buf,
            links,
            links_gen,
        } = &mut *rx;
        let gen = self.sh.inbound_gen();
        if gen != *links_gen {
            (*links, *links_gen) = self.sh.inbound();
        }
        let mut got = 0;
        for link in links.iter() {
            if got >= budget {
                break;
            }
            let closed = link.closed.load(Ordering::Acquire);
            // (Each ring a share, so one busy ring does not starve the others.)
            let share = (budget / links.len()).max(MIN_SHARE);
            let taps = self.taps;
            let mut placed = 0;
            // Without taps, a long payload stays in the ring until the engine
            // places it (one copy on this side); taps see whole datagrams.
            let r = link
                .reader
                .drain(share.min(budget - got), buf, !taps, |m, bytes, source| {
                    // Without its ICRC: trusted as the peer's engine built it, unless
                    // taps see it, which get a real RoCE v2 datagram (the ICRC as from
                    // the peer's port, IPv4 ID 0), checked after them as any other.
                    let trusted = m.no_icrc && !taps;
                    placed += usize::from(source.is_some());
                    if m.no_icrc && taps {
                        rverbs_engine::net::fill_icrc(m.src, link.local, m.src_port, bytes);
                    }
                    sink.deliver(Arrival {
                        src: m.src,
                        src_port: m.src_port,
                        dst: link.local,
                        ip: m.ip,
                        ipv4_id: None,
                        roce_v1: false,
                        icrc_checked: trusted,
                        framed: false,
                        bytes,
                        source,
                    })
                });
            let n = match r {
                Ok(n) => n,
                Err(_) => {
                    self.sh.remove(link, true);
                    continue;
                }
            };
            self.sh.count_rx(n, placed);
            got += n;
            if n > 0 {
                sink.batch_end(n, n >= MIN_SHARE);
            }
            if closed && !link.reader.pending() {
                self.sh.remove(link, false);
            }
        }
        got
    }

    fn watch(&self, _fds: &mut Vec<RawFd>) {}

    fn bell(&self) -> Option<RawFd> {
        self.sh.has_inbound().then(|| self.sh.bell_fd())
    }

    fn arm(&self) -> bool {
        let links = self.sh.inbound().0;
        let pending = self.sh.arm(&links);
        ARMED.with(|a| *a.borrow_mut() = Some(links));
        pending
    }

    fn disarm(&self, rung: bool) {
        if let Some(links) = ARMED.with(|a| a.borrow_mut().take()) {
            self.sh.disarm(&links, rung);
        }
    }

    fn has_inbound(&self) -> bool {
        self.sh.has_inbound()
    }
}
