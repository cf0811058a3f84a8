//! Features that must work through the same calls on every device: memory windows
//! (type 1 and 2, local and remote invalidation), UD address handles from a received
//! completion, multicast, the SRQ-limit asynchronous event, and completion events on
//! a tokio runtime. They run on the default soft device; with
//! `RVERBS_TEST_DEVICE=rxe0` (any device of the system's libibverbs) on that device,
//! both ends in this process (interop/hardware.sh runs them in the rxe guest).

mod common;
use common::*;
use rverbs::*;
use std::time::Duration;

fn dev() -> DeviceInfo {
    match std::env::var("RVERBS_TEST_DEVICE") {
        Ok(name) if !name.is_empty() => device(Some(&name)).unwrap(),
        _ => device(None).unwrap(),
    }
}

fn rights() -> AccessFlags {
    AccessFlags::ALL | AccessFlags::MW_BIND
}

/// An RC endpoint whose region may have windows bound to it.
fn mw_end(ctx: Context) -> End {
    end_with(ctx, 4096, rights())
}

fn mw_pair() -> (End, End) {
    let d = dev();
    let (a, b) = (mw_end(d.open().unwrap()), mw_end(d.open().unwrap()));
    connect(&a, &b, &ConnectOpts::default());
    (a, b)
}

/// `a` WRITEs 64 bytes of `tag` to `to`; the completion's status.
fn write(a: &End, to: RemoteBuf, tag: u8) -> WcStatus {
    a.mr.write(0, &[tag; 64]);
    a.qp.post_send(&SendRequest::write(7, &[a.mr.slice(0..64)], to))
        .unwrap();
    let w = wait(&a.cq);
    assert_eq!(w.wr_id, 7);
    w.status
}

fn done(cq: &Cq, op: WcOpcode) {
    let w = wait(cq);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, op), "{w:?}");
}

#[test]
fn type1_window_grants_and_revokes_remote_writes() {
    let (a, b) = mw_pair();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    assert_eq!(mw.kind(), MwType::Type1);
    let first = mw.rkey();
    // Nothing to unbind before the first bind.
    assert_eq!(b.qp.unbind_mw(9, &mw).unwrap_err().errno(), libc::EINVAL);
    let win =
        b.qp.bind_mw(1, &mw, b.mr.slice(256..320), AccessFlags::REMOTE_WRITE)
            .unwrap();
    done(&b.cq, WcOpcode::BindMw);
    assert_ne!(win.rkey, first);
    assert_eq!(win.rkey, mw.rkey());
    assert_eq!((win.len, win.rkey & !0xff), (64, first & !0xff));
    assert_eq!(write(&a, win, 0x5a), WcStatus::Success);
    assert_eq!(b.mr.to_vec()[256..320], [0x5a; 64]);
    // A type-2 bind request names a type-1 window: refused before the device.
    assert_eq!(
        b.qp.bind_mw(
            2,
            &b.pd.alloc_mw(MwType::Type2).unwrap(),
            b.mr.slice(0..8),
            rights()
        )
        .unwrap_err()
        .errno(),
        libc::EINVAL
    );
    b.qp.unbind_mw(3, &mw).unwrap();
    done(&b.cq, WcOpcode::BindMw);
    assert_eq!(write(&a, win, 0x11), WcStatus::RemAccessErr);
    assert_eq!(b.mr.to_vec()[256..320], [0x5a; 64]);
}

