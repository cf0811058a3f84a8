//! The RDMA CM over the soft device: contexts on the loopback device connect through
//! their GSIs, move data, reject, disconnect; and the failure paths (no listener, a
//! port taken twice, a full backlog, a dead or lossy link, bad arguments).

use rverbs::cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};
use rverbs::{AccessFlags, Context, Faults, OpenOptions, QpInitAttr, QpType, SendRequest, Wc};
use std::net::SocketAddr;
use std::time::Duration;

mod cm_common;
use cm_common::*;

fn ctx() -> Context {
    rverbs::device(None).unwrap().open().unwrap()
}

fn lossy(spec: &str) -> Context {
    let opts = OpenOptions {
        faults: Some(Faults::parse(spec).unwrap()),
        ..OpenOptions::default()
    };
    rverbs::Context::open_with(rverbs::device(None).unwrap(), &opts).unwrap()
}

struct Conn {
    c: CmId,
    cch: EventChannel,
    s: CmId,
    sch: EventChannel,
    cctx: Context,
    sctx: Context,
    _l: CmId,
}

/// An RC connection between two contexts, both sides established.
fn connect_pair() -> Conn {
    let (sctx, cctx) = (ctx(), ctx());
    let (l, sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let cq = cctx.create_cq(64).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    let req = expect(&sch, EventKind::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&l));
    assert_eq!(req.id.peer_addr(), c.local_addr());
    let scq = sctx.create_cq(64).unwrap();
    req.id
        .create_qp(
            &sctx.alloc_pd().unwrap(),
            &QpInitAttr::new(QpType::Rc, &scq),
        )
        .unwrap();
    req.id.accept(&ConnParam::default()).unwrap();
    expect(&cch, EventKind::Established);
    expect(&sch, EventKind::Established);
    Conn {
        c,
        cch,
        s: req.id,
        sch,
        cctx,
        sctx,
        _l: l,
    }
}

#[test]
fn rc_send_and_write_after_connect_then_client_disconnects() {
    let (sctx, cctx) = (ctx(), ctx());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Tcp, 4);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(16).unwrap());
    let cqp = c
        .create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))
        .unwrap();
    // 56 bytes: all the user's room in a REQ after rdma_cm's 36-byte header.
    let hello: Vec<u8> = (0..56).collect();
    c.connect(&ConnParam {
        private_data: hello.clone(),
        ..ConnParam::default()
    })
    .unwrap();
    let req = expect(&sch, EventKind::ConnectRequest);
    assert_eq!(req.private_data, hello);
    let (spd, scq) = (sctx.alloc_pd().unwrap(), sctx.create_cq(16).unwrap());
    let sqp = req
        .id
        .create_qp(&spd, &QpInitAttr::new(QpType::Rc, &scq))
        .unwrap();
    let smr = spd.reg_mr(4096, AccessFlags::ALL).unwrap();
    sqp.post_recv(1, &[smr.slice(0..64)]).unwrap();
    // The buffer advertisement rides in the REP's private data.
    let adv = smr.remote(1024..4096).to_bytes();
    req.id
        .accept(&ConnParam {
            private_data: adv.to_vec(),
            ..ConnParam::default()
        })
        .unwrap();
    let est = expect(&cch, EventKind::Established);
    assert_eq!(est.private_data.len(), 196);
    let remote = rverbs::RemoteBuf::from_bytes(&est.private_data[..adv.len()]).unwrap();
    let cmr = cpd.reg_mr(4096, AccessFlags::ALL).unwrap();
    cmr.write(0, b"ping");
    cqp.post_send(&SendRequest::send(1, &[cmr.slice(0..4)]).signaled(true))
        .unwrap();
    let mut wc = [Wc::default()];
    assert_eq!(scq.poll_wait(&mut wc, D).unwrap(), 1);
    assert_eq!(
        (wc[0].status, wc[0].byte_len),
        (rverbs::WcStatus::Success, 4)
    );
    let mut got = [0u8; 4];
    smr.read(0, &mut got);
    assert_eq!(&got, b"ping");
    // An RDMA WRITE of 3 KiB into the advertised range (remote write granted by the CM).
    cmr.write(0, &[0x5a; 3072]);
    cqp.post_send(&SendRequest::write(2, &[cmr.slice(0..3072)], remote).signaled(true))
        .unwrap();
    assert_eq!(ccq.poll_wait(&mut wc, D).unwrap(), 1);
    let n = if wc[0].wr_id == 1 {
        ccq.poll_wait(&mut wc, D).unwrap()
    } else {
        1
    };
    assert_eq!(
        (n, wc[0].wr_id, wc[0].status),
        (1, 2, rverbs::WcStatus::Success)
    );
    let mut back = vec![0u8; 3072];
    smr.read(1024, &mut back);
    assert!(back.iter().all(|&b| b == 0x5a));
    expect(&sch, EventKind::Established);

    // The client disconnects: DREQ; the server's consumer answers with DREP.
    c.disconnect().unwrap();
    assert_eq!(cqp.state(), rverbs::QpState::Err);
    expect(&sch, EventKind::Disconnected);
    req.id.disconnect().unwrap();
    let d = expect(&cch, EventKind::Disconnected);
    assert_eq!(d.status, 0);
    // Both leave time-wait.
    expect(&cch, EventKind::TimewaitExit);
    expect(&sch, EventKind::TimewaitExit);
}

