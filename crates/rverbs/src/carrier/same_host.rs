//! The same-host carrier as a [`Carrier`]: datagrams to another rverbs context of
//! this host (and network namespace) go through its shared-memory ring
//! (`crate::same_host`: rendezvous, rings, doorbells); the rest stay in the queue for
//! the next carrier.

use super::{Arrival, Carrier, Departure, Sink, TxQueue, ROCE_PORT};
use crate::same_host::{Handle, InLink, RecordMeta, SameHost, MAX_PAYLOAD};
use crate::sys::IpMeta;
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
}

thread_local! {
    /// The inbound rings this thread armed before its sleep ([`Carrier::arm`]), to be
    /// disarmed after it: the list may change meanwhile.
    static ARMED: RefCell<Option<Arc<Vec<Arc<InLink>>>>> = const { RefCell::new(None) };
}

impl Rings {
    pub(crate) fn new(sh: SameHost) -> Rings {
        Rings {
            sh,
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
            // Written straight into the ring (a body from its region), then its
            // ICRC as from the device's socket (port 4791, IPv4 ID 0) unless sealed.
            let ip = Rings::carried_meta(IpMeta {
                hop_limit: t.hop_limit,
                traffic_class: t.traffic_class,
                flow_label: t.flow_label,
            });
            let meta = RecordMeta {
                src: t.src,
                src_port: ROCE_PORT,
                ip,
            };
            let sealed = q.sealed;
            let pushed = h.push_with(&meta, t.len(), |slot| {
                t.write_into(slot);
                if !sealed {
                    rverbs_engine::net::fill_icrc(t.src, t.dst, ROCE_PORT, slot);
                }
            });
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
            let r = link.reader.drain(share.min(budget - got), buf, |m, bytes| {
                sink.deliver(Arrival {
                    src: m.src,
                    src_port: m.src_port,
                    dst: link.local,
                    ip: m.ip,
                    ipv4_id: None,
                    roce_v1: false,
                    icrc_checked: false,
                    framed: false,
                    bytes,
                })
            });
            let n = match r {
                Ok(n) => n,
                Err(_) => {
                    self.sh.remove(link, true);
                    continue;
                }
            };
            self.sh.count_rx(n);
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
