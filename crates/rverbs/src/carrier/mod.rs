//! Carriers: the ways a soft device's RoCE v2 datagrams travel.
//!
//! The engine (`rverbs-engine`) turns verbs and received packets into packets to send;
//! a carrier moves them. Each path is one [`Carrier`]:
//!
//! ```text
//!            soft device (engine, driver, progress)
//!                 │ Carrier: send(queue) / receive(budget, sink) / watch / arm
//!     tap::Faults ─ tap::Capture ─ Chain ─┬─ same_host  (shared-memory rings)
//!                                         ├─ raw        (AF_PACKET frames, ARP/ND)
//!                                         └─ udp        (sockets, GSO/GRO, connected)
//! ```
//!
//! The soft device knows only the trait. Taps (the `tap` module) wrap any carrier as
//! smoltcp's `phy::FaultInjector` and `phy::PcapWriter` wrap a `Device`: the
//! carriers know nothing of faults or captures, except that they report how each
//! datagram left ([`Departure`]) when a capture asks. A [`Chain`] offers a queue to
//! each of its carriers in turn; each takes the datagrams it carries (a same-host ring
//! the datagrams to a context of this host, the raw device those it routes) and
//! leaves the rest, in order, for the next.
//!
//! Transport rules stay out of the carriers: which datagrams may ride one train and
//! where an ACK may ride, or in which order a received train reaches the engine, is
//! the engine's word (`rverbs_engine::train`).

pub(crate) mod raw;
pub(crate) mod same_host;
pub(crate) mod udp;

use crate::sys::IpMeta;
use rverbs_engine::{Datagram, Nanos, PayloadSource, Transmit};
use std::net::IpAddr;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;

/// Wakes the soft device's driver thread (its eventfd): a carrier or tap whose own
/// deadline moved earlier (a held datagram, a neighbour probe) or that has work for it.
#[derive(Clone)]
pub(crate) struct Waker(pub(crate) Arc<OwnedFd>);

impl Waker {
    pub(crate) fn wake(&self) {
        crate::sys::eventfd_signal(&self.0);
    }
}

/// How a carrier sends a datagram as it is ([`Carrier::seal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seal {
    /// Not this carrier's: ask the next.
    Pass,
    /// As this datagram, its ICRC now filled for the port it leaves from: datagram
    /// taps may judge it.
    Datagram,
    /// As frames the carrier builds and taps itself (`raw::FrameTap`).
    Frames,
}

/// The RoCE v2 UDP port.
pub const ROCE_PORT: u16 = 4791;

/// A datagram as a carrier received it, for a [`Sink`].
pub(crate) struct Arrival<'a> {
    pub(crate) src: IpAddr,
    pub(crate) src_port: u16,
    /// The local address it was sent to.
    pub(crate) dst: IpAddr,
    pub(crate) ip: IpMeta,
    /// The IPv4 Identification, when the carrier saw the real header.
    pub(crate) ipv4_id: Option<u16>,
    pub(crate) roce_v1: bool,
    /// The carrier checked the ICRC against the real headers.
    pub(crate) icrc_checked: bool,
    /// The carrier's own frame taps saw it (the raw device): datagram taps leave it.
    pub(crate) framed: bool,
    /// BTH through ICRC (taps may change them: corruption).
    pub(crate) bytes: &'a mut [u8],
    /// Where the payload bytes really are when the carrier left them in its own
    /// memory (the same-host rings): `bytes` then holds the headers and trailer
    /// only, and the engine places the payload from here
    /// ([`rverbs_engine::Engine::handle_datagram_placed`]).
    pub(crate) source: Option<&'a dyn PayloadSource>,
}

