//! `--perftest -R`: perftest's RDMA CM mode, on [`rverbs::cm`].
//!
//! With `-R` perftest opens no TCP socket: it connects twice through the RDMA CM on
//! the same port (`src/perftest_communication.c`, `establish_connection`,
//! `rdma_client_connect` / `rdma_server_connect`, `create_rdma_cm_connection`):
//!
//! 1. a *control* RC connection (port space TCP, no READs offered, RNR retry 7): each
//!    side keeps one 56-byte receive posted (`post_one_recv_wqe`) and every exchange
//!    step is a SEND of the step's bytes (`ctx_xchg_data_rdma`, `rdma_write_keys`,
//!    `rdma_read_keys`): the client sends then receives, the server receives (and
//!    posts the next receive) then sends. The steps are those of the TCP exchange, but
//!    a key message is the binary `struct pingpong_dest` ([`encode`]), not text, and
//!    the last step sends no `"done"` (`ctx_close_connection`).
//! 2. the test's QPs, one CM connection each, made between two handshakes of zeroed
//!    keys after the MTU check (`create_rdma_cm_connection`): the server's listener
//!    from step 1 is gone by then (`rdma_server_connect` destroys it) and it listens
//!    again for `-q` requests (`rdma_cm_server_connection`), the client resolves and
//!    connects each (`_rdma_cm_client_connection`), offering READ/atomic depth only for
//!    the READ and atomic tools, with RNR retries = its retry count. The CM moves the
//!    QPs; the QP numbers and PSNs of the later key handshakes are not used.
//! 3. with `-c UD` the test's QPs are UD, in the UDP port space: the client resolves
//!    each with SIDR and sends to the QPN and Q_Key of the SIDR reply
//!    (`rdma_cm_establish_ud_connection`); in a latency test it first sends the server
//!    its QPN as immediate data, for which the server posted a receive before
//!    accepting (`rdma_cm_request_ud_connection_parameters`,
//!    `rdma_cm_initialize_ud_connection_parameters`); nothing is disconnected.
//!
//! perftest's server listens again only after its half of the first zeroed handshake,
//! so a client may come too early and be rejected (reason 8): we retry for a while
//! (perftest's client retries 10 times, 100 ms apart, in `rdma_cm_client_connection`).
//! Our server listens again before that handshake, so a client never comes too early.

use super::{Dest, OUT_READS};
use rverbs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventKind, PortSpace, UdParam};
use rverbs::{AccessFlags, Context, Cq, Gid, Mr, Pd, Qp, QpInitAttr, QpType, RemoteBuf};
use rverbs::{SendRequest, Wc};
use rverbs::{WcOpcode, WcStatus};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `sizeof(struct pingpong_dest)` (`perftest_resources.h`): five 32-bit fields, 4
/// bytes of padding, the 64-bit address, the 16-byte GID, the SRQ number and the GID
/// index. Also the size of the control connection's receives.
pub const DEST_LEN: usize = 56;
/// perftest's `wr_id` of every control SEND and receive (`SYNC_SPEC_ID`).
const SYNC_SPEC_ID: u64 = 5;
/// Our `wr_id` of a liveness probe on the control QP.
const PROBE_ID: u64 = 6;
/// How often a wait with no time limit probes the peer.
const PROBE_EVERY: Duration = Duration::from_secs(5);
/// How long a client keeps connecting while the server rejects it for not listening
/// (yet): a server on a slow host listens again only after its handshake.
const CONNECT_FOR: Duration = Duration::from_secs(10);

/// [`CONNECT_FOR`], or the handshake timeout when that is shorter.
pub fn connect_for() -> Duration {
    CONNECT_FOR.min(super::peer_timeout())
}
/// Between two connection attempts (perftest's 100 ms).
const RETRY_GAP: Duration = Duration::from_millis(100);
/// The most one step of a connection (address, route, the answer to a REQ) may take:
/// beyond the CM's own limit (an unanswered REQ is given up after its 15 retries at
/// rdma_cm's response timeout, about a minute), so the CM's event comes first.
const STEP: Duration = Duration::from_secs(90);
/// The most a closing side waits for the peer's disconnect.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The key message of `rdma_write_keys`: `struct pingpong_dest` with every integer
/// big-endian (perftest built with `HAVE_ENDIAN`, as Debian's is).
pub fn encode(d: &Dest) -> [u8; DEST_LEN] {
    let mut m = [0u8; DEST_LEN];
    m[0..4].copy_from_slice(&u32::from(d.lid).to_be_bytes());
    m[4..8].copy_from_slice(&u32::from(d.out_reads).to_be_bytes());
    m[8..12].copy_from_slice(&d.qpn.to_be_bytes());
    m[12..16].copy_from_slice(&d.psn.to_be_bytes());
    m[16..20].copy_from_slice(&d.rkey.to_be_bytes());
    m[24..32].copy_from_slice(&d.vaddr.to_be_bytes());
    m[32..48].copy_from_slice(&d.gid.octets());
    m[48..52].copy_from_slice(&d.srqn.to_be_bytes());
    m
}

