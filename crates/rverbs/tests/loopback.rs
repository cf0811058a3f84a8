//! Two contexts on the loopback soft device talk over real UDP sockets (127.0.0.x).

mod common;
use common::*;
use rverbs::*;

#[test]
fn rc_between_two_contexts() {
    let dev = device(None).unwrap();
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    assert_ne!(a.gid(1), b.gid(1), "each context binds its own 127.0.0.x");
    let (ea, eb) = (end(a.clone(), 1 << 20), end(b.clone(), 1 << 20));
    connect(&ea, &eb, &ConnectOpts::default());
    let (qa, qb, ma, mb, cqa, cqb) = (&ea.qp, &eb.qp, &ea.mr, &eb.mr, &ea.cq, &eb.cq);

    // SEND of 100 KB (segmented into 1 KiB packets).
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    ma.write(0, &data);
    qb.post_recv(1, &[mb.slice(0..200_000)]).unwrap();
    qa.post_send(&SendRequest::send(2, &[ma.slice(0..100_000)]))
        .unwrap();
    let wc = wait(cqb);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 100_000)
    );
    assert_eq!(wait(cqa).status, WcStatus::Success);
    let mut got = vec![0u8; 100_000];
    mb.read(0, &mut got);
    assert_eq!(got, data);

    // WRITE, then READ it back, then atomics.
    qa.post_send(&SendRequest::write(
        3,
        &[ma.slice(0..50_000)],
        mb.remote(300_000..350_000),
    ))
    .unwrap();
    assert_eq!(wait(cqa).status, WcStatus::Success);
    qa.post_send(&SendRequest::read(
        4,
        &[ma.slice(500_000..550_000)],
        mb.remote(300_000..350_000),
    ))
    .unwrap();
    assert_eq!(wait(cqa).status, WcStatus::Success);
    let mut back = vec![0u8; 50_000];
    ma.read(500_000, &mut back);
    assert_eq!(back, data[..50_000]);
    mb.write(8, &10u64.to_ne_bytes());
    qa.post_send(&SendRequest::fetch_add(
        5,
        ma.slice(0..8),
        mb.remote(8..16),
        5,
    ))
    .unwrap();
    assert_eq!(wait(cqa).status, WcStatus::Success);
    let mut v = [0u8; 8];
    ma.read(0, &mut v);
    assert_eq!(u64::from_ne_bytes(v), 10);
    mb.read(8, &mut v);
    assert_eq!(u64::from_ne_bytes(v), 15);
    assert_eq!(a.counters().rx_icrc_errors + b.counters().rx_icrc_errors, 0);
}

