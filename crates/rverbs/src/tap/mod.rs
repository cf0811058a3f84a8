//! Taps: fault injection (`RVERBS_FAULTS`) and packet capture (`RVERBS_PCAP`) as
//! wrappers that stack on any carrier, as smoltcp's `phy::FaultInjector` and
//! `phy::PcapWriter` wrap a `Device`.
//!
//! A soft device stacks them `Faulty(Captured(chain))`: the capture sits closest to
//! the wire, so it records what really left (after loss, with corruption) and what
//! really arrived (before the fault injector drops or corrupts it). Each tap works at
//! the level its carrier carries: datagrams for UDP and the same-host rings; the raw
//! device taps its own Ethernet frames ([`FrameTaps`]: ARP and ND included), and the
//! datagram taps pass what it carries through untouched ([`Seal::Frames`]).

pub(crate) mod capture;
pub(crate) mod faults;

use crate::carrier::{
    Arrival, Carrier, Departure, Seal, Sink, TxQueue, Waker, WithSink, ROCE_PORT,
};
use crate::sys::IpMeta;
use capture::PcapWriter;
use faults::{FaultState, Held};
use rverbs_engine::{Nanos, Transmit};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// A tap's shared state, locked per datagram.
pub(crate) type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tap sleeps as the carrier it wraps: the same descriptors, doorbell and arming,
/// and seals a datagram as it would.
macro_rules! waits_as_inner {
    () => {
        fn watch(&self, fds: &mut Vec<RawFd>) {
            self.inner.watch(fds)
        }
        fn bell(&self) -> Option<RawFd> {
            self.inner.bell()
        }
        fn arm(&self) -> bool {
            self.inner.arm()
        }
        fn disarm(&self, rung: bool) {
            self.inner.disarm(rung)
        }
        fn quiet_wake(&self) {
            self.inner.quiet_wake()
        }
        fn has_inbound(&self) -> bool {
            self.inner.has_inbound()
        }
    };
}

/// A datagram carrier with faults injected into both directions.
pub(crate) struct Faulty<C> {
    inner: C,
    state: Shared<FaultState>,
    /// Tells the driver to look at the held datagrams' deadline.
    waker: Waker,
}

impl<C: Carrier> Faulty<C> {
    pub(crate) fn new(inner: C, state: Shared<FaultState>, waker: Waker) -> Self {
        Faulty {
            inner,
            state,
            waker,
        }
    }
}

/// A datagram held back by a delay, sent by [`Carrier::poll`] when due.
fn held_transmit(
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    m: (u8, u8, u32),
    bytes: Vec<u8>,
) -> Transmit {
    Transmit {
        src,
        dst,
        src_port: ROCE_PORT,
        hop_limit: m.0,
        traffic_class: m.1,
        flow_label: m.2,
        roce_v1: false,
        payload: bytes,
        body: None,
    }
}

impl<C: Carrier> Carrier for Faulty<C> {
    fn send(&self, q: &mut TxQueue, now: Nanos) {
        // Every datagram is judged before it leaves. One the verdict leaves untouched
        // (delivered once, now, unchanged: all but the few corrupted, duplicated or
        // delayed) goes on the carrier's own path, batched with its neighbours and
        // its payload sent from its region, as without faults: the tap costs what it
        // injects, not a copy, an ICRC and a system call per datagram, which slowed a
        // stream under `loss=0` to half its rate and made every loss look dearer
        // than it is. One whose bytes the verdict changes or copies is sealed first
        // (its bytes final for the port it leaves from), so a corruption is one the
        // receiver sees, and sent as it is. The order of the rest is kept. The raw
        // device's frames are judged by its own taps.
        let mut dropped = Vec::new();
        let all = std::mem::take(&mut q.queue);
        // (datagram, sealed)
        let mut out: Vec<(Transmit, bool)> = Vec::with_capacity(all.len());
        let mut st = lock(&self.state);
        let mut held = false;
        for mut t in all {
            if self.inner.frames(&t) {
                out.push((t, false));
                continue;
            }
            let v = st.decide(t.len(), true);
            if v.copies == 0 {
                dropped.push(t);
                continue;
            }
            if v.untouched() {
                out.push((t, false));
                continue;
            }
            self.inner.seal(&mut t);
            v.corrupt(&mut t.payload);
            if v.delay_ns > 0 {
                let m = (t.hop_limit, t.traffic_class, t.flow_label);
                for _ in 0..v.copies {
                    st.hold(
                        now + v.delay_ns,
                        t.src,
                        t.dst,
                        meta_of(m),
                        t.payload.clone(),
                    );
                }
                held = true;
                dropped.push(t);
                continue;
            }
            if v.copies == 2 {
                let m = (t.hop_limit, t.traffic_class, t.flow_label);
                out.push((held_transmit(t.src, t.dst, m, t.payload.clone()), true));
            }
            out.push((t, true));
        }
        drop(st);
        // Runs of the same kind, in order: one send per run.
        let mut it = out.into_iter().peekable();
        while let Some((t, sealed)) = it.next() {
            q.queue.push(t);
            while let Some((t, _)) = it.next_if(|(_, s)| *s == sealed) {
                q.queue.push(t);
            }
            q.sealed = sealed;
            self.inner.send(q, now);
            q.sealed = false;
        }
        for t in dropped {
            q.drop_one(t);
        }
        if held {
            self.waker.wake();
        }
    }

