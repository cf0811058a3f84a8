//! RoCE v1 (EtherType 0x8915) between two raw-mode contexts in two network namespaces
//! joined by a veth pair the test creates (root only; skipped loudly otherwise by
//! `VethPair::new`). Each context is opened on its veth end, with an IPv4 address, in
//! raw mode on the same interface: its GID table then holds a RoCE v1 and a RoCE v2
//! entry per GID, and QPs / AHs whose `sgid_index` names a v1 entry talk v1 through the
//! raw device. Some tests give each side the other's MAC as a static neighbour entry
//! (the v1 path takes a complete entry of the kernel's ARP table), others flush the
//! tables so the context resolves its peer itself (ARP, `neigh.rs`).

mod common;

use common::context_in_ns;
use rverbs::*;
use rverbs_raw::netns::{self, VethPair};
use std::net::Ipv4Addr;
use std::time::Duration;

fn ip(args: &[&str]) {
    netns::ip(args).unwrap();
}

fn mac_of(ns: &str, ifname: &str) -> String {
    let m = netns::link_mac(ns, ifname).unwrap();
    m.map(|b| format!("{b:02x}")).join(":")
}

struct Net {
    pair: VethPair,
    addr: [Ipv4Addr; 2],
}

/// The veth pair with 10.231.x.1 / .2 and static neighbour entries both ways.
fn net() -> Option<Net> {
    net_with(true)
}

/// The veth pair with 10.231.x.1 / .2, with static neighbour entries both ways or with
/// none at all.
fn net_with(static_neigh: bool) -> Option<Net> {
    let pair = VethPair::new()?;
    let x = (std::process::id() % 200) as u8 + 1;
    let addr = [Ipv4Addr::new(10, 231, x, 1), Ipv4Addr::new(10, 231, x, 2)];
    let ends = [
        (pair.ns_a.clone(), pair.if_a.clone()),
        (pair.ns_b.clone(), pair.if_b.clone()),
    ];
    for (i, (ns, ifn)) in ends.iter().enumerate() {
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", addr[i]),
            "dev",
            ifn,
        ]);
    }
    for (i, (ns, ifn)) in ends.iter().enumerate() {
        if !static_neigh {
            ip(&["-n", ns, "neigh", "flush", "dev", ifn]);
            continue;
        }
        let (pns, pif) = &ends[1 - i];
        let mac = mac_of(pns, pif);
        let peer = addr[1 - i].to_string();
        ip(&[
            "-n",
            ns,
            "neigh",
            "replace",
            &peer,
            "lladdr",
            &mac,
            "dev",
            ifn,
            "nud",
            "permanent",
        ]);
    }
    Some(Net { pair, addr })
}

fn v1_index(ctx: &Context, a: Ipv4Addr) -> u8 {
    let i = ctx
        .find_gid_index(&Gid::from(a), GidType::RoceV1)
        .expect("a RoCE v1 entry for the address");
    u8::try_from(i).unwrap()
}