impl Arrival<'_> {
    /// The same arrival again (a duplicate).
    pub(crate) fn reborrow(&mut self) -> Arrival<'_> {
        Arrival {
            bytes: &mut *self.bytes,
            ..*self
        }
    }

    /// Copies what the source holds into `bytes`, which then hold the whole
    /// datagram: for whoever reads more than the headers (taps, flow steering).
    pub(crate) fn materialize(&mut self) {
        if let Some(src) = self.source.take() {
            src.copy_to(0, self.bytes);
        }
    }

    /// The engine's view of it.
    pub(crate) fn datagram(&self) -> Datagram<'_> {
        Datagram {
            src: self.src,
            dst: self.dst,
            src_port: self.src_port,
            hop_limit: self.ip.hop_limit,
            traffic_class: self.ip.traffic_class,
            flow_label: self.ip.flow_label,
            ipv4_id: self.ipv4_id,
            roce_v1: self.roce_v1,
            icrc_checked: self.icrc_checked,
            payload: self.bytes,
        }
    }
}

/// What a sleeping receive calls once something came: it takes the engine lock and
/// hands the caller a [`Sink`] into the engine (`Carrier::sleep_receive`).
pub(crate) type WithSink<'a> = dyn FnMut(&mut dyn FnMut(&mut dyn Sink)) + 'a;

/// Where received datagrams go (the soft device's engine, through the taps).
pub(crate) trait Sink {
    /// One datagram.
    fn deliver(&mut self, a: Arrival<'_>);
    /// A carrier's receive of `n` datagrams ended; `more`: it stopped because its
    /// batch was full, so more may wait (answers should leave now, not be deferred).
    fn batch_end(&mut self, n: usize, more: bool);
}

/// How one datagram left, as a capture records it: from which local address and
/// UDP source port, with which TTL / TOS on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Departure {
    pub(crate) src: IpAddr,
    pub(crate) src_port: u16,
    pub(crate) ip: IpMeta,
}

/// A queue of datagrams for [`Carrier::send`], with its scratch (kept from flush to
/// flush so that sending allocates nothing).
#[derive(Default)]
pub(crate) struct TxQueue {
    /// Still to send, in the engine's order.
    pub(crate) queue: Vec<Transmit>,
    /// Sent (or dropped for good): their buffers go back to the engine.
    pub(crate) done: Vec<Transmit>,
    /// How each of `done` left (`None`: not sent), when `log` is on (a capture).
    pub(crate) left: Vec<Option<Departure>>,
    pub(crate) log: bool,
    /// The datagrams' bytes are final (their ICRC filled for port 4791 and ID 0 by a
    /// tap that may have corrupted them): carriers send them as they are, from the
    /// device's port, one by one.
    pub(crate) sealed: bool,
    /// Scratch for a carrier that takes part of the queue.
    pub(crate) rest: Vec<Transmit>,
    /// The UDP carrier's send scratch (trains, messages, connected sockets): kept
    /// with the queue, whose lock the soft device holds while a carrier sends.
    pub(crate) udp: udp::Tx,
}

impl TxQueue {
    /// Marks datagram `t` sent as `how` (`None`: lost).
    pub(crate) fn sent(&mut self, t: Transmit, how: Option<Departure>) {
        if self.log {
            self.left.push(how);
        }
        self.done.push(t);
    }

    /// Marks datagram `t` lost (not sent).
    pub(crate) fn drop_one(&mut self, t: Transmit) {
        self.sent(t, None);
    }
}

/// A way datagrams travel. Every method may be called from any thread; `send` and
/// `receive` are called with the engine lock held (the soft device's order), the
/// others without it.
pub(crate) trait Carrier: Send + Sync {
    /// Sends the datagrams of `q.queue` this carrier carries, moving them to
    /// `q.done`; the rest stay in `q.queue`, in order.
    fn send(&self, q: &mut TxQueue, now: Nanos);

    /// Fills `t`'s ICRC as this carrier would send it sealed (from the device's port
    /// for a datagram; nothing for frames it builds itself), if it carries `t`.
    fn seal(&self, _t: &mut Transmit) -> Seal {
        Seal::Pass
    }

