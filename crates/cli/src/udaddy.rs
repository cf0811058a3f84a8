//! `rverbs udaddy`: rdma-core's `udaddy` over [`rverbs::cm`] (UD QPs found with the
//! RDMA CM's SIDR exchange, port space UDP), wire-compatible with it in either role
//! (rdma-core `librdmacm/examples/udaddy.c`).
//!
//! The client resolves the server, connects (a SIDR_REQ; the reply gives the server's
//! QPN and Q_Key) and sends `-C` SENDs with immediate data (its own QPN) of `-S`
//! bytes; the server answers each client with as many SENDs, through an address handle
//! built from the first receive's completion and GRH.

use crate::rping::{event_str, RpingError as Error};
use rverbs::cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace, UdParam};
use rverbs::{AccessFlags, Ah, Cq, Mr, Pd, QpCap, QpInitAttr, QpType, SendRequest, Wc, WcStatus};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The room a UD receive needs before the data (`sizeof(struct ibv_grh)`).
const GRH: usize = 40;

/// What the command line asked for.
#[derive(Clone)]
pub struct Opts {
    /// `-s`: the server to connect to (client); absent: be the server.
    pub server_addr: Option<String>,
    /// `-b`: the address to bind.
    pub bind: Option<String>,
    /// `-c`: connections.
    pub connections: usize,
    /// `-C`: messages each way per connection.
    pub count: usize,
    /// `-S`: message size (at most the path MTU).
    pub size: usize,
    /// The port (udaddy's is fixed at 7174).
    pub port: u16,
    /// The device (default: the one with the address).
    pub dev: Option<String>,
    /// A context to use instead of opening one.
    pub ctx: Option<rverbs::Context>,
    /// Give up after this long.
    pub timeout: Duration,
}

fn fail<T>(s: impl Into<String>) -> Result<T, Error> {
    Err(Error(s.into()))
}

struct Node {
    id: CmId,
    pd: Pd,
    cq: Cq,
    qp: Arc<rverbs::Qp>,
    mr: Mr,
    ah: Option<Ah>,
    remote_qpn: u32,
    remote_qkey: u32,
}

impl Node {
    fn new(id: CmId, o: &Opts) -> Result<Node, Error> {
        let Some(ctx) = id.context() else {
            return fail("the CM ID has no device");
        };
        let mtu = ctx.device().active_mtu().bytes();
        if o.count > 0 && o.size > mtu {
            return fail(format!(
                "udaddy: message_size {} is larger than active mtu {mtu}",
                o.size
            ));
        }
        let pd = ctx.alloc_pd()?;
        let n = o.count.max(1) as u32;
        let cq = ctx.create_cq(n * 2)?;
        let cap = QpCap {
            max_send_wr: n,
            max_recv_wr: n,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCap::default()
        };
        let qp = id.create_qp(&pd, &QpInitAttr::new(QpType::Ud, &cq).cap(cap))?;
        let mr = pd.reg_mr(o.size + GRH, AccessFlags::LOCAL_WRITE)?;
        for _ in 0..o.count {
            qp.post_recv(0, &[mr.slice(0..o.size + GRH)])?;
        }
        Ok(Node {
            id,
            pd,
            cq,
            qp,
            mr,
            ah: None,
            remote_qpn: 0,
            remote_qkey: 0,
        })
    }

    fn post_sends(&self, o: &Opts, signaled: bool) -> Result<(), Error> {
        let Some(ah) = &self.ah else {
            return fail("no address handle");
        };
        for _ in 0..o.count {
            let wr = SendRequest::send(0, &[self.mr.slice(0..o.size)])
                .imm(self.qp.qp_num())
                .signaled(signaled)
                .to(ah, self.remote_qpn, self.remote_qkey);
            self.qp.post_send(&wr)?;
        }
        Ok(())
    }