#[test]
fn server_disconnects_first() {
    let p = connect_pair();
    p.s.disconnect().unwrap();
    expect(&p.cch, EventKind::Disconnected);
    p.c.disconnect().unwrap();
    expect(&p.sch, EventKind::Disconnected);
    // A second disconnect has nothing left to do.
    assert_eq!(p.c.disconnect().unwrap_err().errno(), libc::EINVAL);
    let _ = (&p.cctx, &p.sctx);
}

#[test]
fn dropping_a_connected_id_disconnects_the_peer() {
    let p = connect_pair();
    drop(p.c);
    expect(&p.sch, EventKind::Disconnected);
}

#[test]
fn dropping_the_last_id_of_a_context_still_tells_the_peer() {
    for _ in 0..5 {
        let p = connect_pair();
        // The client's context has no other ID: its CM goes with this one, and the
        // DREQ must still leave.
        let Conn { c, sch, .. } = p;
        drop(c);
        expect(&sch, EventKind::Disconnected);
    }
}

#[test]
fn reject_carries_reason_28_and_private_data() {
    let (sctx, cctx) = (ctx(), ctx());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let cq = cctx.create_cq(4).unwrap();
    let qp = c
        .create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    let req = expect(&sch, EventKind::ConnectRequest);
    req.id.reject(b"go away").unwrap();
    let e = expect(&cch, EventKind::Rejected);
    assert_eq!(e.status, 28);
    assert_eq!(&e.private_data[..7], b"go away");
    assert_eq!(qp.state(), rverbs::QpState::Err);
}