/// A peer's key message (what `rdma_read_keys` takes from it: the SRQ number and GID
/// index are not read). Values no QP can have are an error.
pub fn decode(m: &[u8]) -> Result<Dest, String> {
    if m.len() < DEST_LEN {
        return Err(format!(
            "perftest key message of {} bytes, want {DEST_LEN}",
            m.len()
        ));
    }
    let u = |i: usize| u32::from_be_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]);
    let small = |v: u32, max: u32, what: &str| {
        if v > max {
            Err(format!("perftest key: bad {what} {v:#x}"))
        } else {
            Ok(v)
        }
    };
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&m[32..48]);
    let mut vaddr = [0u8; 8];
    vaddr.copy_from_slice(&m[24..32]);
    Ok(Dest {
        lid: small(u(0), 0xffff, "LID")? as u16,
        out_reads: small(u(4), 0xffff, "out_reads")? as u16,
        qpn: small(u(8), 0xff_ffff, "QPN")?,
        psn: small(u(12), 0xff_ffff, "PSN")?,
        rkey: u(16),
        vaddr: u64::from_be_bytes(vaddr),
        gid: Gid(gid),
        srqn: 0,
    })
}

/// What a REJ reason means (IBTA 12.6.7.2 Table 112; the kernel's `ib_cm_rej_reason`).
fn rej_text(reason: i32) -> String {
    let why = match reason {
        1 => "no QP",
        3 => "no resources",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid communication ID",
        8 => "invalid service ID: nobody listens on the port",
        9 => "invalid transport type",
        10 => "stale connection",
        12 => "invalid GID",
        28 => "rejected by the peer's program",
        _ => "see IBTA 12.6.7.2",
    };
    format!("rejected (REJ reason {reason}, {why})")
}

/// The peer's IPv4 address for `server` (perftest resolves `AF_INET` only).
pub fn resolve(server: &str, port: u16) -> Result<SocketAddr, String> {
    let addrs = (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("-R: cannot resolve {server}: {e}"))?;
    let mut v4 = addrs.filter(SocketAddr::is_ipv4).peekable();
    v4.next()
        .ok_or_else(|| format!("-R: {server} has no IPv4 address (perftest's -R speaks IPv4)"))
}

/// Waits for the next event of `id` on `ch` (others are left behind), up to `wait`.
fn event_of(ch: &EventChannel, id: &CmId, wait: Duration, what: &str) -> Result<CmEvent, String> {
    let end = Instant::now() + wait;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match ch.get_event(Some(left)) {
            Some(e) if e.id == *id => return Ok(e),
            Some(_) => {}
            None => return Err(format!("-R: no answer to {what} within {wait:?}")),
        }
    }
}

/// An event other than the one wanted, as an error.
fn unexpected(e: &CmEvent, what: &str, to: SocketAddr) -> String {
    match e.kind {
        EventKind::Rejected => format!("-R: {what} to {to}: {}", rej_text(e.status)),
        EventKind::Unreachable if e.status > 0 => {
            format!("-R: {what} to {to}: SIDR reply status {}", e.status)
        }
        EventKind::Unreachable => format!("-R: {what} to {to}: the peer did not answer"),
        k => format!("-R: {what} to {to}: {k:?} (status {})", e.status),
    }
}

/// One connection the active side made: its ID, its QP, and for UD where the peer's
/// QP is (the SIDR reply's QPN and Q_Key, and the path to it).
pub struct Connected {
    /// The connection's ID.
    pub id: CmId,
    /// Its QP, moved to RTS by the CM.
    pub qp: Arc<Qp>,
    /// UD: the peer's QP, Q_Key and the AH attributes towards it.
    pub ud: Option<UdParam>,
}