#[test]
fn type2_window_is_bound_by_a_request_and_invalidated_locally() {
    let (a, b) = mw_pair();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let bind = SendRequest::bind_mw(
        1,
        &mw,
        b.mr.slice(512..576),
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    let win = bind.bound().unwrap();
    b.qp.post_send(&bind).unwrap();
    assert_eq!(mw.rkey(), win.rkey);
    done(&b.cq, WcOpcode::BindMw);
    assert_eq!(write(&a, win, 0x77), WcStatus::Success);
    assert_eq!(b.mr.to_vec()[512..576], [0x77; 64]);
    b.qp.post_send(&SendRequest::local_inv(2, win.rkey))
        .unwrap();
    done(&b.cq, WcOpcode::LocalInv);
    assert_eq!(write(&a, win, 0x12), WcStatus::RemAccessErr);
    assert_eq!(b.mr.to_vec()[512..576], [0x77; 64]);
}

#[test]
fn send_with_invalidate_revokes_the_receivers_window() {
    let (a, b) = mw_pair();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let bind = SendRequest::bind_mw(1, &mw, b.mr.slice(1024..1088), AccessFlags::REMOTE_WRITE);
    let win = bind.bound().unwrap();
    b.qp.post_send(&bind).unwrap();
    done(&b.cq, WcOpcode::BindMw);
    assert_eq!(write(&a, win, 0x33), WcStatus::Success);
    b.qp.post_recv(5, &[b.mr.slice(2048..2112)]).unwrap();
    a.mr.write(64, b"revoke");
    a.qp.post_send(&SendRequest::send_inv(6, &[a.mr.slice(64..70)], win.rkey))
        .unwrap();
    done(&a.cq, WcOpcode::Send);
    let r = wait(&b.cq);
    assert_eq!(
        (r.status, r.opcode, r.byte_len),
        (WcStatus::Success, WcOpcode::Recv, 6)
    );
    assert!(r.wc_flags.contains(WcFlags::WITH_INV), "{r:?}");
    assert_eq!(r.imm_data, win.rkey);
    assert_eq!(write(&a, win, 0x44), WcStatus::RemAccessErr);
    assert_eq!(b.mr.to_vec()[1024..1088], [0x33; 64]);
}

/// `from` sends `tag` to `qpn` through `ah`; its completion succeeds.
fn ud_send(from: &UdEnd, ah: &Ah, qpn: u32, tag: &[u8]) {
    from.mr.write(40, tag);
    from.qp
        .post_send(
            &SendRequest::send(9, &[from.mr.slice(40..40 + tag.len())]).to(ah, qpn, 0x1111_1111),
        )
        .unwrap();
    done(&from.cq, WcOpcode::Send);
}

fn ah_to(from: &UdEnd, dgid: Gid) -> Ah {
    from.pd
        .create_ah(&AhAttr {
            av: AddressVector {
                dgid,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            port_num: 1,
        })
        .unwrap()
}

#[test]
fn a_ud_reply_goes_to_the_address_handle_made_from_the_request() {
    let d = dev();
    let (a, b) = (ud_end(d.open().unwrap(), 16), ud_end(d.open().unwrap(), 16));
    a.qp.post_recv(1, &[a.mr.all()]).unwrap();
    b.qp.post_recv(2, &[b.mr.all()]).unwrap();
    let to_b = ah_to(&a, b.ctx.gid(1).unwrap());
    ud_send(&a, &to_b, b.qp.qp_num(), b"ping");
    let got = wait(&b.cq);
    assert_eq!((got.status, got.byte_len), (WcStatus::Success, 40 + 4));
    assert_eq!(got.src_qp, a.qp.qp_num());
    assert!(got.wc_flags.contains(WcFlags::GRH));
    let grh = b.mr.to_vec()[..40].to_vec();
    let attr = b.ctx.init_ah_from_wc(1, &got, &grh).unwrap();
    assert_eq!(attr.av.dgid, a.ctx.gid(1).unwrap());
    let back = b.pd.create_ah_from_wc(1, &got, &grh).unwrap();
    ud_send(&b, &back, got.src_qp, b"pong");
    let r = wait(&a.cq);
    assert_eq!(
        (r.status, r.byte_len, r.src_qp),
        (WcStatus::Success, 44, b.qp.qp_num())
    );
    assert_eq!(&a.mr.to_vec()[40..44], b"pong");
}

/// Attach and detach on the device; a datagram to the group reaches an attached QP
/// unless `RVERBS_TEST_MCAST_LOCAL=0` says the device does not deliver its own
/// multicast to itself (rxe sends a group's datagrams to the wire only).
#[test]
fn multicast_attach_detach_and_delivery() {
    let d = dev();
    let (a, b) = (ud_end(d.open().unwrap(), 16), ud_end(d.open().unwrap(), 16));
    let group = Gid::from(std::net::Ipv4Addr::new(
        239,
        78,
        0,
        (std::process::id() % 200) as u8 + 1,
    ));
    for i in 0..4 {
        b.qp.post_recv(i, &[b.mr.all()]).unwrap();
    }
    b.qp.attach_mcast(&group, 0).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let ah = ah_to(&a, group);
    let local = std::env::var("RVERBS_TEST_MCAST_LOCAL").map_or(true, |v| v != "0");
    ud_send(&a, &ah, MULTICAST_QPN, b"one");
    let mut wc = [Wc::default()];
    let n = b.cq.poll_wait(&mut wc, Duration::from_secs(2)).unwrap();
    if local {
        assert_eq!(n, 1, "the attached QP got no copy");
        assert_eq!(
            (wc[0].status, wc[0].src_qp),
            (WcStatus::Success, a.qp.qp_num())
        );
    }
    b.qp.detach_mcast(&group, 0).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    ud_send(&a, &ah, MULTICAST_QPN, b"two");
    assert_eq!(
        b.cq.poll_wait(&mut wc, Duration::from_millis(500)).unwrap(),
        0,
        "a detached QP got a copy"
    );
}

#[test]
fn an_srq_below_its_limit_raises_the_async_event() {
    let d = dev();
    let (a, b) = (end(d.open().unwrap(), 4096), d.open().unwrap());
    let pd = b.alloc_pd().unwrap();
    let cq = b.create_cq(64).unwrap();
    let srq = pd.create_srq(&SrqInitAttr::new(16)).unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).srq(&srq))
        .unwrap();
    connect_qps(&a.qp, &qp, &ConnectOpts::default());
    for i in 0..4 {
        srq.post_recv(i, &[mr.slice(i as usize * 64..(i as usize + 1) * 64)])
            .unwrap();
    }
    srq.arm_limit(2).unwrap();
    while b.try_get_async_event().is_some() {}
    for _ in 0..3 {
        a.qp.post_send(&SendRequest::send(1, &[a.mr.slice(0..16)]))
            .unwrap();
        done(&a.cq, WcOpcode::Send);
        assert_eq!(wait(&cq).status, WcStatus::Success);
    }
    let want = AsyncEvent::SrqLimitReached { srq: srq.handle() };
    let end = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        match b.get_async_event(Some(left)) {
            Some(e) if e == want => break,
            Some(_) => continue,
            None => panic!("no SRQ limit event within 5 s"),
        }
    }
}