#[test]
fn no_listener_is_rej_invalid_service_id() {
    let (sctx, cctx) = (ctx(), ctx());
    // sctx's CM runs (it has an ID) but nobody listens on this port.
    let (l, _sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let other = SocketAddr::new(addr.ip(), addr.port().wrapping_add(1).max(1));
    let (c, cch) = client(&cctx, PortSpace::Tcp, other);
    let cq = cctx.create_cq(4).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    let e = expect(&cch, EventKind::Rejected);
    assert_eq!(
        e.status,
        i32::from(rverbs::cm::reject_reason::INVALID_SERVICE_ID)
    );
    assert!(l.cm_stats().unwrap().no_listener >= 1);
}

#[test]
fn second_listener_on_a_port_is_eaddrinuse() {
    let sctx = ctx();
    let (_l, _ch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let ch = EventChannel::new().unwrap();
    let l2 = CmId::create_on(&ch, &sctx, PortSpace::Tcp).unwrap();
    l2.bind_addr(addr).unwrap();
    assert_eq!(l2.listen(0).unwrap_err().errno(), libc::EADDRINUSE);
    // The same port in the UDP port space is another service ID.
    let l3 = CmId::create_on(&ch, &sctx, PortSpace::Udp).unwrap();
    l3.bind_addr(addr).unwrap();
    l3.listen(0).unwrap();
}

#[test]
fn full_backlog_drops_requests_until_one_is_taken() {
    let (sctx, cctx) = (ctx(), ctx());
    let (l, sch, addr) = listen(&sctx, PortSpace::Tcp, 1);
    let cq = cctx.create_cq(8).unwrap();
    let pd = cctx.alloc_pd().unwrap();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
        // REQ resent every 2 x 4.096 us x 2^16 + 4.096 us x 2^14 = 0.6 s.
        c.set_cm_timeouts(14, 15).unwrap();
        c.create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        c.connect(&ConnParam::default()).unwrap();
        clients.push((c, cch));
        std::thread::sleep(Duration::from_millis(50));
    }
    // One request fits; the other was dropped (no REJ: its sender retries).
    std::thread::sleep(Duration::from_millis(200));
    assert!(l.cm_stats().unwrap().backlog_full >= 1);
    let first = expect(&sch, EventKind::ConnectRequest);
    // Taking it freed the place: the retry of the second gets in.
    let second = expect(&sch, EventKind::ConnectRequest);
    assert_ne!(first.id, second.id);
    for e in [first, second] {
        e.id.reject(&[]).unwrap();
    }
    for (_, cch) in &clients {
        assert_eq!(expect(cch, EventKind::Rejected).status, 28);
    }
}

#[test]
fn ud_resolves_the_peer_with_sidr() {
    let (sctx, cctx) = (ctx(), ctx());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Udp, 0);
    let (c, cch) = client(&cctx, PortSpace::Udp, addr);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(16).unwrap());
    let cqp = c
        .create_qp(&cpd, &QpInitAttr::new(QpType::Ud, &ccq))
        .unwrap();
    assert_eq!(cqp.state(), rverbs::QpState::Rts);
    c.connect(&ConnParam {
        private_data: b"ud?".to_vec(),
        ..ConnParam::default()
    })
    .unwrap();
    let req = expect(&sch, EventKind::ConnectRequest);
    assert_eq!(&req.private_data[..3], b"ud?");
    let (spd, scq) = (sctx.alloc_pd().unwrap(), sctx.create_cq(16).unwrap());
    let sqp = req
        .id
        .create_qp(&spd, &QpInitAttr::new(QpType::Ud, &scq))
        .unwrap();
    let smr = spd.reg_mr(256, AccessFlags::ALL).unwrap();
    sqp.post_recv(7, &[smr.slice(0..256)]).unwrap();
    req.id
        .accept(&ConnParam {
            private_data: b"ud!".to_vec(),
            ..ConnParam::default()
        })
        .unwrap();
    let est = expect(&cch, EventKind::Established);
    let ud = est.ud.expect("UD parameters");
    assert_eq!((ud.qp_num, ud.qkey), (sqp.qp_num(), 0x0123_4567));
    assert_eq!(&est.private_data[..3], b"ud!");
    let ah = cpd.create_ah(&ud.ah_attr).unwrap();
    let cmr = cpd.reg_mr(64, AccessFlags::ALL).unwrap();
    cmr.write(0, b"datagram");
    cqp.post_send(&SendRequest::send(1, &[cmr.slice(0..8)]).to(&ah, ud.qp_num, ud.qkey))
        .unwrap();
    let mut wc = [Wc::default()];
    assert_eq!(scq.poll_wait(&mut wc, D).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (7, 40 + 8));
    let mut got = [0u8; 8];
    smr.read(40, &mut got);
    assert_eq!(&got, b"datagram");
}

#[test]
fn ud_reject_is_unreachable_with_the_sidr_status() {
    let (sctx, cctx) = (ctx(), ctx());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Udp, 0);
    let (c, cch) = client(&cctx, PortSpace::Udp, addr);
    let cq = cctx.create_cq(4).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Ud, &cq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    expect(&sch, EventKind::ConnectRequest)
        .id
        .reject(&[])
        .unwrap();
    let e = expect(&cch, EventKind::Unreachable);
    assert_eq!(e.status, 2); // IB_SIDR_REJECT
}

