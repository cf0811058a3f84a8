//! MADs between contexts over real UDP on loopback: PMA counters over the wire equal
//! the traffic, reset; agents with timeouts; B_Key violations reach the trap
//! destination; local SMPs and the Rust counter API.

mod common;
use common::*;
use rverbs::mad::{self, attr, class, method, MadDest, Registration};
use rverbs::*;
use rverbs_wire::mad::pma::{PortCountersExtended, PortCountersExtendedRepr};
use std::time::Duration;

const T: Duration = Duration::from_millis(300);

fn pcx(resp: &mad::Mad) -> PortCountersExtendedRepr {
    PortCountersExtendedRepr::parse(&PortCountersExtended::new_unchecked(&resp[64..])).unwrap()
}

#[test]
fn perf_counters_over_the_wire_match_the_traffic() {
    let dev = device(None).unwrap();
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    let (ea, eb) = (end(a.clone(), 1 << 16), end(b.clone(), 1 << 16));
    connect(&ea, &eb, &ConnectOpts::default());
    ea.mr.write(0, &[7u8; 1000]);
    eb.qp.post_recv(1, &[eb.mr.slice(0..1000)]).unwrap();
    ea.qp
        .post_send(&SendRequest::send(2, &[ea.mr.slice(0..1000)]))
        .unwrap();
    assert_eq!(wait(&eb.cq).status, WcStatus::Success);
    assert_eq!(wait(&ea.cq).status, WcStatus::Success);
    std::thread::sleep(Duration::from_millis(50));
    let (ca, cb) = (a.counters(), b.counters());
    let agent = a.register_mad_agent(None).unwrap();
    let mut get = mad::request(class::PERF_MGMT, attr::PMA_PORT_COUNTERS_EXT, 0);
    get[65] = 1;
    let r = agent
        .request(MadDest::gsi(b.gid(1).unwrap()), &get, T, 3)
        .unwrap();
    let x = pcx(&r.mad);
    // B's counters at the time it answered: the RC traffic plus our one request.
    let req_bytes = 280;
    assert_eq!(x.port_rcv_pkts, cb.rx_packets + 1);
    assert_eq!(x.port_rcv_data, (cb.rx_bytes + req_bytes) / 4);
    assert_eq!(x.port_xmit_pkts, cb.tx_packets);
    assert_eq!(x.port_xmit_data, cb.tx_bytes / 4);
    // What A sent is what B received (RC data + ACK traffic, no loss on loopback).
    assert_eq!(ca.tx_packets, cb.rx_packets);
    assert_eq!(ca.tx_bytes, cb.rx_bytes);
    // Reset (all counters), then only the new MADs count.
    let mut set = get;
    set[3] = method::SET;
    set[66..68].copy_from_slice(&0x00ffu16.to_be_bytes());
    let r = agent
        .request(MadDest::gsi(b.gid(1).unwrap()), &set, T, 3)
        .unwrap();
    let x = pcx(&r.mad);
    assert_eq!(
        (x.port_xmit_pkts, x.port_rcv_pkts, x.port_rcv_data),
        (0, 0, 0)
    );
    let x = pcx(&agent
        .request(MadDest::gsi(b.gid(1).unwrap()), &get, T, 3)
        .unwrap()
        .mad);
    // Since the reset: the Set's response went out, this Get came in.
    assert_eq!((x.port_xmit_pkts, x.port_rcv_pkts), (1, 1));
    assert_eq!(b.pma_counters().rcv_pkts, 1);
}

#[test]
fn request_times_out_and_agents_get_requests() {
    let dev = device(None).unwrap();
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    let agent = a.register_mad_agent(None).unwrap();
    // A Send of a class nobody handles gets no answer: timeout after the retries.
    let mut m = mad::request(0x30, 1, 0);
    m[3] = method::SEND;
    let err = agent
        .request(
            MadDest::gsi(b.gid(1).unwrap()),
            &m,
            Duration::from_millis(30),
            2,
        )
        .unwrap_err();
    assert_eq!(err.errno(), libc_etimedout());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.mad_stats().gsi_dropped, 3);
    // Now B registers for it and answers.
    let server = b
        .register_mad_agent(Some(Registration {
            mgmt_class: 0x30,
            class_version: 1,
            methods: 1 << method::GET,
        }))
        .unwrap();
    let t = std::thread::spawn(move || {
        let req = server.recv(Duration::from_secs(5)).expect("request");
        let mut resp = req.mad;
        resp[3] = method::GET_RESP;
        resp[64] = 0xAB;
        server.send(MadDest::gsi(req.src_gid()), &resp).unwrap();
    });
    let r = agent
        .request(
            MadDest::gsi(b.gid(1).unwrap()),
            &mad::request(0x30, 1, 0),
            T,
            10,
        )
        .unwrap();
    assert_eq!(r.mad[64], 0xAB);
    t.join().unwrap();
}

fn libc_etimedout() -> i32 {
    110
}

#[test]
fn local_smp_and_traps() {
    let ctx = device(None).unwrap().open().unwrap();
    let mut smp = mad::request(class::SUBN_DIRECTED_ROUTE, 0x0011, 1);
    smp[32..36].copy_from_slice(&[0xff; 4]);
    let r = ctx.local_smp(&smp).unwrap();
    assert_eq!(r[3], method::GET_RESP);
    assert_ne!(&r[64 + 12..64 + 20], &[0; 8], "a NodeGUID");
    ctx.set_m_key(5, 3);
    assert!(ctx.local_smp(&smp).is_err());
    let t = ctx.poll_trap().expect("trap 256");
    assert_eq!((t.class(), t.number()), (class::SUBN_LID_ROUTED, 256));
    assert_eq!(ctx.mad_stats().mkey_drops, 1);
}

#[test]
fn requests_that_arrive_during_a_request_keep_their_order() {
    let dev = device(None).unwrap();
    let (a, b, c) = (
        dev.open().unwrap(),
        dev.open().unwrap(),
        dev.open().unwrap(),
    );
    let agent = a
        .register_mad_agent(Some(Registration {
            mgmt_class: 0x31,
            class_version: 1,
            methods: 1 << method::SEND,
        }))
        .unwrap();
    let sender = c.register_mad_agent(None).unwrap();
    for tag in [1u8, 2, 3] {
        let mut m = mad::request(0x31, 1, 0);
        m[3] = method::SEND;
        m[64] = tag;
        sender.send(MadDest::gsi(a.gid(1).unwrap()), &m).unwrap();
    }
    // A's request to B goes unanswered; meanwhile C's three Sends reach A's agent,
    // which the request takes aside and puts back.
    let mut m = mad::request(0x30, 1, 0);
    m[3] = method::SEND;
    assert!(agent
        .request(MadDest::gsi(b.gid(1).unwrap()), &m, T, 0)
        .is_err());
    let tags: Vec<u8> = std::iter::from_fn(|| agent.recv(T).map(|r| r.mad[64])).collect();
    assert_eq!(tags, [1, 2, 3]);
}