/// RVERBS_FAULTS-style injection on both devices: loss, duplication, reordering,
/// corruption and delay; every byte still arrives, in order, exactly once. (The READ is
/// kept to 200 KB: a reordered READ response triggers an immediate go-back-N replay of
/// the rest, so very large READs under reordering can exhaust retry_cnt — see the
/// engine's loss-matrix notes.)
#[test]
fn rc_survives_injected_faults() {
    let dev = device(None).unwrap();
    let faults = |seed| Faults {
        loss: 0.05,
        dup: 0.02,
        reorder: 0.02,
        corrupt: 0.02,
        delay_us: 50,
        seed,
    };
    let a = Context::open_with(
        dev.clone(),
        &OpenOptions {
            faults: Some(faults(7)),
            ..Default::default()
        },
    )
    .unwrap();
    let b = Context::open_with(
        dev,
        &OpenOptions {
            faults: Some(faults(8)),
            ..Default::default()
        },
    )
    .unwrap();
    let (ea, eb) = (end(a, 1 << 21), end(b, 1 << 21));
    // The verbs default ACK timeout (67 ms): losses are repaired from what arrives
    // (NAKs, selective reports, probes) long before it; a shorter one (12: 16.8 ms)
    // ran out of its seven retries when the test's threads waited that long for a core.
    let o = ConnectOpts::default();
    connect(&ea, &eb, &o);
    let (qa, qb, ma, mb, cqa, cqb) = (&ea.qp, &eb.qp, &ea.mr, &eb.mr, &ea.cq, &eb.cq);
    let (a, b) = (&ea.ctx, &eb.ctx);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 13 + 5) as u8).collect();
    ma.write(0, &data);
    for i in 0..10u64 {
        qb.post_recv(
            i,
            &[mb.slice(i as usize * 100_000..(i as usize + 1) * 100_000)],
        )
        .unwrap();
    }
    for i in 0..10u64 {
        let r = i as usize * 100_000..(i as usize + 1) * 100_000;
        qa.post_send(&SendRequest::send(i, &[ma.slice(r)])).unwrap();
    }
    for i in 0..10 {
        let wc = wait(cqb);
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i, WcStatus::Success, 100_000)
        );
    }
    for i in 0..10 {
        let wc = wait(cqa);
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    assert_eq!(mb.to_vec()[..1_000_000], data[..]);
    qa.post_send(&SendRequest::read(
        99,
        &[ma.slice(1_000_000..1_200_000)],
        mb.remote(0..200_000),
    ))
    .unwrap();
    assert_eq!(wait(cqa).status, WcStatus::Success);
    assert_eq!(ma.to_vec()[1_000_000..1_200_000], data[..200_000]);
    let (fa, fb) = (a.fault_stats(), b.fault_stats());
    assert!(
        fa.lost + fb.lost > 0
            && fa.corrupted + fb.corrupted > 0
            && fa.duplicated + fb.duplicated > 0
    );
    let (ca, cb) = (a.counters(), b.counters());
    assert!(
        ca.rx_icrc_errors + cb.rx_icrc_errors > 0,
        "corruption must be caught by the ICRC"
    );
    assert!(ca.retransmitted_packets + cb.retransmitted_packets > 0);
}

/// Options that cannot be honoured fail the open with a clear error.
#[test]
fn unusable_capture_path_is_an_error() {
    let dev = device(None).unwrap();
    let opts = OpenOptions {
        pcap: Some("/nonexistent-rverbs-dir/x.pcap".into()),
        ..Default::default()
    };
    let e = Context::open_with(dev, &opts)
        .err()
        .expect("open must fail");
    assert!(e.to_string().contains("RVERBS_PCAP"), "{e}");
    assert_eq!(e.errno(), 2, "ENOENT");
}