/// The active side of one connection: a new ID of port space `ps` on `ctx` and `ch`,
/// its address and route resolved, its QP made by `mk_qp`, a REQ (UDP: a SIDR_REQ)
/// with `param`, until the peer accepts. A rejection for nobody listening (reason 8;
/// for SIDR the status "unsupported" (1), the kernel's answer then) is tried again,
/// every [`RETRY_GAP`], up to `until`; every other failure is an error at once.
pub fn connect_one(
    ctx: &Context,
    ch: &EventChannel,
    to: SocketAddr,
    ps: PortSpace,
    param: &ConnParam,
    until: Instant,
    mk_qp: &dyn Fn(&CmId) -> Result<Arc<Qp>, String>,
) -> Result<Connected, String> {
    let e = |what: &str, err: rverbs::Error| format!("-R: {what} {to}: {err}");
    loop {
        let id = CmId::create_on(ch, ctx, ps).map_err(|x| e("a CM ID for", x))?;
        id.resolve_addr(None, to, Duration::from_secs(2))
            .map_err(|x| e("resolving", x))?;
        let ev = event_of(ch, &id, STEP, "the address resolution")?;
        if ev.kind != EventKind::AddrResolved {
            return Err(unexpected(&ev, "resolving the address", to));
        }
        id.resolve_route(Duration::from_secs(2))
            .map_err(|x| e("a route to", x))?;
        let ev = event_of(ch, &id, STEP, "the route resolution")?;
        if ev.kind != EventKind::RouteResolved {
            return Err(unexpected(&ev, "resolving the route", to));
        }
        let qp = mk_qp(&id)?;
        id.connect(param).map_err(|x| e("connecting to", x))?;
        let ev = event_of(ch, &id, STEP, "the connection request")?;
        let nobody = match (ps, ev.kind) {
            (PortSpace::Udp, EventKind::Unreachable) => {
                ev.status == i32::from(rverbs::cm::sidr_status::UNSUPPORTED)
            }
            (_, EventKind::Rejected) => {
                ev.status == i32::from(rverbs::cm::reject_reason::INVALID_SERVICE_ID)
            }
            _ => false,
        };
        match ev.kind {
            EventKind::Established if ps == PortSpace::Udp && ev.ud.is_none() => {
                return Err(format!("-R: the SIDR reply from {to} names no QP"))
            }
            EventKind::Established => return Ok(Connected { id, qp, ud: ev.ud }),
            _ if nobody && Instant::now() + RETRY_GAP < until => {
                std::thread::sleep(RETRY_GAP);
            }
            _ => return Err(unexpected(&ev, "connecting", to)),
        }
    }
}

/// A listener of port space `ps` on `port` of every address of `ctx`'s device
/// (perftest binds `INADDR_ANY`), taking `backlog` requests.
pub fn listen(
    ctx: &Context,
    ch: &EventChannel,
    ps: PortSpace,
    port: u16,
    backlog: u32,
) -> Result<CmId, String> {
    let id = CmId::create_on(ch, ctx, ps).map_err(|e| listen_err(port, e))?;
    id.bind_addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
        .map_err(|e| listen_err(port, e))?;
    id.listen(backlog).map_err(|e| listen_err(port, e))?;
    Ok(id)
}

fn listen_err(port: u16, e: rverbs::Error) -> String {
    format!("-R: cannot listen on port {port}: {e}")
}

/// The next connect request to the listener on `ch`, up to `wait` (`None`: as long as
/// it takes, as perftest's server waits for its client).
pub fn next_request(ch: &EventChannel, wait: Option<Duration>) -> Result<CmId, String> {
    let end = wait.map(|w| Instant::now() + w);
    loop {
        let left = end.map(|e| e.saturating_duration_since(Instant::now()));
        match ch.get_event(left) {
            Some(e) if e.kind == EventKind::ConnectRequest => return Ok(e.id),
            Some(_) => {}
            None if end.is_some() => {
                return Err("-R: the client did not connect its test QPs".into())
            }
            None => {}
        }
    }
}

/// The connection perftest exchanges its parameters over (`comm->rdma_ctx`).
pub struct CmLink {
    id: CmId,
    qp: Arc<Qp>,
    /// Our SEND (bytes 0..64) and the posted receive (64..128).
    mr: Mr,
    scq: Cq,
    rcq: Cq,
    ch: EventChannel,
    _pd: Pd,
    client: bool,
    /// How long a receive may wait (`None`: until the peer's message or disconnect,
    /// with liveness probes).
    pub wait: Option<Duration>,
    /// A liveness probe is outstanding.
    probing: bool,
}

