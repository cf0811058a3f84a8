//! Who moves the packets: the wake-up policy between the application's threads and
//! the context's driver thread.
//!
//! **Progress on poll.** A thread that polls a CQ and finds it empty receives the
//! device's pending datagrams and runs its due timers itself, under the engine lock,
//! instead of waiting for the driver thread to be scheduled: a busy-polling
//! application then gets its completions with no thread hop, and on a machine with
//! few cores the spinning thread does the work instead of competing with the thread
//! that would. Receiving always happens under the engine lock, so datagrams are handed
//! to the engine in the order the socket delivered them whichever thread reads them.
//!
//! **Driver stand-off.** While an application thread polls, the driver thread does
//! not wait on the sockets (it would only be woken to find the datagram already
//! taken) and does not take the engine lock: it sleeps on its eventfd and looks again
//! when the stand-off may have ended ([`Standoff`]). The stand-off lasts
//! [`STANDOFF_NS`] after the application's last poll at first and doubles, up to
//! [`STANDOFF_MAX_NS`], each time the driver finds the application polled during
//! its last sleep: every look takes a core from a busy-polling thread for a moment
//! (at a 2 ms rhythm, those looks were the p99 of a spinning ping-pong: 14 µs against
//! 5 µs at 8 ms). When polling stops, the driver resumes within the stand-off. Arming
//! a CQ ends it at once ([`crate::Cq::req_notify`] wakes the driver): a thread that
//! waits for a completion event needs the driver to receive.
//!
//! **Deferred acknowledgements.** What the engine answers to datagrams received on
//! an application thread (ACKs, mostly) leaves with the application's next verb — a
//! ping-pong's reply then carries its ACK in the same system call (on the loopback
//! device in the same `UDP_SEGMENT` buffer, the ACK as its last segment, which the
//! receiver handles first), and the peer wakes once instead of twice — or, when the
//! poll found no completion, at once. If the application makes no further call, the
//! driver thread sends it when it next looks (it sleeps at most [`DEFER_NS`] while it
//! knows of one — in the stand-off rounded up to `poll(2)`'s millisecond — and at most
//! the stand-off otherwise: one deferred after the driver went to sleep waits for its next look).
//! ACKs are cumulative (IBTA 9.7.5.1.1 allows coalescing them), so a
//! late ACK only delays the requester's completions, never loses anything.
//!
//! **Sleeping in the receive.** [`crate::Cq::wait`] on a device with one socket
//! sleeps in the receive itself (`recvmsg` for one buffer, `recvmmsg` for more; a
//! blocking socket with a receive timeout; every other
//! call passes `MSG_DONTWAIT`): one system call per wake-up, as a TCP `read`. While
//! datagrams come one per wake-up (a ping-pong) it asks for one buffer, so the kernel
//! returns with the first instead of trying for a second; once datagrams are found
//! queued behind it (a stream) it takes whole batches again. The driver thread leaves
//! the socket to it meanwhile.
//!
//! **Waiting for a completion event** ([`crate::CompChannel::get_cq_event`],
//! [`crate::Context::get_cq_event`]) sleeps the same way, in `poll(2)` on the
//! channel's eventfd and the device's sockets, and runs the engine on the waiting
//! thread when a datagram comes: one wake-up per event, not the driver's and then the
//! waiter's (an event-driven 8-byte `rverbs pingpong rc -e`: 78 → 42–49 µs per
//! iteration). The asynchronous form waits on the eventfd and leaves receiving to the
//! driver.
//!
//! **Wake-ups on demand.** A verb that creates work wakes the driver only when the
//! engine's next deadline is earlier than the time the driver will wake up anyway
//! (published under the engine lock as `driver_wake_at`), not on every post.

use super::Shared;
use rverbs_engine::Nanos;
use std::sync::atomic::Ordering;

/// Longest a deferred acknowledgement waits for the application before the driver
/// thread sends it (50 µs).
pub(crate) const DEFER_NS: Nanos = 50_000;

/// How long after an application's last poll the driver thread leaves the sockets to
/// it at first (2 ms).
pub(crate) const STANDOFF_NS: Nanos = 2_000_000;

/// The longest stand-off (8 ms): reached after a few of the driver's looks found the
/// application still polling. Each look takes a core from a busy-polling thread for a
/// moment; at 2 ms they were the p99 of a spinning ping-pong.
pub(crate) const STANDOFF_MAX_NS: Nanos = 8_000_000;

/// Longest one sleep in `recvmmsg` (`Shared::sleep_receive`) lasts: the UDP
/// carrier's socket receive timeout.
pub(crate) use crate::carrier::udp::socket::SLEEP_RECV_NS;

