//! `rverbs pingpong {rc|uc|ud} [SERVER]`: wire- and handshake-compatible with rdma-core's
//! `ibv_rc_pingpong`, `ibv_uc_pingpong` and `ibv_ud_pingpong` (libibverbs/examples), so
//! either side can be a real rdma-core tool on a host with rxe or a RoCE NIC.
//!
//! The exchange: the client connects to TCP port 18515 and sends
//! `"%04x:%06x:%06x:%s\0"` (LID, QPN, PSN, GID as 32 hex digits of its raw bytes), 52
//! bytes; the server connects its QP, answers with its own 52 bytes, and the client
//! answers `"done\0"`. Then both ping-pong SENDs of `size` bytes `iters` times, each
//! side posting its next send once its previous send and receive have completed.
//!
//! **`--reply-from-wc` (UD).** The server ignores the address the client announces and
//! answers every datagram through an address handle built from its work completion and
//! GRH area (`create_ah_from_wc`): destination GID, source GID index, hop limit and
//! traffic class all come from the received packet. It prints that AH once
//! (`  reply AH: ...`). It still needs to tell the client one of its GIDs: the one of
//! the IP family of the client's announced GID (the family only; the client picks its
//! family from the TCP connection's, falling back to the other one when it has no GID
//! of that family). The server's TCP listener is dual-stack, so clients reach it over
//! IPv4 and IPv6.

use rverbs::{
    device, AccessFlags, AddressVector, AhAttr, ConnectOpts, Gid, Mtu, PeerInfo, QpInitAttr,
    QpType, SendRequest, Wc, WcStatus,
};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Options, named as rdma-core names them.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Transport.
    pub qp_type: QpType,
    /// Server to connect to; `None` = be the server.
    pub server: Option<String>,
    /// TCP port of the exchange.
    pub port: u16,
    /// Device name (default: loopback, or the device owning the route's address).
    pub dev: Option<String>,
    /// Message size.
    pub size: usize,
    /// Path MTU in bytes (RC/UC).
    pub mtu: usize,
    /// Receives kept posted.
    pub rx_depth: usize,
    /// Exchanges.
    pub iters: usize,
    /// Sleep on CQ events instead of polling.
    pub events: bool,
    /// GID index; `None` picks one of the peer's address family.
    pub gid_idx: Option<u8>,
    /// Validate every received buffer.
    pub check: bool,
    /// Print the device's port counters at the end (to stderr, one `name=value` line).
    pub stats: bool,
    /// UD server: answer each datagram through an AH built from its completion.
    pub reply_from_wc: bool,
    /// Hop limit / TTL of the AH or path (rdma-core's pingpongs use 1).
    pub hop_limit: u8,
    /// Traffic class / TOS of the AH or path.
    pub traffic_class: u8,
    /// Local ACK timeout exponent (4.096 µs · 2^n; rdma-core's tools use 14).
    pub ack_timeout: u8,
    /// Keep the device open this long after the run (its GSI keeps answering, e.g.
    /// `rverbs perfquery --gid`).
    pub linger: std::time::Duration,
}

/// The default message size (`-s`): 4096 bytes, and over UD 1024, which fits the
/// smallest usual path MTU (`ibv_ud_pingpong` since rdma-core v26, commit 7ffa09b9c,
/// though its help text still says 2048).
pub fn default_size(qp_type: QpType) -> usize {
    if qp_type == QpType::Ud {
        1024
    } else {
        4096
    }
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const GRH: usize = 40;

#[derive(Debug, Clone, Copy)]
struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: Gid,
}

fn encode(d: &Dest) -> [u8; 52] {
    let text = format!("{:04x}:{:06x}:{:06x}:{}", d.lid, d.qpn, d.psn, d.gid.hex());
    let mut msg = [0u8; 52];
    msg[..51].copy_from_slice(text.as_bytes());
    msg
}

fn decode(msg: &[u8; 52]) -> Result<Dest, String> {
    // ASCII only: the fixed offsets below must fall between characters (a multi-byte
    // UTF-8 character there made slicing panic).
    if !msg[..51].is_ascii() {
        return Err("bad remote address: not ASCII text".into());
    }
    let text = std::str::from_utf8(&msg[..51]).map_err(|_| "peer address is not text")?;
    let mut f = text.split(':');
    let mut hex = |what: &str| -> Result<u32, String> {
        u32::from_str_radix(f.next().ok_or(format!("missing {what}"))?, 16)
            .map_err(|_| format!("bad {what}"))
    };
    let lid = hex("LID")? as u16;
    let qpn = hex("QPN")?;
    let psn = hex("PSN")?;
    let gid = Gid::from_hex(&text[19..51]).map_err(|_| "bad GID")?;
    Ok(Dest { lid, qpn, psn, gid })
}