/// Payloads of 1 KiB and more (SEND and WRITE packets, READ responses) leave straight
/// from their memory regions: the device gathers them into its `sendmmsg` and hashes
/// them into the ICRC without copying them into the datagram first. Every byte arrives
/// (a wrong ICRC would drop the packets), a packet whose payload straddles two SGEs'
/// regions is copied as before, and a capture holds every packet whole, with a good
/// ICRC.
#[test]
fn large_payloads_leave_from_their_regions_and_captures_hold_them_whole() {
    let dir = std::env::temp_dir().join(format!("rverbs-inplace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("a.pcap");
    let dev = device(None).unwrap();
    let opts = OpenOptions {
        pcap: Some(pcap.clone()),
        ..OpenOptions::default()
    };
    let a = Context::open_with(dev.clone(), &opts).unwrap();
    let (ea, eb) = (end(a.clone(), 1 << 20), end(dev.open().unwrap(), 1 << 20));
    let mtu4k = ConnectOpts {
        mtu: Mtu::M4096,
        ..ConnectOpts::default()
    };
    connect(&ea, &eb, &mtu4k);
    let (qa, qb, ma, mb) = (&ea.qp, &eb.qp, &ea.mr, &eb.mr);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 31 + i / 977) as u8).collect();
    ma.write(0, &data);
    let done = |cq: &Cq| assert_eq!(wait(cq).status, WcStatus::Success);

    // SEND of 100,000 bytes from an odd offset: 24 full packets and one of 1,699
    // bytes (pad 1), all in place.
    let before = ea.ctx.counters().tx_payloads_in_place;
    qb.post_recv(1, &[mb.slice(0..200_000)]).unwrap();
    qa.post_send(&SendRequest::send(2, &[ma.slice(3..100_003)]))
        .unwrap();
    let wc = wait(&eb.cq);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 100_000));
    done(&ea.cq);
    assert_eq!(mb.to_vec()[..100_000], data[3..100_003]);
    assert!(ea.ctx.counters().tx_payloads_in_place - before >= 25);

    // WRITE of 64 KiB: 16 packets in place.
    let before = ea.ctx.counters().tx_payloads_in_place;
    qa.post_send(&SendRequest::write(
        3,
        &[ma.slice(100_000..165_536)],
        mb.remote(300_000..365_536),
    ))
    .unwrap();
    done(&ea.cq);
    assert_eq!(mb.to_vec()[300_000..365_536], data[100_000..165_536]);
    assert!(ea.ctx.counters().tx_payloads_in_place - before >= 16);

    // READ of 50,000 bytes: the responder sends its 12 full responses in place, the
    // last (848 bytes) copied.
    let before = eb.ctx.counters().tx_payloads_in_place;
    qa.post_send(&SendRequest::read(
        4,
        &[ma.slice(500_000..550_000)],
        mb.remote(300_000..350_000),
    ))
    .unwrap();
    done(&ea.cq);
    assert_eq!(ma.to_vec()[500_000..550_000], data[100_000..150_000]);
    assert!(eb.ctx.counters().tx_payloads_in_place - before >= 12);

    // Two SGEs in two regions: the packet across their border is copied, the two
    // others go in place.
    let other = ea.pd.reg_mr(8192, AccessFlags::ALL).unwrap();
    other.write(0, &data[..8192]);
    let before = ea.ctx.counters().tx_payloads_in_place;
    qb.post_recv(5, &[mb.slice(0..200_000)]).unwrap();
    qa.post_send(&SendRequest::send(
        6,
        &[ma.slice(150_000..155_000), other.slice(0..5000)],
    ))
    .unwrap();
    let wc = wait(&eb.cq);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 10_000));
    done(&ea.cq);
    let got = mb.to_vec();
    assert_eq!(got[..5000], data[150_000..155_000]);
    assert_eq!(got[5000..10_000], data[..5000]);
    let in_place = ea.ctx.counters().tx_payloads_in_place - before;
    // Anything sent again (a retransmission, a tail-loss probe or an ACK nudge, which
    // `retransmitted_packets` does not count) may leave in place again.
    let c = ea.ctx.counters();
    let resent = c.retransmitted_packets + c.tail_loss_probes + c.ack_nudges;
    assert!(
        in_place == 2 || (in_place >= 2 && resent > 0),
        "{in_place} in place, {resent} sent again"
    );

    assert_eq!(
        ea.ctx.counters().rx_icrc_errors + eb.ctx.counters().rx_icrc_errors,
        0
    );
    drop((other, ea, eb, a));
    // The capture: every packet a sent or received, whole (IP, UDP and RoCE lengths
    // agree), with the ICRC of its bytes; the long ones carry the data.
    let cap = std::fs::read(&pcap).unwrap();
    let (mut off, mut long) = (24, 0);
    while off + 16 <= cap.len() {
        let n = u32::from_le_bytes(cap[off + 8..off + 12].try_into().unwrap()) as usize;
        let ip = &cap[off + 16..off + 16 + n];
        assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), n);
        assert_eq!(usize::from(u16::from_be_bytes([ip[24], ip[25]])), n - 20);
        assert_eq!(
            rverbs_wire::icrc::verify(ip),
            Ok(true),
            "packet at {off} ({n} bytes)"
        );
        long += usize::from(n >= 20 + 8 + 12 + 4096 + 4);
        off += 16 + n;
    }
    assert_eq!(off, cap.len(), "the capture ends with a whole packet");
    assert!(long >= 24 + 16 + 12, "{long} full-size packets");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A "peer" that never answers: a UDP socket on the first free 127.0.0.x:4791 with x
