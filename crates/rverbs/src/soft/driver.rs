//! The driver thread: keeps a device going while the application is busy (receives,
//! acknowledges, retransmits, runs the carriers' timers) and re-reads the interface's
//! addresses.

use super::Shared;
use crate::sys;
use rverbs_engine::{Engine, Nanos};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How often a device re-reads its interface's addresses.
const RESCAN_NS: Nanos = 1_000_000_000;

/// While the engine has had a timer running within the last `BUSY_NS` (1 s), the
/// driver thread, watching the sockets, sleeps at most `BUSY_SLEEP_NS` (10 ms) between
/// looks. A verb whose deadline comes before the driver's planned look wakes it
/// (`Shared::wake_if_needed`): on a QP that keeps going idle (an event-driven
/// ping-pong: every ACK stops the retransmit timer, every post starts it again) that
/// was a wake-up of the driver per post; with looks at most 10 ms apart, the
/// retransmit deadline of the usual timeouts (14 and up: 67 ms) is never earlier.
const BUSY_NS: Nanos = 1_000_000_000;
pub(crate) const BUSY_SLEEP_NS: Nanos = 10_000_000;

/// Re-reads the interface's addresses: binds sockets for new ones, updates the GID
/// table (entries in use stay until released, `gid.rs`) and the engine's copy of it,
/// and closes the sockets of addresses whose entry is gone.
fn rescan(shared: &Shared) {
    shared.prune_groups();
    if let Some(net) = &shared.net {
        net.refresh_prefixes();
    }
    if shared.info.is_loopback() {
        return;
    }
    let Ok(now_addrs) = crate::device::interface_addrs(&shared.info.ifname) else {
        return;
    };
    // Lock order, as everywhere: engine, then sockets, then the GID table (senders
    // hold the engine while they take the sockets' read lock).
    let mut engine = shared.lock();
    let mut socks = shared.udp.sockets();
    for a in &now_addrs {
        if !socks.iter().any(|(b, _)| b == a) {
            shared.udp.add_address(&mut socks, *a);
        }
    }
    let usable: Vec<IpAddr> = now_addrs
        .iter()
        .copied()
        .filter(|a| socks.iter().any(|(b, _)| b == a))
        .collect();
    let mut table = shared.gid_table.lock().unwrap_or_else(|e| e.into_inner());
    if table.update(&usable, |i| engine.sgid_in_use(i)) {
        let gids = table.engine_gids();
        socks
            .retain(|(a, _)| a.is_multicast() || gids.contains(&rverbs_engine::net::ip_to_gid(*a)));
        engine.set_gids(gids);
        engine.set_gid_roce_v1(table.engine_gid_roce_v1());
    }
}

