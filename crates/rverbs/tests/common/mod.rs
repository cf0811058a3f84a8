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
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    let mr = pd.reg_mr(mr_len, AccessFlags::ALL).unwrap();
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
