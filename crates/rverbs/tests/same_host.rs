//! The same-host carrier (`same_host.rs`): contexts of one host exchange their
//! datagrams through shared rings, fall back to UDP where no rverbs context listens,
//! and treat what a peer puts into a ring as untrusted.
#![forbid(unsafe_code)]

mod common;

use common::*;
use rverbs::*;
use rverbs_sys::mem::SharedMap;
use rverbs_sys::unix;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn open(on: bool) -> Context {
    Context::open_with(
        device(None).unwrap(),
        &OpenOptions {
            same_host: Some(on),
            ..Default::default()
        },
    )
    .unwrap()
}

fn pair_of(a: Context, b: Context) -> (End, End) {
    let (a, b) = (end(a, 4096), end(b, 4096));
    connect(&a, &b, &ConnectOpts::default());
    (a, b)
}

fn stats(c: &Context) -> SameHostStats {
    c.same_host_stats().expect("the carrier is on")
}

/// Waits up to 5 s for `f`.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(5), "{what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A short spinning ping-pong (both sides on this thread, `Cq::wait` with a spin).
fn spin_ping_pong(a: &End, b: &End, rounds: u64) {
    let mut wc = [Wc::default()];
    let mut next = |cq: &Cq| loop {
        if cq
            .wait(&mut wc, Duration::from_millis(1), Duration::from_millis(1))
            .unwrap()
            == 1
        {
            assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
            return wc[0];
        }
    };
    for i in 0..rounds {
        b.qp.post_recv(i, &[b.mr.slice(0..64)]).unwrap();
        a.mr.write(64, &i.to_le_bytes());
        a.qp.post_send(&SendRequest::send(i, &[a.mr.slice(64..72)]))
            .unwrap();
        let wc = next(&b.cq);
        assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Recv, 8));
        let mut m = [0u8; 8];
        b.mr.read(0, &mut m);
        assert_eq!(u64::from_le_bytes(m), i);
        assert_eq!(next(&a.cq).opcode, WcOpcode::Send);
    }
}

#[test]
fn a_sleeping_ping_pong_goes_through_the_rings_with_doorbells() {
    let (a, b) = pair_of(open(true), open(true));
    let (ca, cb) = (a.ctx.clone(), b.ctx.clone());
    ping_pong_in_order(a, b, 300);
    // (`counters` sends deferred ACKs first; then nothing more is sent.)
    let (na, nb) = (ca.counters(), cb.counters());
    eventually("every carried packet read", || {
        stats(&ca).rx_datagrams == stats(&cb).tx_datagrams
            && stats(&cb).rx_datagrams == stats(&ca).tx_datagrams
    });
    for (c, n) in [(&ca, na), (&cb, nb)] {
        let s = stats(c);
        assert_eq!((s.links_out, s.links_in), (1, 1), "{s:?}");
        // Every packet each way went through a ring (none over UDP), and arrived
        // (above). (The engine's rx_packets leaves out a SEND it answered with an RNR
        // NAK, which the ping-pong's timing may cause: the ring's count does not.)
        assert_eq!(s.tx_datagrams, n.tx_packets, "{s:?} {n:?}");
        assert!(s.doorbells > 0, "sleepers were rung: {s:?}");
        assert_eq!((s.tx_ring_full, s.refused, s.corrupt_links), (0, 0, 0));
        assert_eq!(n.rx_icrc_errors, 0, "the ICRC is checked on receipt");
    }
}

