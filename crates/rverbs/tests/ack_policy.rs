//! The RC ACK policy through the verbs API, between two contexts over loopback UDP:
//! unsignaled SENDs are acknowledged by one ACK (an ACK nudge for the tail) with the
//! default `AckPolicy::Coalesce`, one AckReq per message with
//! `AckPolicy::EveryMessage` (`OpenOptions::ack_policy`), and a bad
//! `RVERBS_ACK_POLICY` (or `RVERBS_WRITE_PIECES`) fails `Context::open` with a clear
//! error.

mod common;
use common::*;
use rverbs::*;
use std::time::{Duration, Instant};

const N: u64 = 20;

/// `N` unsignaled 8-byte SENDs from a to b and nothing after them; returns the
/// requester's and the responder's counters once the requester has heard an ACK.
fn unsignaled_tail(policy: AckPolicy) -> (Counters, Counters) {
    let dev = device(None).unwrap();
    let opts = OpenOptions {
        ack_policy: policy,
        ..Default::default()
    };
    unsignaled_tail_on(&|| Context::open_with(dev.clone(), &opts).unwrap())
}

/// [`unsignaled_tail`] between two contexts `open` makes.
fn unsignaled_tail_on(open: &dyn Fn() -> Context) -> (Counters, Counters) {
    let (a, b) = (end(open(), 4096), end(open(), 4096));
    connect(&a, &b, &ConnectOpts::default());
    for i in 0..N {
        b.qp.post_recv(i, &[b.mr.slice(0..64)]).unwrap();
    }
    for i in 0..N {
        a.qp.post_send(&SendRequest::send(i, &[a.mr.slice(0..8)]).signaled(false))
            .unwrap();
    }
    let mut wcs = [Wc::default(); 32];
    let mut got = 0;
    while got < N as usize {
        let n = b.cq.poll_wait(&mut wcs, Duration::from_secs(10)).unwrap();
        assert!(n > 0, "SENDs lost: {got} of {N} received");
        assert!(wcs[..n].iter().all(|w| w.status == WcStatus::Success));
        got += n;
    }
    // The requester receives nothing but ACKs: wait for the first (the nudge's, with
    // the default policy; the bound only keeps a broken build from hanging).
    let t0 = Instant::now();
    while a.ctx.counters().rx_packets == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no ACK ever came");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Unsignaled successes never complete to the CQ; nothing failed.
    assert_eq!(a.cq.poll(&mut wcs).unwrap(), 0);
    // The send queue is free: a signaled SEND goes out and completes.
    b.qp.post_recv(99, &[b.mr.slice(0..64)]).unwrap();
    a.qp.post_send(&SendRequest::send(99, &[a.mr.slice(0..8)]))
        .unwrap();
    let n = a.cq.poll_wait(&mut wcs, Duration::from_secs(10)).unwrap();
    assert_eq!((n, wcs[0].wr_id, wcs[0].status), (1, 99, WcStatus::Success));
    (a.ctx.counters(), b.ctx.counters())
}

/// The ACK requests the policy made: every AckReq sent, less the tail-loss probes (a
/// probe asks for an ACK too, when an answer is late on a loaded host; it is recovery,
/// not the policy).
fn asked(c: &rverbs::Counters) -> u64 {
    c.tx_ack_requests - c.tail_loss_probes
}

#[test]
fn coalesced_acks_complete_an_unsignaled_tail_with_a_nudge() {
    let (a, b) = unsignaled_tail(AckPolicy::Coalesce);
    assert_eq!(a.retransmit_timeouts, 0, "{a:?}");
    assert_eq!(a.retransmitted_packets, 0, "{a:?}");
    // The nudge (or, on a host slow enough to take `ack_nudge_ns` between two of
    // the SENDs, an AckReq on a later one), then the signaled SEND: far fewer
    // requests than messages.
    assert!(
        asked(&a) >= 2 && asked(&a) <= 4,
        "{} ACK requests for {} messages: {a:?}",
        asked(&a),
        N + 1
    );
    assert!(b.tx_acks <= a.tx_ack_requests + b.rx_duplicate_requests);
}

#[test]
fn every_message_policy_asks_on_every_message() {
    let (a, b) = unsignaled_tail(AckPolicy::EveryMessage);
    assert_eq!(asked(&a), N + 1, "{a:?}");
    assert_eq!(a.ack_nudges, 0);
    assert_eq!(a.retransmit_timeouts, 0);
    // ACKs for packets handled in one batch coalesce in the responder's queue.
    assert!(b.tx_acks >= 1 && b.tx_acks <= N + 1, "{b:?}");
}

/// A bad `RVERBS_ACK_POLICY` is a clear error from `Context::open`, and the two good
/// values open. Environment variables are per process: the checks run in a child.
#[test]
fn rverbs_ack_policy_env_is_checked() {
    if let Ok(v) = std::env::var("RVERBS_ACK_POLICY_TEST_CHILD") {
        let r = Context::open(device(None).unwrap());
        if v == "bad" {
            let e = r.err().expect("a bad RVERBS_ACK_POLICY must fail the open");
            let msg = e.to_string();
            assert!(
                msg.contains("RVERBS_ACK_POLICY") && msg.contains("every-message"),
                "{msg}"
            );
        } else {
            r.expect("a valid RVERBS_ACK_POLICY opens");
            // And the policy it names is the one the contexts use.
            let (a, _) = unsignaled_tail_on(&|| Context::open(device(None).unwrap()).unwrap());
            if v == "every-message" {
                assert_eq!(asked(&a), N + 1, "{a:?}");
            } else {
                assert!(asked(&a) <= 4, "{a:?}");
            }
        }
        return;
    }
    for (value, mode) in [
        ("bogus", "bad"),
        ("every-message", "every-message"),
        ("coalesce", "coalesce"),
    ] {
        in_child(
            "rverbs_ack_policy_env_is_checked",
            "RVERBS_ACK_POLICY",
            value,
            mode,
        );
    }
}

/// Runs test `test` of this binary again in a child process with `var` set to `value`
/// and `{var}_TEST_CHILD` to `mode` (which the test reads to do the child's part), and
/// checks that the child ran it and passed.
fn in_child(test: &str, var: &str, value: &str, mode: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(format!("{var}_TEST_CHILD"), mode)
        .env(var, value)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{var}={value:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("1 passed"),
        "the child ran the check: {stdout}"
    );
}

/// A bad `RVERBS_WRITE_PIECES` is a clear error from `Context::open` as well (not the
/// device's default taken silently); `1`, `0` and empty open.
#[test]
fn rverbs_write_pieces_env_is_checked() {
    if let Ok(v) = std::env::var("RVERBS_WRITE_PIECES_TEST_CHILD") {
        let r = Context::open(device(None).unwrap());
        if v == "bad" {
            let msg = r
                .err()
                .expect("a bad RVERBS_WRITE_PIECES must fail the open")
                .to_string();
            assert!(
                msg.contains("RVERBS_WRITE_PIECES") && msg.contains("\"yes\""),
                "{msg}"
            );
        } else {
            r.expect("a valid RVERBS_WRITE_PIECES opens");
        }
        return;
    }
    for (value, mode) in [("yes", "bad"), ("1", "ok"), ("0", "ok"), ("", "ok")] {
        in_child(
            "rverbs_write_pieces_env_is_checked",
            "RVERBS_WRITE_PIECES",
            value,
            mode,
        );
    }
}
