//! `rverbs ucmatose`: rdma-core's `ucmatose` (`cmatose.c`) over [`rverbs::cm`]: `-c`
//! RC connections made by the RDMA CM, `-C` SENDs of `-S` bytes from the server on
//! each, as many back from the client, then the server disconnects every connection
//! and each side waits for the other's half of the disconnect. Wire-compatible with
//! it in either role.

use crate::rping::{event_str, RpingError as Error};
use rverbs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventKind, PortSpace};
use rverbs::{AccessFlags, Cq, Mr, QpCap, QpInitAttr, QpType, SendRequest, Wc, WcStatus};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// `-S`: message size.
    pub size: usize,
    /// `-p` (ucmatose's default is 7471).
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
    qp: Arc<rverbs::Qp>,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
    connected: bool,
}

impl Node {
    fn new(id: CmId, o: &Opts) -> Result<Node, Error> {
        let Some(ctx) = id.context() else {
            return fail("the CM ID has no device");
        };
        let pd = ctx.alloc_pd()?;
        let n = o.count.max(1) as u32;
        let (scq, rcq) = (ctx.create_cq(n)?, ctx.create_cq(n)?);
        let cap = QpCap {
            max_send_wr: n,
            max_recv_wr: n,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCap::default()
        };
        let attr = QpInitAttr::new(QpType::Rc, &scq)
            .recv_cq(&rcq)
            .cap(cap)
            .sq_sig_all(true);
        let qp = id.create_qp(&pd, &attr)?;
        let mr = pd.reg_mr(o.size.max(1), AccessFlags::LOCAL_WRITE)?;
        for _ in 0..o.count {
            qp.post_recv(0, &[mr.slice(0..o.size)])?;
        }
        Ok(Node {
            id,
            qp,
            scq,
            rcq,
            mr,
            connected: false,
        })
    }

    fn post_sends(&self, o: &Opts) -> Result<(), Error> {
        if !self.connected {
            return Ok(());
        }
        for _ in 0..o.count {
            self.qp
                .post_send(&SendRequest::send(0, &[self.mr.slice(0..o.size)]))?;
        }
        Ok(())
    }

    fn poll(&self, cq: &Cq, o: &Opts) -> Result<(), Error> {
        let deadline = Instant::now() + o.timeout;
        let mut done = 0;
        while self.connected && done < o.count {
            let mut wc = [Wc::default(); 8];
            let n = cq.poll_wait(&mut wc, Duration::from_millis(10))?;
            if let Some(w) = wc[..n].iter().find(|w| w.status != WcStatus::Success) {
                return fail(format!(
                    "cmatose: completion failed status {}",
                    w.status as u32
                ));
            }
            done += n;
            if n == 0 && Instant::now() >= deadline {
                return fail(format!("cmatose: {done} of {} completions came", o.count));
            }
        }
        Ok(())
    }
}

fn create_id(ch: &EventChannel, o: &Opts) -> Result<CmId, Error> {
    if let Some(ctx) = &o.ctx {
        return Ok(CmId::create_on(ch, ctx, PortSpace::Tcp)?);
    }
    Ok(match &o.dev {
        Some(d) => CmId::create_on(ch, &rverbs::device(Some(d))?.open()?, PortSpace::Tcp)?,
        None => CmId::create(ch, PortSpace::Tcp)?,
    })
}

fn resolve(s: &str) -> Result<IpAddr, Error> {
    s.parse()
        .map_err(|_| Error(format!("cmatose: getaddrinfo error: bad address {s}")))
}

/// cmatose's `cma_handler` for the events both roles share; errors end the run.
fn handle(
    e: &CmEvent,
    nodes: &mut [Node],
    connects_left: &mut usize,
    disconnects_left: &mut usize,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let node = nodes.iter_mut().find(|n| n.id == e.id);
    match e.kind {
        EventKind::Established => {
            if let Some(n) = node {
                n.connected = true;
            }
            *connects_left = connects_left.saturating_sub(1);
            *disconnects_left += 1;
        }
        EventKind::Disconnected => {
            if let Some(n) = node {
                // The other half of the disconnect (a DREP, or nothing to do).
                let _ = n.id.disconnect();
            }
            *disconnects_left = disconnects_left.saturating_sub(1);
        }
        EventKind::AddrError
        | EventKind::RouteError
        | EventKind::ConnectError
        | EventKind::Unreachable
        | EventKind::Rejected => {
            let _ = writeln!(
                out,
                "cmatose: event: {}, error: {}",
                event_str(e.kind),
                e.status
            );
            return fail(format!("cmatose: {}", event_str(e.kind)));
        }
        _ => {}
    }
    Ok(())
}