fn mtu_of(bytes: usize) -> Result<Mtu, String> {
    Ok(match bytes {
        256 => Mtu::M256,
        512 => Mtu::M512,
        1024 => Mtu::M1024,
        2048 => Mtu::M2048,
        4096 => Mtu::M4096,
        _ => {
            return Err(format!(
                "invalid MTU {bytes} (valid: 256, 512, 1024, 2048, 4096)"
            ))
        }
    })
}

/// The `-c` buffer, as rdma-core's pingpong fills it: 0x7b everywhere (its initial
/// fill) and `i / page_size % sizeof(char)`, i.e. 0, at the start of every page of
/// `page` bytes (the host's page size, `sysconf(_SC_PAGESIZE)`), so an rverbs peer and
/// an rdma-core peer validate each other. Unlike rdma-core (which checks the page starts
/// once, at the end, on the server) every received message is checked whole.
fn pattern(buf: &mut [u8], page: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = if i % page.max(1) == 0 { 0 } else { 0x7b };
    }
}

/// The host's page size (`sysconf(_SC_PAGESIZE)`, as rdma-core's pingpongs take it).
fn page_size() -> usize {
    rverbs_sys::misc::page_size()
}

/// What `-c` poisons the receive area with before the first message: neither byte of
/// the pattern, so every byte checked must have come from the peer.
const POISON: u8 = 0xa5;

