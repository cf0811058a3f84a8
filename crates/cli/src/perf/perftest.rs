//! `rverbs perf OP KIND [SERVER] --perftest`: perftest's own out-of-band exchange (its
//! "Ethernet" exchange over TCP), so an unmodified perftest tool (`ib_write_bw`,
//! `ib_send_bw`, `ib_read_bw`, `ib_atomic_bw`, `ib_write_lat`, `ib_send_lat`,
//! `ib_read_lat`, `ib_atomic_lat`) can be the peer, in either role.
//!
//! The sequence and byte layouts follow perftest's `src/perftest_communication.c`
//! (`exchange_versions`, `check_sys_data`, `check_mtu`, `ctx_hand_shake` with
//! `ethernet_write_keys`/`ethernet_read_keys`, `xchg_bw_reports`,
//! `ctx_close_connection`), the order of each tool's `main` (`src/write_bw.c`,
//! `send_bw.c`, `read_bw.c`, `atomic_bw.c`, `write_lat.c`, `send_lat.c`, `read_lat.c`,
//! `atomic_lat.c`) and the data loops of `src/perftest_resources.c` (`run_iter_bw`,
//! `run_iter_bw_server`, `run_iter_lat_write`, `run_iter_lat_send`, `run_iter_lat`).
//! Every exchange step is symmetric: the client writes first and then reads the same
//! number of bytes, the server reads first.
//!
//! **Versions.** We announce 6.06 (Debian's perftest 4.5+0.17). perftest refuses peers
//! older than 5.70 (`check_version_compatibility`), and perftest >= 6.28 exchanges a
//! raw `struct perftest_parameters_negotiate` (with a native-layout
//! `struct ibv_device_attr`) only when the *peer's* version is >= 6.28
//! (`negotiate_params`): a newer perftest therefore skips that step with us, and so do
//! we. The rest of the exchange is the same in 6.06 and 6.29 for the options spoken
//! here.

use super::{Kind, Lat, Op, Opts, Report, Side, STALL};
use rverbs::cm::{CmId, EventChannel, PortSpace};
use rverbs::{
    device, AccessFlags, Ah, AhAttr, ConnectOpts, Context, Cq, Gid, Mr, Mtu, Pd, PeerInfo, Qp,
    QpInitAttr, QpType, RemoteBuf, SendRequest, Wc, WcFlags, WcOpcode, WcStatus,
};
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod msg;
mod oob;
pub mod rdma_cm;
pub use msg::{decode, encode, parse_mtu, parse_sys, parse_version, BwReport, Dest};
mod run_iter;
use oob::Oob;
use rdma_cm::{CmLink, DataConns};
use run_iter::*;

/// The version we announce: one perftest accepts (>= 5.70) and below 6.28, so no peer
/// asks for the parameter negotiation.
pub const VERSION: &str = "6.06";
/// `MAX_VERSION`: the version field's size on the wire.
const MAX_VERSION: usize = 16;
/// `KEY_MSG_SIZE_GID`: one `pingpong_dest` in `KEY_PRINT_FMT_GID`, with its NUL.
pub const KEY_MSG_SIZE_GID: usize = 108;
/// The READ/atomic depth we offer and use (`out_reads`).
const OUT_READS: u16 = 16;
/// Receives kept posted by a SEND receiver (perftest's `DEF_RX_SEND`).
const RX_DEPTH: u64 = 512;
/// The most receives a UC or UD SEND receiver posts (perftest's `UC_MAX_RX`): over UC
/// and UD it posts one per message, up to this many, since a message that finds none is
/// lost
/// (`perftest_parameters.c`, `force_dependecies`).
const UC_MAX_RX: u64 = 16_000;
/// perftest's `DEF_PAGE_SIZE` and `DEF_CACHE_LINE_SIZE`, what we send in
/// `check_sys_data`.
const PAGE: i32 = 4096;
const CACHE_LINE: i32 = 64;
/// How long one handshake step of the exchange may wait for the peer (the TCG guest
/// is slow). A wait for the peer's end of a run has no read timeout (it lasts as long
/// as the run, e.g. `-D 400`): TCP keepalive, or with `-R` a liveness probe, ends it
/// if the peer goes.
const PEER_TIMEOUT: Duration = Duration::from_secs(300);
/// For tests: the handshake timeout in milliseconds instead of [`PEER_TIMEOUT`].
pub(super) const PEER_TIMEOUT_ENV: &str = "RVERBS_PERFTEST_PEER_TIMEOUT_MS";