/// Most datagrams one poll takes from the sockets before returning (bounded so a
/// poller under a flood still returns to its caller).
pub(crate) const POLL_BUDGET: usize = 64;

/// The driver thread's stand-off: whether it leaves the sockets to the application
/// now, and for how long.
#[derive(Debug, Default)]
pub(crate) struct Standoff {
    /// The current length (0 before the first: [`STANDOFF_NS`]).
    len: Nanos,
    /// The application's last poll as seen when the previous stand-off sleep began.
    polled: Option<Nanos>,
}

/// What the application threads have published, as the driver reads it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AppState {
    /// Some CQ is armed: a thread waits for its event, which needs the driver.
    armed: bool,
    /// `Shared::app_poll_at` (0: no poll yet; in the future while a thread sleeps on
    /// the sockets in `Cq::wait` or `get_cq_event`).
    polled: Nanos,
    /// `Shared::flush_pending` (0: no deferred answer).
    deferred: Nanos,
}

impl Standoff {
    /// When the driver thread should look again if it stands off now (sleeping on its
    /// eventfd only, without the engine lock: the polling thread receives, runs the
    /// timers and sends what it deferred), at the latest `bound`; `None` when the
    /// stand-off is over and the driver must work and watch the sockets.
    pub(crate) fn until(&mut self, shared: &Shared, now: Nanos, bound: Nanos) -> Option<Nanos> {
        // Published before the armed flag is read; `Cq::req_notify` stores that flag
        // before it reads this one, so one of the two sees the other (SeqCst).
        shared.driver_standoff.store(true, Ordering::SeqCst);
        let app = AppState {
            armed: shared.cq_armed.load(Ordering::SeqCst),
            polled: shared.app_poll_at.load(Ordering::Relaxed),
            deferred: shared.flush_pending.load(Ordering::Relaxed),
        };
        let until = self.judge(app, now, bound);
        if until.is_none() {
            shared.driver_standoff.store(false, Ordering::SeqCst);
        } else {
            // No verb needs to wake us for its deadline: the polling thread runs timers.
            shared.driver_wake_at.store(0, Ordering::Release);
        }
        until
    }