    /// Polls `count` completions; the first receive without an AH yet makes one
    /// (udaddy's `create_reply_ah`).
    fn poll(&mut self, o: &Opts) -> Result<(), Error> {
        let deadline = Instant::now() + o.timeout;
        let mut done = 0;
        while done < o.count {
            let mut wc = [Wc::default(); 8];
            let n = self.cq.poll_wait(&mut wc, Duration::from_millis(10))?;
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    return fail(format!(
                        "udaddy: completion failed status {}",
                        w.status as u32
                    ));
                }
                if self.ah.is_none() {
                    let mut grh = [0u8; GRH];
                    self.mr.read(0, &mut grh);
                    self.ah = Some(self.pd.create_ah_from_wc(1, w, &grh)?);
                    self.remote_qpn = w.imm_data;
                    self.remote_qkey = 0x0123_4567;
                }
            }
            done += n;
            if n == 0 && Instant::now() >= deadline {
                return fail(format!("udaddy: {done} of {} completions came", o.count));
            }
        }
        Ok(())
    }
}

fn resolve(s: &str) -> Result<IpAddr, Error> {
    s.parse()
        .map_err(|_| Error(format!("udaddy: getaddrinfo error: bad address {s}")))
}

fn create_id(ch: &EventChannel, o: &Opts) -> Result<CmId, Error> {
    if let Some(ctx) = &o.ctx {
        return Ok(CmId::create_on(ch, ctx, PortSpace::Udp)?);
    }
    Ok(match &o.dev {
        Some(d) => CmId::create_on(ch, &rverbs::device(Some(d))?.open()?, PortSpace::Udp)?,
        None => CmId::create(ch, PortSpace::Udp)?,
    })
}

fn next(ch: &EventChannel, o: &Opts, out: &mut dyn Write) -> Result<rverbs::cm::CmEvent, Error> {
    let Some(e) = ch.get_event(Some(o.timeout)) else {
        return fail("udaddy: timed out waiting for an event");
    };
    if matches!(
        e.kind,
        EventKind::AddrError
            | EventKind::RouteError
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected
    ) {
        let _ = writeln!(
            out,
            "udaddy: event: {}, error: {}",
            event_str(e.kind),
            e.status
        );
        return fail(format!("udaddy: {}", event_str(e.kind)));
    }
    Ok(e)
}

/// Runs udaddy; its lines go to `out`.
pub fn run(o: &Opts, out: &mut dyn Write) -> Result<(), Error> {
    let r = if o.server_addr.is_some() {
        client(o, out)
    } else {
        server(o, out)
    };
    let _ = writeln!(out, "test complete");
    let _ = writeln!(out, "return status {}", if r.is_ok() { 0 } else { -1 });
    r
}

fn server(o: &Opts, out: &mut dyn Write) -> Result<(), Error> {
    let _ = writeln!(out, "udaddy: starting server");
    let ch = EventChannel::new()?;
    let l = create_id(&ch, o)?;
    let ip = match &o.bind {
        Some(b) => resolve(b)?,
        None => IpAddr::from([0u8; 4]),
    };
    l.bind_addr(SocketAddr::new(ip, o.port))?;
    l.listen(0)?;
    if ip.is_unspecified() {
        if let Some(c) = l.context().filter(|c| c.device().is_loopback()) {
            let a = rverbs::cm::local_ip(&c, false).map_or_else(String::new, |a| a.to_string());
            eprintln!("listening on {} (device address {a})", ip);
        }
    }
    let mut nodes = Vec::new();
    while nodes.len() < o.connections {
        let e = next(&ch, o, out)?;
        if e.kind != EventKind::ConnectRequest {
            continue;
        }
        let node = Node::new(e.id.clone(), o)?;
        node.id.accept(&ConnParam::default())?;
        nodes.push(node);
    }
    if o.count > 0 {
        let _ = writeln!(out, "receiving data transfers");
        for n in &mut nodes {
            n.poll(o)?;
        }
        let _ = writeln!(out, "sending replies");
        for n in &nodes {
            n.post_sends(o, true)?;
        }
        for n in &mut nodes {
            n.poll(o)?;
        }
        let _ = writeln!(out, "data transfers complete");
    }
    let ctx = nodes.first().and_then(|n| n.id.context());
    drop((nodes, l, ch));
    crate::rping::finish(ctx);
    Ok(())
}