/// [`PEER_TIMEOUT`], or the one [`PEER_TIMEOUT_ENV`] sets.
fn peer_timeout() -> Duration {
    super::timeout_ms(
        PEER_TIMEOUT_ENV,
        std::env::var(PEER_TIMEOUT_ENV).ok().as_deref(),
    )
    .ok()
    .flatten()
    .unwrap_or(PEER_TIMEOUT)
}

const MAX_SIZE: usize = 1 << 23;
/// A receive's `wr_id` carries this bit.
const RECV: u64 = 1 << 63;
/// A work request's QP index (`-q`) sits in the `wr_id` from this bit up, its sequence
/// number below ([`wr_id`]).
const LANE_SHIFT: u32 = 40;
/// The sequence number of a `wr_id`.
const SEQ: u64 = (1 << LANE_SHIFT) - 1;

/// The `wr_id` of request (or, with [`RECV`], receive) `seq` on QP `lane`.
fn wr_id(lane: usize, seq: u64) -> u64 {
    (lane as u64) << LANE_SHIFT | seq
}

/// The QP index of a `wr_id` made by [`wr_id`].
fn lane_of(wr_id: u64) -> usize {
    ((wr_id & !RECV) >> LANE_SHIFT) as usize
}
/// perftest's Q_Key for UD (`DEF_QKEY`).
const DEF_QKEY: u32 = 0x1111_1111;
/// What a UD receive holds in front of the message (`UD_ADDITION`: the GRH area).
const UD_ADDITION: usize = 40;
/// perftest's most QPs (`MAX_QP_NUM`).
pub const MAX_QPS: usize = 16384;