/// Runs one side. Output goes to `out` in rdma-core's format.
pub fn run<W: Write>(o: &Opts, out: &mut W) -> Result<(), String> {
    let e = |e: rverbs::Error| e.to_string();
    let w = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    let ud = o.qp_type == QpType::Ud;
    let dev = device(o.dev.as_deref()).map_err(e)?;
    let ctx = dev.open().map_err(e)?;
    if ud && o.size > dev.active_mtu().bytes() {
        return Err(format!(
            "Requested size larger than port MTU ({})",
            dev.active_mtu().bytes()
        ));
    }
    let pd = ctx.alloc_pd().map_err(e)?;
    let cq = ctx.create_cq(o.rx_depth as u32 + 1).map_err(e)?;
    let buf_len = if ud { o.size + GRH } else { o.size };
    // Sends go out from the first `buf_len` bytes and receives land in the next ones
    // (rdma-core shares one area; with separate ones `-c` can clear what it received
    // without changing what it sends).
    let rx_off = buf_len.max(1);
    let mr = pd
        .reg_mr_from(vec![0x7b; 2 * rx_off], AccessFlags::LOCAL_WRITE)
        .map_err(e)?;
    let data_off = if ud { GRH } else { 0 };
    let page = page_size();
    if o.check {
        mr.with(|b| {
            pattern(&mut b[data_off..][..o.size], page);
            b[rx_off..].fill(POISON);
        });
    }
    let mut attr = QpInitAttr::new(o.qp_type, &cq);
    attr.cap.max_send_wr = 1;
    attr.cap.max_recv_wr = o.rx_depth as u32;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    let qp = pd.create_qp(&attr).map_err(e)?;
    let inline = o.size <= attr.cap.max_inline_data as usize;
    let psn = rand_u32() & 0xff_ffff;
    let conn_opts = ConnectOpts {
        sgid_index: 0,
        mtu: mtu_of(o.mtu)?,
        psn,
        access: AccessFlags::NONE,
        timeout: o.ack_timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        rd_atomic: 1,
        hop_limit: o.hop_limit,
        traffic_class: o.traffic_class,
        qkey: 0x1111_1111,
    };
    qp.init(&conn_opts).map_err(e)?;
    let recv_buf = mr.slice(rx_off..rx_off + buf_len);
    let send_buf = if ud {
        mr.slice(GRH..GRH + o.size)
    } else {
        mr.slice(0..o.size)
    };
    let mut routs = 0;
    for _ in 0..o.rx_depth {
        qp.post_recv(RECV_WRID, &[recv_buf]).map_err(e)?;
        routs += 1;
    }
    if o.events {
        cq.req_notify(false).map_err(e)?;
    }
    // Which local GID: the one asked for, or one of the peer's address family.
    let pick_gid = |ipv6: bool| -> Result<u8, String> {
        match o.gid_idx {
            Some(i) => Ok(i),
            None => ctx.gid_index_for(ipv6).ok_or_else(|| {
                let why = if ipv6 && dev.is_loopback() {
                    " (lo has no free IPv6 address of its own; ::1 needs \
                     RVERBS_LOOPBACK_IPV6=1 and is one context's at a time)"
                } else {
                    ""
                };
                format!(
                    "no {} GID on {}{why}",
                    if ipv6 { "IPv6" } else { "IPv4" },
                    dev.name
                )
            }),
        }
    };
    let connect = |rem: &Dest, sgid: u8| -> Result<(), String> {
        let opts = ConnectOpts {
            sgid_index: sgid,
            ..conn_opts
        };
        qp.connect(
            &PeerInfo {
                qpn: rem.qpn,
                psn: rem.psn,
                gid: rem.gid,
            },
            &opts,
        )
        .map_err(e)
    };
    // Our address for the exchange, printed as rdma-core prints it.
    let announce = |out: &mut W, sgid: u8| -> Result<Dest, String> {
        let me = Dest {
            lid: 0,
            qpn: qp.qp_num(),
            psn,
            gid: ctx.gid(sgid).ok_or("no such GID index")?,
        };
        w(writeln!(
            out,
            "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            0, me.qpn, psn, me.gid
        ))?;
        Ok(me)
    };
    let (rem, sgid, mut watch) = match &o.server {
        Some(server) => {
            let addrs: Vec<SocketAddr> = (server.as_str(), o.port)
                .to_socket_addrs()
                .map_err(|err| format!("{server}: {err}"))?
                .collect();
            let mut stream = None;
            for a in &addrs {
                if let Ok(s) = TcpStream::connect_timeout(a, Duration::from_secs(10)) {
                    stream = Some((s, *a));
                    break;
                }
            }
            let (mut s, addr) = stream.ok_or(format!("Couldn't connect to {server}:{}", o.port))?;
            // rdma-core waits for ever; a peer that says nothing is an error here.
            s.set_read_timeout(Some(crate::perf::handshake_timeout()))
                .map_err(|e| e.to_string())?;
            let v6 = addr.ip().is_ipv6()
                && !matches!(addr.ip(), IpAddr::V6(v) if v.to_ipv4_mapped().is_some());
            // The TCP connection's family, or the other one when this device has no GID
            // of that family (e.g. another context holds the only IPv6 loopback address).
            let sgid = match (o.gid_idx, ctx.gid_index_for(v6)) {
                (None, None) if ctx.gid_index_for(!v6).is_some() => {
                    eprintln!(
                        "rverbs pingpong: no {} GID on {}; using {}",
                        if v6 { "IPv6" } else { "IPv4" },
                        dev.name,
                        if v6 { "IPv4" } else { "IPv6" }
                    );
                    pick_gid(!v6)?
                }
                _ => pick_gid(v6)?,
            };
            let me = announce(out, sgid)?;
            s.write_all(&encode(&me)).map_err(|e| e.to_string())?;
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg)
                .map_err(|e| format!("Couldn't read/write remote address: {}", why(&e)))?;
            // Our LIVE only to a server that sent its own: rdma-core's server reads
            // `done` with one read that must return exactly its 5 bytes.
            let live = PeerWatch::read_live(&mut s, Duration::from_millis(200));
            let mut done = b"done\0".to_vec();
            if live {
                done.extend_from_slice(LIVE);
            }
            s.write_all(&done).map_err(|e| e.to_string())?;
            let rem = decode(&msg)?;
            let watch = PeerWatch::new(s, live);
            (rem, sgid, watch)
        }
        None => {
            let listener = listen_dual_stack(o.port)
                .map_err(|err| format!("Couldn't listen to port {}: {err}", o.port))?;
            let (mut s, _) = listener.accept().map_err(|e| e.to_string())?;
            // Waiting for a client is unbounded (as rdma-core); a client that connects
            // and says nothing is not.
            s.set_read_timeout(Some(crate::perf::handshake_timeout()))
                .map_err(|e| e.to_string())?;
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg)
                .map_err(|e| format!("Couldn't read remote address: {}", why(&e)))?;
            let rem = decode(&msg)?;
            let sgid = pick_gid(rem.gid.to_ipv4_mapped().is_none())?;
            let me = announce(out, sgid)?;
            if ud && o.reply_from_wc {
                // Nothing of the client's address is used: a UD QP needs no peer.
                connect(
                    &Dest {
                        lid: 0,
                        qpn: 0,
                        psn: 0,
                        gid: Gid::ZERO,
                    },
                    sgid,
                )?;
            } else {
                connect(&rem, sgid)?;
            }
            let mut reply = encode(&me).to_vec();
            reply.extend_from_slice(LIVE);
            s.write_all(&reply).map_err(|e| e.to_string())?;
            let mut done = [0u8; 5];
            let _ = s.read_exact(&mut done);
            let live = PeerWatch::read_live(&mut s, Duration::from_secs(1));
            let watch = PeerWatch::new(s, live);
            (rem, sgid, watch)
        }
    };
    w(writeln!(
        out,
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        rem.lid, rem.qpn, rem.psn, rem.gid
    ))?;
    let client = o.server.is_some();
    if client {
        connect(&rem, sgid)?;
    }
    let from_wc = ud && !client && o.reply_from_wc;
    // With --reply-from-wc the server's AH (and the QPN it answers) come from each
    // received datagram instead.
    let mut ah = if ud && !from_wc {
        Some(
            pd.create_ah(&AhAttr {
                av: AddressVector {
                    dgid: rem.gid,
                    sgid_index: sgid,
                    hop_limit: o.hop_limit,
                    traffic_class: o.traffic_class,
                    flow_label: 0,
                },
                port_num: 1,
            })
            .map_err(e)?,
        )
    } else {
        None
    };
    let mut reply_qpn = rem.qpn;
    let mut shown = false;
    let post_send = |ah: &Option<rverbs::Ah>, qpn: u32| -> Result<(), String> {
        let mut req = SendRequest::send(SEND_WRID, &[send_buf]);
        if inline {
            req = req.inline();
        }
        if ud {
            let ah = ah.as_ref().ok_or("no address handle to answer with")?;
            req = req.to(ah, qpn, 0x1111_1111);
        }
        qp.post_send(&req).map_err(e)
    };
    let mut pending = RECV_WRID;
    if client {
        post_send(&ah, reply_qpn)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0usize, 0usize);
    let mut wcs = [Wc::default(), Wc::default()];
    let mut last_progress = Instant::now();
    while rcnt < o.iters || scnt < o.iters {
        if o.events {
            if ctx.get_cq_event(Duration::from_secs(30)).is_none() {
                return Err("no completion event in 30 s".into());
            }
            cq.req_notify(false).map_err(e)?;
        }
        let mut ne = cq.poll(&mut wcs).map_err(e)?;
        if ne == 0 {
            let idle = last_progress.elapsed();
            if idle > Duration::from_secs(30) {
                return Err(format!("no completion in 30 s (rcnt {rcnt}, scnt {scnt})"));
            }
            if idle > PEER_GONE_GRACE && watch.peer_gone() {
                return Err(format!(
                    "the peer closed the connection after {rcnt} of {} iterations and \
                     sent nothing for {} ms: it failed or was stopped",
                    o.iters,
                    idle.as_millis()
                ));
            }
            // A ping-pong answers within microseconds; a peer quiet for longer is
            // waited for without spinning a core: asleep on the device (`Cq::wait`),
            // which wakes for a datagram and for the device's own timers. A blind
            // sleep left both waiting: a lossy link's recovery (a tail-loss probe, a
            // resend on the peer's report) went out at the end of the sleep, and on
            // the soft device nobody received meanwhile (its driver thread leaves the
            // sockets to a thread that polls).
            if idle > Duration::from_millis(2) {
                ne = cq
                    .wait(&mut wcs, Duration::ZERO, Duration::from_micros(500))
                    .map_err(e)?;
            } else {
                std::thread::yield_now();
            }
            if ne == 0 {
                continue;
            }
        }
        last_progress = Instant::now();
        for wc in &wcs[..ne] {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {:?} ({}) for wr_id {}",
                    wc.status, wc.status as i32, wc.wr_id
                ));
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    if from_wc {
                        // The send of the previous round has completed (`pending`), so
                        // its AH can go; the next reply uses this datagram's.
                        let grh = mr.with(|b| b[rx_off..][..GRH].to_vec());
                        let attr = ctx.init_ah_from_wc(1, wc, &grh).map_err(e)?;
                        if !shown {
                            w(writeln!(
                                out,
                                "  reply AH: sgid_index {}, dgid {}, hop_limit {}, traffic_class {}, flow_label 0x{:05x}, remote QPN 0x{:06x}",
                                attr.av.sgid_index,
                                attr.av.dgid,
                                attr.av.hop_limit,
                                attr.av.traffic_class,
                                attr.av.flow_label,
                                wc.src_qp
                            ))?;
                            shown = true;
                        }
                        ah = Some(pd.create_ah_from_wc(1, wc, &grh).map_err(e)?);
                        reply_qpn = wc.src_qp;
                    }
                    if o.check {
                        // The whole message, and the peer's bytes: the area was
                        // poisoned before the first message. (Not again after each:
                        // several completions may share the area before we look —
                        // UC delivers a duplicated SEND twice, as rxe does — and
                        // poisoning after the first would fail the second, although
                        // its bytes arrived.)
                        if wc.byte_len as usize != buf_len {
                            return Err(format!(
                                "Error validating received buffer of iteration {rcnt}: \
                                 {} bytes, expected {buf_len}",
                                wc.byte_len
                            ));
                        }
                        let mut want = vec![0u8; o.size];
                        pattern(&mut want, page);
                        let ok = mr.with(|b| b[rx_off..][data_off..][..o.size] == want[..]);
                        if !ok {
                            return Err(format!(
                                "Error validating received buffer of iteration {rcnt} \
                                 (-c needs the peer to run with -c too: it fills its \
                                 buffer with the checked pattern)"
                            ));
                        }
                    }
                    routs -= 1;
                    if routs <= 1 {
                        while routs < o.rx_depth {
                            qp.post_recv(RECV_WRID, &[recv_buf]).map_err(e)?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending &= !wc.wr_id;
            if scnt < o.iters && pending == 0 {
                post_send(&ah, reply_qpn)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    if o.qp_type == QpType::Rc {
        time_wait(&ctx, conn_opts.timeout);
    }
    let bytes = o.size as u64 * o.iters as u64 * 2;
    w(writeln!(
        out,
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    ))?;
    w(writeln!(
        out,
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    ))?;
    if o.stats {
        let c = ctx.counters();
        let line: Vec<String> = c.iter().map(|(n, v)| format!("{n}={v}")).collect();
        eprintln!("rverbs counters: {}", line.join(" "));
        eprintln!("rverbs faults: {:?}", ctx.fault_stats());
        if let Some(s) = ctx.raw_net_stats() {
            eprintln!("rverbs raw path: {s:?}");
        }
        if let Some(s) = ctx.same_host_stats() {
            eprintln!("rverbs same-host carrier: {s:?}");
        }
    }
    if !o.linger.is_zero() {
        w(out.flush())?;
        std::thread::sleep(o.linger);
    }
    Ok(())
}

/// What an rverbs peer appends to its part of the exchange (after the 52-byte address
/// as the server, in the same write; after `done\0` as the client, only when the
/// server sent it): it keeps the TCP connection open until its run ends, so its
/// closing before then means it failed or was stopped. rdma-core's client reads at
/// most its 52 bytes and closes the connection after the exchange, never seeing it;
/// rdma-core's server, whose read of `done` must return exactly 5 bytes, is never sent
/// it. Without it the connection's close means nothing.
const LIVE: &[u8] = b"rverbs-live\0";

/// How long a peer whose connection closed may stay quiet before the run fails: its
/// last messages, and their retransmissions after a lost ACK (rdma-core's timeout 14 is
/// 67 ms), come well within it.
const PEER_GONE_GRACE: Duration = Duration::from_millis(1500);

/// The exchange's TCP connection, kept during the run when the peer said [`LIVE`].
struct PeerWatch {
    stream: Option<TcpStream>,
    gone: bool,
}

impl PeerWatch {
    /// Whether the peer sent [`LIVE`] next (waiting at most `wait`: rdma-core's tools
    /// send nothing more).
    fn read_live(s: &mut TcpStream, wait: Duration) -> bool {
        let mut tag = [0u8; LIVE.len()];
        s.set_read_timeout(Some(wait)).is_ok() && s.read_exact(&mut tag).is_ok() && tag == LIVE
    }

    /// Keeps the connection to watch when the peer is `live`.
    fn new(s: TcpStream, live: bool) -> PeerWatch {
        let live = live && s.set_nonblocking(true).is_ok();
        PeerWatch {
            stream: live.then_some(s),
            gone: false,
        }
    }

    /// Whether the peer closed the connection (or it broke).
    fn peer_gone(&mut self) -> bool {
        if let (Some(s), false) = (&mut self.stream, self.gone) {
            let mut b = [0u8; 16];
            self.gone = match s.read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            };
        }
        self.gone
    }
}

/// An exchange read's failure, in words (a read timeout says so).
fn why(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "the peer sent nothing for {} s",
            crate::perf::handshake_timeout().as_secs_f64()
        ),
        _ => e.to_string(),
    }
}