#[test]
fn a_spinning_ping_pong_and_a_stream_go_through_the_rings() {
    let (a, b) = pair_of(open(true), open(true));
    spin_ping_pong(&a, &b, 200);
    // RDMA WRITEs of 3 KiB each (several packets at the loopback MTU), checked.
    let big = 3000;
    for i in 0..50u8 {
        a.mr.write(0, &vec![i; big]);
        a.qp.post_send(&SendRequest::write(
            u64::from(i),
            &[a.mr.slice(0..big)],
            b.mr.remote(1024..1024 + big),
        ))
        .unwrap();
        assert_eq!(wait(&a.cq).opcode, WcOpcode::RdmaWrite);
        let mut got = vec![0u8; big];
        b.mr.read(1024, &mut got);
        assert!(got.iter().all(|&x| x == i), "write {i}");
    }
    // (`counters` first: it sends a deferred ACK, which the ring then counts.)
    let n = a.ctx.counters();
    let s = stats(&a.ctx);
    assert_eq!(s.tx_datagrams, n.tx_packets, "{s:?}");
}

#[test]
fn a_peer_without_the_carrier_is_reached_over_udp() {
    let (a, b) = pair_of(open(true), open(false));
    assert!(b.ctx.same_host_stats().is_none());
    spin_ping_pong(&a, &b, 50);
    let s = stats(&a.ctx);
    // Nobody listens for b: no ring, every datagram over UDP.
    assert_eq!(
        (s.links_out, s.tx_datagrams, s.rx_datagrams),
        (0, 0, 0),
        "{s:?}"
    );
    assert!(a.ctx.counters().tx_packets >= 50);
}

#[test]
fn a_ring_to_a_context_that_ended_is_dropped_and_its_address_reached_afresh() {
    let a = end(open(true), 4096);
    let b = end(open(true), 4096);
    connect(&a, &b, &ConnectOpts::default());
    spin_ping_pong(&a, &b, 10);
    let b_addr = b.ctx.gid(1).unwrap();
    drop(b);
    // The next context takes the freed address (the first free one from the same
    // start) and a new QP of `a` talks to it.
    let c = end(open(true), 4096);
    if c.ctx.gid(1).unwrap() != b_addr {
        eprintln!("the new context took another address; the rebind case is not covered");
    }
    let qp2 = a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq)).unwrap();
    connect_qps(&qp2, &c.qp, &ConnectOpts::default());
    let a2 = End {
        qp: qp2,
        mr: a.pd.reg_mr(4096, AccessFlags::ALL).unwrap(),
        cq: a.cq.clone(),
        pd: a.pd.clone(),
        ctx: a.ctx.clone(),
    };
    spin_ping_pong(&a2, &c, 10);
    let s = stats(&a.ctx);
    assert_eq!(s.links_out, 2, "a second ring for the new context: {s:?}");
    assert_eq!(stats(&c.ctx).links_in, 1);
}

/// The abstract name a context bound to `ip` listens on.
fn listener_name(ip: IpAddr) -> String {
    format!("rverbs-roce-v2:{ip}")
}

/// Connects to the context at `ip` as a writer would and sends `hello` with `fd`.
fn fake_writer(ip: IpAddr, hello: &[u8], fd: Option<&OwnedFd>) -> OwnedFd {
    let s = unix::connect_abstract(listener_name(ip).as_bytes()).expect("the context listens");
    send_with_fd(&s, hello, fd);
    s
}

/// Sends `bytes` on seqpacket socket `s`, with descriptor `fd` attached if given.
fn send_with_fd(s: &OwnedFd, bytes: &[u8], fd: Option<&OwnedFd>) {
    let fds: Vec<_> = fd.iter().map(|f| f.as_fd()).collect();
    unix::send_with_fds(s, bytes, &fds).expect("the whole message sent");
}

/// A non-blocking listener on the carrier's name for `ip` (as a context makes).
fn bind_listener(ip: IpAddr) -> OwnedFd {
    unix::listen_abstract(listener_name(ip).as_bytes(), 8).expect("the name is free")
}

/// A memfd of a ring's size (4 KiB header, `data` bytes), its size sealed against
/// shrinking or not sealed at all.
fn ring_memfd(data: usize, seal: bool) -> OwnedFd {
    let seals = if seal { libc::F_SEAL_SHRINK } else { 0 };
    rverbs_sys::mem::memfd(c"test-ring", 4096 + data, seals).unwrap()
}