#[test]
fn dead_link_is_unreachable_after_the_retries() {
    let sctx = ctx();
    let cctx = lossy("loss=1.0,seed=3");
    let (l, _sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    // 2 tries, 0.6 s each.
    c.set_cm_timeouts(14, 1).unwrap();
    let cq = cctx.create_cq(4).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    let t0 = std::time::Instant::now();
    c.connect(&ConnParam::default()).unwrap();
    let e = expect(&cch, EventKind::Unreachable);
    assert_eq!(e.status, -libc::ETIMEDOUT);
    assert!(
        t0.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t0.elapsed()
    );
    let st = c.cm_stats().unwrap();
    assert_eq!((st.retries, st.timeouts), (1, 1));
    assert_eq!(l.cm_stats().unwrap().rx, 0);
    assert!(cctx.fault_stats().lost >= 2);
}

#[test]
fn lossy_link_still_connects_and_disconnects() {
    // 30 % of every datagram either way lost: the CM's resends get through.
    let (sctx, cctx) = (lossy("loss=0.3,seed=11"), lossy("loss=0.3,seed=12"));
    let (_l, sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    c.set_cm_timeouts(12, 15).unwrap();
    let cq = cctx.create_cq(4).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    let req = next(&sch);
    assert_eq!(req.kind, EventKind::ConnectRequest, "{req:?}");
    let scq = sctx.create_cq(4).unwrap();
    req.id
        .create_qp(
            &sctx.alloc_pd().unwrap(),
            &QpInitAttr::new(QpType::Rc, &scq),
        )
        .unwrap();
    req.id.accept(&ConnParam::default()).unwrap();
    expect(&cch, EventKind::Established);
    // The REP is resent until an RTU gets through (a duplicate REP is answered
    // with the RTU again).
    expect(&sch, EventKind::Established);
    c.disconnect().unwrap();
    expect(&sch, EventKind::Disconnected);
    req.id.disconnect().unwrap();
    expect(&cch, EventKind::Disconnected);
    assert!(sctx.fault_stats().lost + cctx.fault_stats().lost > 0);
}

#[test]
fn bad_arguments_fail_with_einval() {
    let cctx = ctx();
    let ch = EventChannel::new().unwrap();
    let id = CmId::create_on(&ch, &cctx, PortSpace::Tcp).unwrap();
    let errno = |r: rverbs::Result<()>| r.unwrap_err().errno();
    // No address yet: no route, no connect.
    assert_eq!(errno(id.resolve_route(D)), libc::EINVAL);
    assert_eq!(errno(id.connect(&ConnParam::default())), libc::EINVAL);
    assert_eq!(
        errno(id.resolve_addr(None, "0.0.0.0:1".parse().unwrap(), D)),
        libc::EINVAL
    );
    assert_eq!(
        errno(id.resolve_addr(None, "224.0.0.1:1".parse().unwrap(), D)),
        libc::EINVAL
    );
    assert_eq!(
        errno(id.resolve_addr(
            Some("::1".parse().unwrap()),
            "127.0.0.1:1".parse().unwrap(),
            D
        )),
        libc::EINVAL
    );
    // An address that is not the context's.
    let other = CmId::create_on(&ch, &cctx, PortSpace::Tcp).unwrap();
    assert_eq!(
        errno(other.bind_addr("192.0.2.1:5".parse().unwrap())),
        libc::EADDRNOTAVAIL
    );
    // Unsupported port space; bad timeouts.
    assert!(CmId::create(&ch, PortSpace::Ib).is_err());
    assert_eq!(errno(id.set_cm_timeouts(32, 1)), libc::EINVAL);
    // A UD QP on a TCP ID; a QP of another context.
    let (sctx, pd) = (ctx(), cctx.alloc_pd().unwrap());
    let (_l, _sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let (c, _cch) = client(&cctx, PortSpace::Tcp, addr);
    let cq = cctx.create_cq(4).unwrap();
    assert_eq!(
        c.create_qp(&pd, &QpInitAttr::new(QpType::Ud, &cq))
            .err()
            .unwrap()
            .errno(),
        libc::EINVAL
    );
    let spd = sctx.alloc_pd().unwrap();
    let scq = sctx.create_cq(4).unwrap();
    assert_eq!(
        c.create_qp(&spd, &QpInitAttr::new(QpType::Rc, &scq))
            .err()
            .unwrap()
            .errno(),
        libc::EINVAL
    );
    // Private data past the REQ's 56 user bytes.
    c.create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let long = ConnParam {
        private_data: vec![0; 57],
        ..ConnParam::default()
    };
    assert_eq!(errno(c.connect(&long)), libc::EINVAL);
    // Accept / reject on an ID that has no request.
    assert_eq!(errno(c.accept(&ConnParam::default())), libc::EINVAL);
    assert_eq!(errno(c.reject(&[])), libc::EINVAL);
}

#[test]
fn create_ep_resolves_in_one_call() {
    let (sctx, cctx) = (ctx(), ctx());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let (id, ch) = CmId::create_ep(Some(&cctx), None, addr, PortSpace::Tcp, D).unwrap();
    assert!(ch.try_get_event().is_none());
    assert!(id.channel().is_some());
    assert_eq!(id.peer_addr(), Some(addr));
    assert!(id.local_addr().is_some());
    // Nothing listens there: resolution works, connecting is refused by the peer.
    let _ = sch;
}

#[cfg(feature = "tokio")]
#[test]
fn events_awaited_on_tokio() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (sctx, cctx) = (ctx(), ctx());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let (c, _cch) = client(&cctx, PortSpace::Tcp, addr);
    let cq = cctx.create_cq(4).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    rt.block_on(async {
        c.connect(&ConnParam::default()).unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), sch.get_event_async())
            .await
            .expect("an event within 5 s")
            .unwrap();
        assert_eq!(e.kind, EventKind::ConnectRequest);
    });
}