    fn receive(&self, budget: usize, sink: &mut dyn Sink) -> usize {
        let mut s = FaultySink {
            inner: sink,
            state: &self.state,
        };
        self.inner.receive(budget, &mut s)
    }

    fn receive_spinning(&self, budget: usize, sink: &mut dyn Sink, now: Nanos) -> usize {
        let mut s = FaultySink {
            inner: sink,
            state: &self.state,
        };
        self.inner.receive_spinning(budget, &mut s, now)
    }

    fn sleep_receive(&self, with_sink: &mut WithSink<'_>) -> Option<usize> {
        let state = &self.state;
        self.inner.sleep_receive(&mut |f| {
            with_sink(&mut |sink| {
                let mut s = FaultySink { inner: sink, state };
                f(&mut s)
            })
        })
    }

    fn seal(&self, t: &mut Transmit) -> Seal {
        self.inner.seal(t)
    }

    fn frames(&self, t: &Transmit) -> bool {
        self.inner.frames(t)
    }

    waits_as_inner!();

    fn poll(&self, now: Nanos) -> Option<Nanos> {
        // The held datagrams that are due, then when the next one is.
        let mut q = TxQueue::default();
        let next = loop {
            let mut st = lock(&self.state);
            match st.due(now, false) {
                Some(Held::Datagram(src, dst, m, bytes)) => {
                    drop(st);
                    q.queue.push(held_transmit(src, dst, m, bytes));
                }
                Some(Held::Frame(_)) => {}
                None => break st.next_due(false),
            }
        };
        if !q.queue.is_empty() {
            q.sealed = true;
            self.inner.send(&mut q, now);
        }
        match (next, self.inner.poll(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn meta_of(m: (u8, u8, u32)) -> IpMeta {
    IpMeta {
        hop_limit: m.0,
        traffic_class: m.1,
        flow_label: m.2,
    }
}

/// Received datagrams through the fault injector: lost, corrupted or duplicated.
struct FaultySink<'a> {
    inner: &'a mut dyn Sink,
    state: &'a Mutex<FaultState>,
}

impl Sink for FaultySink<'_> {
    fn deliver(&mut self, a: Arrival<'_>) {
        if a.framed {
            return self.inner.deliver(a);
        }
        let mut a = a;
        a.materialize();
        let copies = lock(self.state).judge(a.bytes, false).copies;
        for _ in 0..copies {
            self.inner.deliver(a.reborrow());
        }
    }

    fn batch_end(&mut self, n: usize, more: bool) {
        self.inner.batch_end(n, more)
    }
}

/// A datagram carrier whose traffic is written to a capture file.
pub(crate) struct Captured<C> {
    inner: C,
    pcap: Shared<PcapWriter>,
}

impl<C: Carrier> Captured<C> {
    pub(crate) fn new(inner: C, pcap: Shared<PcapWriter>) -> Self {
        Captured { inner, pcap }
    }
}

impl<C: Carrier> Carrier for Captured<C> {
    fn send(&self, q: &mut TxQueue, now: Nanos) {
        let start = q.done.len();
        let was = std::mem::replace(&mut q.log, true);
        let left_start = q.left.len();
        self.inner.send(q, now);
        q.log = was;
        let left: Vec<Option<Departure>> = q.left.drain(left_start..).collect();
        let mut p = lock(&self.pcap);
        for (t, how) in q.done[start..].iter_mut().zip(left.iter()) {
            if let Some(d) = how {
                // As sent: the body copied in if it was sent from its region.
                t.materialize();
                p.write(d.src, t.dst, (d.src_port, ROCE_PORT), d.ip, &t.payload);
            }
        }
        if was {
            q.left.extend(left);
        }
    }

    fn receive(&self, budget: usize, sink: &mut dyn Sink) -> usize {
        let mut s = CapturedSink {
            inner: sink,
            pcap: &self.pcap,
        };
        self.inner.receive(budget, &mut s)
    }

    fn receive_spinning(&self, budget: usize, sink: &mut dyn Sink, now: Nanos) -> usize {
        let mut s = CapturedSink {
            inner: sink,
            pcap: &self.pcap,
        };
        self.inner.receive_spinning(budget, &mut s, now)
    }

    fn sleep_receive(&self, with_sink: &mut WithSink<'_>) -> Option<usize> {
        let pcap = &self.pcap;
        self.inner.sleep_receive(&mut |f| {
            with_sink(&mut |sink| {
                let mut s = CapturedSink { inner: sink, pcap };
                f(&mut s)
            })
        })
    }

    fn seal(&self, t: &mut Transmit) -> Seal {
        self.inner.seal(t)
    }

    fn frames(&self, t: &Transmit) -> bool {
        self.inner.frames(t)
    }

    waits_as_inner!();

    fn poll(&self, now: Nanos) -> Option<Nanos> {
        lock(&self.pcap).flush();
        self.inner.poll(now)
    }
}

/// Received datagrams written to the capture first.
struct CapturedSink<'a> {
    inner: &'a mut dyn Sink,
    pcap: &'a Mutex<PcapWriter>,
}

impl Sink for CapturedSink<'_> {
    fn deliver(&mut self, mut a: Arrival<'_>) {
        if !a.framed {
            a.materialize();
            lock(self.pcap).write(a.src, a.dst, (a.src_port, ROCE_PORT), a.ip, a.bytes);
        }
        self.inner.deliver(a)
    }