fn client(o: &Opts, out: &mut dyn Write) -> Result<(), Error> {
    let _ = writeln!(out, "udaddy: starting client");
    let dst = SocketAddr::new(resolve(o.server_addr.as_deref().unwrap_or(""))?, o.port);
    let src = o.bind.as_deref().map(resolve).transpose()?;
    let _ = writeln!(out, "udaddy: connecting");
    let ch = EventChannel::new()?;
    let mut nodes = Vec::new();
    for _ in 0..o.connections {
        let id = create_id(&ch, o)?;
        id.resolve_addr(src, dst, Duration::from_secs(2))?;
        let e = next(&ch, o, out)?;
        if e.kind != EventKind::AddrResolved {
            return fail(format!("udaddy: unexpected {}", event_str(e.kind)));
        }
        id.resolve_route(Duration::from_secs(2))?;
        let e = next(&ch, o, out)?;
        if e.kind != EventKind::RouteResolved {
            return fail(format!("udaddy: unexpected {}", event_str(e.kind)));
        }
        let mut node = Node::new(id, o)?;
        node.id.connect(&ConnParam::default())?;
        let e = next(&ch, o, out)?;
        let (
            EventKind::Established,
            Some(UdParam {
                qp_num,
                qkey,
                ah_attr,
            }),
        ) = (e.kind, e.ud)
        else {
            return fail(format!("udaddy: unexpected {}", event_str(e.kind)));
        };
        node.ah = Some(node.pd.create_ah(&ah_attr)?);
        node.remote_qpn = qp_num;
        node.remote_qkey = qkey;
        nodes.push(node);
    }
    if o.count > 0 {
        let _ = writeln!(out, "initiating data transfers");
        for n in &nodes {
            n.post_sends(o, false)?;
        }
        let _ = writeln!(out, "receiving data transfers");
        for n in &mut nodes {
            n.poll(o)?;
        }
        let _ = writeln!(out, "data transfers complete");
    }
    let ctx = nodes.first().and_then(|n| n.id.context());
    drop((nodes, ch));
    crate::rping::finish(ctx);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_and_client_over_loopback() {
        let dev = rverbs::device(None).unwrap();
        let (sctx, cctx) = (dev.open().unwrap(), dev.open().unwrap());
        let ip = rverbs::cm::local_ip(&sctx, false).unwrap();
        let port = {
            let ch = EventChannel::new().unwrap();
            let l = CmId::create_on(&ch, &sctx, PortSpace::Udp).unwrap();
            l.bind_addr(SocketAddr::new(ip, 0)).unwrap();
            l.local_addr().unwrap().port()
        };
        let base = Opts {
            server_addr: None,
            bind: Some(ip.to_string()),
            connections: 2,
            count: 10,
            size: 100,
            port,
            dev: None,
            ctx: Some(sctx),
            timeout: Duration::from_secs(10),
        };
        let so = base.clone();
        let srv = std::thread::spawn(move || {
            let mut out = Vec::new();
            run(&so, &mut out).map(|_| String::from_utf8(out).unwrap())
        });
        std::thread::sleep(Duration::from_millis(300));
        let co = Opts {
            server_addr: Some(ip.to_string()),
            bind: None,
            ctx: Some(cctx),
            ..base
        };
        let mut out = Vec::new();
        run(&co, &mut out).unwrap();
        let c = String::from_utf8(out).unwrap();
        assert!(
            c.contains("data transfers complete\ntest complete\nreturn status 0"),
            "{c}"
        );
        let s = srv.join().unwrap().unwrap();
        assert!(
            s.contains("sending replies\ndata transfers complete"),
            "{s}"
        );
    }
}