/// One perftest tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_atomic_bw` (fetch-and-add).
    AtomicBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_atomic_lat` (fetch-and-add).
    AtomicLat,
}

impl Tool {
    /// The tool for `rverbs perf OP KIND`; `None` for `tcp`.
    pub fn of(op: Op, kind: Kind) -> Option<Tool> {
        Some(match (op, kind) {
            (Op::Write, Kind::Bw) => Tool::WriteBw,
            (Op::Read, Kind::Bw) => Tool::ReadBw,
            (Op::Send, Kind::Bw) => Tool::SendBw,
            (Op::Atomic, Kind::Bw) => Tool::AtomicBw,
            (Op::Write, Kind::Lat) => Tool::WriteLat,
            (Op::Read, Kind::Lat) => Tool::ReadLat,
            (Op::Send, Kind::Lat) => Tool::SendLat,
            (Op::Atomic, Kind::Lat) => Tool::AtomicLat,
            (Op::Tcp, _) => return None,
        })
    }

    /// perftest's program name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::WriteBw => "ib_write_bw",
            Tool::ReadBw => "ib_read_bw",
            Tool::SendBw => "ib_send_bw",
            Tool::AtomicBw => "ib_atomic_bw",
            Tool::WriteLat => "ib_write_lat",
            Tool::ReadLat => "ib_read_lat",
            Tool::SendLat => "ib_send_lat",
            Tool::AtomicLat => "ib_atomic_lat",
        }
    }

    /// perftest's default `-n` (`DEF_ITERS_WB` for `ib_write_bw`, else `DEF_ITERS`).
    pub fn default_iters(self) -> u64 {
        if self == Tool::WriteBw {
            5000
        } else {
            1000
        }
    }

    fn is_send(self) -> bool {
        matches!(self, Tool::SendBw | Tool::SendLat)
    }

    /// Handshakes from the first key exchange up to the traffic: `write_lat.c`,
    /// `read_lat.c` and `atomic_lat.c` shake hands once more before the per-QP loop.
    fn handshakes(self) -> usize {
        match self {
            Tool::WriteLat | Tool::ReadLat | Tool::AtomicLat => 4,
            _ => 3,
        }
    }
}

/// The connected QP, its region and the peer's details.
struct Conn {
    oob: Oob,
    /// `-R`: the test QPs' CM connections.
    data: Option<DataConns>,
    /// The QPs (`-q`; one but for the bandwidth tools), each with both sides' keys.
    lanes: Vec<Lane>,
    /// The size of one area of the region: QP `i` sends from area `i` and the peer
    /// writes / sends into area `lanes.len() + i` (perftest's `ctx->buf[i]` layout).
    half: usize,
    /// The path MTU both sides settled on (`check_mtu`).
    mtu: Mtu,
    mr: Mr,
    cq: Cq,
    spin: Duration,
    /// `ib_send_lat`'s completion moderation (`Opts::lat_cq_mod`).
    cq_mod: u64,
    /// `-A CMP_AND_SWAP` (`Opts::cmp_swap`).
    cmp_swap: bool,
    /// Receives a SEND receiver keeps posted ([`RX_DEPTH`], or over UC and UD one per
    /// message up to [`UC_MAX_RX`]).
    rx_depth: u64,
    _pd: Pd,
    ctx: Context,
}

/// One QP of the test and both sides' keys for it.
struct Lane {
    qp: Arc<Qp>,
    me: Dest,
    rem: Dest,
    /// UD: the address handle towards the peer's QP (perftest's `ctx->ah[i]`).
    ah: Option<Ah>,
    /// UD: the peer's QP and Q_Key its SENDs go to (`ctx->rem_qpn[i]`, `remote_qkey`):
    /// from the key exchange and `DEF_QKEY`, or with `-R` from the CM.
    ud_dest: (u32, u32),
}

/// A UD peer as the CM made it known (`struct cma_node`'s `remote_qpn`,
/// `remote_qkey` and `ctx->ah[i]`).
struct UdPeer {
    ah: Ah,
    qpn: u32,
    qkey: u32,
}

fn is_ipv6(a: IpAddr) -> bool {
    match a {
        IpAddr::V6(v) => v.to_ipv4_mapped().is_none(),
        IpAddr::V4(_) => false,
    }
}

fn v4_mapped(g: &Gid) -> bool {
    let o = g.octets();
    o[..10].iter().all(|b| *b == 0) && o[10] == 0xff && o[11] == 0xff
}

/// exchange, the QP's connection and the remaining handshakes up to the traffic.
fn setup(o: &Opts, tool: Tool, max_size: usize) -> Result<Conn, String> {
    let e = |e: rverbs::Error| e.to_string();
    let client = o.server.is_some();
    let n = o.qps.max(1);
    let dev = device(o.dev.as_deref()).map_err(e)?;
    let ctx = dev.open().map_err(e)?;
    // -R: the test's QPs are of port space UDP over UD (SIDR), TCP otherwise.
    let data_ps = match o.transport {
        QpType::Ud => PortSpace::Udp,
        _ => PortSpace::Tcp,
    };
    let (mut oob, peer, mut data) = if o.rdma_cm {
        let link = match &o.server {
            Some(s) => CmLink::connect(&ctx, rdma_cm::resolve(s, o.port)?, o.retry_count)?,
            None => CmLink::accept(&ctx, o.port, o.retry_count)?,
        };
        let peer = link.peer();
        // Our server listens for the test's QPs before the client may connect them.
        let ch = EventChannel::new().map_err(e)?;
        let listener = match client {
            true => None,
            false => Some(rdma_cm::listen(&ctx, &ch, data_ps, o.port, n as u32)?),
        };
        let data = DataConns {
            ids: Vec::new(),
            ch,
            listener,
            ud: o.transport == QpType::Ud,
        };
        (Oob::cm(link, client), peer, Some(data))
    } else {
        let (oob, peer) = Oob::tcp(o)?;
        (oob, peer, None)
    };

    // exchange_versions + check_version_compatibility
    let mut v = [0u8; MAX_VERSION];
    v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    let rem_version = parse_version(&oob.xchg(&v)?)?;
    if rem_version < 570 {
        return Err(format!(
            "perftest {}.{:02} on the peer: perftest speaks only with 5.70 and newer",
            rem_version / 100,
            rem_version % 100
        ));
    }
    // check_sys_data
    let c = oob.xchg(&PAGE.to_be_bytes())?;
    let l = oob.xchg(&CACHE_LINE.to_be_bytes())?;
    let (cycle, line) = parse_sys(&c, &l)?;

    // check_mtu: the MTU enum as text in 2 bytes; the path takes the smaller.
    let mine = match o.mtu {
        0 => dev.active_mtu(),
        256 => Mtu::M256,
        512 => Mtu::M512,
        1024 => Mtu::M1024,
        2048 => Mtu::M2048,
        4096 => Mtu::M4096,
        m => {
            return Err(format!(
                "invalid MTU {m} (valid: 256, 512, 1024, 2048, 4096)"
            ))
        }
    };
    let r = oob.xchg(&[b'0' + mine as u8, 0])?;
    let mtu = parse_mtu(&r).map_or(mine, |t| t.min(mine));
    // check_mtu: a UD message is one packet; perftest lowers its default size (and a
    // sweep's end) to the MTU but refuses a larger -s.
    if o.transport == QpType::Ud && o.size_given && !o.all && o.size > mtu.bytes() {
        return Err(format!(
            "--perftest: over UD a message is at most the path MTU ({} bytes), not -s {}",
            mtu.bytes(),
            o.size
        ));
    }

    // Our region: per QP two areas of BUFF_SIZE rounded to the cache line (INC): QP
    // `i` sends from (or reads into) area `i`, the peer writes / sends / reads area
    // `n + i` (perftest's `ctx->buf[i]`, `set_up_connection`).
    // (A UD receive also holds the 40-byte GRH area in front of the message.)
    let ud = o.transport == QpType::Ud;
    let half = (max_size.max(cycle) + if ud { UD_ADDITION } else { 0 }).div_ceil(line) * line;
    let pd = ctx.alloc_pd().map_err(e)?;
    // Over UC and UD a SEND receiver posts one receive per message (up to UC_MAX_RX).
    let rx_depth = match (tool.is_send(), o.transport) {
        (false, _) => 1,
        (true, QpType::Rc) => RX_DEPTH,
        (true, _) => o.iters.min(UC_MAX_RX),
    };
    let rx = rx_depth as usize;
    // One CQ for every QP's sends and, on a side that receives (the SEND tools'
    // server, both sides of a latency test or of -b), the receives it keeps posted.
    let receives = tool.is_send() && (o.server.is_none() || o.bidir || o.kind == Kind::Lat);
    let posted = (o.iters as usize).min(rx);
    let cqe = n * (o.depth + if receives { posted } else { 0 }) + 64;
    let max_cqe = ctx.query_device().map_err(e)?.max_cqe as usize;
    if cqe > max_cqe {
        return Err(format!(
            "--perftest: {n} QPs of depth {} need a CQ of {cqe} entries, more than the \
             device's {max_cqe} (use fewer QPs, or a smaller -t or -n)",
            o.depth
        ));
    }
    let cq = ctx.create_cq(cqe as u32).map_err(e)?;
    let mr = pd.reg_mr(2 * n * half, AccessFlags::ALL).map_err(e)?;
    let qp_type = o.transport;
    let sgid = match o.gid_idx {
        Some(i) => i,
        None => ctx
            .gid_index_for(is_ipv6(peer.ip()))
            .ok_or_else(|| format!("no GID of the peer's address family on {}", dev.name))?,
    };
    let gid = ctx.gid(sgid).ok_or("no such GID index")?;
    let attr = || {
        let mut a = QpInitAttr::new(qp_type, &cq);
        a.cap.max_send_wr = o.depth.max(16) as u32 + 1;
        a.cap.max_recv_wr = rx as u32;
        a
    };
    // -R (`create_rdma_cm_connection`): a handshake of zeroed keys, the test's QPs
    // connected (and moved) by the CM, another handshake of zeroed keys.
    let mut cm_qps = Vec::new();
    if let Some(d) = data.as_mut() {
        let zero = rdma_cm::encode(&Dest::default());
        oob.xchg(&zero)?;
        let reads = matches!(
            tool,
            Tool::ReadBw | Tool::ReadLat | Tool::AtomicBw | Tool::AtomicLat
        );
        let param = rdma_cm::data_param(reads, o.retry_count);
        let mk = |id: &CmId| {
            id.create_qp(&pd, &attr())
                .map_err(|x| format!("-R: test QP: {x}"))
        };
        // UD (`rdma_cm_request_ud_connection_parameters` and the two after it): in a
        // latency test the server learns the client's QP from the client's first
        // SEND, with its QPN as immediate data, received before any other.
        let qpn_msg = ud && o.kind == Kind::Lat;
        match &o.server {
            Some(server) => {
                let to = rdma_cm::resolve(server, o.port)?;
                let until = Instant::now() + rdma_cm::connect_for();
                for _ in 0..n {
                    let c = rdma_cm::connect_one(&ctx, &d.ch, to, data_ps, &param, until, &mk)?;
                    let peer = match c.ud {
                        Some(u) => {
                            let ah = pd.create_ah(&u.ah_attr).map_err(e)?;
                            if qpn_msg {
                                send_qpn(&c.qp, &cq, &mr, &ah, u.qp_num, u.qkey)?;
                            }
                            Some(UdPeer {
                                ah,
                                qpn: u.qp_num,
                                qkey: u.qkey,
                            })
                        }
                        None => None,
                    };
                    d.ids.push(c.id);
                    cm_qps.push((c.qp, peer));
                }
            }
            None => {
                for i in 0..n {
                    let id = rdma_cm::next_request(&d.ch, Some(peer_timeout()))?;
                    let qp = mk(&id)?;
                    // Into the QP's receive area, which the test's receives use later.
                    let area = (n + i) * half;
                    if qpn_msg {
                        qp.post_recv(0, &[mr.slice(area..area + UD_ADDITION + 4)])
                            .map_err(|x| format!("-R: the receive for the peer's QPN: {x}"))?;
                    }
                    id.accept(&param)
                        .map_err(|x| format!("-R: accepting a test QP: {x}"))?;
                    let peer = match qpn_msg {
                        true => Some(recv_qpn(&qp, &cq, &pd, &mr, area)?),
                        false => None,
                    };
                    d.ids.push(id);
                    cm_qps.push((qp, peer));
                }
                d.listener = None;
            }
        }
        oob.xchg(&zero)?;
    }
    let mut cm_qps = cm_qps.into_iter();
    let mut lanes = Vec::with_capacity(n);
    for i in 0..n {
        let (qp, cm_peer) = match cm_qps.next() {
            Some(q) => q,
            None => (Arc::new(pd.create_qp(&attr()).map_err(e)?), None),
        };
        let me = Dest {
            lid: 0,
            out_reads: OUT_READS,
            qpn: qp.qp_num(),
            psn: (std::process::id() + 0x1001 * i as u32) & 0xff_ffff,
            rkey: mr.rkey(),
            vaddr: mr.addr() + ((n + i) * half) as u64,
            gid,
            srqn: 0,
        };
        // The first key exchange, one per QP.
        let rem = oob.hand_shake(&me)?;
        let (ah, ud_dest) = match cm_peer {
            Some(p) => (Some(p.ah), (p.qpn, p.qkey)),
            None if ud => (
                Some(pd.create_ah(&AhAttr::to(rem.gid, sgid)).map_err(e)?),
                (rem.qpn, DEF_QKEY),
            ),
            None => (None, (rem.qpn, DEF_QKEY)),
        };
        lanes.push(Lane {
            qp,
            me,
            rem,
            ah,
            ud_dest,
        });
    }
    // With -R the CM connected the QPs (perftest checks no GIDs then).
    if data.is_none() {
        // ctx_check_gid_compatibility: both IPv4-mapped or neither.
        if v4_mapped(&gid) != v4_mapped(&lanes[0].rem.gid) {
            return Err("the peer's GID is of the other IP version (pick one with -x)".into());
        }
        for l in &lanes {
            let copts = ConnectOpts {
                sgid_index: sgid,
                mtu,
                psn: l.me.psn,
                rd_atomic: OUT_READS.min(l.rem.out_reads.max(1)) as u8,
                timeout: o.ack_timeout,
                retry_cnt: o.retry_count,
                ..ConnectOpts::default()
            };
            l.qp.connect(
                &PeerInfo {
                    qpn: l.rem.qpn,
                    psn: l.rem.psn,
                    gid: l.rem.gid,
                },
                &copts,
            )
            .map_err(e)?;
        }
    }
    // The remaining handshakes, the last one after both sides reached RTR: with one
    // QP the tool's count of them; with several (bandwidth tools) one per QP and one
    // of the first QP's keys, in the tool's order (`send_bw.c`: the single one first;
    // `write_bw.c`, `read_bw.c`, `atomic_bw.c`: last). The peer keeps what the per-QP
    // ones carry (`rem_dest[i]`), so each carries its QP's keys.
    if n == 1 {
        for _ in 1..tool.handshakes() {
            oob.hand_shake(&lanes[0].me)?;
        }
    } else {
        if tool.is_send() {
            oob.hand_shake(&lanes[0].me)?;
        }
        for l in &lanes {
            oob.hand_shake(&l.me)?;
        }
        if !tool.is_send() {
            oob.hand_shake(&lanes[0].me)?;
        }
    }
    Ok(Conn {
        oob,
        data,
        lanes,
        half,
        mtu,
        mr,
        cq,
        spin: o.spin,
        cq_mod: o.lat_cq_mod(),
        cmp_swap: o.cmp_swap,
        rx_depth,
        _pd: pd,
        ctx,
    })
}

/// `rdma_cm_send_ud_connection_parameters`: a signaled SEND with our QPN as
/// immediate data (4 bytes of the QP's send area) to the UD peer the CM resolved,
/// waited for.
fn send_qpn(qp: &Qp, cq: &Cq, mr: &Mr, ah: &Ah, qpn: u32, qkey: u32) -> Result<(), String> {
    let wr = SendRequest::send(0, &[mr.slice(0..4)])
        .imm(qp.qp_num())
        .to(ah, qpn, qkey)
        .signaled(true);
    qp.post_send(&wr)
        .map_err(|x| format!("-R: sending our QPN to the UD peer: {x}"))?;
    let wc = one_wc(cq, "the SEND of our QPN")?;
    if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Send {
        return Err(format!(
            "-R: the SEND of our QPN to the UD peer: {:?} ({:?})",
            wc.status, wc.opcode
        ));
    }
    Ok(())
}

/// `rdma_cm_initialize_ud_connection_parameters`: the receive posted at `area` before
/// the accept brings the peer's QPN as immediate data; its network header gives the
/// AH back, and the Q_Key is our QP's (rdma_cm's, on both sides).
fn recv_qpn(qp: &Qp, cq: &Cq, pd: &Pd, mr: &Mr, area: usize) -> Result<UdPeer, String> {
    let wc = one_wc(cq, "the UD peer's QPN")?;
    if wc.status != WcStatus::Success
        || wc.opcode != WcOpcode::Recv
        || wc.wc_flags.0 & WcFlags::WITH_IMM.0 == 0
    {
        return Err(format!(
            "-R: the UD peer's first message is not its QPN: {:?} ({:?}, {} bytes)",
            wc.status, wc.opcode, wc.byte_len
        ));
    }
    let mut grh = [0u8; UD_ADDITION];
    mr.read(area, &mut grh);
    let ah = pd
        .create_ah_from_wc(1, &wc, &grh)
        .map_err(|x| format!("-R: an AH to the UD peer from its message: {x}"))?;
    let qkey = qp
        .query()
        .map_err(|x| format!("-R: our QP's Q_Key: {x}"))?
        .qkey;
    Ok(UdPeer {
        ah,
        qpn: wc.imm_data & 0xff_ffff,
        qkey,
    })
}

/// The next completion on `cq`, waited for up to the peer timeout.
fn one_wc(cq: &Cq, what: &str) -> Result<Wc, String> {
    let mut wc = [Wc::default()];
    match cq.poll_wait(&mut wc, peer_timeout()) {
        Ok(1) => Ok(wc[0]),
        Ok(_) => Err(format!(
            "-R: no completion of {what} within {:?}",
            peer_timeout()
        )),
        Err(x) => Err(format!("-R: {x}")),
    }
}

/// Checks the options `--perftest` speaks.
pub fn check(o: &Opts) -> Result<Tool, String> {
    let tool = Tool::of(o.op, o.kind).ok_or("--perftest: perftest has no tcp test")?;
    let bw = matches!(
        tool,
        Tool::WriteBw | Tool::ReadBw | Tool::AtomicBw | Tool::SendBw
    );
    if o.bidir && !bw {
        return Err(format!(
            "--perftest: -b is for the bandwidth tools, not {}",
            tool.name()
        ));
    }
    // perftest's own rules (`perftest_parameters.c`), so that both sides agree.
    if o.post_list > 1 {
        if !bw {
            return Err("--perftest: a post list (-l) is for bandwidth tests only".into());
        }
        if o.duration.is_none() && o.iters % o.post_list as u64 != 0 {
            return Err("--perftest: -n must be a multiple of the post list (-l)".into());
        }
        if o.cq_mod
            .is_some_and(|_| o.post_list as u64 % bw_cq_mod(o) != 0)
        {
            return Err("--perftest: the post list (-l) must be a multiple of -Q".into());
        }
    }
    if o.duration.is_some() {
        // ib_send_bw's receiver runs its own clock and stops reposting when it ends;
        // latency tools and size sweeps take no duration in perftest.
        if !matches!(tool, Tool::WriteBw | Tool::ReadBw | Tool::AtomicBw) {
            return Err(format!(
                "--perftest: -D is supported with ib_write_bw, ib_read_bw and ib_atomic_bw, not {}",
                tool.name()
            ));
        }
        if o.all {
            return Err("--perftest: perftest runs no size sweep (-a) with a duration (-D)".into());
        }
    } else if o.iters < 5 {
        return Err("--perftest: perftest runs at least 5 iterations (-n 5)".into());
    }
    if o.size == 0 || o.size > MAX_SIZE {
        return Err(format!("--perftest: -s must be 1 .. {MAX_SIZE}"));
    }
    // perftest: "Multiple QPs only available on bw tests".
    if o.qps > 1 && !bw {
        return Err(format!(
            "--perftest: several QPs (-q) are for the bandwidth tools, not {}",
            tool.name()
        ));
    }
    if o.qps == 0 || o.qps > MAX_QPS {
        return Err(format!("--perftest: -q must be 1 .. {MAX_QPS}"));
    }
    // UC carries SENDs and WRITEs only: it has no READ or atomic opcodes (IBTA 9.2,
    // the BTH opcode table; perftest's `change_conn_type`: "UC connection not possible
    // in READ/ATOMIC verbs").
    if o.transport == QpType::Uc
        && !matches!(
            tool,
            Tool::SendBw | Tool::SendLat | Tool::WriteBw | Tool::WriteLat
        )
    {
        return Err(format!(
            "--perftest: -c UC is for SEND and WRITE tools, not {}",
            tool.name()
        ));
    }
    // UD carries SENDs only (`change_conn_type`: "UD connection only possible in SEND
    // verb").
    if o.transport == QpType::Ud && !tool.is_send() {
        return Err(format!(
            "--perftest: -c UD is for the SEND tools, not {}",
            tool.name()
        ));
    }
    if o.transport == QpType::Ud && o.bidir {
        return Err("--perftest: -c UD with -b is not spoken".into());
    }
    // perftest: "UC is not supported in librdmacm".
    if o.rdma_cm && o.transport == QpType::Uc {
        return Err("--perftest -R: RC or UD (perftest refuses UC with -R)".into());
    }
    Ok(tool)
}

/// A bandwidth test's completion moderation: `-Q` lowered to the TX depth (`-t`), as
/// perftest's `force_dependecies` lowers it before checking it against the post list
/// (a larger one would never be reached: the sender stops at `-t` outstanding and
/// waits for a completion that is not requested); without `-Q`, the post list's size
/// or one in a quarter of the depth (at most 100).
fn bw_cq_mod(o: &Opts) -> u64 {
    let depth = o.depth.max(1) as u64;
    let list = o.post_list.max(1) as u64;
    match o.cq_mod {
        Some(q) => (q as u64).clamp(1, depth),
        None if list > 1 => list,
        None => (depth / 4).clamp(1, 100),
    }
}

/// Runs one side of a perftest tool's test against an unmodified perftest peer,
/// printing our figures (for `ib_write_bw`, `ib_read_bw` and `ib_atomic_bw` on the
/// server: the figures the perftest client reports to its server).
pub fn run(o: &Opts, out: &mut impl Write) -> Result<Vec<Report>, String> {
    let tool = check(o)?;
    let sizes = super::sizes(o);
    let max = *sizes.iter().max().unwrap_or(&8);
    let client = o.server.is_some();
    let mut c = setup(o, tool, max.max(8))?;
    // A UD message is one packet: perftest's default size becomes the MTU and a sweep
    // stops there (a larger -s was refused in `setup`, as `check_mtu` does).
    let sizes: Vec<usize> = if o.transport == QpType::Ud {
        let m = c.mtu.bytes();
        if o.all {
            sizes.into_iter().filter(|&s| s <= m).collect()
        } else {
            sizes.into_iter().map(|s| s.min(m)).collect()
        }
    } else {
        sizes
    };
    let w = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    let show = |out: &mut dyn Write, r: &Report| -> Result<(), String> {
        if o.json {
            w(writeln!(out, "{}", r.json(o).render()))
        } else {
            w(writeln!(out, "{}", super::row(o, r)))
        }
    };
    if !o.json {
        w(writeln!(out, "{}", super::header(o)))?;
    }
    let mut reports = Vec::new();
    match tool {
        Tool::WriteBw | Tool::ReadBw | Tool::AtomicBw if o.bidir => {
            // Both sides send (`duplex` in write_bw.c, read_bw.c, atomic_bw.c): for each
            // size a handshake, the traffic, in a sweep (-a) of WRITEs or READs another
            // handshake, and the two sides' reports exchanged; each prints the sum.
            for &size in &sizes {
                c.oob.hand_shake(&c.me())?;
                let me = c.bw_send(tool, o, size)?;
                // The peer's run may end later than ours.
                let r = if o.all && tool != Tool::AtomicBw {
                    let d = c.me();
                    c.oob.after_run(|b| b.hand_shake(&d))?;
                    c.both_ways(size, &me)?
                } else {
                    c.after_run(|c| c.both_ways(size, &me))?
                };
                show(out, &r)?;
                reports.push(r);
            }
            c.oob.close(&c.me())?;
        }
        Tool::WriteBw | Tool::ReadBw | Tool::AtomicBw => {
            let mut last = BwReport::default();
            if client {
                for &size in &sizes {
                    let me = c.bw_send(tool, o, size)?;
                    let r = Report::new(size, &me, &Side::default(), None);
                    last = BwReport::of(size, &me);
                    show(out, &r)?;
                    reports.push(r);
                }
            }
            // The server waits here while the client runs every size.
            let d = c.me();
            c.oob.after_run(|b| b.hand_shake(&d))?;
            let theirs = c.oob.reports(&last)?;
            c.oob.close(&c.me())?;
            if !client {
                if !o.json {
                    w(writeln!(
                        out,
                        "# the figures {} measured on the client (it sends them to its server)",
                        tool.name()
                    ))?;
                }
                let r = BwReport::from_fields(&theirs)?.report();
                show(out, &r)?;
                reports.push(r);
            }
        }
        Tool::SendBw if o.bidir => {
            // send_bw.c with `duplex`: both sides prepost their receives, shake hands,
            // run `run_iter_bi`, exchange reports (each prints the sum) and, in a
            // sweep, shake hands again.
            for &size in &sizes {
                let mut k = c.counts();
                c.prepost(&mut k, o.iters)?;
                c.oob.hand_shake(&c.me())?;
                let me = c.bw_bi(o, size, &mut k, client)?;
                let r = c.after_run(|c| c.both_ways(size, &me))?;
                show(out, &r)?;
                reports.push(r);
                if o.all {
                    c.oob.hand_shake(&c.me())?;
                }
            }
            c.oob.close(&c.me())?;
        }
        Tool::SendBw => {
            for &size in &sizes {
                let mut k = c.counts();
                if !client {
                    c.prepost(&mut k, o.iters)?;
                }
                c.oob.hand_shake(&c.me())?;
                let me = if client {
                    c.bw_send(tool, o, size)?
                } else {
                    c.bw_recv(&mut k, o.iters)?
                };
                if o.all {
                    c.oob.hand_shake(&c.me())?;
                }
                // The receiver's messages are the ones it received.
                let moved = Side {
                    sent: me.rx,
                    ..Side::default()
                };
                let r = Report::new(size, &me, &moved, None);
                show(out, &r)?;
                reports.push(r);
            }
            c.oob.close(&c.me())?;
        }
        Tool::WriteLat => {
            for &size in &sizes {
                // CPU time per size: the report divides it by this size's time.
                let cpu0 = super::cpu_seconds();
                let t = c.write_lat(o.iters, size, !client)?;
                let r = lat_report(o, size, &t, true, cpu0);
                show(out, &r)?;
                reports.push(r);
            }
            // write_lat.c closes without a last exchange.
            c.oob.linger();
        }
        Tool::SendLat => {
            for &size in &sizes {
                let mut k = c.counts();
                c.prepost(&mut k, o.iters)?;
                c.oob.hand_shake(&c.me())?;
                let cpu0 = super::cpu_seconds();
                let t = c.send_lat(&mut k, o.iters, size, client)?;
                let r = lat_report(o, size, &t, true, cpu0);
                show(out, &r)?;
                reports.push(r);
            }
            c.oob.close(&c.me())?;
        }
        Tool::ReadLat | Tool::AtomicLat => {
            if client {
                for &size in &sizes {
                    let cpu0 = super::cpu_seconds();
                    let t = c.rt_lat(tool, o.iters, size)?;
                    let r = lat_report(o, size, &t, false, cpu0);
                    show(out, &r)?;
                    reports.push(r);
                }
            }
            // The server only answers: its close waits out the client's traffic.
            let d = c.me();
            c.oob.after_run(|b| b.close(&d))?;
            if !client {
                let r = Report::new(sizes[0], &Side::default(), &Side::default(), None);
                show(out, &r)?;
                reports.push(r);
            }
        }
    }
    // -R: the test's connections, then the control connection, end as perftest's do
    // (`rdma_cm_disconnect_nodes`, then the comm context's).
    if let Some(d) = &c.data {
        d.close(client);
    }
    c.oob.close_cm();
    // For interop diagnostics: our port counters (ICRC errors, drops, retransmissions).
    let line: Vec<String> = c
        .ctx
        .counters()
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    eprintln!("rverbs counters: {}", line.join(" "));
    Ok(reports)
}

#[cfg(test)]
mod tests;