#[test]
fn hostile_cm_mads_are_dropped_and_counted() {
    let (sctx, cctx) = (ctx(), ctx());
    let (l, sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    let agent = cctx.register_mad_agent(None).unwrap();
    let to = rverbs::mad::MadDest::gsi(sctx.gid(sctx.gid_index_for(false).unwrap()).unwrap());
    let mad = |attr: u16, fill: &dyn Fn(usize) -> u8| {
        let mut m = [0u8; 256];
        for (i, b) in m.iter_mut().enumerate().skip(24) {
            *b = fill(i);
        }
        m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]); // CM, version 2, Send
        m[16..18].copy_from_slice(&attr.to_be_bytes());
        m
    };
    // An unknown attribute, and a REP / RTU / DREQ for IDs that do not exist.
    agent.send(to, &mad(0x0099, &|_| 0)).unwrap();
    for attr in [0x0013, 0x0014, 0x0015, 0x0016] {
        agent.send(to, &mad(attr, &|i| i as u8)).unwrap();
    }
    // 300 MADs of random CM attributes and bytes.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..300 {
        let attr = 0x0010 + (rnd() % 9) as u16;
        let seed = rnd();
        agent
            .send(to, &mad(attr, &|i| (seed >> (i % 8 * 8)) as u8 ^ i as u8))
            .unwrap();
        if rnd() % 20 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let t0 = std::time::Instant::now();
    while l.cm_stats().unwrap().rx < 305 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = l.cm_stats().unwrap();
    assert!(st.rx >= 305, "{st:?}");
    assert!(st.unknown_attribute >= 1 && st.unmatched >= 4, "{st:?}");
    // Random REQs may have reached the listener as connect requests: reject them.
    while let Some(e) = sch.try_get_event() {
        if e.kind == EventKind::ConnectRequest {
            let _ = e.id.reject(&[]);
        }
    }
    // The port still connects.
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let cq = cctx.create_cq(4).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    let req = loop {
        let e = next(&sch);
        if e.kind == EventKind::ConnectRequest && e.id.peer_addr() == c.local_addr() {
            break e;
        }
    };
    req.id.reject(b"no").unwrap();
    assert_eq!(expect(&cch, EventKind::Rejected).status, 28);
}

