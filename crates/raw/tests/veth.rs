//! RAW_PACKET QPs and flow steering on a real veth pair between two network namespaces
//! the test creates (root only; skipped loudly otherwise): a sender in namespace A
//! injects UDP, TCP, VLAN-tagged, VXLAN-encapsulated and IPv6 frames; each QP in
//! namespace B receives exactly the frames its rules select, in priority order; DROP
//! drops, TAG tags, COUNT counts, SNIFFER mirrors, ALL_DEFAULT takes the rest, and a
//! destroyed flow steers nothing from the moment its destroy returns.

#[path = "common/caps.rs"]
mod caps;
#[path = "../../flow/tests/common/mod.rs"]
mod frames;

use caps::rerun_without_cap_net_raw;
use frames::*;
use rverbs_flow::attr::*;
use rverbs_raw::netns::VethPair;
use rverbs_raw::{RawDevice, RawPort, RawQp, RxMode};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(5);

fn flow(qp: &RawQp, prio: u16, specs: Vec<FlowSpec>) -> rverbs_raw::Flow {
    qp.create_flow(&FlowAttr::normal(prio, specs))
        .expect("create_flow")
}

/// Receives until `n` frames arrived on `qp` (or WAIT passed).
fn collect(qp: &RawQp, n: usize) -> Vec<rverbs_raw::RawCompletion> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        if let Some(c) = qp.recv(Duration::from_millis(100)) {
            got.push(c);
        }
    }
    got
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn each_qp_receives_exactly_what_its_rules_select_ring() {
    steering(RxMode::Ring);
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn each_qp_receives_exactly_what_its_rules_select_plain() {
    steering(RxMode::Plain);
}

fn steering(mode: RxMode) {
    let pair = VethPair::new()
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let if_a = pair.if_a.clone();
    let tx = VethPair::in_ns(&pair.ns_a, move || {
        RawPort::open(&if_a).expect("open sender")
    });
    let if_b = pair.if_b.clone();
    let dev = VethPair::in_ns(&pair.ns_b, move || {
        RawDevice::open_with(&if_b, mode).expect("open raw device")
    });

    let caps = dev.query_device();
    assert_ne!(
        caps.device_cap_flags & rverbs_raw::IBV_DEVICE_MANAGED_FLOW_STEERING,
        0
    );
    let q_udp = dev.create_qp(256);
    let q_tcp = dev.create_qp(256);
    let q_vlan = dev.create_qp(256);
    let q_vxlan = dev.create_qp(256);
    let q_v6 = dev.create_qp(256);
    let q_catch = dev.create_qp(256);
    let q_drop = dev.create_qp(256);
    let q_sniff = dev.create_qp(256);
    let q_default = dev.create_qp(256);
    let counters = Counters::new();

    let f_udp = flow(
        &q_udp,
        1,
        vec![
            FlowSpec::ipv4_dst(a4("10.0.0.2")),
            FlowSpec::udp_dst(Some(4791)),
            FlowSpec::Tag(1),
        ],
    );
    let _f_tcp = flow(
        &q_tcp,
        1,
        vec![FlowSpec::tcp_dst(Some(80)), FlowSpec::Tag(2)],
    );
    let _f_vlan = flow(&q_vlan, 0, vec![FlowSpec::vlan_id(100), FlowSpec::Tag(3)]);
    let _f_vxlan = flow(
        &q_vxlan,
        0,
        vec![
            FlowSpec::vxlan_vni(42),
            FlowSpec::ipv4_dst(a4("192.168.0.2")).into_inner(),
            FlowSpec::Tag(4),
        ],
    );
    let _f_v6 = flow(
        &q_v6,
        2,
        vec![
            FlowSpec::ipv6_dst(a6("fd00::2")),
            FlowSpec::udp_dst(None),
            FlowSpec::Tag(5),
        ],
    );
    let _f_catch = flow(&q_catch, 5, vec![FlowSpec::udp_dst(None), FlowSpec::Tag(6)]);
    let _f_drop = flow(
        &q_drop,
        0,
        vec![
            FlowSpec::udp_dst(Some(666)),
            FlowSpec::Count(counters.clone()),
            FlowSpec::Drop,
        ],
    );
    let _f_sniff = q_sniff
        .create_flow(&FlowAttr::of_type(FlowAttrType::Sniffer))
        .unwrap();
    let _f_default = q_default
        .create_flow(&FlowAttr::of_type(FlowAttrType::AllDefault))
        .unwrap();

    let inner = eth(
        MAC_A,
        MAC_B,
        None,
        0x0800,
        &ipv4(
            a4("192.168.0.1"),
            a4("192.168.0.2"),
            6,
            0,
            &tcp(1, 22, b"inner"),
        ),
    );
    // (frame, QP that must receive it with its tag; None = dropped or default)
    type Case<'a> = (Vec<u8>, Option<(&'a RawQp, u32)>);
    let cases: Vec<Case> = vec![
        (udp4("10.0.0.1", "10.0.0.2", 1000, 4791), Some((&q_udp, 1))),
        (
            udp4("10.0.0.1", "10.0.0.3", 1001, 4791),
            Some((&q_catch, 6)),
        ),
        (udp4("10.0.0.1", "10.0.0.2", 1002, 53), Some((&q_catch, 6))),
        (tcp4("10.0.0.1", "10.0.0.2", 1003, 80), Some((&q_tcp, 2))),
        (tcp4("10.0.0.1", "10.0.0.2", 1004, 81), None),
        (
            eth(
                MAC_B,
                MAC_A,
                Some(100),
                0x0800,
                &ipv4(
                    a4("10.0.0.1"),
                    a4("10.0.0.2"),
                    17,
                    0,
                    &udp(1005, 4791, b"v"),
                ),
            ),
            Some((&q_vlan, 3)),
        ),
        (
            eth(
                MAC_B,
                MAC_A,
                Some(101),
                0x0800,
                &ipv4(
                    a4("10.0.0.1"),
                    a4("10.0.0.2"),
                    17,
                    0,
                    &udp(1006, 4791, b"v"),
                ),
            ),
            Some((&q_udp, 1)),
        ),
        (vxlan4(1007, 42, &inner), Some((&q_vxlan, 4))),
        (vxlan4(1008, 43, &inner), Some((&q_catch, 6))),
        (
            eth(
                MAC_B,
                MAC_A,
                None,
                0x86dd,
                &ipv6(
                    a6("fd00::1"),
                    a6("fd00::2"),
                    17,
                    0,
                    7,
                    &udp(1009, 9, b"six"),
                ),
            ),
            Some((&q_v6, 5)),
        ),
        (
            eth(
                MAC_B,
                MAC_A,
                None,
                0x86dd,
                &ipv6(
                    a6("fd00::1"),
                    a6("fd00::3"),
                    17,
                    0,
                    7,
                    &udp(1010, 9, b"six"),
                ),
            ),
            Some((&q_catch, 6)),
        ),
        (udp4("10.0.0.1", "10.0.0.2", 1011, 666), None),
        (udp4("10.0.0.1", "10.0.0.2", 1012, 666), None),
        (eth([0xff; 6], MAC_A, None, 0x0806, &[0u8; 28]), None),
    ];
    for (f, _) in &cases {
        tx.send(f).unwrap();
    }
    // The sniffer sees every frame, so once it has them all, steering is done.
    let sniffed = collect(&q_sniff, cases.len());
    assert_eq!(
        sniffed.len(),
        cases.len(),
        "sniffer copies; stats {:?}",
        dev.stats()
    );
    for (c, (f, _)) in sniffed.iter().zip(&cases) {
        assert_eq!(&c.frame, f, "sniffer sees frames in wire order, unmodified");
        assert_eq!(c.byte_len() as usize, f.len());
        assert_eq!(c.flow_tag, None);
        assert!(!c.csum_ok, "the builders leave checksums 0: not IP_CSUM_OK");
    }
    type Tagged = (Vec<u8>, Option<u32>);
    // Every copy of the last frame is queued too (the sniffer's copy is queued first).
    let copies = cases.len() + cases.iter().filter(|c| c.1.is_some()).count() + 2;
    let deadline = Instant::now() + WAIT;
    while (dev.stats().delivered as usize) < copies && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(dev.stats().delivered as usize, copies);
    let mut want: HashMap<u32, Vec<Tagged>> = HashMap::new();
    for (f, to) in &cases {
        if let Some((qp, tag)) = to {
            want.entry(qp.qp_num())
                .or_default()
                .push((f.clone(), Some(*tag)));
        }
    }
    // ALL_DEFAULT: what no rule took and no DROP discarded (TCP 81, ARP).
    let defaults: Vec<_> = [4usize, 13]
        .iter()
        .map(|&i| (cases[i].0.clone(), None))
        .collect();
    want.insert(q_default.qp_num(), defaults);
    for qp in [
        &q_udp, &q_tcp, &q_vlan, &q_vxlan, &q_v6, &q_catch, &q_drop, &q_default,
    ] {
        let got: Vec<_> = qp
            .drain()
            .into_iter()
            .map(|c| (c.frame, c.flow_tag))
            .collect();
        let w = want.remove(&qp.qp_num()).unwrap_or_default();
        assert_eq!(got, w, "frames of {qp:?}");
    }
    assert_eq!(counters.read().packets, 2, "COUNT on the DROP rule");
    assert_eq!(dev.stats().dropped_by_rule, 2);

    // DONT_TRAP: a monitor at priority 0 sees UDP and lets it go on to the real owner.
    let q_mon = dev.create_qp(16);
    let mut mon = FlowAttr::normal(0, vec![FlowSpec::udp_dst(None), FlowSpec::Tag(7)]);
    mon.flags = FlowFlags::DONT_TRAP;
    let f_mon = q_mon.create_flow(&mon).unwrap();
    let f1 = udp4("10.0.0.1", "10.0.0.2", 2000, 4791);
    tx.send(&f1).unwrap();
    assert_eq!(
        collect(&q_udp, 1)
            .iter()
            .map(|c| (&c.frame, c.flow_tag))
            .collect::<Vec<_>>(),
        [(&f1, Some(1))]
    );
    assert_eq!(
        collect(&q_mon, 1)
            .iter()
            .map(|c| (&c.frame, c.flow_tag))
            .collect::<Vec<_>>(),
        [(&f1, Some(7))]
    );
    drop(f_mon);

    // Destroying a flow stops delivery at once: the very next frame goes elsewhere.
    f_udp.destroy().unwrap();
    let f2 = with_checksums(udp4("10.0.0.1", "10.0.0.2", 2001, 4791));
    tx.send(&f2).unwrap();
    let got = collect(&q_catch, 1);
    assert_eq!(got.iter().map(|c| &c.frame).collect::<Vec<_>>(), [&f2]);
    assert!(got[0].csum_ok, "valid IPv4 and UDP checksums: IP_CSUM_OK");
    assert_eq!(collect(&q_sniff, 2).len(), 2);
    assert!(q_udp.drain().is_empty(), "no frame for a destroyed flow");
    assert!(q_mon.drain().is_empty(), "no frame for a dropped flow");
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn egress_drop_and_sends_of_whole_frames() {
    let pair = VethPair::new()
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let if_a = pair.if_a.clone();
    let peer = VethPair::in_ns(&pair.ns_a, move || {
        RawDevice::open(&if_a).expect("open peer")
    });
    let if_b = pair.if_b.clone();
    let dev = VethPair::in_ns(&pair.ns_b, move || {
        RawDevice::open(&if_b).expect("open device")
    });
    let rxq = peer.create_qp(16);
    let _all = rxq
        .create_flow(&FlowAttr::of_type(FlowAttrType::AllDefault))
        .unwrap();
    let txq = dev.create_qp(16);
    let sniff = dev.create_qp(16);
    let _s = sniff
        .create_flow(&FlowAttr::of_type(FlowAttrType::Sniffer))
        .unwrap();
    let mut egress = FlowAttr::normal(0, vec![FlowSpec::udp_dst(Some(9)), FlowSpec::Drop]);
    egress.flags = FlowFlags::EGRESS;
    let _e = txq.create_flow(&egress).unwrap();
    let blocked = udp4("10.0.0.2", "10.0.0.1", 1, 9);
    let allowed = udp4("10.0.0.2", "10.0.0.1", 1, 10);
    assert!(
        !txq.post_send(&blocked).unwrap(),
        "EGRESS DROP stops the frame"
    );
    assert!(txq.post_send(&allowed).unwrap());
    // veth keeps order: had the blocked frame left, it would arrive first.
    let got = collect(&rxq, 1);
    assert_eq!(got.iter().map(|c| &c.frame).collect::<Vec<_>>(), [&allowed]);
    assert_eq!(
        sniff.drain().len(),
        2,
        "sniffers see sent frames, dropped or not"
    );
    assert_eq!(dev.stats().sent, 1);
}