/// One message from `c` and the descriptors it carries, waiting up to 5 s for it.
fn recv_waiting(c: &OwnedFd, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let start = Instant::now();
    loop {
        match unix::recv_with_fds(c, buf) {
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && start.elapsed() < Duration::from_secs(5) =>
            {
                rverbs_sys::poll::poll_in(c, 100)
            }
            r => return r,
        }
    }
}

fn hello(data: u64) -> Vec<u8> {
    let mut h = b"rvshm02\0".to_vec();
    h.extend_from_slice(&data.to_le_bytes());
    h
}

#[test]
fn malformed_hellos_and_unsealed_rings_are_refused() {
    let (a, b) = pair_of(open(true), open(true));
    let ip = IpAddr::V4(a.ctx.gid(1).unwrap().to_ipv4_mapped().unwrap());
    let unsealed = ring_memfd(1 << 20, false);
    let sealed = ring_memfd(1 << 20, true);
    let socks = [
        fake_writer(ip, b"hello", None),
        fake_writer(ip, &hello(1 << 20), None),
        fake_writer(ip, &hello(1 << 20), Some(&unsealed)),
        // A size that is not the memfd's.
        fake_writer(ip, &hello(1 << 21), Some(&sealed)),
        fake_writer(ip, &hello(1000), Some(&sealed)),
    ];
    eventually("five refusals", || stats(&a.ctx).refused == 5);
    // The context carries on.
    spin_ping_pong(&a, &b, 20);
    assert_eq!(stats(&a.ctx).links_in, 1);
    // The descriptors this test opened close here.
    drop((socks, unsealed, sealed));
}

#[test]
fn a_ring_whose_writer_breaks_the_format_is_ended_and_counted() {
    let (a, b) = pair_of(open(true), open(true));
    let ip = IpAddr::V4(a.ctx.gid(1).unwrap().to_ipv4_mapped().unwrap());
    spin_ping_pong(&a, &b, 5);
    assert_eq!(stats(&a.ctx).links_in, 1);
    let fd = ring_memfd(1 << 20, true);
    let mem = SharedMap::map_sealed(&fd, 4096 + (1 << 20)).unwrap();
    let s = fake_writer(ip, &hello(1 << 20), Some(&fd));
    eventually("the ring taken", || stats(&a.ctx).links_in == 2);
    // A writer's position far beyond anything written, then a doorbell-less wait:
    // the driver reads it when it next looks.
    // (The first 8 bytes of the mapping: the writer's position.)
    mem.atomic_u64(0).unwrap().store(1 << 40, Ordering::Release);
    let before = a.ctx.counters().rx_packets;
    eventually("the corrupt ring ended", || {
        spin_ping_pong(&a, &b, 1);
        stats(&a.ctx).corrupt_links == 1
    });
    spin_ping_pong(&a, &b, 20);
    assert!(a.ctx.counters().rx_packets >= before + 20);
    drop((s, mem, fd));
}

/// A UDP socket at a free 127.0.0.x:4791 (the peer's address), reading with a timeout.
fn udp_peer() -> (std::net::UdpSocket, std::net::Ipv4Addr) {
    let (s, ip) = (200..=250u8)
        .rev()
        .find_map(|x| {
            let ip = std::net::Ipv4Addr::new(127, 0, 0, x);
            std::net::UdpSocket::bind((ip, 4791)).ok().map(|s| (s, ip))
        })
        .expect("a free 127.0.0.x:4791");
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    (s, ip)
}