fn next(ch: &EventChannel, o: &Opts) -> Result<CmEvent, Error> {
    ch.get_event(Some(o.timeout))
        .ok_or_else(|| Error("cmatose: timed out waiting for an event".into()))
}

/// Runs ucmatose; its lines go to `out`.
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
    let _ = writeln!(out, "cmatose: starting server");
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
    let (mut nodes, mut connects_left, mut disconnects_left) = (Vec::new(), o.connections, 0);
    while connects_left > 0 {
        let e = next(&ch, o)?;
        if e.kind == EventKind::ConnectRequest {
            if nodes.len() == o.connections {
                let _ = writeln!(out, "cmatose: failing connection request");
                e.id.reject(&[])?;
                continue;
            }
            let n = Node::new(e.id.clone(), o)?;
            n.id.accept(&ConnParam::default())?;
            nodes.push(n);
            continue;
        }
        handle(
            &e,
            &mut nodes,
            &mut connects_left,
            &mut disconnects_left,
            out,
        )?;
    }
    if o.count > 0 {
        let _ = writeln!(out, "initiating data transfers");
        for n in &nodes {
            n.post_sends(o)?;
        }
        let _ = writeln!(out, "completing sends");
        for n in &nodes {
            n.poll(&n.scq, o)?;
        }
        let _ = writeln!(out, "receiving data transfers");
        for n in &nodes {
            n.poll(&n.rcq, o)?;
        }
        let _ = writeln!(out, "data transfers complete");
    }
    let _ = writeln!(out, "cmatose: disconnecting");
    for n in nodes.iter_mut().filter(|n| n.connected) {
        n.connected = false;
        n.id.disconnect()?;
    }
    while disconnects_left > 0 {
        let e = next(&ch, o)?;
        handle(
            &e,
            &mut nodes,
            &mut connects_left,
            &mut disconnects_left,
            out,
        )?;
    }
    let _ = writeln!(out, "disconnected");
    let ctx = nodes.first().and_then(|n| n.id.context());
    drop((nodes, l, ch));
    crate::rping::finish(ctx);
    Ok(())
}

fn client(o: &Opts, out: &mut dyn Write) -> Result<(), Error> {
    let _ = writeln!(out, "cmatose: starting client");
    let dst = SocketAddr::new(resolve(o.server_addr.as_deref().unwrap_or(""))?, o.port);
    let src = o.bind.as_deref().map(resolve).transpose()?;
    let _ = writeln!(out, "cmatose: connecting");
    let ch = EventChannel::new()?;
    let mut ids = Vec::new();
    for _ in 0..o.connections {
        let id = create_id(&ch, o)?;
        id.resolve_addr(src, dst, Duration::from_secs(2))?;
        ids.push(id);
    }
    let (mut nodes, mut connects_left, mut disconnects_left) = (Vec::new(), o.connections, 0);
    while connects_left > 0 {
        let e = next(&ch, o)?;
        match e.kind {
            EventKind::AddrResolved => e.id.resolve_route(Duration::from_secs(2))?,
            EventKind::RouteResolved => {
                let n = Node::new(e.id.clone(), o)?;
                n.id.connect(&ConnParam {
                    retry_count: 5,
                    ..ConnParam::default()
                })?;
                nodes.push(n);
            }
            _ => handle(
                &e,
                &mut nodes,
                &mut connects_left,
                &mut disconnects_left,
                out,
            )?,
        }
    }
    if o.count > 0 {
        let _ = writeln!(out, "receiving data transfers");
        for n in &nodes {
            n.poll(&n.rcq, o)?;
        }
        let _ = writeln!(out, "sending replies");
        for n in &nodes {
            n.post_sends(o)?;
        }
        let _ = writeln!(out, "data transfers complete");
    }
    while disconnects_left > 0 {
        let e = next(&ch, o)?;
        handle(
            &e,
            &mut nodes,
            &mut connects_left,
            &mut disconnects_left,
            out,
        )?;
    }
    let ctx = nodes.first().and_then(|n| n.id.context());
    drop((nodes, ids, ch));
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
            let l = CmId::create_on(&ch, &sctx, PortSpace::Tcp).unwrap();
            l.bind_addr(SocketAddr::new(ip, 0)).unwrap();
            l.local_addr().unwrap().port()
        };
        let base = Opts {
            server_addr: None,
            bind: Some(ip.to_string()),
            connections: 3,
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
            c.contains("sending replies\ndata transfers complete\ntest complete\nreturn status 0"),
            "{c}"
        );
        let s = srv.join().unwrap().unwrap();
        assert!(
            s.contains("cmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0"),
            "{s}"
        );
    }
}
