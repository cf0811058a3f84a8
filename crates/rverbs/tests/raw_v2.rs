//! RoCE v2 through the raw device of a raw-mode context (`rawnet.rs`), between two
//! network namespaces joined by a veth pair the test creates (root only; skipped loudly
//! otherwise by `VethPair::new`). The neighbour tables are flushed first, so every
//! destination MAC comes from the context's own ARP / Neighbor Discovery.

mod common;

use common::{connect_nobody, context_in_ns, ud_end, UdEnd};
use rverbs::*;
use rverbs_raw::netns::{self, VethPair};
use rverbs_wire::ethernet::MacAddr;
use rverbs_wire::rocev2::{self, RoceV2Repr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::{Duration, Instant};

fn ip(args: &[&str]) {
    netns::ip(args).unwrap();
}

fn mac_of(ns: &str, ifname: &str) -> MacAddr {
    MacAddr(netns::link_mac(ns, ifname).unwrap())
}

struct Net {
    pair: VethPair,
    addr: [IpAddr; 2],
    /// An address in the prefix that nobody owns.
    nobody: IpAddr,
}

/// The veth pair with x.1 / x.2 addresses (IPv4 or IPv6) and no neighbour entries.
fn net(v6: bool) -> Option<Net> {
    let pair = VethPair::new()?;
    let x = (std::process::id() % 200) as u8 + 1;
    let (addr, nobody, plen): ([IpAddr; 2], IpAddr, u8) = if v6 {
        let a = |i: u16| IpAddr::V6(Ipv6Addr::new(0xfd00, 0x232, u16::from(x), 0, 0, 0, 0, i));
        ([a(1), a(2)], a(0x77), 64)
    } else {
        let a = |i: u8| IpAddr::V4(Ipv4Addr::new(10, 232, x, i));
        ([a(1), a(2)], a(77), 24)
    };
    let ends = [
        (pair.ns_a.clone(), pair.if_a.clone()),
        (pair.ns_b.clone(), pair.if_b.clone()),
    ];
    for (i, (ns, ifn)) in ends.iter().enumerate() {
        if v6 {
            // VethPair turns IPv6 off; this test wants it on this interface.
            for key in ["all", "default", ifn.as_str()] {
                let s = format!("net.ipv6.conf.{key}.disable_ipv6=0");
                let _ = Command::new("ip")
                    .args(["netns", "exec", ns, "sysctl", "-qw", &s])
                    .status();
            }
        }
        let a = format!("{}/{plen}", addr[i]);
        let mut args = vec!["-n", ns, "addr", "add", &a, "dev", ifn];
        if v6 {
            args.push("nodad");
        }
        ip(&args);
    }
    for (ns, ifn) in &ends {
        ip(&["-n", ns, "neigh", "flush", "dev", ifn]);
    }
    Some(Net { pair, addr, nobody })
}

fn v2_index(ctx: &Context, a: IpAddr) -> u8 {
    let g = match a {
        IpAddr::V4(v) => Gid::from(v),
        IpAddr::V6(v) => Gid::from(v),
    };
    u8::try_from(ctx.find_gid_index(&g, GidType::RoceV2).expect("a v2 entry")).unwrap()
}

fn gid(a: IpAddr) -> Gid {
    match a {
        IpAddr::V4(v) => Gid::from(v),
        IpAddr::V6(v) => Gid::from(v),
    }
}

fn wait_any(cq: &Cq, secs: u64) -> Wc {
    let mut out = [Wc::default()];
    assert_eq!(
        cq.poll_wait(&mut out, Duration::from_secs(secs)).unwrap(),
        1,
        "no completion"
    );
    out[0]
}

fn wait(cq: &Cq) -> Wc {
    let wc = wait_any(cq, 20);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    wc
}

/// Waits until `f` holds (checked every 10 ms, up to 5 s).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const MIB: usize = 1 << 20;

struct RcEnd {
    _pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn rc_end(ctx: &Context) -> RcEnd {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let mr = pd
        .reg_mr(
            2 * MIB + 64,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_ATOMIC,
        )
        .unwrap();
    RcEnd {
        _pd: pd,
        cq,
        qp,
        mr,
    }
}

fn connect(a: &RcEnd, ca: &Context, aa: IpAddr, b: &RcEnd, cb: &Context, ab: IpAddr) {
    let oa = ConnectOpts {
        sgid_index: v2_index(ca, aa),
        ..ConnectOpts::default()
    };
    let ob = ConnectOpts {
        sgid_index: v2_index(cb, ab),
        psn: 0x1234,
        ..ConnectOpts::default()
    };
    a.qp.connect(
        &PeerInfo {
            qpn: b.qp.qp_num(),
            psn: ob.psn,
            gid: gid(ab),
        },
        &oa,
    )
    .unwrap();
    b.qp.connect(
        &PeerInfo {
            qpn: a.qp.qp_num(),
            psn: oa.psn,
            gid: gid(aa),
        },
        &ob,
    )
    .unwrap();
}

/// SEND with immediate, WRITE, READ (1 MiB each), fetch-and-add and compare-and-swap
/// from `a` to `b`.
fn all_opcodes(a: &RcEnd, b: &RcEnd) {
    let msg: Vec<u8> = (0..MIB as u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    a.mr.write(0, &msg);
    b.qp.post_recv(1, &[b.mr.slice(0..MIB)]).unwrap();
    a.qp.post_send(&SendRequest::send(2, &[a.mr.slice(0..MIB)]).imm(0xfeed))
        .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 2);
    let wc = wait(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.imm_data),
        (1, MIB as u32, 0xfeed)
    );
    assert!(b.mr.with(|m| m[..MIB] == msg[..]));
    // WRITE the reversed message into the second MiB, READ it back.
    let rev: Vec<u8> = msg.iter().rev().copied().collect();
    a.mr.write(MIB, &rev);
    a.qp.post_send(&SendRequest::write(
        3,
        &[a.mr.slice(MIB..2 * MIB)],
        b.mr.remote(MIB..2 * MIB),
    ))
    .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 3);
    assert!(b.mr.with(|m| m[MIB..2 * MIB] == rev[..]));
    a.mr.with(|m| m[..MIB].fill(0));
    a.qp.post_send(&SendRequest::read(
        4,
        &[a.mr.slice(0..MIB)],
        b.mr.remote(MIB..2 * MIB),
    ))
    .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 4);
    assert!(a.mr.with(|m| m[..MIB] == rev[..]));
    // Atomics on b's last 8 bytes.
    let at = 2 * MIB..2 * MIB + 8;
    b.mr.write(2 * MIB, &40u64.to_ne_bytes());
    a.qp.post_send(&SendRequest::fetch_add(
        5,
        a.mr.slice(2 * MIB..2 * MIB + 8),
        b.mr.remote(at.clone()),
        2,
    ))
    .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 5);
    let orig = |m: &Mr| {
        let mut v = [0u8; 8];
        m.read(2 * MIB, &mut v);
        u64::from_ne_bytes(v)
    };
    assert_eq!(orig(&a.mr), 40);
    a.qp.post_send(&SendRequest::cmp_swap(
        6,
        a.mr.slice(2 * MIB..2 * MIB + 8),
        b.mr.remote(at),
        42,
        7,
    ))
    .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 6);
    assert_eq!(orig(&a.mr), 42);
    assert_eq!(orig(&b.mr), 7);
}