/// Without CAP_NET_RAW, opening a raw device fails with EPERM (the test re-runs itself
/// with the capability dropped via setpriv(1)).
#[test]
fn no_cap_net_raw_is_eperm() {
    if std::env::var_os("RVERBS_RAW_NO_CAP_CHILD").is_some() {
        assert!(!rverbs_raw::has_cap_net_raw());
        let e = RawDevice::open("lo").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc_eperm()), "{e}");
        let e = validate(
            &FlowAttr::normal(0, vec![FlowSpec::udp_dst(None)]),
            &FlowContext {
                cap_net_raw: rverbs_raw::has_cap_net_raw(),
                ..FlowContext::raw_packet()
            },
        )
        .unwrap_err();
        assert_eq!(e.errno(), rverbs_flow::error::errno::EPERM);
        return;
    }
    if !rverbs_raw::has_cap_net_raw() {
        // Already unprivileged: the check applies directly.
        let e = RawDevice::open("lo").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc_eperm()));
        return;
    }
    rerun_without_cap_net_raw("no_cap_net_raw_is_eperm", "RVERBS_RAW_NO_CAP_CHILD");
}

fn libc_eperm() -> i32 {
    1
}

/// A QP with a verbs receive queue: frames land in posted buffers in order with their
/// wr_ids, a too-small buffer completes with LOC_LEN_ERR, a frame with no buffer posted
/// is dropped and counted, sends gather a scatter/gather list, and destroying the QP
/// flushes what is still posted.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn posted_receive_buffers_and_gathered_sends() {
    use rverbs_raw::{RawRecvWr, RawWcOpcode, RawWcStatus};
    let pair = VethPair::new()
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let if_a = pair.if_a.clone();
    let peer = VethPair::in_ns(&pair.ns_a, move || {
        RawDevice::open(&if_a).expect("open peer")
    });
    let if_b = pair.if_b.clone();
    let dev = VethPair::in_ns(&pair.ns_b, move || {
        RawDevice::open(&if_b).expect("open device")
    });

    let qp = dev.create_qp_with_rq(3);
    let _f = qp
        .create_flow(&FlowAttr::normal(
            0,
            vec![FlowSpec::udp_dst(Some(4791)), FlowSpec::Tag(9)],
        ))
        .unwrap();
    for (id, len) in [(1u64, 2048usize), (2, 2048), (3, 32)] {
        qp.post_recv(RawRecvWr {
            wr_id: id,
            buf: vec![0; len],
        })
        .unwrap();
    }
    let e = qp
        .post_recv(RawRecvWr {
            wr_id: 4,
            buf: vec![0; 64],
        })
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(12), "ENOMEM beyond max_recv_wr");
    let auto = dev.create_qp(4);
    assert_eq!(
        auto.post_recv(RawRecvWr {
            wr_id: 5,
            buf: vec![0; 64]
        })
        .unwrap_err()
        .raw_os_error(),
        Some(22)
    );
    assert_eq!(
        qp.post_recv(RawRecvWr {
            wr_id: 6,
            buf: Vec::new()
        })
        .unwrap_err()
        .raw_os_error(),
        Some(22)
    );

    // Sent by the peer as a three-piece gather list.
    let frames: Vec<Vec<u8>> = (0..4)
        .map(|i| udp4("10.0.0.1", "10.0.0.2", 3000 + i, 4791))
        .collect();
    let tx = peer.create_qp(1);
    for (i, f) in frames.iter().enumerate() {
        let (a, rest) = f.split_at(6);
        let (b, c) = rest.split_at(20);
        tx.post_send_wr(100 + i as u64, &[a, b, c], true).unwrap();
    }
    let sends: Vec<_> = (0..4).filter_map(|_| tx.wait_cq(WAIT)).collect();
    assert_eq!(
        sends
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len as usize))
            .collect::<Vec<_>>(),
        (0..4)
            .map(|i| (
                100 + i as u64,
                RawWcStatus::Success,
                RawWcOpcode::Send,
                frames[i].len()
            ))
            .collect::<Vec<_>>()
    );
    let wcs: Vec<_> = (0..3).filter_map(|_| qp.wait_cq(WAIT)).collect();
    assert_eq!(wcs.len(), 3);
    for (k, w) in wcs.iter().enumerate() {
        assert_eq!(w.wr_id, k as u64 + 1);
        assert_eq!(w.opcode, RawWcOpcode::Recv);
        assert_eq!(w.byte_len as usize, frames[k].len());
        assert_eq!(w.flow_tag, Some(9));
        if k < 2 {
            assert_eq!(w.status, RawWcStatus::Success);
            assert_eq!(
                &w.buf[..frames[k].len()],
                &frames[k][..],
                "frame lands in the posted buffer"
            );
        } else {
            assert_eq!(
                w.status,
                RawWcStatus::LocLenErr,
                "a 32-byte buffer is too small"
            );
        }
    }
    // The fourth frame found no buffer: dropped and counted.
    let deadline = Instant::now() + WAIT;
    while dev.stats().queue_full < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(dev.stats().queue_full, 1);
    assert!(qp.poll_cq(8).is_empty());
    // Oversized send: LOC_LEN_ERR completion even when unsignaled, nothing sent.
    let sent_before = peer.stats().sent;
    tx.post_send_wr(7, &[&vec![0u8; rverbs_raw::MAX_FRAME + 1]], false)
        .unwrap();
    assert_eq!(tx.poll_cq(1)[0].status, RawWcStatus::LocLenErr);
    assert_eq!(peer.stats().sent, sent_before);
    // Destroy flushes the still-posted buffers.
    qp.post_recv(RawRecvWr {
        wr_id: 42,
        buf: vec![0; 64],
    })
    .unwrap();
    let flushed = qp.destroy();
    assert_eq!(
        flushed
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [(42, RawWcStatus::WrFlushErr)]
    );
}

