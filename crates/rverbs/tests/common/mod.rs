//! Shared set-up for the rverbs integration tests: endpoints on the loopback device.
#![allow(dead_code)]

use rverbs::*;
use std::time::Duration;

/// One endpoint: a context and the objects of one RC QP.
pub struct End {
    pub qp: Qp,
    pub mr: Mr,
    pub cq: Cq,
    pub pd: Pd,
    pub ctx: Context,
}

/// An RC endpoint on `ctx` with a `mr_len`-byte region open to everything.
pub fn end(ctx: Context, mr_len: usize) -> End {
    end_with(ctx, mr_len, AccessFlags::ALL)
}

/// An RC endpoint on `ctx` with a `mr_len`-byte region of `access`.
pub fn end_with(ctx: Context, mr_len: usize, access: AccessFlags) -> End {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    let mr = pd.reg_mr(mr_len, access).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    End {
        qp,
        mr,
        cq,
        pd,
        ctx,
    }
}

/// One UD endpoint: a context and the objects of one UD QP (in RTS).
pub struct UdEnd {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

/// A UD endpoint on `ctx` with a `cqe`-entry CQ and a region for one datagram of up to
/// 256 bytes behind its 40-byte GRH area; no receive posted yet.
pub fn ud_end(ctx: Context, cqe: u32) -> UdEnd {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(cqe).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
    let mr = pd.reg_mr(40 + 256, AccessFlags::LOCAL_WRITE).unwrap();
    connect_nobody(&qp);
    UdEnd {
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

/// Two RC endpoints on contexts of their own on `dev`, connected with default options.
pub fn connected_pair(dev: &DeviceInfo, mr_a: usize, mr_b: usize) -> (End, End) {
    let (a, b) = (
        end(dev.open().unwrap(), mr_a),
        end(dev.open().unwrap(), mr_b),
    );
    connect(&a, &b, &ConnectOpts::default());
    (a, b)
}

/// Connects `a` and `b` to each other (first PSNs 0).
pub fn connect(a: &End, b: &End, o: &ConnectOpts) {
    connect_qps(&a.qp, &b.qp, o);
}

/// Connects two RC QPs to each other (first PSNs 0), each at GID 1 of its context.
pub fn connect_qps(a: &Qp, b: &Qp, o: &ConnectOpts) {
    let peer = |q: &Qp| PeerInfo {
        qpn: q.qp_num(),
        psn: 0,
        gid: q.context().gid(1).unwrap(),
    };
    a.connect(&peer(b), o).unwrap();
    b.connect(&peer(a), o).unwrap();
}

/// Moves a UD or RAW_PACKET QP to RTS: it has no peer, so the peer given is all zeros.
pub fn connect_nobody(qp: &Qp) {
    let nobody = PeerInfo {
        qpn: 0,
        psn: 0,
        gid: Gid::ZERO,
    };
    qp.connect(&nobody, &ConnectOpts::default()).unwrap();
}

/// The next completion of `cq` (within 10 s).
pub fn wait(cq: &Cq) -> Wc {
    let mut out = [Wc::default()];
    let n = cq.poll_wait(&mut out, Duration::from_secs(10)).unwrap();
    assert_eq!(n, 1, "no completion within 10 s");
    out[0]
}

/// A context on the soft device of interface `ifname` inside network namespace `ns`
/// (root tests with a `rverbs_raw::netns::VethPair`), in raw mode on that interface
/// when `raw`, writing a capture to `pcap` when given.
pub fn context_in_ns(
    ns: &str,
    ifname: &str,
    raw: bool,
    pcap: Option<std::path::PathBuf>,
) -> Context {
    let ifname = ifname.to_string();
    rverbs_raw::netns::VethPair::in_ns(ns, move || {
        let dev = devices()
            .expect("devices")
            .into_iter()
            .find(|d| d.ifname == ifname)
            .expect("a soft device on the veth end");
        Context::open_with(
            dev,
            &OpenOptions {
                raw_interface: raw.then_some(ifname),
                pcap,
                ..Default::default()
            },
        )
        .expect("open")
    })
}

/// The next completion, sleeping in `Cq::wait` (no spin); fails after 10 s.
pub fn next_sleeping(cq: &Cq) -> Wc {
    let start = std::time::Instant::now();
    let mut wc = [Wc::default()];
    loop {
        let n = cq
            .wait(&mut wc, Duration::ZERO, Duration::from_millis(1))
            .unwrap();
        if n == 1 {
            assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
            return wc[0];
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no completion in 10 s"
        );
    }
}

/// `rounds` 8-byte RC ping-pongs between connected ends `a` (client) and `b` (echoing
/// side, on a thread of its own), both sleeping in `Cq::wait`: checks each message and
/// echo, and that the echoing side gets its echo's completion before the next
/// message (the ACK it carries comes first, whatever the device did with it on the
/// way).
pub fn ping_pong_in_order(a: End, b: End, rounds: u64) {
    let next = next_sleeping;
    let server = std::thread::spawn(move || {
        b.qp.post_recv(0, &[b.mr.slice(0..64)]).unwrap();
        for i in 0..rounds {
            let wc = next(&b.cq);
            assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Recv, 8), "round {i}");
            let mut m = [0u8; 8];
            b.mr.read(0, &mut m);
            assert_eq!(u64::from_le_bytes(m), i, "round {i}: the message");
            b.qp.post_recv(i + 1, &[b.mr.slice(0..64)]).unwrap();
            b.mr.write(64, &m);
            b.qp.post_send(&SendRequest::send(i, &[b.mr.slice(64..72)]))
                .unwrap();
            // The client's next message follows our echo's ACK: the echo completes
            // first.
            let wc = next(&b.cq);
            assert_eq!((wc.opcode, wc.wr_id), (WcOpcode::Send, i), "round {i}");
        }
    });
    a.qp.post_recv(0, &[a.mr.slice(0..64)]).unwrap();
    for i in 0..rounds {
        a.mr.write(64, &i.to_le_bytes());
        a.qp.post_send(&SendRequest::send(i, &[a.mr.slice(64..72)]))
            .unwrap();
        let (mut sent, mut echoed) = (false, false);
        while !(sent && echoed) {
            let wc = next(&a.cq);
            match wc.opcode {
                WcOpcode::Send => sent = true,
                WcOpcode::Recv => {
                    let mut m = [0u8; 8];
                    a.mr.read(0, &mut m);
                    assert_eq!(u64::from_le_bytes(m), i, "round {i}: the echo");
                    a.qp.post_recv(i + 1, &[a.mr.slice(0..64)]).unwrap();
                    echoed = true;
                }
                o => panic!("round {i}: unexpected {o:?}"),
            }
        }
    }
    server.join().unwrap();
}

/// An address handle to multicast `group` from `ctx`'s GID of the group's family (hop
/// limit 2).
pub fn mcast_ah(ctx: &Context, pd: &Pd, group: Gid) -> Ah {
    let sgid = ctx.gid_index_for(group.to_ipv4_mapped().is_none()).unwrap();
    pd.create_ah(&AhAttr {
        av: AddressVector {
            dgid: group,
            sgid_index: sgid,
            hop_limit: 2,
            traffic_class: 0,
            flow_label: 0,
        },
        port_num: 1,
    })
    .unwrap()
}
