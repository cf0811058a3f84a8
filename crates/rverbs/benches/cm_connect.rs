//! Connections per second through the RDMA CM: one listener on one context accepts N
//! RC connections (default 1000) from clients on another context of the loopback
//! device; each is resolved, given a QP, connected, accepted and established on both
//! sides. Reports the connection rate, then disconnects them all.
//!
//! ```text
//! cargo bench -p rverbs --bench cm_connect            # 1000 connections
//! cargo bench -p rverbs --bench cm_connect -- 200     # another N
//! ```

use rverbs::cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};
use rverbs::{QpCap, QpInitAttr, QpType};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let t = Some(Duration::from_secs(30));
    let dev = rverbs::device(None).expect("the loopback device");
    let (sctx, cctx) = (dev.open().unwrap(), dev.open().unwrap());
    let (spd, cpd) = (sctx.alloc_pd().unwrap(), cctx.alloc_pd().unwrap());
    let (scq, ccq) = (sctx.create_cq(64).unwrap(), cctx.create_cq(64).unwrap());
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let sch = EventChannel::new().unwrap();
    let listener = CmId::create_on(&sch, &sctx, PortSpace::Tcp).unwrap();
    let ip = rverbs::cm::local_ip(&sctx, false).unwrap();
    listener.bind_addr(SocketAddr::new(ip, 0)).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();

    let cch = EventChannel::new().unwrap();
    let t0 = Instant::now();
    let (mut clients, mut servers) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // In windows of 64 outstanding connects: resolve, QP, connect; the server accepts
    // what arrives; both sides count ESTABLISHED.
    let (mut started, mut c_est, mut s_est) = (0usize, 0usize, 0usize);
    while c_est < n || s_est < n {
        while started < n && started - c_est < 64 {
            let id = CmId::create_on(&cch, &cctx, PortSpace::Tcp).unwrap();
            id.resolve_addr(None, addr, Duration::from_secs(2)).unwrap();
            id.resolve_route(Duration::from_secs(2)).unwrap();
            id.create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq).cap(cap))
                .unwrap();
            id.connect(&ConnParam::default()).unwrap();
            clients.push(id);
            started += 1;
        }
        while let Some(e) = sch.try_get_event() {
            match e.kind {
                EventKind::ConnectRequest => {
                    e.id.create_qp(&spd, &QpInitAttr::new(QpType::Rc, &scq).cap(cap))
                        .unwrap();
                    e.id.accept(&ConnParam::default()).unwrap();
                    servers.push(e.id);
                }
                EventKind::Established => s_est += 1,
                k => panic!("server: {k:?} status {}", e.status),
            }
        }
        match cch.get_event(Some(Duration::from_millis(1))) {
            Some(e) if e.kind == EventKind::Established => c_est += 1,
            Some(e) if matches!(e.kind, EventKind::AddrResolved | EventKind::RouteResolved) => {}
            Some(e) => panic!("client: {:?} status {}", e.kind, e.status),
            None => {}
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "{c_est}/{s_est} of {n} after 600 s"
        );
    }
    let dt = t0.elapsed();
    println!(
        "cm_connect: {n} connections established in {:.2} s = {:.0} connections/s",
        dt.as_secs_f64(),
        n as f64 / dt.as_secs_f64()
    );
    let stats = listener.cm_stats().unwrap();
    println!(
        "server CM: rx {} tx {} retries {} duplicates {} backlog_full {}",
        stats.rx, stats.tx, stats.retries, stats.duplicates, stats.backlog_full
    );
    let t1 = Instant::now();
    for c in &clients {
        c.disconnect().unwrap();
    }
    let mut gone = 0;
    while gone < n {
        match sch.get_event(t) {
            Some(e) if e.kind == EventKind::Disconnected => {
                e.id.disconnect().unwrap();
                gone += 1;
            }
            Some(_) => {}
            None => panic!("{gone} of {n} disconnects after 30 s"),
        }
    }
    println!(
        "cm_connect: {n} disconnects in {:.2} s",
        t1.elapsed().as_secs_f64()
    );
}
