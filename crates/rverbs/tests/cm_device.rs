//! The RDMA CM through the same calls on every device: connect / accept with private
//! data both ways, data over the connection, reject with private data, disconnect, a
//! REQ nobody listens for, and UD over the UDP port space. On the default soft device
//! (two contexts of the loopback device); with `RVERBS_TEST_DEVICE=rxe0` (a device of
//! the system's libibverbs) on two contexts of that device, through the system's
//! librdmacm (interop/hardware.sh runs them in the rxe guest).

use rverbs::cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};
use rverbs::*;
use std::time::Duration;

mod cm_common;
use cm_common::*;

fn dev() -> DeviceInfo {
    match std::env::var("RVERBS_TEST_DEVICE") {
        Ok(name) if !name.is_empty() => device(Some(&name)).unwrap(),
        _ => device(None).unwrap(),
    }
}

fn param(data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: data.to_vec(),
        ..ConnParam::default()
    }
}

fn poll_one(cq: &Cq) -> Wc {
    let mut wc = [Wc::default()];
    assert_eq!(cq.poll_wait(&mut wc, Duration::from_secs(10)).unwrap(), 1);
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    wc[0]
}

#[test]
fn connect_accept_with_private_data_moves_data_and_disconnects() {
    let d = dev();
    let (sctx, cctx) = (d.open().unwrap(), d.open().unwrap());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Tcp, 8);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(16).unwrap());
    let cqp = c
        .create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))
        .unwrap();
    // A second QP on the same ID is refused.
    let again = c.create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq));
    assert_eq!(again.err().map(|e| e.errno()), Some(libc::EINVAL));
    let offer = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        ..param(b"hello from the client")
    };
    c.connect(&offer).unwrap();

    let req = expect(&sch, EventKind::ConnectRequest);
    assert!(req.private_data.starts_with(b"hello from the client"));
    assert!(req.listen_id.is_some());
    let got = req.id.request_params().expect("the REQ's parameters");
    assert_eq!(
        (got.responder_resources, got.initiator_depth),
        (1, 1),
        "{got:?}"
    );
    assert_eq!(
        req.id.peer_addr().map(|a| a.ip()),
        rverbs::cm::local_ip(&cctx, false)
    );
    assert_eq!(req.id.local_addr(), Some(addr));
    let sctx2 = req.id.context().unwrap();
    assert_eq!(sctx2.device().name, d.name);
    let (spd, scq) = (sctx2.alloc_pd().unwrap(), sctx2.create_cq(16).unwrap());
    let sqp = req
        .id
        .create_qp(&spd, &QpInitAttr::new(QpType::Rc, &scq))
        .unwrap();
    let smr = spd.reg_mr(64, AccessFlags::ALL).unwrap();
    sqp.post_recv(1, &[smr.slice(0..64)]).unwrap();
    req.id.accept(&param(b"welcome")).unwrap();

    let est = expect(&cch, EventKind::Established);
    assert!(est.private_data.starts_with(b"welcome"), "{est:?}");
    expect(&sch, EventKind::Established);
    assert_eq!(cqp.state(), QpState::Rts);
    assert_eq!(sqp.state(), QpState::Rts);

    // A SEND and an RDMA WRITE over the connection the CM made.
    let cmr = cpd.reg_mr(64, AccessFlags::ALL).unwrap();
    cmr.write(0, b"ping over the CM");
    cqp.post_send(&SendRequest::send(2, &[cmr.slice(0..16)]))
        .unwrap();
    assert_eq!(poll_one(&ccq).wr_id, 2);
    let w = poll_one(&scq);
    assert_eq!((w.wr_id, w.byte_len), (1, 16));
    assert_eq!(&smr.to_vec()[..16], b"ping over the CM");
    cqp.post_send(&SendRequest::write(
        3,
        &[cmr.slice(0..4)],
        smr.remote(32..36),
    ))
    .unwrap();
    assert_eq!(poll_one(&ccq).wr_id, 3);
    assert_eq!(&smr.to_vec()[32..36], b"ping");

    // The DREQ reaches the server, whose disconnect answers it (the DREP).
    c.disconnect().unwrap();
    expect(&sch, EventKind::Disconnected);
    req.id.disconnect().unwrap();
    assert_eq!(sqp.state(), QpState::Err);
    expect(&cch, EventKind::Disconnected);
    assert_eq!(cqp.state(), QpState::Err);
}

#[test]
fn a_reject_carries_its_private_data() {
    let d = dev();
    let (sctx, cctx) = (d.open().unwrap(), d.open().unwrap());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Tcp, 8);
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(4).unwrap());
    let cqp = c
        .create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))
        .unwrap();
    c.connect(&param(b"may I?")).unwrap();
    let req = expect(&sch, EventKind::ConnectRequest);
    assert!(req.private_data.starts_with(b"may I?"));
    req.id.reject(b"no, thanks").unwrap();
    let rej = expect(&cch, EventKind::Rejected);
    assert_eq!(
        rej.status,
        i32::from(rverbs::cm::reject_reason::CONSUMER_DEFINED)
    );
    assert!(rej.private_data.starts_with(b"no, thanks"), "{rej:?}");
    assert_eq!(cqp.state(), QpState::Err);
    // An ID that is not connected cannot disconnect or accept.
    assert!(c.accept(&ConnParam::default()).is_err());
}