fn wait(cq: &Cq) -> Wc {
    let mut out = [Wc::default()];
    assert_eq!(
        cq.poll_wait(&mut out, Duration::from_secs(10)).unwrap(),
        1,
        "no completion"
    );
    assert_eq!(out[0].status, WcStatus::Success, "{:?}", out[0]);
    out[0]
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn gid_table_has_v1_then_v2_per_gid() {
    let n = net().expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let ctx = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let entries = ctx.query_gid_table(GID_TABLE_LEN).unwrap();
    let types: Vec<(u32, GidType)> = entries.iter().map(|e| (e.gid_index, e.gid_type)).collect();
    // Default GID as v1 (0) and v2 (1), then the address as v1 (2) and v2 (3).
    assert_eq!(
        types,
        vec![
            (0, GidType::RoceV1),
            (1, GidType::RoceV2),
            (2, GidType::RoceV1),
            (3, GidType::RoceV2)
        ]
    );
    assert_eq!(entries[0].gid, entries[1].gid);
    assert_eq!(entries[2].gid, Gid::from(n.addr[0]));
    assert_eq!(entries[3].gid, Gid::from(n.addr[0]));
    // The v2 lookup helpers skip the v1 entries.
    assert_eq!(ctx.gid_index_for(false), Some(3));
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn rc_send_and_read_over_v1() {
    // No neighbour entries: each side ARPs for the other itself.
    let n = net_with(false)
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let a = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let b = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
    let side = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        let mr = pd
            .reg_mr(
                16384,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        (pd, cq, qp, mr)
    };
    let (_pa, cqa, qpa, mra) = side(&a);
    let (_pb, cqb, qpb, mrb) = side(&b);
    let opts = |ctx: &Context, me: Ipv4Addr| ConnectOpts {
        sgid_index: v1_index(ctx, me),
        ..ConnectOpts::default()
    };
    let (oa, ob) = (opts(&a, n.addr[0]), opts(&b, n.addr[1]));
    qpa.connect(
        &PeerInfo {
            qpn: qpb.qp_num(),
            psn: ob.psn,
            gid: Gid::from(n.addr[1]),
        },
        &oa,
    )
    .unwrap();
    qpb.connect(
        &PeerInfo {
            qpn: qpa.qp_num(),
            psn: oa.psn,
            gid: Gid::from(n.addr[0]),
        },
        &ob,
    )
    .unwrap();
    // A 5000-byte SEND (5 packets at MTU 1024) and a READ of it back.
    let msg: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    mra.write(0, &msg);
    qpb.post_recv(1, &[mrb.slice(0..8192)]).unwrap();
    qpa.post_send(&SendRequest::send(2, &[mra.slice(0..5000)]))
        .unwrap();
    assert_eq!(wait(&cqa).wr_id, 2);
    let wc = wait(&cqb);
    assert_eq!((wc.wr_id, wc.byte_len), (1, 5000));
    assert_eq!(&mrb.to_vec()[..5000], &msg[..]);
    qpa.post_send(&SendRequest::read(
        3,
        &[mra.slice(8192..13192)],
        mrb.remote(0..5000),
    ))
    .unwrap();
    assert_eq!(wait(&cqa).wr_id, 3);
    assert_eq!(&mra.to_vec()[8192..13192], &msg[..]);
    // It all went as RoCE v1 frames, none through the UDP sockets' v2 path. (B counts
    // a frame once it is sent, which may be after A completed on it: wait for the
    // count to catch up with what A received.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (sa, sb) = loop {
        let (sa, sb) = (a.roce_v1_stats().unwrap(), b.roce_v1_stats().unwrap());
        if sb.tx_frames >= sa.rx_frames || std::time::Instant::now() > deadline {
            break (sa, sb);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(sa.tx_frames >= 6 && sb.tx_frames >= 6, "{sa:?} {sb:?}");
    assert_eq!(sa.rx_frames, sb.tx_frames, "{sa:?} {sb:?}");
    assert_eq!(sa.rx_icrc_errors + sb.rx_icrc_errors, 0);
    assert_eq!(sa.rx_malformed + sb.rx_malformed, 0);
    assert_eq!(a.counters().rx_icrc_errors + b.counters().rx_icrc_errors, 0);
    let na = a.raw_net_stats().unwrap();
    assert!(na.neigh_probes >= 1 && na.neigh_learned >= 1, "{na:?}");
    assert_eq!(na.neigh_dropped, 0, "{na:?}");
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn ud_ping_pong_over_v1_with_init_ah_from_wc() {
    let n = net().expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let a = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let b = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
    let side = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
        let mr = pd.reg_mr(40 + 256, AccessFlags::LOCAL_WRITE).unwrap();
        let nobody = PeerInfo {
            qpn: 0,
            psn: 0,
            gid: Gid::ZERO,
        };
        qp.connect(&nobody, &ConnectOpts::default()).unwrap();
        (pd, cq, qp, mr)
    };
    let (pa, cqa, qpa, mra) = side(&a);
    let (pb, cqb, qpb, mrb) = side(&b);
    let (va, vb) = (v1_index(&a, n.addr[0]), v1_index(&b, n.addr[1]));
    qpb.post_recv(1, &[mrb.all()]).unwrap();
    qpa.post_recv(1, &[mra.all()]).unwrap();
    let ah = pa
        .create_ah(&AhAttr {
            av: AddressVector {
                dgid: Gid::from(n.addr[1]),
                sgid_index: va,
                hop_limit: 5,
                traffic_class: 0x20,
                flow_label: 0x1_2345,
            },
            port_num: 1,
        })
        .unwrap();
    mra.write(40, b"ping over RoCE v1");
    qpa.post_send(&SendRequest::send(2, &[mra.slice(40..57)]).to(&ah, qpb.qp_num(), 0x1111_1111))
        .unwrap();
    assert_eq!(wait(&cqa).wr_id, 2);
    let wc = wait(&cqb);
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert_eq!((wc.byte_len, wc.src_qp), (40 + 17, qpa.qp_num()));
    assert_eq!(&mrb.to_vec()[40..57], b"ping over RoCE v1");
    // The network header area is the GRH itself: IPVer 6, NxtHdr 0x1B.
    let grh = mrb.with(|m| m[..40].to_vec());
    assert_eq!((grh[0] >> 4, grh[6], grh[7]), (6, 0x1b, 5));
    assert_eq!(&grh[8..24], &Gid::from(n.addr[0]).octets());
    assert_eq!(&grh[24..40], &Gid::from(n.addr[1]).octets());
    let attr = b.init_ah_from_wc(1, &wc, &grh).unwrap();
    assert_eq!(attr.av.sgid_index, vb, "the v1 entry of b's address");
    assert_eq!(attr.av.dgid, Gid::from(n.addr[0]));
    assert_eq!(
        (attr.av.hop_limit, attr.av.traffic_class, attr.av.flow_label),
        (5, 0x20, 0x1_2345)
    );
    // b answers through an AH built from the completion: v1 again.
    let reply = pb.create_ah_from_wc(1, &wc, &grh).unwrap();
    mrb.write(40, b"pong");
    qpb.post_send(&SendRequest::send(3, &[mrb.slice(40..44)]).to(&reply, wc.src_qp, 0x1111_1111))
        .unwrap();
    assert_eq!(wait(&cqb).wr_id, 3);
    let wc_a = wait(&cqa);
    assert_eq!(wc_a.src_qp, qpb.qp_num());
    assert_eq!(&mra.to_vec()[40..44], b"pong");
    let grh_a = mra.with(|m| m[..40].to_vec());
    assert_eq!(grh_a[6], 0x1b);
    assert_eq!(
        a.init_ah_from_wc(1, &wc_a, &grh_a).unwrap().av.sgid_index,
        va
    );
    let (sa, sb) = (a.roce_v1_stats().unwrap(), b.roce_v1_stats().unwrap());
    assert_eq!((sa.tx_frames, sa.rx_frames), (1, 1), "{sa:?}");
    assert_eq!((sb.tx_frames, sb.rx_frames), (1, 1), "{sb:?}");
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn no_neighbour_is_counted_not_sent() {
    let n = net().expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let a = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let nobody = PeerInfo {
        qpn: 0,
        psn: 0,
        gid: Gid::ZERO,
    };
    qp.connect(&nobody, &ConnectOpts::default()).unwrap();
    // 10.231.x.77 has no neighbour entry.
    let o = n.addr[1].octets();
    let ah = pd
        .create_ah(&AhAttr {
            av: AddressVector {
                dgid: Gid::from(Ipv4Addr::new(o[0], o[1], o[2], 77)),
                sgid_index: v1_index(&a, n.addr[0]),
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            port_num: 1,
        })
        .unwrap();
    qp.post_send(&SendRequest::send(1, &[mr.slice(0..4)]).to(&ah, 0x99, 0x1111_1111))
        .unwrap();
    // A UD send completes once handed to the device, as on a NIC.
    assert_eq!(wait(&cq).wr_id, 1);
    // Nobody answers the three ARP requests: the queued frame is dropped and counted.
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while a.roce_v1_stats().unwrap().tx_no_neighbour == 0 {
        assert!(std::time::Instant::now() < end, "never given up");
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = a.roce_v1_stats().unwrap();
    assert_eq!((s.tx_frames, s.tx_no_neighbour), (0, 1), "{s:?}");
    let ns = a.raw_net_stats().unwrap();
    assert_eq!(
        (ns.neigh_probes, ns.neigh_queued, ns.neigh_dropped),
        (3, 1, 1),
        "{ns:?}"
    );
}

/// GSI over RoCE v1: a MAD sent from QP1 with a v1 source GID index goes as a 0x8915
/// frame, the peer's PMA answers over v1 too (its receive shows the v1 GRH), and a MAD
/// sent with a v2 index still goes as RoCE v2.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn gsi_mads_over_v1() {
    use rverbs::mad::{self, attr, class, MadDest, GSI_QKEY, GSI_QPN};
    let n = net_with(false)
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let a = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let b = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
    let agent = a.register_mad_agent(None).unwrap();
    let mut get = mad::request(class::PERF_MGMT, attr::PMA_PORT_COUNTERS_EXT, 0);
    get[65] = 1;
    let dest = |sgid_index| MadDest {
        dgid: Gid::from(n.addr[1]),
        qpn: GSI_QPN,
        qkey: GSI_QKEY,
        sgid_index: Some(sgid_index),
    };
    let t = Duration::from_millis(500);
    let r = agent
        .request(dest(v1_index(&a, n.addr[0])), &get, t, 3)
        .unwrap();
    assert_eq!(r.mad[3], 0x81, "a GetResp");
    // The answer came as RoCE v1: the GRH itself in the area, NxtHdr 0x1B.
    assert_eq!((r.grh[0] >> 4, r.grh[6]), (6, 0x1b));
    assert_eq!(&r.grh[8..24], &Gid::from(n.addr[1]).octets());
    let (sa, sb) = (a.roce_v1_stats().unwrap(), b.roce_v1_stats().unwrap());
    assert!(sa.tx_frames >= 1 && sb.tx_frames >= 1, "{sa:?} {sb:?}");
    assert_eq!((sa.rx_icrc_errors, sb.rx_icrc_errors), (0, 0));
    // The same request with the v2 entry of the address: answered over RoCE v2.
    let v2 = a
        .find_gid_index(&Gid::from(n.addr[0]), GidType::RoceV2)
        .unwrap();
    let r = agent
        .request(dest(u8::try_from(v2).unwrap()), &get, t, 3)
        .unwrap();
    assert_ne!(r.grh[6], 0x1b, "an IPv4 header area, not a v1 GRH");
    assert_eq!(a.roce_v1_stats().unwrap().tx_frames, sa.tx_frames);
}
