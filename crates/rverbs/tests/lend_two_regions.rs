//! A request whose payload lies in two regions, sent while an application thread
//! holds one region in `Mr::with` and reads the other (which `with` allows): the
//! device lent both regions for the batch, one after the other, and deadlocked with
//! that thread (holding the engine, so the whole context stopped). It now lends one
//! region per batch and copies the other bodies in first, one region lock at a time.
//!
//! A deadlock cannot be unwound: the watchdog ends this test binary (its own file for
//! that reason) with a failure when neither side progresses for 1.5 s.

mod common;
use common::*;
use rverbs::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[test]
fn a_send_from_two_regions_does_not_deadlock_with_a_nested_with() {
    let dev = device(None).unwrap();
    let (a, b) = connected_pair(&dev, 1 << 16, 1 << 16);
    let other = a.pd.reg_mr(1 << 16, AccessFlags::ALL).unwrap();
    other.write(0, &[7; 8192]);
    a.mr.write(0, &[9; 8192]);
    let stop = AtomicBool::new(false);
    let (app_n, msgs, done) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        let (mr_a, mr_b) = (&a.mr, &other);
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                mr_a.with(|_| {
                    std::thread::yield_now();
                    let mut x = [0u8; 4];
                    mr_b.read(0, &mut x);
                });
                app_n.fetch_add(1, Ordering::Relaxed);
            }
            done.fetch_add(1, Ordering::Relaxed);
        });
        s.spawn(|| {
            let mut out = [Wc::default(); 4];
            while !stop.load(Ordering::Relaxed) {
                b.qp.post_recv(1, &[b.mr.slice(0..1 << 16)]).unwrap();
                // Payloads of 8 KiB: sent from their regions (`Transmit::body`).
                let sges = [mr_b.slice(0..8192), mr_a.slice(0..8192)];
                a.qp.post_send(&SendRequest::send(2, &sges)).unwrap();
                let (mut sent, mut got) = (false, false);
                while !(stop.load(Ordering::Relaxed) || sent && got) {
                    if a.cq
                        .poll_wait(&mut out[..1], Duration::from_millis(50))
                        .unwrap()
                        == 1
                    {
                        assert_eq!(out[0].status, WcStatus::Success);
                        sent = true;
                    }
                    if b.cq.poll(&mut out[..1]).unwrap() == 1 {
                        assert_eq!(out[0].status, WcStatus::Success);
                        assert_eq!(out[0].byte_len, 16384);
                        got = true;
                    }
                }
                if sent && got {
                    let mut data = vec![0u8; 16384];
                    b.mr.read(0, &mut data);
                    assert!(data[..8192].iter().all(|&x| x == 7));
                    assert!(data[8192..].iter().all(|&x| x == 9));
                    msgs.fetch_add(1, Ordering::Relaxed);
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
        });
        // Four seconds of both; neither side moving for 1.5 s is the deadlock.
        let mut last = (0, 0);
        let mut still = 0;
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(100));
            let now = (app_n.load(Ordering::Relaxed), msgs.load(Ordering::Relaxed));
            still = if now == last { still + 1 } else { 0 };
            if still >= 15 {
                eprintln!(
                    "deadlock: no progress for 1.5 s (app {}, messages {})",
                    now.0, now.1
                );
                std::process::exit(1);
            }
            last = now;
        }
        stop.store(true, Ordering::Relaxed);
        // Both end within a few seconds, or they are stuck (a deadlock at the end).
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while done.load(Ordering::Relaxed) < 2 {
            if std::time::Instant::now() > until {
                eprintln!("deadlock: the threads did not end after the stop");
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    assert!(msgs.load(Ordering::Relaxed) > 0);
}
