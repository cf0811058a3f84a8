//! A context belongs to the network namespace it was opened in, whichever thread posts
//! to it later (`rverbs_raw::netns::VethPair::in_ns`: "sockets it opens stay in that
//! namespace"): the connected send sockets of its peers (`conn_tx.rs`) must be made
//! there too, not in the namespace of the thread that happens to flush. Root only (a
//! namespace of our own); skipped loudly otherwise.

#![forbid(unsafe_code)]

mod common;
use common::*;
use rverbs::*;
use std::process::Command;

struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().map(|s| s.success());
    assert!(matches!(ok, Ok(true)), "ip {args:?}");
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn loopback_contexts_opened_in_a_namespace_work_from_a_thread_outside_it() {
    assert!(
        rverbs_sys::misc::euid() == 0,
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    let ns = Ns(format!("rvcn{}", std::process::id()));
    ip(&["netns", "add", &ns.0]);
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    // With the default TTL and TOS, and with others: then the datagrams posted from
    // outside the namespace leave one by one with their control messages (the
    // unconnected path of `send_all` for such a path).
    let ttl1 = ConnectOpts {
        hop_limit: 1,
        traffic_class: 0x10,
        ..ConnectOpts::default()
    };
    for opts in [ConnectOpts::default(), ttl1] {
        // Both ends on the namespace's loopback device, opened there.
        let (a, b) = rverbs_raw::netns::VethPair::in_ns(&ns.0, || {
            let dev = devices()
                .expect("devices")
                .into_iter()
                .find(|d| d.is_loopback())
                .expect("the loopback device");
            (end(dev.open().unwrap(), 64), end(dev.open().unwrap(), 64))
        });
        connect(&a, &b, &opts);
        // Posted (and flushed) from this thread, in the root namespace, where the
        // same 127.0.0.x addresses exist but nobody listens for these contexts.
        for round in 0..3u64 {
            a.mr.write(0, &round.to_le_bytes());
            a.qp.post_send(&SendRequest::write(
                round,
                &[a.mr.slice(0..8)],
                b.mr.remote(0..8),
            ))
            .unwrap();
            let wc = wait(&a.cq);
            assert_eq!(
                wc.status,
                WcStatus::Success,
                "hop limit {}, round {round}: {wc:?}",
                opts.hop_limit
            );
            let mut got = [0u8; 8];
            b.mr.read(0, &mut got);
            assert_eq!(u64::from_le_bytes(got), round);
        }
    }
}