/// The last handle of a device dropped on its own receive thread (a notify hook that
/// held it — rverbs' hook briefly holds its context) stops the device without joining
/// that thread from itself (which panicked: "failed to join thread").
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn device_dropped_from_its_receive_thread() {
    let pair = VethPair::new()
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let if_a = pair.if_a.clone();
    let tx = VethPair::in_ns(&pair.ns_a, move || {
        RawPort::open(&if_a).expect("open sender")
    });
    let if_b = pair.if_b.clone();
    let dev = VethPair::in_ns(&pair.ns_b, move || {
        RawDevice::open(&if_b).expect("open raw device")
    });
    let qp = dev.create_qp_with_rq(4);
    qp.post_recv(rverbs_raw::RawRecvWr {
        wr_id: 1,
        buf: vec![0; 2048],
    })
    .unwrap();
    let _f = flow(&qp, 0, vec![FlowSpec::udp_dst(Some(9))]);
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(dev)));
    let (done, dropped) = std::sync::mpsc::channel();
    let done = std::sync::Mutex::new(done);
    let s2 = slot.clone();
    qp.set_notify(Some(std::sync::Arc::new(move || {
        let d = s2.lock().unwrap().take();
        if d.is_some() {
            drop(d);
            let _ = done.lock().unwrap().send(());
        }
    })));
    tx.send(&udp4("10.0.0.1", "10.0.0.2", 1, 9)).unwrap();
    dropped
        .recv_timeout(WAIT)
        .expect("the device was dropped on its receive thread without a panic");
    assert_eq!(qp.poll_cq(8).len(), 1);
}