    fn batch_end(&mut self, n: usize, more: bool) {
        self.inner.batch_end(n, more)
    }
}

/// The taps of a carrier of Ethernet frames (the raw device): what it sends and
/// receives is captured whole, and faults apply to the bytes after the Ethernet
/// header.
#[derive(Default, Clone)]
pub(crate) struct FrameTaps {
    pub(crate) pcap: Option<Shared<PcapWriter>>,
    pub(crate) faults: Option<Shared<FaultState>>,
}

impl crate::carrier::raw::FrameTap for FrameTaps {
    fn emit(&self, now: Nanos, frame: &[u8], wire: &mut dyn FnMut(&[u8])) -> bool {
        let Some(faults) = &self.faults else {
            self.record(frame);
            wire(frame);
            return false;
        };
        let mut bytes = frame.to_vec();
        let mut f = lock(faults);
        let from = bytes.len().min(14);
        let v = f.judge(&mut bytes[from..], true);
        for _ in 0..v.copies {
            if v.delay_ns == 0 {
                self.record(&bytes);
                wire(&bytes);
            } else {
                f.hold_frame(now + v.delay_ns, bytes.clone());
            }
        }
        v.delay_ns > 0
    }

    fn record(&self, frame: &[u8]) {
        if let Some(p) = &self.pcap {
            lock(p).write_frame(frame);
        }
    }

    fn arrive(&self, frame: &mut [u8]) -> u32 {
        self.record(frame);
        match &self.faults {
            Some(f) => {
                let from = frame.len().min(14);
                lock(f).judge(&mut frame[from..], false).copies
            }
            None => 1,
        }
    }