pub(crate) fn driver(shared: Arc<Shared>) {
    let mut fds: Vec<i32> = Vec::new();
    let mut ready = Vec::new();
    let mut next_rescan: Nanos = RESCAN_NS;
    let mut reload = true;
    let mut standoff = super::progress::Standoff::default();
    // When the engine last had a timer running (see `BUSY_SLEEP_NS`).
    let mut busy_at: Nanos = 0;
    while !shared.shutdown.load(Ordering::SeqCst) {
        if shared.now() >= next_rescan {
            rescan(&shared);
            next_rescan = shared.now() + RESCAN_NS;
            reload = true;
        }
        if shared.udp.sockets_changed.swap(false, Ordering::AcqRel) {
            reload = true;
        }
        if reload {
            // Every carrier's descriptors (the sockets; in raw mode the RoCE socket,
            // read inline too), then the driver's eventfd.
            fds.clear();
            shared.watch_fds(&mut fds);
            fds.push(shared.waker.0.as_raw_fd());
            reload = false;
        }
        // The carriers' own duties: held datagrams, neighbour probes (and the
        // capture's flush).
        let next_due = shared.poll_carriers(shared.now());
        // The driver's own next duty (a held datagram, a neighbour probe, the rescan).
        let bound = next_due.map_or(next_rescan, |d| d.min(next_rescan));
        // While an application thread makes progress itself, sleep on the eventfd only,
        // without the engine lock (`progress.rs`, "Driver stand-off"); otherwise watch
        // the sockets too, until the engine's next deadline.
        let (watch, until, standing_off) = match standoff.until(&shared, shared.now(), bound) {
            Some(until) => (&fds[fds.len() - 1..], until, true),
            None => (
                &fds[..],
                plan(&shared, &shared.lock(), bound, &mut busy_at),
                false,
            ),
        };
        let left = until.saturating_sub(shared.now());
        let polled = if standing_off {
            // (Whole milliseconds: the polling thread runs the timers meanwhile, and
            // each look takes a core from it.)
            sys::poll_readable(watch, sys::poll_ms(left), &mut ready)
        } else {
            // To the nanosecond (`ppoll`): a timer due in 200 µs (a tail-loss probe)
            // fires then, not at the next whole millisecond.
            shared.poll_wait(watch, left.min(sys::MAX_POLL_NS), &mut ready)
        };
        if polled.is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        let poked = ready.last() == Some(&true);
        if poked {
            sys::eventfd_drain(&shared.waker.0);
        } else if standing_off {
            continue;
        }
        // (Poked in the stand-off — a deferred destruction, an armed CQ, ... —: one
        // pass under the lock, then the stand-off is judged again.)
        let mut engine = shared.lock();
        shared.run_deferred(&mut engine);
        shared.driver_wake_at.store(0, Ordering::Release);
        let now = shared.now();
        if shared.drain_raw_qps(&mut engine) {
            shared.flush(&mut engine, now);
        }
        let deferred = shared.flush_pending.load(Ordering::Relaxed);
        if deferred != 0 && now >= deferred + super::progress::DEFER_NS {
            shared.flush(&mut engine, now);
        }
        // Drain what is queued (bounded, so timers still run under load) — unless an
        // application thread sleeps on the sockets right now (`Cq::wait`): it wakes
        // for the datagram and receives it, and taking it here would leave that
        // thread asleep until its timeout.
        let app_receives = shared.app_sleeping(now);
        if (app_receives || shared.receive(&mut engine, now, 256, false) == 0)
            && shared.flush_pending.load(Ordering::Relaxed) != 0
            && engine.poll_timeout().is_none_or(|t| t > now)
        {
            // Nothing for us: leave the deferred answer to the application.
            continue;
        }
        if engine.poll_timeout().is_some_and(|t| t <= now) {
            engine.handle_timeout(now);
        }
        shared.flush(&mut engine, now);
    }
}

/// When the driver thread, watching the sockets, looks again at the latest: the
/// engine's next timer, a deferred answer's bound, `bound` (its own next duty), and at
/// most [`BUSY_SLEEP_NS`] while timers run (`busy_at`: when one last did). Published
/// under the engine lock `e` holds: a verb that makes the deadline earlier than this
/// wakes the driver (`Shared::wake_if_needed`).
fn plan(shared: &Shared, e: &Engine, bound: Nanos, busy_at: &mut Nanos) -> Nanos {
    if !e.any_cq_armed() {
        shared.cq_armed.store(false, Ordering::SeqCst);
    }
    let now = shared.now();
    let mut until = bound;
    if let Some(t) = e.poll_timeout() {
        until = until.min(t);
        *busy_at = now;
    }
    if now.saturating_sub(*busy_at) < BUSY_NS {
        until = until.min(now + BUSY_SLEEP_NS);
    }
    let deferred = shared.flush_pending.load(Ordering::Relaxed);
    if deferred != 0 {
        // A deferred answer waits at most this long for the application.
        until = until.min(deferred + super::progress::DEFER_NS);
    }
    shared.driver_wake_at.store(until, Ordering::Release);
    until
}
