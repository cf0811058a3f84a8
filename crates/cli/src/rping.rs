//! `rverbs rping`: rdma-core's `rping` over [`rverbs::cm`], wire-compatible with it in
//! either role (rdma-core `librdmacm/examples/rping.c`).
//!
//! The protocol after the RDMA CM connects (no private data in the REQ or REP):
//! each side advertises a buffer with a 16-byte SEND (`struct rping_rdma_info`:
//! address, rkey and size, big-endian). Per ping the client advertises its source
//! buffer (filled with `rdma-ping-N: ` and a rotating alphabet, NUL-terminated); the
//! server RDMA READs it, SENDs a go-ahead (16 bytes of zeros), receives the client's
//! sink advertisement, RDMA WRITEs the string (up to its NUL) there and SENDs another
//! go-ahead. The client then compares source and sink (`-V`) and prints the sink
//! (`-v`). The client ends with a disconnect; the server reports it as rping does.

use rverbs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventKind, PortSpace};
use rverbs::{AccessFlags, Cq, Mr, Qp, QpCap, QpInitAttr, QpType, RemoteBuf, SendRequest, Wc};
use rverbs::{WcOpcode, WcStatus};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// rping's `RPING_MIN_BUFSIZE`: `sizeof("2147483647") + sizeof("rdma-ping-%d: ")`.
pub const MIN_SIZE: usize = 11 + 15;
/// rping's `RPING_BUFSIZE - 1`.
pub const MAX_SIZE: usize = 64 * 1024 - 1;
/// rping's default port.
pub const DEFAULT_PORT: u16 = 7174;
/// rping's `RPING_SQ_DEPTH`.
const SQ_DEPTH: u32 = 16;
/// `struct rping_rdma_info`.
const INFO_LEN: usize = 16;

/// What the command line asked for.
#[derive(Clone)]
pub struct Opts {
    /// Server (`-s`) or client (`-c`).
    pub server: bool,
    /// `-a`: the server's address (client), the address to bind (server).
    pub addr: Option<String>,
    /// `-I`: the client's source address.
    pub source: Option<String>,
    /// `-p`.
    pub port: u16,
    /// `-C`: pings (0 = until interrupted).
    pub count: u64,
    /// `-S`: ping data size.
    pub size: usize,
    /// `-v`: print the ping data.
    pub verbose: bool,
    /// `-V`: check the ping data.
    pub validate: bool,
    /// `-d`: say what happens on stderr.
    pub debug: bool,
    /// The device (default: the one with the address, or the loopback device).
    pub dev: Option<String>,
    /// Give up waiting for the peer after this long.
    pub timeout: Duration,
    /// A context to use instead of opening one (tests, embedding).
    pub ctx: Option<rverbs::Context>,
    /// Print the port's counters and the CM's at the end (stderr).
    pub stats: bool,
}

/// The port's and the CM's counters, one line each, on stderr.
pub fn print_stats(id: &CmId) {
    if let Some(ctx) = id.context() {
        let c = ctx.counters();
        let line: Vec<String> = c.iter().map(|(n, v)| format!("{n}={v}")).collect();
        eprintln!("rverbs counters: {}", line.join(" "));
        eprintln!("rverbs faults: {:?}", ctx.fault_stats());
    }
    if let Some(s) = id.cm_stats() {
        eprintln!("rverbs cm: {s:?}");
    }
}

/// A failure, with rping's wording where it has one.
#[derive(Debug)]
pub struct RpingError(pub String);

impl std::fmt::Display for RpingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RpingError {}

impl From<rverbs::Error> for RpingError {
    fn from(e: rverbs::Error) -> Self {
        RpingError(e.to_string())
    }
}

fn fail<T>(s: impl Into<String>) -> Result<T, RpingError> {
    Err(RpingError(s.into()))
}

/// librdmacm's `rdma_event_str` names.
pub fn event_str(k: EventKind) -> &'static str {
    match k {
        EventKind::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
        EventKind::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
        EventKind::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
        EventKind::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
        EventKind::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
        EventKind::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
        EventKind::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
        EventKind::Rejected => "RDMA_CM_EVENT_REJECTED",
        EventKind::Established => "RDMA_CM_EVENT_ESTABLISHED",
        EventKind::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
        EventKind::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    }
}

/// The address of `-a` / `-I` (a name or a literal, as rping's `getaddrinfo`).
fn resolve(s: &str) -> Result<IpAddr, RpingError> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(ip);
    }
    match (s, 0).to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => Ok(a.ip()),
        _ => fail(format!(
            "getaddrinfo failed - invalid hostname or IP address: {s}"
        )),
    }
}