/// A TCP listener on every IPv6 and IPv4 address (`[::]` with `IPV6_V6ONLY` off), or on
/// every IPv4 address when the host has no IPv6.
fn listen_dual_stack(port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let v6 = (|| {
        let s = Socket::new(Domain::IPV6, Type::STREAM, None)?;
        s.set_only_v6(false)?;
        s.set_reuse_address(true)?;
        s.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
        s.listen(1)?;
        Ok::<_, std::io::Error>(s)
    })();
    match v6 {
        Ok(s) => Ok(s.into()),
        Err(_) => TcpListener::bind(("0.0.0.0", port)),
    }
}

/// After the last exchange, an RC peer may still be waiting for the ACK of its last
/// message: if that ACK was lost it retransmits, and a QP that is gone never answers
/// (the kernel's rxe then retries for ever: seen in the interop suite, where it kept
/// retransmitting for 90 s with retry_cnt 7). So, like TCP's TIME_WAIT, the device stays
/// up (the responder re-acknowledges a duplicate request) until the peer has been quiet
/// for two local ACK timeouts (4.096 µs · 2^timeout each), at most 2 s.
fn time_wait(ctx: &rverbs::Context, timeout: u8) {
    let quiet = Duration::from_nanos(4096u64 << timeout.min(31)) * 2;
    let quiet = quiet.clamp(Duration::from_millis(20), Duration::from_secs(2));
    let end = Instant::now() + Duration::from_secs(2);
    let heard = || {
        let c = ctx.counters();
        c.rx_packets + c.rx_duplicate_requests + c.rx_out_of_sequence
    };
    let mut seen = heard();
    let mut since = Instant::now();
    while Instant::now() < end && since.elapsed() < quiet {
        std::thread::sleep(Duration::from_millis(5));
        let now = heard();
        if now != seen {
            seen = now;
            since = Instant::now();
        }
    }
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    t ^ std::process::id().rotate_left(16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_format_matches_rdma_core() {
        let d = Dest {
            lid: 0,
            qpn: 0x2c,
            psn: 0xcbfa69,
            gid: "::ffff:10.77.0.1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .into(),
        };
        let m = encode(&d);
        assert_eq!(
            &m[..],
            b"0000:00002c:cbfa69:00000000000000000000ffff0a4d0001\0"
        );
        let back = decode(&m).unwrap();
        assert_eq!((back.qpn, back.psn, back.gid), (0x2c, 0xcbfa69, d.gid));
        let mut bad = m;
        bad[5] = b'x';
        assert!(decode(&bad).is_err());
    }

    #[test]
    fn non_ascii_peer_address_is_an_error_not_a_panic() {
        // `0:0:0:`, 12 × `a`, `é` (2 bytes), 31 × `0`, NUL: 52 bytes, valid UTF-8, with
        // the `é` across the GID's fixed offset 19.
        let mut v = b"0:0:0:".to_vec();
        v.extend([b'a'; 12]);
        v.extend("é".as_bytes());
        v.extend([b'0'; 31]);
        v.push(0);
        let m: [u8; 52] = v.try_into().unwrap();
        assert!(std::str::from_utf8(&m[..51]).is_ok());
        let err = decode(&m).unwrap_err();
        assert!(err.contains("remote address"), "{err}");
        assert!(decode(&[0xff; 52]).is_err());
        assert!(decode(&[0; 52]).is_err());
    }

    #[test]
    fn check_pattern_follows_the_page_size() {
        let mut b = [1u8; 20];
        pattern(&mut b, 8);
        assert_eq!(&b[..9], &[0, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0]);
        assert_eq!(b[16], 0);
        assert!(page_size() >= 4096 && page_size().is_power_of_two());
        const { assert!(POISON != 0 && POISON != 0x7b) };
    }

    #[test]
    fn ud_default_size_fits_a_1024_mtu() {
        assert_eq!(default_size(QpType::Ud), 1024);
        assert!(default_size(QpType::Ud) <= Mtu::M1024.bytes());
        assert_eq!(default_size(QpType::Rc), 4096);
        assert_eq!(default_size(QpType::Uc), 4096);
    }
}