/// Flow steering is the device's answer: the soft device installs a rule on a UD QP;
/// a system device passes it to its provider (`ibv_create_flow`), and rxe, which has
/// no flow steering, answers EOPNOTSUPP (a ConnectX installs it). Without CAP_NET_RAW
/// the rule is refused before the device (EPERM, as the kernel's `ib_uverbs_ex_create_flow`).
#[test]
fn flow_steering_is_the_devices_answer() {
    let d = dev();
    let u = ud_end(d.open().unwrap(), 8);
    let rule = rverbs::flow::text::parse_rule("prio 1 eth type 0x0800 udp dport 4791").unwrap();
    let r = u.qp.create_flow(&rule);
    if !rverbs_raw::has_cap_net_raw() {
        assert_eq!(r.unwrap_err().errno(), libc::EPERM);
        return;
    }
    let without_steering =
        d.kind == DeviceKind::System && (d.name.starts_with("rxe") || d.name.starts_with("siw"));
    if without_steering {
        let e = r.unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e}");
        // The provider's answer, not a refusal of rverbs'.
        assert!(e.to_string().contains("ibv_create_flow"), "{e}");
    } else {
        r.unwrap().destroy().unwrap();
    }
}

/// The events of `ctx` within `t`, until one is `want` (included).
fn events_until(ctx: &Context, want: AsyncEvent, t: Duration) -> Vec<AsyncEvent> {
    let end = std::time::Instant::now() + t;
    let mut seen = Vec::new();
    while let Some(e) = ctx.get_async_event(Some(
        end.saturating_duration_since(std::time::Instant::now()),
    )) {
        seen.push(e);
        if e == want {
            break;
        }
    }
    seen
}