/// The ping text of ping `n` (rping's `rping_test_client`): `rdma-ping-N: `, then
/// letters from `start` cycling through 'A'..='z', a NUL last.
pub fn ping_data(n: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{n}: ").into_bytes();
    b.truncate(size.saturating_sub(1));
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

/// `struct rping_rdma_info` of a buffer.
pub fn info_bytes(r: &RemoteBuf) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..8].copy_from_slice(&r.addr.to_be_bytes());
    b[8..12].copy_from_slice(&r.rkey.to_be_bytes());
    b[12..].copy_from_slice(&r.len.to_be_bytes());
    b
}

/// The buffer a `struct rping_rdma_info` names.
pub fn parse_info(b: &[u8]) -> Option<RemoteBuf> {
    let b: &[u8; INFO_LEN] = b.get(..INFO_LEN)?.try_into().ok()?;
    Some(RemoteBuf {
        addr: u64::from_be_bytes(b[..8].try_into().ok()?),
        rkey: u32::from_be_bytes(b[8..12].try_into().ok()?),
        len: u32::from_be_bytes(b[12..].try_into().ok()?),
    })
}

/// The string in a buffer, up to its first NUL (as `printf("%s")`).
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// One connection's verbs objects (`struct rping_cb`'s).
struct Conn {
    id: CmId,
    ch: EventChannel,
    qp: Arc<Qp>,
    cq: Cq,
    recv: Mr,
    send: Mr,
    rdma: Mr,
    start: Option<Mr>,
    debug: bool,
    timeout: Duration,
    disconnected: bool,
}

/// What a wait ended with.
enum Got {
    Wc(Wc),
    Disconnected,
}

impl Conn {
    fn new(id: CmId, ch: EventChannel, o: &Opts) -> Result<Conn, RpingError> {
        let Some(ctx) = id.context() else {
            return fail("the CM ID has no device");
        };
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(SQ_DEPTH * 2)?;
        let cap = QpCap {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCap::default()
        };
        let qp = id.create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq).cap(cap))?;
        let remote = AccessFlags::LOCAL_WRITE
            .with(AccessFlags::REMOTE_READ)
            .with(AccessFlags::REMOTE_WRITE);
        let recv = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
        let send = pd.reg_mr(INFO_LEN, AccessFlags::NONE)?;
        let rdma = pd.reg_mr(o.size, remote)?;
        let start = if o.server {
            None
        } else {
            Some(pd.reg_mr(o.size, remote)?)
        };
        qp.post_recv(0, &[recv.slice(0..INFO_LEN)])?;
        Ok(Conn {
            id,
            ch,
            qp,
            cq,
            recv,
            send,
            rdma,
            start,
            debug: o.debug,
            timeout: o.timeout,
            disconnected: false,
        })
    }

    fn log(&self, s: impl FnOnce() -> String) {
        if self.debug {
            eprintln!("{}", s());
        }
    }

    /// A CM event for this connection: a disconnect is noted, errors end the run.
    fn cm_event(&mut self, e: &CmEvent, server: bool) -> Result<(), RpingError> {
        self.log(|| format!("cma_event type {} status {}", event_str(e.kind), e.status));
        match e.kind {
            EventKind::Disconnected => {
                eprintln!(
                    "{} DISCONNECT EVENT...",
                    if server { "server" } else { "client" }
                );
                self.disconnected = true;
                Ok(())
            }
            EventKind::Established | EventKind::TimewaitExit => Ok(()),
            k => fail(format!("cma event {}, error {}", event_str(k), e.status)),
        }
    }

    /// The next completion other than a SEND's, or the peer's disconnect.
    fn wait(&mut self, server: bool) -> Result<Got, RpingError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if self.disconnected {
                return Ok(Got::Disconnected);
            }
            let mut wc = [Wc::default()];
            if self.cq.poll_wait(&mut wc, Duration::from_millis(2))? == 1 {
                let wc = wc[0];
                if wc.status == WcStatus::WrFlushErr {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    return fail(format!("cq completion failed status {}", wc.status as u32));
                }
                match wc.opcode {
                    WcOpcode::Send => continue,
                    WcOpcode::Recv => {
                        if wc.byte_len as usize != INFO_LEN {
                            return fail(format!("Received bogus data, size {}", wc.byte_len));
                        }
                        self.qp.post_recv(0, &[self.recv.slice(0..INFO_LEN)])?;
                    }
                    _ => {}
                }
                return Ok(Got::Wc(wc));
            }
            while let Some(e) = self.ch.try_get_event() {
                self.cm_event(&e, server)?;
            }
            if Instant::now() >= deadline {
                return fail("timed out waiting for the peer");
            }
        }
    }

    fn post_info(&self, r: &RemoteBuf) -> Result<(), RpingError> {
        self.send.write(0, &info_bytes(r));
        self.post_send_info()
    }

    fn post_send_info(&self) -> Result<(), RpingError> {
        let wr = SendRequest::send(1, &[self.send.slice(0..INFO_LEN)]).signaled(true);
        Ok(self.qp.post_send(&wr)?)
    }

    fn received_info(&self) -> Option<RemoteBuf> {
        let mut b = [0u8; INFO_LEN];
        self.recv.read(0, &mut b);
        parse_info(&b)
    }

    /// The end of a run: the QP to ERR and a DREQ (or the DREP to the peer's), then
    /// the client waits for the peer's answer. A DREQ is resent only while its ID
    /// lives (kernel cm.c cancels it when the ID is destroyed) and the first resend
    /// comes after the REQ's timeout (about 4.6 s on RoCE), so the wait spans two of
    /// those: a lost DREQ then still reaches the server, which would otherwise wait
    /// for a peer that has gone.
    fn close(mut self, server: bool) {
        let _ = self.id.disconnect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server && !self.disconnected && Instant::now() < deadline {
            match self.ch.get_event(Some(Duration::from_millis(100))) {
                Some(e) if e.kind == EventKind::Disconnected => self.disconnected = true,
                _ => {}
            }
        }
    }
}