/// Plain mode: a frame longer than the receive buffer is counted in
/// `RawStats::truncated` and dropped, never delivered cut to the buffer's length (it
/// was delivered as a shorter, complete-looking frame before `MSG_TRUNC`).
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn plain_mode_drops_frames_too_long_for_its_buffer() {
    let pair = VethPair::new()
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    for (ns, ifname) in [(&pair.ns_a, &pair.if_a), (&pair.ns_b, &pair.if_b)] {
        let st = std::process::Command::new("ip")
            .args(["-n", ns, "link", "set", "dev", ifname, "mtu", "12000"])
            .status()
            .expect("ip");
        assert!(st.success(), "raising the veth MTU");
    }
    let if_a = pair.if_a.clone();
    let tx = VethPair::in_ns(&pair.ns_a, move || {
        RawPort::open(&if_a).expect("open sender")
    });
    let if_b = pair.if_b.clone();
    let dev = VethPair::in_ns(&pair.ns_b, move || {
        RawDevice::open_with(&if_b, RxMode::Plain).expect("open raw device")
    });
    let qp = dev.create_qp(8);
    let _f = flow(&qp, 0, vec![FlowSpec::udp_dst(Some(9))]);
    let mut big = udp4("10.0.0.1", "10.0.0.2", 1, 9);
    big.resize(rverbs_raw::MAX_FRAME + 500, 0xab);
    tx.send(&big).unwrap();
    let small = udp4("10.0.0.1", "10.0.0.2", 2, 9);
    tx.send(&small).unwrap();
    let got = collect(&qp, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].frame, small);
    assert!(qp.recv(Duration::from_millis(200)).is_none());
    assert_eq!(dev.stats().truncated, 1);
}