/// Both queues of the control QP: one SEND and one receive at a time
/// (`create_comm_struct`: depths 1).
fn control_qp(id: &CmId, pd: &Pd, scq: &Cq, rcq: &Cq) -> Result<Arc<Qp>, String> {
    let mut a = QpInitAttr::new(QpType::Rc, scq).recv_cq(rcq);
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    id.create_qp(pd, &a)
        .map_err(|e| format!("-R: control QP: {e}"))
}

/// The control connection's parameters (`rdma_client_connect`: no READs, the retry
/// count, RNR retry 7).
fn control_param(retry_count: u8) -> ConnParam {
    ConnParam {
        private_data: Vec::new(),
        responder_resources: 0,
        initiator_depth: 0,
        retry_count,
        rnr_retry_count: 7,
    }
}

/// The test QPs' parameters (`rdma_cm_route_handler` and
/// `rdma_cm_connection_request_handler`): READ/atomic depth for those tools only, RNR
/// retries = the retry count.
pub fn data_param(reads: bool, retry_count: u8) -> ConnParam {
    let depth = if reads { OUT_READS.min(255) as u8 } else { 0 };
    ConnParam {
        private_data: Vec::new(),
        responder_resources: depth,
        initiator_depth: depth,
        retry_count,
        rnr_retry_count: retry_count,
    }
}

impl CmLink {
    fn parts(ctx: &Context) -> Result<(Pd, Cq, Cq, Mr), String> {
        let e = |e: rverbs::Error| format!("-R: control connection: {e}");
        let pd = ctx.alloc_pd().map_err(e)?;
        let scq = ctx.create_cq(8).map_err(e)?;
        let rcq = ctx.create_cq(8).map_err(e)?;
        let mr = pd.reg_mr(128, AccessFlags::LOCAL_WRITE).map_err(e)?;
        Ok((pd, scq, rcq, mr))
    }

    fn link(
        id: CmId,
        qp: Arc<Qp>,
        (pd, scq, rcq, mr): (Pd, Cq, Cq, Mr),
        ch: EventChannel,
        client: bool,
    ) -> CmLink {
        CmLink {
            id,
            qp,
            mr,
            scq,
            rcq,
            ch,
            _pd: pd,
            client,
            wait: None,
            probing: false,
        }
    }

    fn post_recv(qp: &Qp, mr: &Mr) -> Result<(), String> {
        qp.post_recv(SYNC_SPEC_ID, &[mr.slice(64..64 + DEST_LEN)])
            .map_err(|e| format!("-R: control receive: {e}"))
    }

    /// The client's control connection to `to` (`rdma_client_connect`).
    pub fn connect(ctx: &Context, to: SocketAddr, retry_count: u8) -> Result<CmLink, String> {
        let (pd, scq, rcq, mr) = Self::parts(ctx)?;
        let ch = EventChannel::new().map_err(|e| format!("-R: {e}"))?;
        let mk = |id: &CmId| {
            let qp = control_qp(id, &pd, &scq, &rcq)?;
            Self::post_recv(&qp, &mr)?;
            Ok(qp)
        };
        let until = Instant::now() + connect_for();
        let param = control_param(retry_count);
        let c = connect_one(ctx, &ch, to, PortSpace::Tcp, &param, until, &mk)?;
        Ok(Self::link(c.id, c.qp, (pd, scq, rcq, mr), ch, true))
    }

    /// The server's control connection on `port` (`rdma_server_connect`): the first
    /// request, accepted with a receive posted; the listener is gone on return.
    pub fn accept(ctx: &Context, port: u16, retry_count: u8) -> Result<CmLink, String> {
        let (pd, scq, rcq, mr) = Self::parts(ctx)?;
        let ch = EventChannel::new().map_err(|e| format!("-R: {e}"))?;
        let listener = listen(ctx, &ch, PortSpace::Tcp, port, 1)?;
        let id = next_request(&ch, None)?;
        drop(listener);
        let qp = control_qp(&id, &pd, &scq, &rcq)?;
        Self::post_recv(&qp, &mr)?;
        id.accept(&control_param(retry_count))
            .map_err(|e| format!("-R: accepting the control connection: {e}"))?;
        Ok(Self::link(id, qp, (pd, scq, rcq, mr), ch, false))
    }