/// A listener on the carrier's name for `ip` that is not an rverbs context: it
/// takes each connection and closes it (`accept_and_close`), or never takes any.
/// Dropping it frees the name (other tests of this binary may bind the address later).
struct FakeListener {
    /// Closed after the thread ends (fields drop after `Drop::drop`).
    _fd: std::sync::Arc<OwnedFd>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn fake_listener(ip: IpAddr, accept_and_close: bool) -> FakeListener {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let l = std::sync::Arc::new(bind_listener(ip));
    let (s2, l2) = (stop.clone(), l.clone());
    let thread = accept_and_close.then(|| {
        std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                // Each connection is closed as soon as it is taken.
                if let Ok(c) = unix::accept(&*l2) {
                    drop(c);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    });
    FakeListener {
        _fd: l,
        stop,
        thread,
    }
}

impl Drop for FakeListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

#[test]
fn a_listener_that_refuses_or_never_answers_leaves_the_datagrams_on_udp() {
    // (Both peers stay bound to the end: the second takes another address.)
    let mut peers = Vec::new();
    for accept_and_close in [true, false] {
        let (peer, ip) = udp_peer();
        let fake = fake_listener(IpAddr::V4(ip), accept_and_close);
        let a = end(open(true), 4096);
        let to_peer = PeerInfo {
            qpn: 0x77,
            psn: 0,
            gid: Gid::from(ip),
        };
        a.qp.connect(&to_peer, &ConnectOpts::default()).unwrap();
        for i in 0..3 {
            a.qp.post_send(&SendRequest::send(i, &[a.mr.slice(0..8)]))
                .unwrap();
        }
        // Every SEND reaches the peer's UDP socket (none vanishes into a ring).
        let mut psns = std::collections::BTreeSet::new();
        let mut buf = [0u8; 256];
        while psns.len() < 3 {
            let n = peer.recv(&mut buf).expect("the SENDs over UDP");
            assert!(n >= 12 + 8 + 4);
            psns.insert(u32::from_be_bytes([0, buf[9], buf[10], buf[11]]));
        }
        assert_eq!(psns.into_iter().collect::<Vec<_>>(), [0, 1, 2]);
        let s = stats(&a.ctx);
        assert_eq!((s.links_out, s.tx_datagrams), (0, 0), "{s:?}");
        drop(a);
        drop(fake);
        peers.push(peer);
    }
}

#[test]
fn large_reads_fit_the_ring_without_drops() {
    // READ responses come back in one burst per READ piece: the pieces must fit our
    // inbound ring, whatever our socket's buffer would have taken.
    let len = 8 << 20;
    let (a, b) = (end(open(true), len), end(open(true), len));
    // A 1 s ACK timeout: a responder descheduled for 67 ms on a loaded machine is not
    // a dropped response (what this test is after: `tx_ring_full` and no timeout).
    let opts = ConnectOpts {
        timeout: 18,
        ..ConnectOpts::default()
    };
    connect(&a, &b, &opts);
    b.mr.write(0, &vec![0x5a; len]);
    for i in 0..4 {
        a.qp.post_send(&SendRequest::read(
            i,
            &[a.mr.slice(0..len)],
            b.mr.remote(0..len),
        ))
        .unwrap();
    }
    for _ in 0..4 {
        assert_eq!(wait(&a.cq).opcode, WcOpcode::RdmaRead);
    }
    let mut got = vec![0u8; len];
    a.mr.read(0, &mut got);
    assert!(got.iter().all(|&x| x == 0x5a));
    let (sb, ca) = (stats(&b.ctx), a.ctx.counters());
    assert_eq!(sb.tx_ring_full, 0, "{sb:?}");
    assert_eq!(ca.retransmit_timeouts, 0, "{ca:?}");
}

/// A peer that takes the ring and answers with a doorbell like an rverbs context, and
/// then never reads: its ring fills, and what does not fit is dropped and counted —
/// the sender neither blocks nor fails.
#[test]
fn a_full_ring_drops_and_counts_without_blocking_the_sender() {
    let (_udp, ip4) = udp_peer();
    let ip = IpAddr::V4(ip4);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let l = bind_listener(ip);
    let s2 = stop.clone();
    let deaf = std::thread::spawn(move || {
        let mut keep = Vec::new();
        while !s2.load(Ordering::Relaxed) {
            let Ok(c) = unix::accept(&l) else {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            };
            // The hello and its memfd (kept open, never mapped: nobody reads).
            let mut buf = [0u8; 64];
            let (n, fds) = recv_waiting(&c, &mut buf).expect("the hello");
            assert_eq!(n, 16, "the hello");
            assert!(!fds.is_empty());
            keep.extend(fds);
            // The answer: a doorbell (an eventfd nobody waits on).
            let bell = rverbs_sys::eventfd().unwrap();
            send_with_fd(&c, b"rvbell1\0", Some(&bell));
            keep.extend([c, bell]);
        }
        // The descriptors this thread opened or received close here.
        drop((keep, l));
    });
    // UD datagrams of 4000 bytes (no window holds them back) to the deaf peer: 1,200
    // of them are more than its 4 MiB ring takes.
    let ctx = open(true);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
    let mr = pd.reg_mr(4000, AccessFlags::LOCAL_WRITE).unwrap();
    connect_nobody(&qp);
    let ah = pd
        .create_ah(&AhAttr {
            av: AddressVector {
                dgid: Gid::from(ip4),
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            port_num: 1,
        })
        .unwrap();
    let start = Instant::now();
    for i in 0..1200u64 {
        qp.post_send(&SendRequest::send(i, &[mr.slice(0..4000)]).to(&ah, 0x99, 0x1111_1111))
            .unwrap();
        // Every send completes, ring full or not.
        assert_eq!(wait(&cq).status, WcStatus::Success, "send {i}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the sender was held up"
    );
    let s = stats(&ctx);
    assert_eq!(s.links_out, 1, "{s:?}");
    assert!(s.tx_ring_full > 0, "{s:?}");
    assert_eq!(s.tx_datagrams + s.tx_ring_full, 1200, "{s:?}");
    // What fitted: about a ring's worth (4 MiB less the acknowledgements' reserve).
    assert!((1000..1050).contains(&s.tx_datagrams), "{s:?}");
    stop.store(true, Ordering::Relaxed);
    deaf.join().unwrap();
}

/// The rings carry datagrams without their ICRC unless a tap needs one: corruption
/// injected on either side is still caught. A sender's fault tap seals each datagram
/// with its ICRC, which the receiver checks; a receiver's fault tap sees datagrams
/// whose ICRC it computed for them first, checked after the tap.
#[test]
fn corruption_on_either_side_of_the_rings_is_caught_by_the_icrc() {
    for faulty_sender in [true, false] {
        let open_with = |faulty: bool| {
            Context::open_with(
                device(None).unwrap(),
                &OpenOptions {
                    same_host: Some(true),
                    faults: faulty.then_some(Faults {
                        corrupt: 0.1,
                        seed: 3,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .unwrap()
        };
        let (a, b) = (
            end(open_with(faulty_sender), 4096),
            end(open_with(!faulty_sender), 4096),
        );
        // A short ACK timeout (4.096 µs · 2^12 = 16.8 ms): dropped requests are
        // resent soon.
        connect(
            &a,
            &b,
            &ConnectOpts {
                timeout: 12,
                ..ConnectOpts::default()
            },
        );
        spin_ping_pong(&a, &b, 60);
        let faulty = if faulty_sender { &a.ctx } else { &b.ctx };
        assert!(faulty.fault_stats().corrupted > 0, "nothing corrupted");
        let caught = a.ctx.counters().rx_icrc_errors + b.ctx.counters().rx_icrc_errors;
        assert!(caught > 0, "faulty sender {faulty_sender}: no ICRC error");
        assert!(stats(&b.ctx).rx_datagrams >= 60 && stats(&a.ctx).rx_datagrams > 0);
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// SENDs (into a receive of two pieces), WRITEs and READs of `sizes` bytes from `a`
/// to `b` (READs from `b` to `a`), each checked byte for byte.
fn transfer_all(a: &End, b: &End, sizes: &[usize]) {
    let half = b.mr.len() / 2;
    for (k, &len) in sizes.iter().enumerate() {
        let seed = k as u8;
        // SEND: the receive scatters over two pieces of `b`'s region.
        let data = pattern(seed, len);
        a.mr.write(0, &data);
        let cut = len / 3;
        b.qp.post_recv(
            1,
            &[
                b.mr.slice(100..100 + cut),
                b.mr.slice(half..half + len - cut),
            ],
        )
        .unwrap();
        a.qp.post_send(&SendRequest::send(2, &[a.mr.slice(0..len)]))
            .unwrap();
        assert_eq!(wait(&a.cq).status, WcStatus::Success);
        let wc = wait(&b.cq);
        assert_eq!((wc.status, wc.byte_len as usize), (WcStatus::Success, len));
        let mut got = vec![0u8; len];
        b.mr.read(100, &mut got[..cut]);
        b.mr.read(half, &mut got[cut..]);
        assert!(got == data, "SEND of {len}");
        // WRITE at an odd offset.
        let data = pattern(seed ^ 0x55, len);
        a.mr.write(0, &data);
        a.qp.post_send(&SendRequest::write(
            3,
            &[a.mr.slice(0..len)],
            b.mr.remote(7..7 + len),
        ))
        .unwrap();
        assert_eq!(wait(&a.cq).status, WcStatus::Success);
        b.mr.read(7, &mut got);
        assert!(got == data, "WRITE of {len}");
        // READ back into `a` at another offset.
        let data = pattern(seed ^ 0xaa, len);
        b.mr.write(3, &data);
        a.qp.post_send(&SendRequest::read(
            4,
            &[a.mr.slice(half + 1..half + 1 + len)],
            b.mr.remote(3..3 + len),
        ))
        .unwrap();
        assert_eq!(wait(&a.cq).status, WcStatus::Success);
        a.mr.read(half + 1, &mut got);
        assert!(got == data, "READ of {len}");
    }
}

const SIZES: [usize; 6] = [600, 1024, 4093, 4096, 12_289, 65_536];

/// Long payloads are placed by the engine straight from the ring into their region
/// (SEND into scattered pieces, WRITE, READ responses), sizes around the MTU and
/// the in-place threshold, all intact.
#[test]
fn long_payloads_are_placed_from_the_ring_intact() {
    let (a, b) = (end(open(true), 256 << 10), end(open(true), 256 << 10));
    connect(&a, &b, &ConnectOpts::default());
    transfer_all(&a, &b, &SIZES);
    let (sa, sb) = (stats(&a.ctx), stats(&b.ctx));
    // SEND and WRITE packets at `b`, READ responses at `a`.
    assert!(sb.rx_in_place >= 2 * 24, "{sb:?}");
    assert!(sa.rx_in_place >= 24, "{sa:?}");
    assert!(
        sb.rx_in_place < sb.rx_datagrams,
        "short ones are copied: {sb:?}"
    );
}

/// A capture or fault injection on the receiver sees whole datagrams: nothing is
/// placed from the ring, and the transfers are intact (with corruption injected,
/// through the ICRC checks and retransmissions).
#[test]
fn with_taps_on_the_receiver_datagrams_are_copied_whole() {
    let dir = std::env::temp_dir().join(format!("rverbs-inplace-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("b.pcap");
    let tapped = [
        OpenOptions {
            same_host: Some(true),
            pcap: Some(pcap.clone()),
            ..Default::default()
        },
        OpenOptions {
            same_host: Some(true),
            faults: Some(Faults {
                corrupt: 0.02,
                seed: 5,
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    for o in tapped {
        let capture = o.pcap.is_some();
        let b = end(
            Context::open_with(device(None).unwrap(), &o).unwrap(),
            256 << 10,
        );
        let a = end(open(true), 256 << 10);
        // (The default ACK timeout: a corrupted request is resent on the NAK or the
        // probe that follows it; a shorter timeout's seven retries ran out under load.)
        connect(&a, &b, &ConnectOpts::default());
        transfer_all(&a, &b, &SIZES);
        let sb = stats(&b.ctx);
        assert_eq!(sb.rx_in_place, 0, "{sb:?}");
        assert!(sb.rx_datagrams >= 2 * 24, "{sb:?}");
        if capture {
            // (The sender without taps still places the READ responses; a
            // receiver's fault injection also seals what it sends.)
            assert!(stats(&a.ctx).rx_in_place >= 24);
            drop(b);
            // Every payload byte b received is in its capture.
            let sent: usize = SIZES.iter().map(|s| 2 * s).sum();
            let len = std::fs::metadata(&pcap).unwrap().len() as usize;
            assert!(len > sent, "capture of {len} bytes");
        } else {
            assert!(b.ctx.fault_stats().corrupted > 0, "nothing corrupted");
            assert!(b.ctx.counters().rx_icrc_errors > 0, "no ICRC error caught");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sender's fault injection seals the datagrams it changes (their ICRC computed,
/// then corrupted) and leaves the others on the carrier's own path: the receiver
/// copies the sealed ones whole and checks them (catching the corruption), and
/// places only the others in place.
#[test]
fn sealed_datagrams_are_copied_whole_and_checked() {
    let a = end(
        Context::open_with(
            device(None).unwrap(),
            &OpenOptions {
                same_host: Some(true),
                faults: Some(Faults {
                    corrupt: 0.02,
                    seed: 9,
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .unwrap(),
        256 << 10,
    );
    let b = end(open(true), 256 << 10);
    connect(&a, &b, &ConnectOpts::default());
    transfer_all(&a, &b, &SIZES);
    let sb = stats(&b.ctx);
    let corrupted = a.ctx.fault_stats().corrupted;
    assert!(corrupted > 0, "nothing corrupted");
    assert!(sb.rx_in_place > 0, "{sb:?}");
    assert!(sb.rx_in_place + corrupted <= sb.rx_datagrams, "{sb:?}");
    assert!(b.ctx.counters().rx_icrc_errors > 0, "no ICRC error caught");
}

/// A long UD SEND is placed from the ring behind the receive's GRH area, which the
/// engine fills itself.
#[test]
fn a_long_ud_send_is_placed_behind_its_grh_area() {
    let make = || {
        let ctx = open(true);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4).unwrap();
        let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
        let mr = pd.reg_mr(40 + 4096, AccessFlags::LOCAL_WRITE).unwrap();
        connect_nobody(&qp);
        (ctx, pd, cq, qp, mr)
    };
    let (ca, pda, cqa, qpa, mra) = make();
    let (cb, _pdb, cqb, qpb, mrb) = make();
    let len = 3001;
    let data = pattern(3, len);
    mra.write(0, &data);
    mrb.write(0, &[0xcc; 40 + 4096]);
    qpb.post_recv(1, &[mrb.all()]).unwrap();
    let ah = pda
        .create_ah(&AhAttr {
            av: AddressVector {
                dgid: cb.gid(1).unwrap(),
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            port_num: 1,
        })
        .unwrap();
    qpa.post_send(&SendRequest::send(2, &[mra.slice(0..len)]).to(&ah, qpb.qp_num(), 0x1111_1111))
        .unwrap();
    assert_eq!(wait(&cqa).status, WcStatus::Success);
    let wc = wait(&cqb);
    assert_eq!(
        (wc.status, wc.byte_len as usize),
        (WcStatus::Success, 40 + len)
    );
    let got = mrb.with(|m| m.to_vec());
    // The GRH area as the engine writes it (IPv4: 20 zero bytes, then the header),
    // the payload from the ring, and nothing past it.
    assert_eq!(&got[..20], &[0u8; 20]);
    assert_eq!(&got[40..40 + len], &data[..]);
    assert!(got[40 + len..].iter().all(|&b| b == 0xcc));
    assert_eq!(stats(&cb).rx_in_place, 1, "{:?}", stats(&cb));
    drop(ca);
}