/// Nothing the engine accepted came through a UDP socket, nothing was dropped, and the
/// context resolved its peer itself.
fn check_raw_only(ctx: &Context, probes: bool) {
    let s = ctx.raw_net_stats().expect("raw-mode v2");
    let c = ctx.counters();
    assert!(s.tx_frames > 0 && s.rx_delivered > 0, "{s:?}");
    assert_eq!(s.rx_frames, s.rx_delivered, "{s:?}");
    assert!(c.rx_packets <= s.rx_delivered, "{c:?} {s:?}");
    assert_eq!(c.rx_icrc_errors, 0);
    assert_eq!(s.neigh_dropped, 0, "{s:?}");
    if probes {
        assert!(s.neigh_probes >= 1 && s.neigh_learned >= 1, "{s:?}");
    }
}

fn rc_between_raw_contexts(v6: bool) {
    let n =
        net(v6).expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let cb = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
    let (a, b) = (rc_end(&ca), rc_end(&cb));
    connect(&a, &ca, n.addr[0], &b, &cb, n.addr[1]);
    all_opcodes(&a, &b);
    all_opcodes(&b, &a);
    check_raw_only(&ca, true);
    check_raw_only(&cb, false);
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn rc_all_opcodes_ipv4() {
    rc_between_raw_contexts(false);
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn rc_all_opcodes_ipv6() {
    rc_between_raw_contexts(true);
}

/// UD ping from `a` to `b`, and the pong through an AH made from the completion.
fn ud_ping_pong(ca: &Context, a: &UdEnd, aa: IpAddr, cb: &Context, b: &UdEnd, ab: IpAddr) {
    b.qp.post_recv(1, &[b.mr.all()]).unwrap();
    a.qp.post_recv(1, &[a.mr.all()]).unwrap();
    let ah =
        a.pd.create_ah(&AhAttr {
            av: AddressVector {
                dgid: gid(ab),
                sgid_index: v2_index(ca, aa),
                hop_limit: 9,
                traffic_class: 0x20,
                flow_label: 0x1_2345,
            },
            port_num: 1,
        })
        .unwrap();
    a.mr.write(40, b"ping over raw RoCE v2");
    a.qp.post_send(&SendRequest::send(2, &[a.mr.slice(40..61)]).to(
        &ah,
        b.qp.qp_num(),
        0x1111_1111,
    ))
    .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 2);
    let wc = wait(&b.cq);
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert_eq!((wc.byte_len, wc.src_qp), (40 + 21, a.qp.qp_num()));
    assert_eq!(&b.mr.to_vec()[40..61], b"ping over raw RoCE v2");
    let grh = b.mr.with(|m| m[..40].to_vec());
    let attr = cb.init_ah_from_wc(1, &wc, &grh).unwrap();
    assert_eq!(attr.av.sgid_index, v2_index(cb, ab));
    assert_eq!(attr.av.dgid, gid(aa));
    // The real IP header: TTL / hop limit and TOS / traffic class as sent.
    assert_eq!((attr.av.hop_limit, attr.av.traffic_class), (9, 0x20));
    let reply = b.pd.create_ah_from_wc(1, &wc, &grh).unwrap();
    b.mr.write(40, b"pong");
    b.qp.post_send(&SendRequest::send(3, &[b.mr.slice(40..44)]).to(&reply, wc.src_qp, 0x1111_1111))
        .unwrap();
    assert_eq!(wait(&b.cq).wr_id, 3);
    let wc_a = wait(&a.cq);
    assert_eq!(wc_a.src_qp, b.qp.qp_num());
    assert_eq!(&a.mr.to_vec()[40..44], b"pong");
}

fn ud_between_raw_contexts(v6: bool) {
    let n =
        net(v6).expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let cb = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
    let (a, b) = (ud_end(ca.clone(), 16), ud_end(cb.clone(), 16));
    ud_ping_pong(&ca, &a, n.addr[0], &cb, &b, n.addr[1]);
    check_raw_only(&ca, true);
    check_raw_only(&cb, false);
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn ud_ping_pong_ipv4() {
    ud_between_raw_contexts(false);
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn ud_ping_pong_ipv6() {
    ud_between_raw_contexts(true);
}

/// A raw-mode context and a UDP-socket one speak the same wire protocol, both ways.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn interop_with_a_udp_socket_context() {
    for v6 in [false, true] {
        let n = net(v6)
            .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
        let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
        let cb = context_in_ns(&n.pair.ns_b, &n.pair.if_b, false, None);
        assert!(cb.raw_net_stats().is_none());
        let (a, b) = (rc_end(&ca), rc_end(&cb));
        connect(&a, &ca, n.addr[0], &b, &cb, n.addr[1]);
        all_opcodes(&a, &b);
        all_opcodes(&b, &a);
        check_raw_only(&ca, true);
        assert_eq!(cb.counters().rx_icrc_errors, 0);
        let (ua, ub) = (ud_end(ca.clone(), 16), ud_end(cb.clone(), 16));
        ud_ping_pong(&ca, &ua, n.addr[0], &cb, &ub, n.addr[1]);
        ud_ping_pong(&cb, &ub, n.addr[1], &ca, &ua, n.addr[0]);
    }
}

/// An address nobody owns: ARP goes unanswered, the queued frames are dropped and
/// counted, and the QP ends in RETRY_EXC_ERR rather than hanging.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn unresolved_neighbour_gives_retry_exceeded() {
    for v6 in [false, true] {
        let n = net(v6)
            .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
        let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
        let a = rc_end(&ca);
        let o = ConnectOpts {
            sgid_index: v2_index(&ca, n.addr[0]),
            timeout: 12, // 16.8 ms
            retry_cnt: 2,
            ..ConnectOpts::default()
        };
        a.qp.connect(
            &PeerInfo {
                qpn: 0x99,
                psn: 0,
                gid: gid(n.nobody),
            },
            &o,
        )
        .unwrap();
        a.qp.post_send(&SendRequest::send(1, &[a.mr.slice(0..100)]))
            .unwrap();
        let wc = wait_any(&a.cq, 20);
        assert_eq!(wc.status, WcStatus::RetryExcErr, "{wc:?}");
        eventually("the queued frames are given up", || {
            let s = ca.raw_net_stats().unwrap();
            s.neigh_dropped >= 1 && s.neigh_probes >= 3
        });
        let s = ca.raw_net_stats().unwrap();
        assert_eq!(s.tx_frames, 0, "{s:?}");
        assert!(s.neigh_queued >= 3, "the first send and its retries: {s:?}");
    }
}

/// Frames injected from namespace A into a raw-mode context in B: each broken one is
/// counted under its own reason and never reaches the engine; a good one (for a QP that
/// does not exist) reaches the engine exactly once (the UDP socket stays silent).
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn bad_frames_are_counted_and_dropped() {
    let n = net(false)
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let cb = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
    // A RAW_PACKET QP with a SNIFFER rule on the same context: it sees every RoCE
    // frame too (the raw device's ring sees all), and the engine still gets each once.
    let pd = cb.alloc_pd().unwrap();
    let scq = cb.create_cq(64).unwrap();
    let smr = pd.reg_mr(32 * 256, AccessFlags::LOCAL_WRITE).unwrap();
    let sniffer = pd
        .create_qp(&QpInitAttr::new(QpType::RawPacket, &scq))
        .unwrap();
    connect_nobody(&sniffer);
    for i in 0..32 {
        sniffer
            .post_recv(i as u64, &[smr.slice(i * 256..(i + 1) * 256)])
            .unwrap();
    }
    let _sniff = sniffer
        .create_flow(&rverbs::flow::text::parse_rule("sniffer").unwrap())
        .unwrap();
    let (ma, mb) = (
        mac_of(&n.pair.ns_a, &n.pair.if_a),
        mac_of(&n.pair.ns_b, &n.pair.if_b),
    );
    let repr = RoceV2Repr {
        src_mac: ma,
        dst_mac: mb,
        src: n.addr[0],
        dst: n.addr[1],
        src_port: 0xc001,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        ipv4_ident: 0x1234,
    };
    // RC SEND ONLY to QPN 0xabcdef, 4 bytes of payload.
    let mut ib = vec![0u8; 12 + 4 + 4];
    ib[0] = 0x04;
    ib[2] = 0xff;
    ib[3] = 0xff;
    ib[5..8].copy_from_slice(&[0xab, 0xcd, 0xef]);
    let good = {
        let mut f = vec![0u8; repr.frame_len(ib.len())];
        repr.emit_frame(&ib, &mut f).unwrap();
        rocev2::fill_icrc(&mut f).unwrap();
        f
    };
    let fix_ip = |f: &mut Vec<u8>| {
        f[24] = 0;
        f[25] = 0;
        let c = rverbs_wire::checksum::checksum(&f[14..14 + usize::from(f[14] & 15) * 4]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    };
    let mut frames = Vec::new();
    let mut icrc = good.clone();
    *icrc.last_mut().unwrap() ^= 1;
    frames.push(icrc);
    let mut ipsum = good.clone();
    ipsum[24] ^= 0x40;
    frames.push(ipsum);
    let mut frag = good.clone();
    frag[20] |= 0x20; // MF
    fix_ip(&mut frag);
    frames.push(frag);
    let mut opts = good[..34].to_vec();
    opts.extend_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
    opts.extend_from_slice(&good[34..]);
    opts[14] = 0x46;
    let tl = (opts.len() - 14) as u16;
    opts[16..18].copy_from_slice(&tl.to_be_bytes());
    fix_ip(&mut opts);
    frames.push(opts);
    let mut vlan = good[..12].to_vec();
    vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    vlan.extend_from_slice(&good[12..]);
    frames.push(vlan);
    let other = RoceV2Repr {
        dst: match n.nobody {
            IpAddr::V4(v) => IpAddr::V4(v),
            v => v,
        },
        ..repr
    };
    let mut not_ours = vec![0u8; other.frame_len(ib.len())];
    other.emit_frame(&ib, &mut not_ours).unwrap();
    rocev2::fill_icrc(&mut not_ours).unwrap();
    frames.push(not_ours);
    frames.push(good.clone());
    let ifa = n.pair.if_a.clone();
    VethPair::in_ns(&n.pair.ns_a, move || {
        let port = rverbs_raw::RawPort::open(&ifa).unwrap();
        for f in &frames {
            port.send(f).unwrap();
        }
    });
    eventually("every frame is handled", || {
        cb.raw_net_stats().unwrap().rx_frames >= 7
    });
    // Let a second copy through the UDP socket show, if the filter let one in.
    std::thread::sleep(Duration::from_millis(300));
    let s = cb.raw_net_stats().unwrap();
    assert_eq!(
        (
            s.rx_icrc_errors,
            s.rx_ip_checksum,
            s.rx_fragments,
            s.rx_ip_options,
            s.rx_vlan,
            s.rx_not_ours,
            s.rx_delivered
        ),
        (1, 1, 1, 1, 1, 1, 1),
        "{s:?}"
    );
    let c = cb.counters();
    assert_eq!((c.rx_unknown_qp, c.rx_icrc_errors), (1, 0), "{c:?}");
    // The sniffer got the seven injected frames (and maybe ARP / ND of the kernel's).
    let mut wcs = [Wc::default(); 32];
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen < 7 && Instant::now() < deadline {
        seen += scq.poll_wait(&mut wcs, Duration::from_millis(100)).unwrap();
    }
    assert!(seen >= 7, "the sniffer saw {seen} frames");
}

/// Traffic to the context's own address never appears on the wire: it goes through the
/// UDP socket (over `lo`), which the socket filter lets through.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn own_address_goes_through_the_socket() {
    let n = net(false)
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let (a, b) = (rc_end(&ca), rc_end(&ca));
    connect(&a, &ca, n.addr[0], &b, &ca, n.addr[0]);
    b.qp.post_recv(1, &[b.mr.slice(0..100)]).unwrap();
    a.mr.write(0, b"to myself");
    a.qp.post_send(&SendRequest::send(2, &[a.mr.slice(0..9)]))
        .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 2);
    assert_eq!(wait(&b.cq).byte_len, 9);
    assert_eq!(&b.mr.to_vec()[..9], b"to myself");
    let s = ca.raw_net_stats().unwrap();
    assert!(s.tx_via_socket >= 2 && s.tx_frames == 0, "{s:?}");
    assert_eq!(ca.counters().rx_icrc_errors, 0);
}

