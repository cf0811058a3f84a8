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

/// Connects `a` and `b` to each other (first PSNs 0).
pub fn connect(a: &End, b: &End, o: &ConnectOpts) {
    let peer = |e: &End| PeerInfo {
        qpn: e.qp.qp_num(),
        psn: 0,
        gid: e.ctx.gid(1).unwrap(),
    };
    a.qp.connect(&peer(b), o).unwrap();
    b.qp.connect(&peer(a), o).unwrap();
}

/// The next completion of `cq` (within 10 s).
pub fn wait(cq: &Cq) -> Wc {
    let mut out = [Wc::default()];
    let n = cq.poll_wait(&mut out, Duration::from_secs(10)).unwrap();
    assert_eq!(n, 1, "no completion within 10 s");
    out[0]
}