/// A tool's last step: its IDs are gone; the context closes once their CM has
/// stopped (deferred ACKs sent, capture finished), as the process's exit does not.
pub fn finish(ctx: Option<rverbs::Context>) {
    if let Some(c) = ctx {
        rverbs::cm::close(c, Duration::from_secs(2));
    }
}

fn expect_event(ch: &EventChannel, want: EventKind, o: &Opts) -> Result<CmEvent, RpingError> {
    match ch.get_event(Some(o.timeout)) {
        Some(e) if e.kind == want => {
            if o.debug {
                eprintln!("cma_event type {}", event_str(e.kind));
            }
            Ok(e)
        }
        Some(e) => fail(format!(
            "cma event {}, error {}",
            event_str(e.kind),
            e.status
        )),
        None => fail(format!("timed out waiting for {}", event_str(want))),
    }
}

fn create_id(ch: &EventChannel, o: &Opts) -> Result<CmId, RpingError> {
    if let Some(ctx) = &o.ctx {
        return Ok(CmId::create_on(ch, ctx, PortSpace::Tcp)?);
    }
    Ok(match &o.dev {
        Some(d) => {
            let ctx = rverbs::device(Some(d))?.open()?;
            CmId::create_on(ch, &ctx, PortSpace::Tcp)?
        }
        None => CmId::create(ch, PortSpace::Tcp)?,
    })
}

/// Runs rping; ping data goes to `out` (`-v`), everything else to stderr.
pub fn run(o: &Opts, out: &mut dyn Write) -> Result<(), RpingError> {
    if !(MIN_SIZE..=MAX_SIZE).contains(&o.size) {
        return fail(format!(
            "Invalid size {} (valid range is {MIN_SIZE} to {})",
            o.size,
            MAX_SIZE + 1
        ));
    }
    if o.server {
        server(o, out)
    } else {
        client(o, out)
    }
}

fn server(o: &Opts, out: &mut dyn Write) -> Result<(), RpingError> {
    let ch = EventChannel::new()?;
    let listener = create_id(&ch, o)?;
    let ip = match &o.addr {
        Some(a) => resolve(a)?,
        None => IpAddr::from([0u8; 4]),
    };
    listener
        .bind_addr(SocketAddr::new(ip, o.port))
        .map_err(|e| RpingError(format!("rdma_bind_addr: {e}")))?;
    listener
        .listen(3)
        .map_err(|e| RpingError(format!("rdma_listen: {e}")))?;
    let ctx = listener.context();
    // On the loopback device every context has its own 127.0.0.x: say which.
    if o.debug || (ip.is_unspecified() && ctx.as_ref().is_some_and(|c| c.device().is_loopback())) {
        let ctx_ip = ctx.and_then(|c| rverbs::cm::local_ip(&c, ip.is_ipv6()));
        eprintln!(
            "listening on {} (device address {})",
            listener
                .local_addr()
                .map_or_else(String::new, |a| a.to_string()),
            ctx_ip.map_or_else(|| "none".into(), |i| i.to_string())
        );
    }
    let req = expect_event(&ch, EventKind::ConnectRequest, o)?;
    let mut c = Conn::new(req.id.clone(), ch.clone(), o)?;
    c.id.accept(&ConnParam::default())
        .map_err(|e| RpingError(format!("rdma_accept: {e}")))?;
    let r = server_loop(&mut c, o, out);
    if let Err(e) = &r {
        eprintln!("rping server failed: {e}");
    }
    let id = c.id.clone();
    c.close(true);
    if o.stats {
        print_stats(&id);
    }
    let ctx = id.context();
    drop((id, req, listener, ch));
    finish(ctx);
    r
}

