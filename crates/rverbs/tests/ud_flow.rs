//! Flows on UD QPs steer RoCE v2 UD datagrams by their outer headers (see
//! `Qp::create_flow`): between two loopback contexts, datagrams sent to QP A of the
//! receiver go where the receiver's rules say — priority, IPv4 source, EtherType (the
//! synthesized Ethernet header of UDP-socket mode), a MAC rule that never matches,
//! DROP + COUNT, SNIFFER, DONT_TRAP — and back to A once the flows are destroyed.
//! Creating flows needs CAP_NET_RAW (root): skipped loudly otherwise.

mod common;
use common::*;
use rverbs::flow::attr::{Counters, FlowAttr, FlowAttrType, FlowFlags, FlowSpec};
use rverbs::flow::text::parse_rule;
use rverbs::*;
use std::time::Duration;

struct Ud {
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn ud(ctx: &Context, pd: &Pd) -> Ud {
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
    let mr = pd.reg_mr(16 * 512, AccessFlags::LOCAL_WRITE).unwrap();
    connect_nobody(&qp);
    for i in 0..16 {
        qp.post_recv(i, &[mr.slice(i as usize * 512..(i as usize + 1) * 512)])
            .unwrap();
    }
    Ud { cq, qp, mr }
}

/// Completions within `wait` (the payload bytes after the 40-byte GRH area).
fn got(u: &Ud, wait: Duration) -> Vec<Vec<u8>> {
    let mut out = [Wc::default(); 16];
    let n = u.cq.poll_wait(&mut out, wait).unwrap();
    out[..n]
        .iter()
        .map(|wc| {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(wc.qp_num, u.qp.qp_num());
            let mut v = vec![0; wc.byte_len as usize - 40];
            u.mr.read(wc.wr_id as usize * 512 + 40, &mut v);
            v
        })
        .collect()
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn flows_on_ud_qps_steer_roce_datagrams_by_outer_headers() {
    assert!(
        rverbs_raw::has_cap_net_raw(),
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    let dev = device(None).unwrap();
    let tx_ctx = dev.open().unwrap();
    let rx_ctx = dev.open().unwrap();
    let tx_pd = tx_ctx.alloc_pd().unwrap();
    let rx_pd = rx_ctx.alloc_pd().unwrap();
    let tx = ud(&tx_ctx, &tx_pd);
    let a = ud(&rx_ctx, &rx_pd);
    let b = ud(&rx_ctx, &rx_pd);
    let c = ud(&rx_ctx, &rx_pd);
    let tx_ip = tx_ctx.gid(1).unwrap().to_ipv4_mapped().unwrap();
    let ah = tx_pd
        .create_ah(&AhAttr::to(rx_ctx.gid(1).unwrap(), 1))
        .unwrap();
    let mut n = 0u8;
    // Sends one datagram to A; returns its payload.
    let mut send = || {
        n += 1;
        let msg = vec![n; 8];
        tx.mr.write(0, &msg);
        tx.qp
            .post_send(&SendRequest::send(n.into(), &[tx.mr.slice(0..8)]).to(
                &ah,
                a.qp.qp_num(),
                ConnectOpts::default().qkey,
            ))
            .unwrap();
        msg
    };
    let short = Duration::from_millis(200);
    let long = Duration::from_secs(5);

    let m = send();
    assert_eq!(got(&a, long), [m], "no flows: the BTH QP");

    // B takes what comes from the sender's address.
    let fb =
        b.qp.create_flow(&parse_rule(&format!("prio 1 ipv4 src {tx_ip} udp dport 4791")).unwrap())
            .unwrap();
    let m = send();
    assert_eq!(got(&b, long), [m]);
    assert!(got(&a, short).is_empty());

    // EtherType 0x0800 (the synthesized Ethernet header) at priority 0 beats B.
    let fc =
        c.qp.create_flow(&parse_rule("prio 0 eth type 0x0800").unwrap())
            .unwrap();
    let m = send();
    assert_eq!(got(&c, long), [m]);
    assert!(got(&b, short).is_empty());
    drop(fc);

    // A MAC address is never seen in UDP-socket mode: this rule never matches.
    let fc =
        c.qp.create_flow(&parse_rule("prio 0 eth dst 02:00:00:00:00:01").unwrap())
            .unwrap();
    let m = send();
    assert_eq!(got(&b, long), [m]);
    assert!(got(&c, short).is_empty());
    drop(fc);

    // DROP + COUNT: nobody gets it, the counter sees it.
    let counters = Counters::new();
    let mut drop_rule = parse_rule("prio 0 udp dport 4791 drop").unwrap();
    drop_rule.specs.push(FlowSpec::Count(counters.clone()));
    let fd = c.qp.create_flow(&drop_rule).unwrap();
    send();
    let deadline = std::time::Instant::now() + long;
    while counters.read().packets == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(counters.read().packets, 1);
    for q in [&a, &b, &c] {
        assert!(got(q, short).is_empty());
    }
    drop(fd);

    // SNIFFER: a copy to C, and B still gets it.
    let fs =
        c.qp.create_flow(&FlowAttr::of_type(FlowAttrType::Sniffer))
            .unwrap();
    let m = send();
    assert_eq!(got(&b, long), std::slice::from_ref(&m));
    assert_eq!(got(&c, long), [m]);
    fs.destroy().unwrap();

    // DONT_TRAP on C at priority 0: C gets a copy and B (the rule below) still takes it.
    let mut monitor = FlowAttr::normal(0, vec![FlowSpec::udp_dst(Some(4791))]);
    monitor.flags = FlowFlags::DONT_TRAP;
    let fm = c.qp.create_flow(&monitor).unwrap();
    let m = send();
    assert_eq!(got(&c, long), std::slice::from_ref(&m));
    assert_eq!(got(&b, long), [m]);
    drop(fm);

    // Destroying the last flow: back to A, at once.
    fb.destroy().unwrap();
    let m = send();
    assert_eq!(got(&a, long), [m]);
    assert!(got(&b, short).is_empty());

    // Destroying a QP destroys its flows: B's new flow goes with B.
    let fb =
        b.qp.create_flow(&parse_rule("prio 0 udp").unwrap())
            .unwrap();
    drop(b);
    let m = send();
    assert_eq!(got(&a, long), [m]);
    assert_eq!(
        fb.destroy().unwrap_err().errno(),
        rverbs::flow::error::errno::EINVAL,
        "already gone with its QP"
    );
}

/// A corrupted UD datagram that a DONT_TRAP flow matches is one ICRC error, and no
/// rule counts it or takes it: the ICRC is checked once, before steering (a NIC drops
/// such a packet before any steering). It was checked again for every delivery (the
/// flow's QP and the destination QP) and counted twice.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn a_corrupted_datagram_is_one_icrc_error_before_steering() {
    assert!(
        rverbs_raw::has_cap_net_raw(),
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    let dev = device(None).unwrap();
    let tx = ud_end(dev.open().unwrap(), 64);
    let opts = OpenOptions {
        faults: Some(Faults::parse("corrupt=1.0").unwrap()),
        ..OpenOptions::default()
    };
    let rx = ud_end(Context::open_with(dev.clone(), &opts).unwrap(), 64);
    let c = rx
        .pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &rx.cq))
        .unwrap();
    connect_nobody(&c);
    let mut monitor = FlowAttr::normal(0, vec![FlowSpec::udp_dst(Some(4791))]);
    monitor.flags = FlowFlags::DONT_TRAP;
    let _flow = c.create_flow(&monitor).unwrap();
    let ah = tx
        .pd
        .create_ah(&AhAttr::to(rx.ctx.gid(1).unwrap(), 1))
        .unwrap();
    let before = rx.ctx.counters().rx_icrc_errors;
    let qkey = ConnectOpts::default().qkey;
    tx.qp
        .post_send(&SendRequest::send(1, &[tx.mr.slice(0..8)]).to(&ah, rx.qp.qp_num(), qkey))
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while rx.ctx.counters().rx_icrc_errors == before {
        assert!(
            std::time::Instant::now() < until,
            "the datagram never arrived"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Time for any second count to land.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.ctx.counters().rx_icrc_errors - before, 1);
    let mut wc = [Wc::default(); 4];
    assert_eq!(rx.cq.poll(&mut wc).unwrap(), 0);
}