    fn due(&self, now: Nanos, wire: &mut dyn FnMut(&[u8])) -> Option<Nanos> {
        let faults = self.faults.as_ref()?;
        loop {
            let mut f = lock(faults);
            match f.due(now, true) {
                Some(Held::Frame(frame)) => {
                    drop(f);
                    self.record(&frame);
                    wire(&frame);
                }
                Some(Held::Datagram(..)) => {}
                None => return f.next_due(true),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faults::Faults;

    /// A carrier that records each send: the datagrams' first bytes (their ids) and
    /// whether the queue was sealed.
    #[derive(Default)]
    struct Log(Mutex<Vec<(bool, Vec<u8>)>>);

    impl Carrier for Log {
        fn send(&self, q: &mut TxQueue, _now: Nanos) {
            let ids = q.queue.iter().map(|t| t.payload[0]).collect();
            lock(&self.0).push((q.sealed, ids));
            q.done.append(&mut q.queue);
        }
        fn seal(&self, t: &mut Transmit) -> Seal {
            t.payload[1] = 0xaa;
            Seal::Datagram
        }
        fn receive(&self, _budget: usize, _sink: &mut dyn Sink) -> usize {
            0
        }
        fn watch(&self, _fds: &mut Vec<RawFd>) {}
    }

    fn datagram(id: u8) -> Transmit {
        let a: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        held_transmit(a, a, (64, 0, 0), vec![id, 0, 0, 0])
    }

    /// Sends datagrams 0..n through the faults; the sends the carrier saw.
    fn run(spec: &str, n: u8) -> (Vec<(bool, Vec<u8>)>, TxQueue) {
        let faulty = Faulty::new(
            Log::default(),
            Arc::new(Mutex::new(FaultState::new(Faults::parse(spec).unwrap()))),
            Waker(Arc::new(crate::sys::eventfd().unwrap())),
        );
        let mut q = TxQueue::default();
        q.queue.extend((0..n).map(datagram));
        faulty.send(&mut q, 0);
        let sends = std::mem::take(&mut *lock(&faulty.inner.0));
        (sends, q)
    }

    #[test]
    fn untouched_datagrams_keep_the_carriers_batched_path() {
        // No fault: one send of all, unsealed (batched, payloads in place), as
        // without the tap.
        let (sends, q) = run("loss=0", 50);
        assert_eq!(sends, [(false, (0..50).collect::<Vec<u8>>())]);
        assert_eq!(q.done.len(), 50);
        // Loss only: the survivors in one unsealed send, in order; the lost ones
        // are done without being sent.
        let (sends, q) = run("loss=0.3,seed=5", 50);
        assert_eq!(sends.len(), 1);
        let (sealed, ids) = &sends[0];
        assert!(!sealed);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert!((20..48).contains(&ids.len()), "{ids:?}");
        assert_eq!(q.done.len(), 50);
    }

    #[test]
    fn changed_datagrams_are_sealed_and_the_order_is_kept() {
        // Every datagram corrupted: each sealed (then one bit flipped), sent sealed,
        // in order.
        let (sends, q) = run("corrupt=1", 10);
        assert_eq!(sends.len(), 1);
        assert!(sends[0].0);
        for (k, t) in q.done.iter().enumerate() {
            let mut want = datagram(k as u8).payload;
            want[1] = 0xaa;
            let flipped: u32 = t
                .payload
                .iter()
                .zip(&want)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(flipped, 1, "datagram {k}: {:?}", t.payload);
        }
        // Some duplicated: runs of unsealed and sealed sends, the copies sealed,
        // together in the engine's order.
        let (sends, _) = run("dup=0.3,seed=9", 40);
        assert!(
            sends.iter().any(|s| s.0) && sends.iter().any(|s| !s.0),
            "{sends:?}"
        );
        assert!(sends.windows(2).all(|w| w[0].0 != w[1].0), "{sends:?}");
        let order: Vec<u8> = sends.iter().flat_map(|s| s.1.iter().copied()).collect();
        let mut dedup = order.clone();
        dedup.dedup();
        assert_eq!(dedup, (0..40).collect::<Vec<u8>>());
        assert!(order.len() > 40);
        for (sealed, ids) in &sends {
            if !sealed {
                // (An unsealed run holds no copy.)
                assert!(ids.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