    /// Whether this carrier sends `t` as frames it builds and taps itself
    /// ([`Seal::Frames`]), as [`Carrier::seal`] would find, without sealing it.
    fn frames(&self, _t: &Transmit) -> bool {
        false
    }

    /// Hands up to `budget` waiting datagrams to `sink` without blocking; how many.
    fn receive(&self, budget: usize, sink: &mut dyn Sink) -> usize;

    /// [`Carrier::receive`] for a pass of a thread that polls in a loop (`now`: its
    /// clock reading). A carrier whose receive is a system call that mostly finds
    /// nothing may skip it on passes less than [`SPIN_SYSCALL_NS`] after its last
    /// one, when the chain also has a carrier that receives without one (the
    /// same-host rings, [`Chain`] decides): the spinning pass then makes no system
    /// call at all.
    fn receive_spinning(&self, budget: usize, sink: &mut dyn Sink, _now: Nanos) -> usize {
        self.receive(budget, sink)
    }

    /// Sleeps in the kernel until one datagram arrives or a short timeout passes,
    /// then hands what came to `sink`, taking the engine lock through `lock` only
    /// once something came. `None` when this carrier cannot sleep so (the caller
    /// then sleeps in `poll(2)` on [`Carrier::watch`]).
    fn sleep_receive(&self, _sink: &mut WithSink<'_>) -> Option<usize> {
        None
    }

    /// Adds the descriptors whose readability means datagrams wait here.
    fn watch(&self, fds: &mut Vec<RawFd>);

    /// A doorbell to sleep on beside [`Carrier::watch`], which writers ring only for
    /// a sleeper that [`Carrier::arm`]ed (the same-host rings).
    fn bell(&self) -> Option<RawFd> {
        None
    }

    /// Before a thread sleeps on [`Carrier::watch`] and [`Carrier::bell`]: marks it
    /// asleep wherever a writer must ring for it. True when datagrams already wait
    /// (do not sleep). Called on the sleeping thread, paired with `disarm`.
    fn arm(&self) -> bool {
        false
    }

    /// After the sleep; `rung`: the bell was readable.
    fn disarm(&self, _rung: bool) {}

    /// The sleep ended with none of the watched descriptors readable (a doorbell, a
    /// timeout): the next receive may skip system calls that would find nothing.
    fn quiet_wake(&self) {}

    /// Runs the carrier's own timers (neighbour probes, held datagrams); when they
    /// next need to run.
    fn poll(&self, _now: Nanos) -> Option<Nanos> {
        None
    }

    /// Whether datagrams arrive here that the kernel's sockets do not see (a thread
    /// then cannot sleep in `recvmmsg` alone).
    fn has_inbound(&self) -> bool {
        false
    }
}

/// How often a spinning poller still asks the sockets while the same-host rings
/// carry its traffic (5 µs): the rest of its passes make no system call. A datagram
/// from a peer that is not on this host waits at most this much longer, about half
/// the kernel's own loopback hop; one that came from the rings none.
pub(crate) const SPIN_SYSCALL_NS: Nanos = 5_000;

/// Carriers tried in order: each takes what it carries from the queue, the last
/// (UDP) everything that is left.
pub(crate) struct Chain {
    pub(crate) carriers: Vec<Box<dyn Carrier>>,
}

impl Carrier for Chain {
    fn send(&self, q: &mut TxQueue, now: Nanos) {
        for c in &self.carriers {
            if q.queue.is_empty() {
                break;
            }
            c.send(q, now);
        }
    }

    fn receive(&self, budget: usize, sink: &mut dyn Sink) -> usize {
        // Each its own budget: a flood on one must not leave another unread. Last
        // first: the sockets' receive is a system call, which a spinning poller makes
        // on every pass (most find nothing); made before the rings are read, a
        // datagram found there reaches the application with no system call after it
        // (the other way round, every same-host hop paid one: 0.5 µs of a 1.2 µs
        // spinning half round trip).
        self.carriers
            .iter()
            .rev()
            .map(|c| c.receive(budget, sink))
            .sum()
    }