/// UD multicast: a frame to a group reaches a member in the other namespace and, as
/// with IP_MULTICAST_LOOP, a member QP of the sending context itself.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn multicast_ud_over_raw() {
    let n = net(false)
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let cb = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
    let group = Gid::from(Ipv4Addr::new(239, 1, 2, 3));
    // Joining opens a group socket, in the namespace of the calling thread.
    let member = |ns: &str, ctx: &Context| {
        let ctx = ctx.clone();
        VethPair::in_ns(ns, move || {
            let u = ud_end(ctx.clone(), 16);
            u.qp.attach_mcast(&group, 0).unwrap();
            u
        })
    };
    let a = ud_end(ca.clone(), 16);
    let a2 = member(&n.pair.ns_a, &ca);
    let b = member(&n.pair.ns_b, &cb);
    b.qp.post_recv(1, &[b.mr.all()]).unwrap();
    a2.qp.post_recv(1, &[a2.mr.all()]).unwrap();
    let ah =
        a.pd.create_ah(&AhAttr {
            av: AddressVector {
                dgid: group,
                sgid_index: v2_index(&ca, n.addr[0]),
                hop_limit: 1,
                traffic_class: 0,
                flow_label: 0,
            },
            port_num: 1,
        })
        .unwrap();
    a.mr.write(40, b"to the group");
    a.qp.post_send(&SendRequest::send(2, &[a.mr.slice(40..52)]).to(
        &ah,
        MULTICAST_QPN,
        0x1111_1111,
    ))
    .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 2);
    assert_eq!(wait(&b.cq).byte_len, 40 + 12);
    assert_eq!(&b.mr.to_vec()[40..52], b"to the group");
    assert_eq!(wait(&a2.cq).byte_len, 40 + 12);
    assert_eq!(&a2.mr.to_vec()[40..52], b"to the group");
    let s = ca.raw_net_stats().unwrap();
    assert_eq!(
        (s.tx_frames, s.tx_looped, s.neigh_probes),
        (1, 1, 0),
        "{s:?}"
    );
}