/// from `xs`, `rcvbuf` bytes of receive buffer (the kernel doubles what is asked) and a
/// 100 ms read timeout.
fn silent_peer(
    mut xs: impl Iterator<Item = u8>,
    rcvbuf: usize,
) -> (std::net::UdpSocket, std::net::Ipv4Addr) {
    let (peer, ip) = xs
        .find_map(|x| {
            let ip = std::net::Ipv4Addr::new(127, 0, 0, x);
            std::net::UdpSocket::bind((ip, 4791)).ok().map(|s| (s, ip))
        })
        .expect("a free 127.0.0.x:4791");
    let sock = socket2::SockRef::from(&peer);
    sock.set_recv_buffer_size(rcvbuf / 2).unwrap();
    assert_eq!(sock.recv_buffer_size().unwrap(), rcvbuf);
    peer.set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .unwrap();
    (peer, ip)
}

/// An RC peer on this machine whose socket has a small receive buffer (an
/// unprivileged process under the default `net.core.rmem_max`, beside a root one)
/// gets a window its buffer takes: the requester stops after that many PSNs
/// without an ACK, whatever its own buffer allows. The peer here is a plain UDP
/// socket at a free 127.0.0.x:4791 with 128 KiB of buffer, which never answers:
/// three quarters of it in 4 KiB packets is 24 PSNs.
#[test]
fn the_window_fits_the_peer_sockets_receive_buffer() {
    let dev = device(None).unwrap();
    let (peer, ip) = silent_peer(200..=250, 128 << 10);
    let e = end(dev.open().unwrap(), 1 << 20);
    let to_peer = PeerInfo {
        qpn: 0x123,
        psn: 0,
        gid: Gid::from(ip),
    };
    // MTU 1024: small packets, so the peer's buffer holds the whole window.
    e.qp.connect(&to_peer, &ConnectOpts::default()).unwrap();
    let remote = RemoteBuf {
        addr: 0x1000,
        rkey: 0x99,
        len: 1 << 16,
    };
    for i in 0..8 {
        e.qp.post_send(&SendRequest::write(i, &[e.mr.slice(0..1 << 16)], remote))
            .unwrap();
    }
    let mut psns = std::collections::BTreeSet::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = peer.recv(&mut buf) {
        assert!(n > 12);
        // BTH bytes 9..12: the PSN.
        psns.insert(u32::from_be_bytes([0, buf[9], buf[10], buf[11]]));
    }
    assert_eq!(psns.len(), 24, "{psns:?}");
    assert_eq!(psns.iter().copied().max(), Some(23));
}