    fn send(&mut self, mine: &[u8]) -> Result<(), String> {
        self.mr.write(0, mine);
        self.qp
            .post_send(&SendRequest::send(
                SYNC_SPEC_ID,
                &[self.mr.slice(0..mine.len())],
            ))
            .map_err(|e| format!("-R: control SEND: {e}"))?;
        // A SEND the peer has no receive for is retried (RNR retry 7, forever); the
        // peer's CM disconnect or our time limit ends the wait.
        let wc = self.one(true, Some(self.wait.unwrap_or(STEP)))?;
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Send {
            return Err(format!(
                "-R: control SEND failed: {:?} ({:?})",
                wc.status, wc.opcode
            ));
        }
        Ok(())
    }

    fn recv(&mut self, len: usize) -> Result<Vec<u8>, String> {
        let wc = self.one(false, self.wait)?;
        if wc.status != WcStatus::Success {
            // A failed probe is why the receive was flushed.
            let mut p = [Wc::default()];
            if self.scq.poll(&mut p).map_err(|e| format!("-R: {e}"))? == 1 {
                self.probe_done(&p[0])?;
            }
            return Err(format!("-R: control receive failed: {:?}", wc.status));
        }
        if (wc.byte_len as usize) < len {
            return Err(format!(
                "-R: the peer sent {} bytes, want {len} (another step of the exchange?)",
                wc.byte_len
            ));
        }
        let mut b = vec![0u8; len];
        self.mr.read(64, &mut b);
        Self::post_recv(&self.qp, &self.mr)?;
        Ok(b)
    }

    /// The next completion of the exchange on the send (`send`) or receive queue, up
    /// to `wait`; the peer's disconnect ends the wait. A wait with no limit (for the
    /// peer's end of a run) sends a liveness probe every [`PROBE_EVERY`]: a peer whose
    /// process died sends no DREQ on a userspace device, and the probe's failure
    /// (transport retries exhausted) ends the wait instead.
    fn one(&mut self, send: bool, wait: Option<Duration>) -> Result<Wc, String> {
        let end = wait.map(|w| Instant::now() + w);
        let mut next_probe = Instant::now() + PROBE_EVERY;
        let mut wc = [Wc::default()];
        loop {
            if !send && self.scq.poll(&mut wc).map_err(|e| format!("-R: {e}"))? == 1 {
                self.probe_done(&wc[0])?;
            }
            let cq = if send { &self.scq } else { &self.rcq };
            if cq
                .poll_wait(&mut wc, Duration::from_millis(200))
                .map_err(|e| format!("-R: {e}"))?
                == 1
            {
                if wc[0].wr_id != PROBE_ID {
                    return Ok(wc[0]);
                }
                self.probe_done(&wc[0])?;
            }
            if let Some(ev) = self.ch.get_event(Some(Duration::ZERO)) {
                if ev.id == self.id && ev.kind == EventKind::Disconnected {
                    return Err("-R: the peer closed the control connection".into());
                }
            }
            if end.is_some_and(|e| Instant::now() > e) {
                return Err(format!(
                    "-R: the peer did not answer within {:?}",
                    wait.unwrap_or_default()
                ));
            }
            if end.is_none() && !self.probing && Instant::now() >= next_probe {
                // IBTA C9-88: the responder checks no R_Key or address for a
                // zero-length RDMA WRITE; it touches no memory and takes no receive.
                let none = RemoteBuf {
                    addr: 0,
                    rkey: 0,
                    len: 0,
                };
                self.qp
                    .post_send(&SendRequest::write(PROBE_ID, &[], none))
                    .map_err(|e| format!("-R: liveness probe: {e}"))?;
                self.probing = true;
                next_probe = Instant::now() + PROBE_EVERY;
            }
        }
    }

    /// A send-queue completion met while waiting: a probe's (an error means the peer
    /// is gone), or the error of a SEND.
    fn probe_done(&mut self, wc: &Wc) -> Result<(), String> {
        if wc.wr_id == PROBE_ID {
            self.probing = false;
        }
        if wc.status != WcStatus::Success {
            return Err(format!(
                "-R: the peer is gone (a liveness probe on the control connection: {:?})",
                wc.status
            ));
        }
        Ok(())
    }