/// A system device's port events through the context's async events: its netdev set
/// down gives PORT_ERR, set up PORT_ACTIVE (rxe: rxe_net.c's netdev notifier), and the
/// GID table comes back as it was.
#[test]
#[ignore = "needs root, a system device (RVERBS_TEST_DEVICE) and RVERBS_TEST_PORT_FLAP=<its netdev>, which it sets down and up"]
fn port_events_follow_the_netdev() {
    let ifname = std::env::var("RVERBS_TEST_PORT_FLAP")
        .expect("RVERBS_TEST_PORT_FLAP names the device's netdev");
    let d = dev();
    assert_eq!(
        d.kind,
        DeviceKind::System,
        "{} is not a system device",
        d.name
    );
    let ctx = d.open().unwrap();
    let before = ctx.gids();
    while ctx.try_get_async_event().is_some() {}
    let link = |state: &str| {
        let st = std::process::Command::new("ip")
            .args(["link", "set", &ifname, state])
            .status()
            .expect("running ip");
        assert!(st.success(), "ip link set {ifname} {state}: {st}");
    };
    link("down");
    let down = events_until(
        &ctx,
        AsyncEvent::PortErr { port: 1 },
        Duration::from_secs(10),
    );
    let state_down = ctx.query_port(1).map(|p| p.state);
    link("up");
    let up = events_until(
        &ctx,
        AsyncEvent::PortActive { port: 1 },
        Duration::from_secs(10),
    );
    println!("down: {down:?} ({state_down:?}); up: {up:?}");
    assert!(down.contains(&AsyncEvent::PortErr { port: 1 }), "{down:?}");
    assert_ne!(state_down.unwrap(), PortState::Active);
    assert!(up.contains(&AsyncEvent::PortActive { port: 1 }), "{up:?}");
    assert_eq!(ctx.query_port(1).unwrap().state, PortState::Active);
    // The GIDs of the addresses Linux keeps over a down / up come back: the IPv4 ones
    // and the link-local one (static IPv6 addresses are flushed on down unless
    // `keep_addr_on_down` is set; the caller puts its own back).
    let kept: Vec<Gid> = before
        .iter()
        .filter(|g| g.to_ipv4_mapped().is_some() || g.0[..2] == [0xfe, 0x80])
        .copied()
        .collect();
    assert!(!kept.is_empty(), "{before:?}");
    let end = std::time::Instant::now() + Duration::from_secs(15);
    let back = || kept.iter().all(|g| ctx.gids().contains(g));
    while !back() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(back(), "{:?} lacks some of {kept:?}", ctx.gids());
}

/// A CQ on its own channel wakes a tokio task through the channel's fd.
#[cfg(feature = "tokio")]
#[test]
fn completion_events_wake_a_tokio_task() {
    let d = dev();
    let (a, b) = (end(d.open().unwrap(), 4096), d.open().unwrap());
    let pd = b.alloc_pd().unwrap();
    let ch = b.create_comp_channel().unwrap();
    let cq = b.create_cq_on(16, &ch).unwrap();
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    connect_qps(&a.qp, &qp, &ConnectOpts::default());
    qp.post_recv(3, &[mr.all()]).unwrap();
    cq.req_notify(false).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let wake = ch.get_cq_event_async();
        a.qp.post_send(&SendRequest::send(1, &[a.mr.slice(0..8)]))
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), wake)
            .await
            .expect("no completion event within 5 s")
            .unwrap();
        assert!(got.same_as(&cq));
        got.ack_events(1).unwrap();
    });
    let mut wc = [Wc::default()];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
}