/// Two RC QPs of one context connected to the same small-buffer peer share its
/// buffer: each gets the window of half of it, so their bursts together fit where
/// two full windows would overflow it. The peer is a plain UDP socket with 256 KiB of
/// buffer that never answers: three quarters of a half in 4 KiB packets is 24 PSNs a
/// QP (a lone QP gets 48).
#[test]
fn qps_to_one_peer_share_its_receive_buffer() {
    let dev = device(None).unwrap();
    // (Addresses from the top: the test above takes them from the bottom.)
    let (peer, ip) = silent_peer((200..=250).rev(), 256 << 10);
    let a = end(dev.open().unwrap(), 1 << 20);
    let b = a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq)).unwrap();
    let remote = RemoteBuf {
        addr: 0x1000,
        rkey: 0x99,
        len: 1 << 16,
    };
    // The peer QP numbers tell the two streams apart. A 4 s ACK timeout, as below:
    // with the default one the retries into the silence could run out while the
    // test reads (a gap under its 100 ms read timeout each time), move `a` to the
    // error state and give `b` the whole buffer, 48 PSNs (seen under load).
    let opts = ConnectOpts {
        timeout: 20,
        ..ConnectOpts::default()
    };
    for (qp, rqpn) in [(&a.qp, 0x123), (&b, 0x124)] {
        let to_peer = PeerInfo {
            qpn: rqpn,
            psn: 0,
            gid: Gid::from(ip),
        };
        qp.connect(&to_peer, &opts).unwrap();
    }
    for (qp, base) in [(&a.qp, 0), (&b, 100)] {
        for i in 0..8 {
            qp.post_send(&SendRequest::write(
                base + i,
                &[a.mr.slice(0..1 << 16)],
                remote,
            ))
            .unwrap();
        }
    }
    let mut psns = std::collections::BTreeMap::<u32, std::collections::BTreeSet<u32>>::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = peer.recv(&mut buf) {
        assert!(n > 12);
        // BTH bytes 5..8: the destination QP; 9..12: the PSN.
        let dqp = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]);
        psns.entry(dqp)
            .or_default()
            .insert(u32::from_be_bytes([0, buf[9], buf[10], buf[11]]));
    }
    let counts: Vec<(u32, usize)> = psns.iter().map(|(q, p)| (*q, p.len())).collect();
    assert_eq!(counts, [(0x123, 24), (0x124, 24)], "{psns:?}");
    // One QP leaves (destroyed): the other takes the whole buffer's window, 48 PSNs,
    // and sends the 24 its narrower one held back. The same when it leaves by a move
    // to the error state instead.
    for leave in ["destroy", "error", "fatal"] {
        let (peer, ip) = silent_peer((200..=250).rev(), 256 << 10);
        let a = end(dev.open().unwrap(), 1 << 20);
        let b = a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq)).unwrap();
        // A 4 s ACK timeout: the silent peer's missing ACKs must not wear out the
        // retries (and move the QP to the error state) while the test reads.
        let opts = ConnectOpts {
            timeout: 20,
            ..ConnectOpts::default()
        };
        // "fatal": b gives up on its own (20 ms timeout, one retry) after sending
        // into the silence, and the engine moves it to the error state.
        let b_opts = if leave == "fatal" {
            ConnectOpts {
                timeout: 12,
                retry_cnt: 1,
                ..ConnectOpts::default()
            }
        } else {
            opts
        };
        for (qp, rqpn, o) in [(&a.qp, 0x123, &opts), (&b, 0x124, &b_opts)] {
            let to_peer = PeerInfo {
                qpn: rqpn,
                psn: 0,
                gid: Gid::from(ip),
            };
            qp.connect(&to_peer, o).unwrap();
        }
        if leave == "fatal" {
            let first_64 = RemoteBuf { len: 64, ..remote };
            b.post_send(&SendRequest::write(99, &[a.mr.slice(0..64)], first_64))
                .unwrap();
        }
        for i in 0..8 {
            a.qp.post_send(&SendRequest::write(i, &[a.mr.slice(0..1 << 16)], remote))
                .unwrap();
        }
        let sent = |peer: &std::net::UdpSocket| {
            let mut psns = std::collections::BTreeSet::new();
            let mut buf = [0u8; 2048];
            while let Ok(n) = peer.recv(&mut buf) {
                assert!(n > 12);
                // a's packets only (to QP 0x123).
                if buf[5..8] == [0, 0x01, 0x23] {
                    psns.insert(u32::from_be_bytes([0, buf[9], buf[10], buf[11]]));
                }
            }
            psns
        };
        let first = sent(&peer);
        let more = match leave {
            "destroy" => {
                assert_eq!(first.len(), 24, "{leave}: two sharers");
                drop(b);
                sent(&peer)
            }
            "error" => {
                assert_eq!(first.len(), 24, "{leave}: two sharers");
                b.modify(&QpModify::to(QpState::Err)).unwrap();
                sent(&peer)
            }
            _ => {
                // b's WRITE and its retry went to QP 0x124, then b failed: the
                // completion says so, and a took the whole window meanwhile.
                let mut wc = [Wc::default(); 4];
                let n = a.cq.poll(&mut wc).unwrap();
                assert!(
                    wc[..n]
                        .iter()
                        .any(|w| w.wr_id == 99 && w.status == WcStatus::RetryExcErr),
                    "{:?}",
                    &wc[..n]
                );
                assert_eq!(b.state(), QpState::Err);
                first.into_iter().filter(|&p| p >= 24).collect()
            }
        };
        assert_eq!(
            (more.len(), more.first(), more.last()),
            (24, Some(&24), Some(&47)),
            "{leave}: alone, PSNs 24..48 follow"
        );
    }
}