/// The records of a classic little-endian pcap file: (link type, frames).
fn read_pcap(path: &std::path::Path) -> (u32, Vec<Vec<u8>>) {
    let b = std::fs::read(path).unwrap();
    assert!(b.len() >= 24 && b[..4] == 0xa1b2_c3d4u32.to_le_bytes());
    let linktype = u32::from_le_bytes(b[20..24].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let n = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + n].to_vec());
        at += 16 + n;
    }
    assert_eq!(at, b.len(), "a cut record");
    (linktype, out)
}

/// `RVERBS_PCAP` of a raw-mode context holds the real Ethernet frames (RoCE v2, ARP /
/// ND), every RoCE frame with a good ICRC, and tshark decodes them without a malformed
/// packet.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn pcap_of_the_raw_path_is_real_ethernet() {
    for v6 in [false, true] {
        let n = net(v6)
            .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
        let path = std::env::temp_dir().join(format!(
            "rverbs-raw-v2-{}-{}.pcap",
            std::process::id(),
            u8::from(v6)
        ));
        let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, Some(path.clone()));
        let cb = context_in_ns(&n.pair.ns_b, &n.pair.if_b, true, None);
        let (a, b) = (rc_end(&ca), rc_end(&cb));
        connect(&a, &ca, n.addr[0], &b, &cb, n.addr[1]);
        all_opcodes(&a, &b);
        let (ua, ub) = (ud_end(ca.clone(), 16), ud_end(cb.clone(), 16));
        ud_ping_pong(&ca, &ua, n.addr[0], &cb, &ub, n.addr[1]);
        // One RoCE v1 datagram too (EtherType 0x8915).
        let v1 = ca.find_gid_index(&gid(n.addr[0]), GidType::RoceV1).unwrap();
        let ah = ua
            .pd
            .create_ah(&AhAttr {
                av: AddressVector {
                    dgid: gid(n.addr[1]),
                    sgid_index: u8::try_from(v1).unwrap(),
                    hop_limit: 3,
                    traffic_class: 0,
                    flow_label: 0,
                },
                port_num: 1,
            })
            .unwrap();
        ub.qp.post_recv(7, &[ub.mr.all()]).unwrap();
        ua.qp
            .post_send(&SendRequest::send(8, &[ua.mr.slice(40..44)]).to(
                &ah,
                ub.qp.qp_num(),
                0x1111_1111,
            ))
            .unwrap();
        assert_eq!(wait(&ua.cq).wr_id, 8);
        assert_eq!(wait(&ub.cq).wr_id, 7);
        drop((a, b, ah, ua, ub));
        drop(ca); // flushes the capture
        let (linktype, frames) = read_pcap(&path);
        assert_eq!(linktype, 1, "LINKTYPE_ETHERNET");
        let (mut roce, mut v1, mut neigh) = (0, 0, 0);
        for f in &frames {
            if let Ok(Some(p)) = rverbs_wire::rocev1::parse_ethernet(f) {
                assert!(p.icrc_ok, "v1 ICRC");
                v1 += 1;
                continue;
            }
            match rverbs_wire::frame::parse_ethernet(f) {
                Ok(rverbs_wire::frame::Decoded::Roce(r)) => {
                    assert!(r.icrc_ok, "{r}");
                    roce += 1;
                }
                _ => neigh += 1,
            }
        }
        assert!(
            roce > 2000 && neigh >= 2,
            "{roce} RoCE frames, {neigh} others"
        );
        assert_eq!(v1, 1, "the RoCE v1 datagram");
        let roce = roce + v1;
        // tshark (when installed) decodes every frame, none malformed.
        match Command::new("tshark")
            .args(["-r", path.to_str().unwrap(), "-Y", "_ws.malformed"])
            .output()
        {
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    out.stdout.is_empty(),
                    "{}",
                    String::from_utf8_lossy(&out.stdout)
                );
                let ib = Command::new("tshark")
                    .args([
                        "-r",
                        path.to_str().unwrap(),
                        "-Y",
                        "infiniband.bth",
                        "-T",
                        "fields",
                        "-e",
                        "frame.number",
                    ])
                    .output()
                    .unwrap();
                let decoded = String::from_utf8_lossy(&ib.stdout).lines().count();
                assert_eq!(decoded, roce, "tshark sees every RoCE frame as InfiniBand");
            }
            Err(_) => {
                assert!(
                    ["RVERBS_REQUIRE_TSHARK", "RVERBS_NO_SKIP"]
                        .iter()
                        .all(|v| std::env::var_os(v).is_none()),
                    "tshark required (RVERBS_REQUIRE_TSHARK or RVERBS_NO_SKIP) but missing"
                );
                eprintln!("SKIP tshark check: tshark not installed");
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// `RVERBS_FAULTS` on a raw-mode context: loss, duplication, corruption and delay hit
/// the raw path's frames; the transport recovers and every corrupted frame that got
/// through is a counted drop.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn faults_on_the_raw_path() {
    let n = net(false)
        .expect("needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored");
    let ca = context_in_ns(&n.pair.ns_a, &n.pair.if_a, true, None);
    let ifb = n.pair.if_b.clone();
    let cb = VethPair::in_ns(&n.pair.ns_b, move || {
        let dev = devices()
            .unwrap()
            .into_iter()
            .find(|d| d.ifname == ifb)
            .unwrap();
        Context::open_with(
            dev,
            &OpenOptions {
                raw_interface: Some(ifb),
                faults: Some(
                    Faults::parse(
                        "loss=0.02,dup=0.02,corrupt=0.02,delay_us=50,reorder=0.02,seed=5",
                    )
                    .unwrap(),
                ),
                ..Default::default()
            },
        )
        .unwrap()
    });
    let (a, b) = (rc_end(&ca), rc_end(&cb));
    connect(&a, &ca, n.addr[0], &b, &cb, n.addr[1]);
    all_opcodes(&a, &b);
    let f = cb.fault_stats();
    assert!(
        f.lost > 0 && f.corrupted > 0 && f.duplicated > 0 && f.delayed > 0,
        "{f:?}"
    );
    let drops = |s: RawNetStats| {
        s.rx_icrc_errors
            + s.rx_ip_checksum
            + s.rx_udp_checksum
            + s.rx_malformed
            + s.rx_not_ours
            + s.rx_fragments
            + s.rx_ip_options
            + s.rx_vlan
    };
    let (sa, sb) = (ca.raw_net_stats().unwrap(), cb.raw_net_stats().unwrap());
    assert!(drops(sa) + drops(sb) >= 1, "{sa:?} {sb:?}");
    // A corrupted frame may also be duplicated (or lost, or its bit hit the Ethernet
    // payload padding of a short frame): never more drops than corrupted copies.
    assert!(
        drops(sa) + drops(sb) <= f.corrupted + f.duplicated,
        "{sa:?} {sb:?} {f:?}"
    );
}