fn server_loop(c: &mut Conn, o: &Opts, out: &mut dyn Write) -> Result<(), RpingError> {
    loop {
        // The client's source advertisement.
        if let Got::Disconnected = c.wait(true)? {
            eprintln!("wait for RDMA_READ_ADV state 10");
            return Ok(());
        }
        let Some(src) = c.received_info() else {
            return fail("bad advertisement");
        };
        c.log(|| {
            format!(
                "Received rkey {:x} addr {:x} len {} from peer",
                src.rkey, src.addr, src.len
            )
        });
        if src.len as usize > o.size || src.len == 0 {
            return fail(format!(
                "the client's buffer ({} bytes) does not fit ours ({})",
                src.len, o.size
            ));
        }
        let len = src.len as usize;
        c.qp.post_send(&SendRequest::read(2, &[c.rdma.slice(0..len)], src).signaled(true))?;
        match c.wait(true)? {
            Got::Wc(wc) if wc.opcode == WcOpcode::RdmaRead => {}
            _ => return fail("wait for RDMA_READ_COMPLETE state"),
        }
        let mut data = vec![0u8; o.size];
        c.rdma.read(0, &mut data);
        if o.verbose {
            let _ = writeln!(out, "server ping data: {}", c_str(&data));
            let _ = out.flush();
        }
        // Go ahead (rping's server never fills its send buffer: 16 zero bytes).
        c.post_send_info()?;
        // The client's sink advertisement.
        let sink = match c.wait(true)? {
            Got::Wc(wc) if wc.opcode == WcOpcode::Recv => c.received_info(),
            _ => return fail("wait for RDMA_WRITE_ADV state"),
        };
        let Some(sink) = sink else {
            return fail("bad advertisement");
        };
        let n = data
            .iter()
            .position(|&b| b == 0)
            .map_or(data.len(), |p| p + 1);
        if n > sink.len as usize {
            return fail("the client's sink is shorter than the ping data");
        }
        let dst = RemoteBuf {
            len: n as u32,
            ..sink
        };
        c.qp.post_send(&SendRequest::write(3, &[c.rdma.slice(0..n)], dst).signaled(true))?;
        match c.wait(true)? {
            Got::Wc(wc) if wc.opcode == WcOpcode::RdmaWrite => {}
            _ => return fail("wait for RDMA_WRITE_COMPLETE state"),
        }
        c.post_send_info()?;
    }
}

fn client(o: &Opts, out: &mut dyn Write) -> Result<(), RpingError> {
    let Some(a) = &o.addr else {
        return fail("a client needs the server's address (-a)");
    };
    let dst = SocketAddr::new(resolve(a)?, o.port);
    let src = o.source.as_deref().map(resolve).transpose()?;
    let ch = EventChannel::new()?;
    let id = create_id(&ch, o)?;
    id.resolve_addr(src, dst, Duration::from_secs(2))
        .map_err(|e| RpingError(format!("rdma_resolve_addr: {e}")))?;
    expect_event(&ch, EventKind::AddrResolved, o)?;
    id.resolve_route(Duration::from_secs(2))
        .map_err(|e| RpingError(format!("rdma_resolve_route: {e}")))?;
    expect_event(&ch, EventKind::RouteResolved, o)?;
    let mut c = Conn::new(id, ch.clone(), o)?;
    c.id.connect(&ConnParam::default())
        .map_err(|e| RpingError(format!("rdma_connect: {e}")))?;
    expect_event(&ch, EventKind::Established, o)?;
    let r = client_loop(&mut c, o, out);
    if let Err(e) = &r {
        eprintln!("rping client failed: {e}");
    }
    let id = c.id.clone();
    c.close(false);
    if o.stats {
        print_stats(&id);
    }
    let ctx = id.context();
    drop((id, ch));
    finish(ctx);
    r
}