    /// The rule. The stand-off lasts while an application thread has polled within its
    /// length or sleeps on the sockets ([`crate::Cq::wait`], `get_cq_event`), no CQ
    /// is armed (unless that thread sleeps on the sockets: it receives) and no
    /// deferred answer has waited longer than [`DEFER_NS`]. Its length doubles, up to
    /// [`STANDOFF_MAX_NS`], each time the application polled during the driver's last
    /// sleep, and starts again at [`STANDOFF_NS`] after the stand-off ends. A pending
    /// deferred answer shortens the sleep to its bound: whether it is still pending
    /// then tells whether the application went away.
    fn judge(&mut self, app: AppState, now: Nanos, bound: Nanos) -> Option<Nanos> {
        let len = self.len.max(STANDOFF_NS);
        let sleeping = app.polled > now;
        // (0: no application thread has polled yet.)
        let polling = !app.armed && app.polled != 0 && now.saturating_sub(app.polled) < len;
        let overdue = app.deferred != 0 && now >= app.deferred + DEFER_NS;
        if !(sleeping || polling) || overdue {
            *self = Standoff::default();
            return None;
        }
        self.len = if self.polled.is_some_and(|p| app.polled > p) {
            (len * 2).min(STANDOFF_MAX_NS)
        } else {
            len
        };
        self.polled = Some(app.polled);
        let mut until = (app.polled + self.len).min(bound);
        if app.deferred != 0 {
            until = until.min(app.deferred + DEFER_NS);
        }
        Some(until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_engine::Wc;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    const MS: Nanos = 1_000_000;
    const FAR: Nanos = Nanos::MAX;

    fn polled(at: Nanos) -> AppState {
        AppState {
            polled: at,
            ..AppState::default()
        }
    }

    #[test]
    fn standoff_grows_while_the_application_polls_and_ends_when_it_stops() {
        let mut s = Standoff::default();
        let mut now = 10 * MS;
        // Polled half a millisecond ago: stand off until 2 ms after that poll.
        assert_eq!(
            s.judge(polled(now - MS / 2), now, FAR),
            Some(now + 3 * MS / 2)
        );
        // Each look finds a newer poll: 4 ms, then 8 ms, and no longer.
        let mut lens = Vec::new();
        for _ in 0..4 {
            now += 2 * MS;
            let at = now - 1000;
            lens.push(s.judge(polled(at), now, FAR).unwrap() - at);
        }
        assert_eq!(lens, [4 * MS, 8 * MS, 8 * MS, 8 * MS]);
        // No poll since the last look, still within the length: the same length.
        let last = now - 1000;
        now = last + 5 * MS;
        assert_eq!(s.judge(polled(last), now, FAR), Some(last + 8 * MS));
        // The application stopped: over 8 ms after its last poll...
        now = last + 8 * MS;
        assert_eq!(s.judge(polled(last), now, FAR), None);
        // ...and the next stand-off starts short again.
        assert_eq!(s.judge(polled(now), now, FAR), Some(now + 2 * MS));
        // Never past the caller's bound (a timer of the driver's own).
        assert_eq!(s.judge(polled(now), now, now + 100), Some(now + 100));
        // Never polled at all: no stand-off, also in the first 2 ms of the context.
        assert_eq!(Standoff::default().judge(polled(0), 10 * MS, FAR), None);
        assert_eq!(Standoff::default().judge(polled(0), MS, FAR), None);
    }

    #[test]
    fn an_armed_cq_ends_the_standoff_unless_the_application_sleeps_on_the_sockets() {
        let now = 10 * MS;
        let armed = AppState {
            armed: true,
            ..polled(now)
        };
        assert_eq!(Standoff::default().judge(armed, now, FAR), None);
        // `Cq::wait` asleep on the sockets until 1 ms from now receives itself.
        let asleep = AppState {
            armed: true,
            ..polled(now + MS)
        };
        assert_eq!(
            Standoff::default().judge(asleep, now, FAR),
            Some(now + 3 * MS)
        );
    }

    #[test]
    fn a_deferred_answer_bounds_the_sleep_and_is_sent_by_the_driver_when_overdue() {
        let now = 10 * MS;
        let mut s = Standoff::default();
        let app = AppState {
            deferred: now - 10_000,
            ..polled(now)
        };
        // Look again when the answer has waited its limit...
        let at = now - 10_000 + DEFER_NS;
        assert_eq!(s.judge(app, now, FAR), Some(at));
        // ...and if it is still waiting then, the application went away: work.
        assert_eq!(s.judge(app, at, FAR), None);
        // An answer sent and another deferred since: the application is there.
        let newer = AppState {
            deferred: at - 1000,
            ..polled(at - 1000)
        };
        assert!(s.judge(newer, at, FAR).is_some());
    }

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(Instant::now() < until, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One end of [`rc_pair`]: an RC QP whose CQ is on its context's channel.
    struct End {
        ctx: crate::Context,
        ch: crate::CompChannel,
        cq: crate::Cq,
        mr: crate::Mr,
        qp: crate::Qp,
    }

    /// Two contexts on the loopback device with one RC QP each, connected.
    fn rc_pair() -> (End, End) {
        rc_pair_with(&crate::ConnectOpts::default())
    }

    /// [`rc_pair`] with `a` connected with `opts_a`.
    fn rc_pair_with(opts_a: &crate::ConnectOpts) -> (End, End) {
        use crate::{AccessFlags, ConnectOpts, PeerInfo, QpInitAttr, QpType};
        let dev = crate::device(None).unwrap();
        let end = || {
            let ctx = dev.open().unwrap();
            let ch = ctx.create_comp_channel().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq_on(4, &ch).unwrap();
            let mr = pd.reg_mr(64, AccessFlags::ALL).unwrap();
            let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
            End {
                ctx,
                ch,
                cq,
                mr,
                qp,
            }
        };
        let (a, b) = (end(), end());
        let peer = |q: &crate::Qp| PeerInfo {
            qpn: q.qp_num(),
            psn: 0,
            gid: q.context().gid(1).unwrap(),
        };
        a.qp.connect(&peer(&b.qp), opts_a).unwrap();
        b.qp.connect(&peer(&a.qp), &ConnectOpts::default()).unwrap();
        (a, b)
    }

    /// After a timer ran (a SEND waiting for its ACK), the driver thread watching the
    /// sockets plans its next look at most `BUSY_SLEEP_NS` ahead: the next post's
    /// retransmit deadline (67 ms at the default timeout) is later, so posting does not
    /// have to wake it (it did on every post of an event-driven ping-pong).
    #[test]
    fn after_a_timer_ran_the_driver_looks_often_enough_that_posts_need_not_wake_it() {
        let (a, b) = rc_pair();
        b.qp.post_recv(1, &[b.mr.slice(0..8)]).unwrap();
        // a's completion comes as an event: no thread of a polls, so a's driver
        // receives the ACK and does not stand off.
        a.cq.req_notify(false).unwrap();
        a.qp.post_send(&crate::SendRequest::send(2, &[a.mr.slice(0..8)]))
            .unwrap();
        assert!(a.ch.get_cq_event(Some(Duration::from_secs(5))).is_some());
        // The driver published 0 in the pass that delivered the event; the next
        // non-zero value is the plan it made after it.
        let shared = a.ctx.soft().unwrap();
        let mut planned = 0;
        wait_for("the driver never planned its next look", || {
            planned = shared.driver_wake_at.load(Ordering::Acquire);
            planned != 0
        });
        assert!(
            planned <= shared.now() + crate::soft::driver::BUSY_SLEEP_NS,
            "the driver plans to sleep {} ms",
            (planned - shared.now()) / 1_000_000
        );
    }

    /// A thread waiting in `get_cq_event` sleeps on the device's sockets and receives
    /// itself: the driver stands off while it waits (before, the driver received the
    /// datagram and woke the waiter, two wake-ups per event), and the event comes.
    #[test]
    fn a_thread_waiting_for_an_event_receives_itself() {
        let (a, b) = rc_pair();
        b.qp.post_recv(1, &[b.mr.slice(0..8)]).unwrap();
        b.cq.req_notify(false).unwrap();
        let shared = b.ctx.soft().unwrap();
        std::thread::scope(|sc| {
            let waiter = sc.spawn(|| b.ch.get_cq_event(Some(Duration::from_secs(10))));
            // (Past the first looks after the context opened and the CQ was armed.)
            std::thread::sleep(Duration::from_millis(50));
            wait_for(
                "the driver did not leave the sockets to the waiting thread",
                || shared.driver_standoff.load(Ordering::SeqCst),
            );
            a.mr.write(0, b"event!!!");
            a.qp.post_send(&crate::SendRequest::send(2, &[a.mr.slice(0..8)]))
                .unwrap();
            let got = waiter.join().unwrap().expect("no completion event");
            assert!(got.same_as(&b.cq));
        });
        let mut wc = [Wc::default()];
        assert_eq!(b.cq.poll(&mut wc).unwrap(), 1);
        assert_eq!((wc[0].wr_id, wc[0].byte_len), (1, 8));
        assert_eq!(&b.mr.to_vec()[..8], b"event!!!");
    }

    /// A thread that arms a CQ will wait for its event, which only the driver thread
    /// can deliver once pollers stop: arming wakes a driver that stands off, even while
    /// another thread keeps polling (which alone would keep it standing off).
    #[test]
    fn arming_a_cq_ends_the_drivers_standoff() {
        let ctx = crate::device(None).unwrap().open().unwrap();
        let (busy, armed) = (ctx.create_cq(4).unwrap(), ctx.create_cq(4).unwrap());
        let shared = ctx.soft().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut wc = [Wc::default()];
                while !stop.load(Ordering::Relaxed) {
                    busy.poll(&mut wc).unwrap();
                }
            });
            // Stops the poller however this closure ends (a failed check included).
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = Stop(&stop);
            wait_for("the driver never stood off for a polling thread", || {
                shared.driver_standoff.load(Ordering::SeqCst)
            });
            armed.req_notify(false).unwrap();
            wait_for("arming a CQ left the driver standing off", || {
                !shared.driver_standoff.load(Ordering::SeqCst)
            });
            // And it stays on the sockets while the CQ is armed.
            std::thread::sleep(Duration::from_millis(20));
            assert!(!shared.driver_standoff.load(Ordering::SeqCst));
        });
    }

    /// Polling or waiting inside `Mr::with` is refused (`WouldDeadlock`), also when
    /// nothing happened since the last empty poll: that shortcut skipped the check,
    /// and the receive behind it wrote a waiting SEND into the region this thread
    /// held, deadlocking the thread on its own lock with the engine held (and so the
    /// whole context).
    #[test]
    fn polling_inside_mr_with_is_refused_not_deadlocked() {
        let (a, b) = rc_pair();
        b.qp.post_recv(1, &[b.mr.slice(0..8)]).unwrap();
        let mut wc = [Wc::default()];
        // Empty polls: the shortcut's state (nothing since the last empty poll).
        for _ in 0..3 {
            assert_eq!(b.cq.poll(&mut wc).unwrap(), 0);
        }
        a.qp.post_send(&crate::SendRequest::send(2, &[a.mr.slice(0..8)]))
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let b = std::thread::spawn(move || {
            let mut wc = [Wc::default()];
            let r = b.mr.with(|_| {
                [
                    b.cq.poll(&mut wc),
                    b.cq.wait(&mut wc, Duration::from_millis(1), Duration::from_millis(5)),
                    b.cq.wait(&mut wc, Duration::ZERO, Duration::from_millis(5)),
                ]
            });
            let _ = tx.send(r.map(|r| r.map_err(|e| e.to_string())));
            b
        });
        let r = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("polling inside Mr::with hung");
        for r in r {
            assert!(r.as_ref().is_err_and(|e| e.contains("deadlock")), "{r:?}");
        }
        // Outside `with` the SEND completes.
        let b = b.join().unwrap();
        wait_for("the SEND outside Mr::with", || {
            b.cq.poll(&mut wc).unwrap() == 1
        });
        assert_eq!(wc[0].wr_id, 1);
        drop(a);
    }

    /// A poisoned engine lock (a thread panicked holding it) does not keep `Cq::wait`
    /// from receiving: it was taken for "busy", and a waiter sleeping on the sockets
    /// (which the driver then leaves to it) looped without ever receiving.
    #[test]
    fn a_poisoned_engine_does_not_stop_wait_from_receiving() {
        let (a, b) = rc_pair();
        b.qp.post_recv(1, &[b.mr.slice(0..8)]).unwrap();
        let shared = b.ctx.soft().unwrap().clone();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = shared.engine.lock().unwrap();
            panic!("a thread dies holding the engine");
        }));
        assert!(shared.engine.is_poisoned());
        // (The driver's next look, up to a second later, would find it: the waiter
        // itself must, at once.)
        let until = Instant::now() + Duration::from_millis(900);
        let mut wc = [Wc::default()];
        std::thread::scope(|s| {
            // The SEND comes once b waits (its driver then leaves the sockets to it).
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                a.qp.post_send(&crate::SendRequest::send(2, &[a.mr.slice(0..8)]))
                    .unwrap();
            });
            // Sleeps under 0.5 ms are taken in poll(2) on the sockets.
            while b
                .cq
                .wait(&mut wc, Duration::ZERO, Duration::from_micros(400))
                .unwrap()
                == 0
            {
                assert!(
                    Instant::now() < until,
                    "no completion through a poisoned engine"
                );
            }
        });
        assert_eq!(wc[0].wr_id, 1);
    }

    /// An ACK that a thread asleep in `recvmsg` (`Cq::wait` with no spin) defers when
    /// it wakes for a SEND leaves without another verb from the application: the
    /// driver, asleep in poll(2) for up to its next rescan (the sleeping thread took
    /// the datagram that would have woken it), is woken for it as `receive` does. It
    /// was not, and the peer's SEND completed only when it resent the SEND at its ACK
    /// timeout (or, with a long timeout, when the driver next looked).
    #[test]
    fn an_ack_deferred_by_a_sleeping_receive_leaves_without_another_verb() {
        // a's ACK timeout is long (18: about 1.07 s): a late ACK shows as latency,
        // not as a resend.
        let opts = crate::ConnectOpts {
            timeout: 18,
            ..Default::default()
        };
        let (a, b) = rc_pair_with(&opts);
        // Idle: b's driver leaves its stand-off for a long sleep.
        std::thread::sleep(Duration::from_millis(1200));
        let mut worst = Duration::ZERO;
        for i in 0..8u64 {
            b.qp.post_recv(i, &[b.mr.slice(0..8)]).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            let mut t0 = Instant::now();
            std::thread::scope(|s| {
                let h = s.spawn(|| {
                    let mut wc = [Wc::default()];
                    while b
                        .cq
                        .wait(&mut wc, Duration::ZERO, Duration::from_secs(2))
                        .unwrap()
                        == 0
                    {}
                });
                // b's thread is asleep in recvmsg when the SEND comes.
                std::thread::sleep(Duration::from_millis(3));
                t0 = Instant::now();
                a.qp.post_send(&crate::SendRequest::send(100 + i, &[a.mr.slice(0..8)]))
                    .unwrap();
                h.join().unwrap();
            });
            // b calls nothing more; a's SEND completes on b's ACK.
            let mut wc = [Wc::default()];
            while a
                .cq
                .wait(&mut wc, Duration::ZERO, Duration::from_secs(3))
                .unwrap()
                == 0
            {
                assert!(t0.elapsed() < Duration::from_secs(3), "no ACK");
            }
            assert_eq!(wc[0].status, rverbs_engine::WcStatus::Success);
            worst = worst.max(t0.elapsed());
        }
        assert_eq!(a.ctx.counters().retransmit_timeouts, 0);
        // The stand-off bounds the deferral (8 ms); the driver's long sleep is 1 s.
        assert!(worst < Duration::from_millis(400), "worst {worst:?}");
    }
}