#[test]
fn addresses_no_device_has_are_addr_errors() {
    let ch = EventChannel::new().unwrap();
    // No context yet: the source address picks the device, and none has this one.
    let id = CmId::create(&ch, PortSpace::Tcp).unwrap();
    id.resolve_addr(
        Some("192.0.2.77".parse().unwrap()),
        "192.0.2.78:5".parse().unwrap(),
        D,
    )
    .unwrap();
    let e = expect(&ch, EventKind::AddrError);
    assert_eq!(e.status, -libc::EADDRNOTAVAIL);
    // A context without an IPv6 address cannot reach an IPv6 peer.
    let c = ctx();
    if rverbs::cm::local_ip(&c, true).is_none() {
        let id = CmId::create_on(&ch, &c, PortSpace::Tcp).unwrap();
        id.resolve_addr(None, "[fd00::1]:5".parse().unwrap(), D)
            .unwrap();
        assert_eq!(
            expect(&ch, EventKind::AddrError).status,
            -libc::EADDRNOTAVAIL
        );
    }
}

#[test]
fn a_dropped_listener_stops_listening() {
    let (sctx, cctx) = (ctx(), ctx());
    let (l, sch, addr) = listen(&sctx, PortSpace::Tcp, 0);
    // Keep the server's CM alive with another ID, as a process with other IDs does.
    let other = CmId::create_on(&sch, &sctx, PortSpace::Tcp).unwrap();
    other.bind_addr(SocketAddr::new(addr.ip(), 0)).unwrap();
    other.listen(0).unwrap();
    drop(l);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let cq = cctx.create_cq(4).unwrap();
    c.create_qp(&cctx.alloc_pd().unwrap(), &QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    assert_eq!(expect(&cch, EventKind::Rejected).status, 8);
    // Its port is free again.
    let again = CmId::create_on(&sch, &sctx, PortSpace::Tcp).unwrap();
    again.bind_addr(addr).unwrap();
    again.listen(0).unwrap();
}

#[test]
fn a_dropped_listener_frees_its_port_before_the_drop_returns() {
    // kernel `rdma_destroy_id`: the port is free when the call returns, even while the
    // CM still holds the listener (here: a request queued on its channel, undelivered,
    // names it). Every 5th round a client's REQ waits in the queue when the listener
    // goes; that request is rejected (consumer, 28) and its event never delivered.
    let (sctx, cctx) = (ctx(), ctx());
    let sch = EventChannel::new().unwrap();
    let (first, _, addr) = listen(&sctx, PortSpace::Tcp, 0);
    first.migrate(&sch);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(256).unwrap());
    let mut l = first;
    let mut clients = Vec::new();
    for round in 0..200 {
        if round % 5 == 0 {
            let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
            c.create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))
                .unwrap();
            let rx = l.cm_stats().unwrap().rx;
            c.connect(&ConnParam::default()).unwrap();
            let t0 = std::time::Instant::now();
            while l.cm_stats().unwrap().rx == rx {
                assert!(t0.elapsed() < D, "round {round}: the REQ never came");
                std::thread::sleep(Duration::from_millis(1));
            }
            clients.push((c, cch));
        }
        drop(l);
        l = CmId::create_on(&sch, &sctx, PortSpace::Tcp).unwrap();
        l.bind_addr(addr).unwrap();
        if let Err(e) = l.listen(0) {
            panic!("round {round}: listening again on {addr}: {e}");
        }
    }
    for (i, (_, cch)) in clients.iter().enumerate() {
        let e = expect(cch, EventKind::Rejected);
        assert_eq!(e.status, 28, "client {i}");
    }
    // No request of a destroyed listener is delivered.
    assert!(sch.try_get_event().is_none());
    // The listener of the last round works.
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    c.create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    let req = expect(&sch, EventKind::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&l));
    req.id.reject(&[]).unwrap();
    assert_eq!(expect(&cch, EventKind::Rejected).status, 28);
}