fn client_loop(c: &mut Conn, o: &Opts, out: &mut dyn Write) -> Result<(), RpingError> {
    let Some(start_mr) = c.start.take() else {
        return fail("no source buffer");
    };
    let mut start = 65u8;
    let mut ping = 0u64;
    let r = (|| loop {
        if o.count != 0 && ping >= o.count {
            return Ok(());
        }
        let data = ping_data(ping, start, o.size);
        start = if start >= 122 { 65 } else { start + 1 };
        start_mr.write(0, &data);
        c.post_info(&start_mr.remote(0..o.size))?;
        // The server read it and says go ahead.
        match c.wait(false)? {
            Got::Wc(wc) if wc.opcode == WcOpcode::Recv => {}
            Got::Disconnected => return Ok(()),
            _ => return fail("wait for RDMA_WRITE_ADV state"),
        }
        c.post_info(&c.rdma.remote(0..o.size))?;
        // The server wrote the sink and says so.
        match c.wait(false)? {
            Got::Wc(wc) if wc.opcode == WcOpcode::Recv => {}
            Got::Disconnected => return Ok(()),
            _ => return fail("wait for RDMA_WRITE_COMPLETE state"),
        }
        let mut sink = vec![0u8; o.size];
        c.rdma.read(0, &mut sink);
        if o.validate && sink != data {
            return fail("data mismatch!");
        }
        if o.verbose {
            let _ = writeln!(out, "ping data: {}", c_str(&sink));
            let _ = out.flush();
        }
        ping += 1;
    })();
    c.start = Some(start_mr);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_data_is_rpings() {
        let d = ping_data(0, 65, 64);
        assert_eq!(d.len(), 64);
        assert_eq!(&d[..16], b"rdma-ping-0: ABC");
        assert_eq!(d[63], 0);
        // The alphabet wraps from 'z' to 'A'.
        let d = ping_data(12, 120, MIN_SIZE);
        assert_eq!(&d[..19], b"rdma-ping-12: xyzAB");
        assert_eq!(d.len(), MIN_SIZE);
    }

    #[test]
    fn info_round_trip() {
        let r = RemoteBuf {
            addr: 0x1122_3344_5566_7788,
            rkey: 0xabcd,
            len: 64,
        };
        let b = info_bytes(&r);
        assert_eq!(&b[..8], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(parse_info(&b), Some(r));
        assert_eq!(parse_info(&b[..15]), None);
    }

    #[test]
    fn sizes_are_checked() {
        let o = Opts {
            server: true,
            addr: None,
            source: None,
            port: 1,
            count: 1,
            size: MIN_SIZE - 1,
            verbose: false,
            validate: false,
            debug: false,
            dev: None,
            timeout: Duration::from_secs(1),
            ctx: None,
            stats: false,
        };
        let e = run(&o, &mut Vec::new()).unwrap_err();
        assert!(e.0.starts_with("Invalid size 25"), "{e}");
    }

    /// Both roles of this implementation in one process over the loopback device.
    #[test]
    fn server_and_client_over_loopback() {
        let dev = rverbs::device(None).unwrap();
        let (sctx, cctx) = (dev.open().unwrap(), dev.open().unwrap());
        let ip = rverbs::cm::local_ip(&sctx, false).unwrap();
        let port = {
            // A free port of the TCP space: bind, read, drop.
            let ch = EventChannel::new().unwrap();
            let l = CmId::create_on(&ch, &sctx, PortSpace::Tcp).unwrap();
            l.bind_addr(SocketAddr::new(ip, 0)).unwrap();
            l.local_addr().unwrap().port()
        };
        let base = Opts {
            server: true,
            addr: Some(ip.to_string()),
            source: None,
            port,
            count: 5,
            size: 100,
            verbose: true,
            validate: true,
            debug: false,
            dev: None,
            timeout: Duration::from_secs(10),
            ctx: Some(sctx),
            stats: true,
        };
        let so = base.clone();
        let srv = std::thread::spawn(move || {
            let mut out = Vec::new();
            run(&so, &mut out).map(|_| out)
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut out = Vec::new();
        let co = Opts {
            server: false,
            ctx: Some(cctx),
            ..base
        };
        run(&co, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(s.lines().count(), 5, "{s}");
        assert!(s.starts_with("ping data: rdma-ping-0: ABCD"), "{s}");
        let sout = String::from_utf8(srv.join().unwrap().unwrap()).unwrap();
        assert_eq!(sout.lines().count(), 5, "{sout}");
        assert!(sout
            .lines()
            .nth(4)
            .unwrap()
            .starts_with("server ping data: rdma-ping-4: EFGH"));
    }
}