    fn receive_spinning(&self, budget: usize, sink: &mut dyn Sink, now: Nanos) -> usize {
        // Only while some carrier receives without a system call (an inbound ring)
        // may the others skip theirs; a context whose traffic is all on UDP reads its
        // sockets on every pass, as before.
        if !self.has_inbound() {
            return self.receive(budget, sink);
        }
        self.carriers
            .iter()
            .rev()
            .map(|c| c.receive_spinning(budget, sink, now))
            .sum()
    }

    fn sleep_receive(&self, sink: &mut WithSink<'_>) -> Option<usize> {
        // Only a chain whose one receiving carrier can sleep in the kernel.
        if self.carriers.iter().any(|c| c.has_inbound()) {
            return None;
        }
        self.carriers.last()?.sleep_receive(sink)
    }

    fn seal(&self, t: &mut Transmit) -> Seal {
        for c in &self.carriers {
            match c.seal(t) {
                Seal::Pass => {}
                s => return s,
            }
        }
        Seal::Pass
    }

    fn frames(&self, t: &Transmit) -> bool {
        self.carriers.iter().any(|c| c.frames(t))
    }

    fn watch(&self, fds: &mut Vec<RawFd>) {
        for c in &self.carriers {
            c.watch(fds);
        }
    }

    fn bell(&self) -> Option<RawFd> {
        self.carriers.iter().find_map(|c| c.bell())
    }

    fn arm(&self) -> bool {
        let mut ready = false;
        for c in &self.carriers {
            ready |= c.arm();
        }
        ready
    }

    fn disarm(&self, rung: bool) {
        for c in &self.carriers {
            c.disarm(rung);
        }
    }

    fn quiet_wake(&self) {
        for c in &self.carriers {
            c.quiet_wake();
        }
    }

    fn poll(&self, now: Nanos) -> Option<Nanos> {
        self.carriers.iter().filter_map(|c| c.poll(now)).min()
    }

    fn has_inbound(&self) -> bool {
        self.carriers.iter().any(|c| c.has_inbound())
    }
}

/// A shared or boxed carrier is a carrier (the soft device keeps handles to some of
/// the chain's).
macro_rules! forward {
    ($($ptr:ident),*) => {$(
        impl<C: Carrier + ?Sized> Carrier for $ptr<C> {
            fn send(&self, q: &mut TxQueue, now: Nanos) {
                (**self).send(q, now)
            }
            fn seal(&self, t: &mut Transmit) -> Seal {
                (**self).seal(t)
            }
            fn frames(&self, t: &Transmit) -> bool {
                (**self).frames(t)
            }
            fn receive(&self, budget: usize, sink: &mut dyn Sink) -> usize {
                (**self).receive(budget, sink)
            }
            fn receive_spinning(&self, budget: usize, sink: &mut dyn Sink, now: Nanos) -> usize {
                (**self).receive_spinning(budget, sink, now)
            }
            fn sleep_receive(
                &self,
                with_sink: &mut WithSink<'_>,
            ) -> Option<usize> {
                (**self).sleep_receive(with_sink)
            }
            fn watch(&self, fds: &mut Vec<RawFd>) {
                (**self).watch(fds)
            }
            fn bell(&self) -> Option<RawFd> {
                (**self).bell()
            }
            fn arm(&self) -> bool {
                (**self).arm()
            }
            fn disarm(&self, rung: bool) {
                (**self).disarm(rung)
            }
            fn quiet_wake(&self) {
                (**self).quiet_wake()
            }
            fn poll(&self, now: Nanos) -> Option<Nanos> {
                (**self).poll(now)
            }
            fn has_inbound(&self) -> bool {
                (**self).has_inbound()
            }
        }
    )*};
}
forward!(Arc, Box);