#[test]
fn a_request_nobody_listens_for_is_rejected() {
    let d = dev();
    let (sctx, cctx) = (d.open().unwrap(), d.open().unwrap());
    // A port that was listened on and is free again, on a context whose CM runs (the
    // soft device's runs while an ID of the context lives; the kernel's always).
    let _other = listen(&sctx, PortSpace::Tcp, 8);
    let addr = {
        let (l, _ch, addr) = listen(&sctx, PortSpace::Tcp, 8);
        drop(l);
        addr
    };
    std::thread::sleep(Duration::from_millis(100));
    let (c, cch) = client(&cctx, PortSpace::Tcp, addr);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(4).unwrap());
    c.create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))
        .unwrap();
    c.connect(&ConnParam::default()).unwrap();
    let e = cch.get_event(T).expect("an answer");
    // IBTA 12.6.7: REJ reason 8, invalid service ID.
    assert_eq!(
        (e.kind, e.status),
        (
            EventKind::Rejected,
            i32::from(rverbs::cm::reject_reason::INVALID_SERVICE_ID)
        ),
        "{e:?}"
    );
}

#[test]
fn ud_peers_find_each_other_through_the_udp_port_space() {
    let d = dev();
    let (sctx, cctx) = (d.open().unwrap(), d.open().unwrap());
    let (_l, sch, addr) = listen(&sctx, PortSpace::Udp, 8);
    let (c, cch) = client(&cctx, PortSpace::Udp, addr);
    assert_eq!(c.qp_type(), QpType::Ud);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(8).unwrap());
    let cqp = c
        .create_qp(&cpd, &QpInitAttr::new(QpType::Ud, &ccq))
        .unwrap();
    assert_eq!(cqp.state(), QpState::Rts);
    c.connect(&param(b"ud hello")).unwrap();

    let req = expect(&sch, EventKind::ConnectRequest);
    assert!(req.private_data.starts_with(b"ud hello"), "{req:?}");
    let sctx2 = req.id.context().unwrap();
    let (spd, scq) = (sctx2.alloc_pd().unwrap(), sctx2.create_cq(8).unwrap());
    let sqp = req
        .id
        .create_qp(&spd, &QpInitAttr::new(QpType::Ud, &scq))
        .unwrap();
    let smr = spd.reg_mr(40 + 64, AccessFlags::LOCAL_WRITE).unwrap();
    sqp.post_recv(5, &[smr.slice(0..40 + 64)]).unwrap();
    req.id.accept(&param(b"ud welcome")).unwrap();

    let est = expect(&cch, EventKind::Established);
    let ud = est.ud.expect("the UD peer");
    assert_eq!(ud.qp_num, sqp.qp_num());
    assert_eq!(ud.qkey, 0x0123_4567);
    assert!(est.private_data.starts_with(b"ud welcome"), "{est:?}");

    let ah = cpd.create_ah(&ud.ah_attr).unwrap();
    let cmr = cpd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    cmr.write(0, b"a datagram");
    cqp.post_send(&SendRequest::send(6, &[cmr.slice(0..10)]).to(&ah, ud.qp_num, ud.qkey))
        .unwrap();
    assert_eq!(poll_one(&ccq).wr_id, 6);
    let w = poll_one(&scq);
    assert_eq!((w.wr_id, w.byte_len), (5, 40 + 10));
    assert_eq!(&smr.to_vec()[40..50], b"a datagram");
}

/// The child of [`a_missing_librdmacm_is_named`]: run with `RVERBS_LIBRDMACM` naming a
/// file that does not exist.
#[test]
#[ignore = "a child process of a_missing_librdmacm_is_named"]
fn missing_librdmacm_child() {
    let d = dev();
    let ctx = d.open().unwrap();
    let ch = EventChannel::new().unwrap();
    let r = CmId::create_on(&ch, &ctx, PortSpace::Tcp);
    if d.kind == DeviceKind::System {
        let e = r.expect_err("no CM without librdmacm");
        let text = e.to_string();
        assert!(
            text.contains("librdmacm.so.1") && text.contains("/nonexistent-rverbs"),
            "{text}"
        );
    } else {
        // The soft device's CM is its own.
        r.expect("the soft device needs no librdmacm");
    }
    println!("child checked {}", d.name);
}

/// A machine without the system's librdmacm: asking for the CM on a system device
/// fails with an error that names the library; the soft device's CM still works.
#[test]
fn a_missing_librdmacm_is_named() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "missing_librdmacm_child",
            "--ignored",
            "--nocapture",
        ])
        .env("RVERBS_LIBRDMACM", "/nonexistent-rverbs/librdmacm.so.1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("child checked"), "{text}");
}
