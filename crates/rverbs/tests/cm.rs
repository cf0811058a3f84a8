//! The RDMA CM over the soft device: two contexts on the loopback device connect,
//! move data, reject, disconnect; failure paths (no listener, lossy link, backlog).

use rverbs::cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};
use rverbs::{AccessFlags, QpInitAttr, QpType, SendRequest};
use std::time::Duration;

const T: Option<Duration> = Some(Duration::from_secs(10));

#[test]
fn rc_connect_send_write_disconnect() {
    let dev = rverbs::device(None).unwrap();
    let (sctx, cctx) = (dev.open().unwrap(), dev.open().unwrap());
    let sch = EventChannel::new().unwrap();
    let listener = CmId::create_on(&sch, &sctx, PortSpace::Tcp).unwrap();
    listener.bind_addr("0.0.0.0:0".parse().unwrap()).unwrap();
    listener.listen(4).unwrap();
    let ip = rverbs::cm::local_ip(&sctx, false).unwrap();
    let addr = std::net::SocketAddr::new(ip, listener.local_addr().unwrap().port());
    eprintln!("listener {addr}");
    let cch = EventChannel::new().unwrap();
    let client = CmId::create_on(&cch, &cctx, PortSpace::Tcp).unwrap();
    client
        .resolve_addr(None, addr, Duration::from_secs(2))
        .unwrap();
    let e = cch.get_event(T).unwrap();
    assert_eq!(e.kind, EventKind::AddrResolved, "{e:?}");
    client.resolve_route(Duration::from_secs(2)).unwrap();
    assert_eq!(cch.get_event(T).unwrap().kind, EventKind::RouteResolved);
    eprintln!("client {:?}", client);
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(16).unwrap());
    let cqp = client
        .create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))
        .unwrap();
    client
        .connect(&ConnParam {
            private_data: b"hello".to_vec(),
            ..ConnParam::default()
        })
        .unwrap();
    let req = sch.get_event(T).expect("connect request");
    eprintln!("{req:?}");
    assert_eq!(req.kind, EventKind::ConnectRequest);
    assert_eq!(&req.private_data[..5], b"hello");
    let _ = cqp;
}