    /// One exchange step (`ctx_xchg_data_rdma`): the client sends then receives, the
    /// server receives then sends; both messages are `mine.len()` bytes.
    pub fn xchg(&mut self, mine: &[u8]) -> Result<Vec<u8>, String> {
        if mine.len() > DEST_LEN {
            return Err(format!("-R: an exchange step of {} bytes", mine.len()));
        }
        if self.client {
            self.send(mine)?;
            self.recv(mine.len())
        } else {
            let theirs = self.recv(mine.len())?;
            self.send(mine)?;
            Ok(theirs)
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.id
            .peer_addr()
            .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))
    }

    /// Ends the control connection (a DREQ, or the answer to the peer's), waiting a
    /// little for the answer.
    pub fn close(&self) {
        close_ids(
            &self.ch,
            std::slice::from_ref(&self.id),
            Duration::ZERO,
            Duration::from_secs(2),
        );
    }
}

/// The test QPs' CM connections.
pub struct DataConns {
    /// One per QP, in the QPs' order.
    pub ids: Vec<CmId>,
    /// Where their events (and the listener's requests) come.
    pub ch: EventChannel,
    /// A listener made before the first handshake of zeroed keys (server).
    pub listener: Option<CmId>,
    /// UD (SIDR): nothing to disconnect (`rdma_cm_disconnect_nodes` skips UD).
    pub ud: bool,
}

impl DataConns {
    /// Ends the test's connections: the client disconnects at once (as perftest's
    /// `rdma_cm_disconnect_nodes`), the server first waits for the client to (up to
    /// [`CLOSE_WAIT`]: its QPs answer the client's last packets meanwhile).
    pub fn close(&self, client: bool) {
        if self.ud {
            return;
        }
        let wait = if client { Duration::ZERO } else { CLOSE_WAIT };
        close_ids(&self.ch, &self.ids, wait, Duration::from_secs(2));
    }
}

/// Waits until every ID in `ids` saw its `Disconnected`, up to `wait`; returns those
/// still connected.
fn wait_disconnected(ch: &EventChannel, ids: &[CmId], wait: Duration) -> Vec<CmId> {
    let mut left: Vec<CmId> = ids.to_vec();
    let end = Instant::now() + wait;
    while !left.is_empty() {
        let t = end.saturating_duration_since(Instant::now());
        match ch.get_event(Some(t)) {
            Some(e) if e.kind == EventKind::Disconnected => left.retain(|i| *i != e.id),
            Some(_) => {}
            None => break,
        }
    }
    left
}

/// Waits up to `first` for the peer to disconnect `ids`, then disconnects every one
/// (`rdma_disconnect`: the DREP to a peer's DREQ, else our DREQ) and waits up to
/// `answer` for the DREPs to ours.
fn close_ids(ch: &EventChannel, ids: &[CmId], first: Duration, answer: Duration) {
    let ours = wait_disconnected(ch, ids, first);
    for id in ids {
        // An ID already past its DREP (TIMEWAIT) refuses: nothing is left to say.
        let _ = id.disconnect();
    }
    wait_disconnected(ch, &ours, answer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_in_perftest_layout() {
        let d = Dest {
            lid: 0,
            out_reads: 16,
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            rkey: 0xdead_beef,
            vaddr: 0x7f00_1234_5678,
            gid: Gid([1; 16]),
            srqn: 0,
        };
        let m = encode(&d);
        // out_reads big-endian at 4, the address at 24 (after 4 bytes of padding).
        assert_eq!(&m[4..8], &[0, 0, 0, 16]);
        assert_eq!(&m[24..32], &0x7f00_1234_5678u64.to_be_bytes());
        assert_eq!(decode(&m).unwrap(), d);
        let mut bad = m;
        bad[8] = 1; // a QPN above 24 bits
        assert!(decode(&bad).unwrap_err().contains("QPN"));
        assert!(decode(&m[..20]).unwrap_err().contains("20 bytes"));
    }

    #[test]
    fn peers_are_ipv4_as_perftest_resolves_them() {
        assert_eq!(
            resolve("127.0.0.1", 18515).unwrap(),
            "127.0.0.1:18515".parse().unwrap()
        );
        assert!(resolve("::1", 18515).unwrap_err().contains("IPv4"));
        assert!(resolve("no such host.invalid", 1).is_err());
    }

    #[test]
    fn reject_reasons_are_named() {
        assert!(rej_text(8).contains("nobody listens"));
        assert!(rej_text(28).contains("reason 28"));
    }
}