/// One side of UD multicast between two processes (interop/hardware.sh: rxe0 in the
/// guest and the host's soft device). `RVERBS_TEST_MCAST_ROLE=recv` attaches a UD QP
/// to the IPv4 group `RVERBS_TEST_MCAST_GROUP`, prints `ready`, and waits up to 20 s
/// for one of the sender's datagrams; `send` sends 80 of them, 100 ms apart.
/// `RVERBS_TEST_MCAST_JOIN=ADDR` (receiver) also joins the group on the interface of
/// the IPv4 address ADDR with a UDP socket while it waits: Linux 6.1's rxe adds only a
/// link-layer address for an attached group (drivers/infiniband/sw/rxe/rxe_mcast.c,
/// `rxe_mcast_add`, mapped as IPv6's), and the IP layer delivers a group's datagrams
/// only to a host that is a member.
#[test]
#[ignore = "one side of a two-process case (interop/hardware.sh runs it; CI skips *_child): needs RVERBS_TEST_MCAST_ROLE and _GROUP"]
fn multicast_role_child() {
    let role = std::env::var("RVERBS_TEST_MCAST_ROLE").expect("needs RVERBS_TEST_MCAST_ROLE");
    let group: std::net::Ipv4Addr = std::env::var("RVERBS_TEST_MCAST_GROUP")
        .expect("needs RVERBS_TEST_MCAST_GROUP")
        .parse()
        .unwrap();
    let group = Gid::from(group);
    let u = ud_end(dev().open().unwrap(), 64);
    match role.as_str() {
        "recv" => {
            for i in 0..16 {
                u.qp.post_recv(i, &[u.mr.all()]).unwrap();
            }
            u.qp.attach_mcast(&group, 0).unwrap();
            let _member = std::env::var("RVERBS_TEST_MCAST_JOIN").ok().map(|a| {
                let ifaddr: std::net::Ipv4Addr =
                    a.parse().expect("RVERBS_TEST_MCAST_JOIN: an IPv4 address");
                let g: std::net::Ipv4Addr = std::env::var("RVERBS_TEST_MCAST_GROUP")
                    .unwrap()
                    .parse()
                    .unwrap();
                let s = std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0)).unwrap();
                s.join_multicast_v4(&g, &ifaddr).unwrap();
                s
            });
            println!("ready qpn {}", u.qp.qp_num());
            let w = wait_long(&u.cq, Duration::from_secs(20));
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            let got = u.mr.to_vec()[40..40 + (w.byte_len as usize).saturating_sub(40)].to_vec();
            assert!(got.starts_with(b"mcast-"), "{got:?}");
            println!(
                "got {:?} from qpn {}",
                String::from_utf8_lossy(&got),
                w.src_qp
            );
            u.qp.detach_mcast(&group, 0).unwrap();
        }
        "send" => {
            let ah = mcast_ah(&u.ctx, &u.pd, group);
            for i in 0..80 {
                ud_send(&u, &ah, MULTICAST_QPN, format!("mcast-{i:02}").as_bytes());
                std::thread::sleep(Duration::from_millis(100));
            }
            println!("sent 80 from qpn {}", u.qp.qp_num());
        }
        r => panic!("RVERBS_TEST_MCAST_ROLE={r}: send or recv"),
    }
}

fn wait_long(cq: &Cq, t: Duration) -> Wc {
    let mut out = [Wc::default()];
    let n = cq.poll_wait(&mut out, t).unwrap();
    assert_eq!(n, 1, "no datagram within {t:?}");
    out[0]
}
