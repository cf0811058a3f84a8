//! `rverbs interop-peer [SERVER]` (hidden): the rverbs side of the interop test of RDMA
//! WRITE, READ (one-packet and multi-packet responses), SEND and WRITE with immediate,
//! FETCH_ADD and CMP_SWAP against the kernel's rxe. Its counterpart is the small C
//! program `interop/rdma_ops.c` (plain libibverbs) run in an rxe-peer guest; the two
//! speak the same exchange and run the same schedule, so either can be the requester
//! and either the responder.
//!
//! Without SERVER the peer is the responder: it fills its buffer, posts receives, listens
//! on TCP, connects its RC QP, waits for `check`, then validates what the requester wrote,
//! sent and swapped and answers `ok` or `FAIL <why>`. With SERVER it is the requester: it
//! runs the schedule `iters` times, validates every READ and atomic result, and succeeds
//! only when the responder answers `ok`.
//!
//! Exchange, one line each way, requester first: `"%06x:%06x:%032x:%016x:%08x\n"` = QPN,
//! PSN, GID (its 16 bytes in hex), MR address, R_Key. Both sides use one
//! [`BUF_LEN`]-byte region with the layout of the `OFF_*` constants.

use rverbs::{
    device, AccessFlags, ConnectOpts, Cq, Gid, Mr, Mtu, PeerInfo, Qp, QpInitAttr, QpType,
    RemoteBuf, SendRequest, Wc, WcFlags, WcOpcode, WcStatus,
};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Size of each side's memory region.
pub const BUF_LEN: usize = 65536;
/// `[0, OFF_WRITE)`: READ source on the responder (pattern 0xA5), READ target on the requester.
pub const OFF_WRITE: usize = 24576;
/// `[OFF_WRITE, OFF_RECV)`: WRITE target on the responder, WRITE source (pattern 0x3C).
pub const OFF_RECV: usize = 49152;
/// The 8-byte atomic target on the responder, starting at [`ATOMIC_INIT`].
pub const OFF_ATOMIC: usize = 57344;
/// Where the requester's atomics return the original values (3 × 8 bytes).
pub const OFF_RESULT: usize = 57352;
/// SEND-with-immediate length (3 packets at MTU 1024), pattern 0x5A from `OFF_RECV`.
pub const SEND_LEN: usize = 3000;
/// WRITE-with-immediate offset and length (2 packets).
pub const WIMM_OFF: usize = OFF_WRITE + 16384;
/// WRITE-with-immediate length.
pub const WIMM_LEN: usize = 2000;
/// Immediate of the n-th SEND: `SEND_IMM + n`.
pub const SEND_IMM: u32 = 0x1234_abcd;
/// Immediate of the n-th WRITE with immediate: `WRITE_IMM + n`.
pub const WRITE_IMM: u32 = 0x0bad_f00d;
/// The responder's atomic target before the test (distinct bytes: byte order shows).
pub const ATOMIC_INIT: u64 = 0x0102_0304_0506_0708;
/// What each FETCH_ADD adds.
pub const ATOMIC_ADD: u64 = 0x10;
/// What the matching CMP_SWAP stores.
pub const ATOMIC_SWAP: u64 = 0xcafe_babe_dead_beef;
/// Most schedule repetitions (the responder posts receives for this many).
pub const MAX_ITERS: usize = 64;

/// Options of `rverbs interop-peer`.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Responder to connect to; `None` = be the responder.
    pub server: Option<String>,
    /// TCP port of the exchange.
    pub port: u16,
    /// Device name (default: the loopback soft device).
    pub dev: Option<String>,
    /// Local GID index (default: one of the peer's address family).
    pub gid_idx: Option<u8>,
    /// Schedule repetitions, 1..=[`MAX_ITERS`].
    pub iters: usize,
    /// Print the device's counters and fault statistics to stderr at the end (also on
    /// failure).
    pub stats: bool,
    /// Local ACK timeout exponent (4.096 µs · 2^n; 14 = 67 ms, as rdma-core's tools).
    pub ack_timeout: u8,
}

/// The fill pattern: byte `i` of a region with seed `seed` (same function in rdma_ops.c).
pub fn pat(seed: u8, i: usize) -> u8 {
    ((i as u32).wrapping_mul(131).wrapping_add(seed as u32) ^ (i as u32 >> 8)) as u8
}

fn fill(b: &mut [u8], range: std::ops::Range<usize>, seed: u8) {
    for i in range {
        b[i] = pat(seed, i);
    }
}

fn same(b: &[u8], base: usize, range: std::ops::Range<usize>, seed: u8) -> bool {
    range
        .clone()
        .all(|i| b[base + i - range.start] == pat(seed, i))
}

/// One side's connection details, as exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID.
    pub gid: Gid,
    /// Address of the region.
    pub addr: u64,
    /// R_Key of the region.
    pub rkey: u32,
}

/// The exchange line of `p`, with its `\n`.
pub fn encode(p: &Peer) -> String {
    format!(
        "{:06x}:{:06x}:{}:{:016x}:{:08x}\n",
        p.qpn & 0xff_ffff,
        p.psn & 0xff_ffff,
        p.gid.hex(),
        p.addr,
        p.rkey
    )
}

/// Parses an exchange line (without or with its `\n`); an error names the bad field.
pub fn decode(line: &str) -> Result<Peer, String> {
    let f: Vec<&str> = line.trim_end_matches('\n').split(':').collect();
    if f.len() != 5 {
        return Err(format!("exchange line has {} fields, want 5", f.len()));
    }
    let hex = |s: &str, digits: usize, what: &str| -> Result<u64, String> {
        if s.is_empty() || s.len() > digits || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("bad {what} {s:?}"));
        }
        u64::from_str_radix(s, 16).map_err(|_| format!("bad {what} {s:?}"))
    };
    let gid = Gid::from_hex(f[2]).map_err(|_| format!("bad GID {:?}", f[2]))?;
    Ok(Peer {
        qpn: hex(f[0], 6, "QPN")? as u32,
        psn: hex(f[1], 6, "PSN")? as u32,
        gid,
        addr: hex(f[3], 16, "address")?,
        rkey: hex(f[4], 8, "R_Key")? as u32,
    })
}

struct Side {
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

impl Side {
    /// Waits up to 30 s for one completion with opcode `want`.
    fn wait(&self, want: WcOpcode, what: &str) -> Result<Wc, String> {
        let mut wc = [Wc::default()];
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let n = self
                .cq
                .poll_wait(&mut wc, Duration::from_millis(100))
                .map_err(|e| e.to_string())?;
            if n == 1 {
                break;
            }
            if Instant::now() > end {
                return Err(format!("{what}: no completion in 30 s"));
            }
        }
        let wc = wc[0];
        if wc.status != WcStatus::Success {
            return Err(format!("{what}: completion status {:?}", wc.status));
        }
        if wc.opcode != want {
            return Err(format!(
                "{what}: completion opcode {:?}, want {want:?}",
                wc.opcode
            ));
        }
        Ok(wc)
    }

    fn post(&self, what: &str, wr: SendRequest<'_>, want: WcOpcode) -> Result<Wc, String> {
        self.qp
            .post_send(&wr)
            .map_err(|e| format!("post {what}: {e}"))?;
        self.wait(want, what)
    }

    fn result(&self, k: usize) -> u64 {
        let mut v = [0u8; 8];
        self.mr.read(OFF_RESULT + 8 * k, &mut v);
        u64::from_ne_bytes(v)
    }

    /// The requester's schedule (the same as rdma_ops.c's `requester`).
    fn requester(&self, rem: &Peer, iters: usize) -> Result<(), String> {
        let remote = |off: usize, len: usize| RemoteBuf {
            addr: rem.addr + off as u64,
            rkey: rem.rkey,
            len: len as u32,
        };
        let mr = &self.mr;
        mr.with(|b| {
            fill(b, OFF_WRITE..OFF_RECV, 0x3c);
            fill(b, OFF_RECV..OFF_RECV + SEND_LEN, 0x5a);
        });
        for it in 0..iters {
            // WRITE: one packet, then 12000 B (12 packets), unaligned.
            self.post(
                "WRITE 512",
                SendRequest::write(
                    1,
                    &[mr.slice(OFF_WRITE..OFF_WRITE + 512)],
                    remote(OFF_WRITE, 512),
                ),
                WcOpcode::RdmaWrite,
            )?;
            let o = OFF_WRITE + 1001;
            self.post(
                "WRITE 12000",
                SendRequest::write(2, &[mr.slice(o..o + 12000)], remote(o, 12000)),
                WcOpcode::RdmaWrite,
            )?;
            // READ: a one-packet response, then a 20000 B (20-packet) response.
            mr.with(|b| b[..OFF_WRITE].fill(0));
            for (off, len) in [(0, 512), (1003, 20000)] {
                let what = format!("READ {len}");
                let wc = self.post(
                    &what,
                    SendRequest::read(3, &[mr.slice(off..off + len)], remote(off, len)),
                    WcOpcode::RdmaRead,
                )?;
                if wc.byte_len as usize != len {
                    return Err(format!("{what}: byte_len {}", wc.byte_len));
                }
                if !mr.with(|b| same(b, off, off..off + len, 0xa5)) {
                    return Err(format!("{what}: data differ"));
                }
            }
            // SEND with immediate (3 packets), WRITE with immediate (2 packets).
            self.post(
                "SEND_WITH_IMM",
                SendRequest::send(4, &[mr.slice(OFF_RECV..OFF_RECV + SEND_LEN)])
                    .imm(SEND_IMM.wrapping_add(it as u32)),
                WcOpcode::Send,
            )?;
            self.post(
                "WRITE_WITH_IMM",
                SendRequest::write(
                    5,
                    &[mr.slice(WIMM_OFF..WIMM_OFF + WIMM_LEN)],
                    remote(WIMM_OFF, WIMM_LEN),
                )
                .imm(WRITE_IMM.wrapping_add(it as u32)),
                WcOpcode::RdmaWrite,
            )?;
            // FETCH_ADD: the original value comes back.
            self.post(
                "FETCH_ADD",
                SendRequest::fetch_add(
                    6,
                    mr.slice(OFF_RESULT..OFF_RESULT + 8),
                    remote(OFF_ATOMIC, 8),
                    ATOMIC_ADD,
                ),
                WcOpcode::FetchAdd,
            )?;
            let want = ATOMIC_INIT + ATOMIC_ADD * it as u64;
            if self.result(0) != want {
                return Err(format!(
                    "FETCH_ADD {it} returned {:016x}, want {want:016x}",
                    self.result(0)
                ));
            }
        }
        let now = ATOMIC_INIT + ATOMIC_ADD * iters as u64;
        // CMP_SWAP that matches (swaps), then one that does not (leaves the value).
        for (k, swap, want) in [(1, ATOMIC_SWAP, now), (2, 1, ATOMIC_SWAP)] {
            self.post(
                "CMP_SWAP",
                SendRequest::cmp_swap(
                    7,
                    mr.slice(OFF_RESULT + 8 * k..OFF_RESULT + 8 * k + 8),
                    remote(OFF_ATOMIC, 8),
                    now,
                    swap,
                ),
                WcOpcode::CompSwap,
            )?;
            if self.result(k) != want {
                return Err(format!(
                    "CMP_SWAP {k} returned {:016x}, want {want:016x}",
                    self.result(k)
                ));
            }
        }
        Ok(())
    }

    /// The responder's checks once the requester says `check`.
    fn responder_check(&self, iters: usize) -> Result<(), String> {
        for it in 0..iters {
            let what = format!("SEND_WITH_IMM {it}");
            let wc = self.wait(WcOpcode::Recv, &what)?;
            let imm = SEND_IMM.wrapping_add(it as u32);
            if !wc.wc_flags.contains(WcFlags::WITH_IMM)
                || wc.imm_data != imm
                || wc.byte_len as usize != SEND_LEN
            {
                return Err(format!(
                    "{what}: flags {:?} imm {:08x} len {}",
                    wc.wc_flags, wc.imm_data, wc.byte_len
                ));
            }
            let base = OFF_RECV + (it % 2) * 4096;
            if !self
                .mr
                .with(|b| same(b, base, OFF_RECV..OFF_RECV + SEND_LEN, 0x5a))
            {
                return Err(format!("{what}: data differ"));
            }
            let what = format!("WRITE_WITH_IMM {it}");
            let wc = self.wait(WcOpcode::RecvRdmaWithImm, &what)?;
            if wc.imm_data != WRITE_IMM.wrapping_add(it as u32) {
                return Err(format!("{what}: imm {:08x}", wc.imm_data));
            }
        }
        let ok = self.mr.with(|b| {
            [
                OFF_WRITE..OFF_WRITE + 512,
                OFF_WRITE + 1001..OFF_WRITE + 13001,
                WIMM_OFF..WIMM_OFF + WIMM_LEN,
            ]
            .into_iter()
            .all(|r| same(b, r.start, r, 0x3c))
        });
        if !ok {
            return Err("WRITE data differ".into());
        }
        let mut v = [0u8; 8];
        self.mr.read(OFF_ATOMIC, &mut v);
        let v = u64::from_ne_bytes(v);
        if v != ATOMIC_SWAP {
            return Err(format!(
                "atomic target is {v:016x}, want {ATOMIC_SWAP:016x}"
            ));
        }
        Ok(())
    }
}

fn read_line<R: BufRead>(r: &mut R) -> Result<String, String> {
    let mut line = String::new();
    // A line longer than any valid message is cut: a peer cannot make us buffer much.
    let n = <&mut R as std::io::Read>::take(r, 256)
        .read_line(&mut line)
        .map_err(|e| format!("TCP read: {e}"))?;
    if n == 0 {
        return Err("the peer closed the TCP connection".into());
    }
    Ok(line.trim_end_matches('\n').to_string())
}

/// Runs one side; progress and the verdict go to `out`. `Ok` only when the whole
/// schedule ran and both sides validated everything.
pub fn run<W: Write>(o: &Opts, out: &mut W) -> Result<(), String> {
    let e = |e: rverbs::Error| e.to_string();
    if o.iters == 0 || o.iters > MAX_ITERS {
        return Err(format!("iterations must be within 1..={MAX_ITERS}"));
    }
    let dev = device(o.dev.as_deref()).map_err(e)?;
    let ctx = dev.open().map_err(e)?;
    let r = run_on(&ctx, o, out);
    if o.stats {
        let line: Vec<String> = ctx
            .counters()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        eprintln!("rverbs counters: {}", line.join(" "));
        eprintln!("rverbs faults: {:?}", ctx.fault_stats());
        if let Some(s) = ctx.raw_net_stats() {
            eprintln!("rverbs raw path: {s:?}");
        }
    }
    r
}

fn run_on<W: Write>(ctx: &rverbs::Context, o: &Opts, out: &mut W) -> Result<(), String> {
    let e = |e: rverbs::Error| e.to_string();
    let pd = ctx.alloc_pd().map_err(e)?;
    let cq = ctx.create_cq(4 * MAX_ITERS as u32 + 8).map_err(e)?;
    let mr = pd.reg_mr(BUF_LEN, AccessFlags::ALL).map_err(e)?;
    let mut attr = QpInitAttr::new(QpType::Rc, &cq);
    attr.cap.max_send_wr = 8;
    attr.cap.max_recv_wr = 2 * MAX_ITERS as u32;
    let qp = pd.create_qp(&attr).map_err(e)?;
    let psn = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        & 0xff_ffff;
    let conn = ConnectOpts {
        psn,
        mtu: Mtu::M1024,
        access: AccessFlags::ALL,
        rd_atomic: 4,
        hop_limit: 1,
        timeout: o.ack_timeout,
        ..ConnectOpts::default()
    };
    qp.init(&conn).map_err(e)?;
    let side = Side { cq, qp, mr };
    let responder = o.server.is_none();
    if responder {
        side.mr.with(|b| {
            fill(b, 0..OFF_WRITE, 0xa5);
            b[OFF_ATOMIC..OFF_ATOMIC + 8].copy_from_slice(&ATOMIC_INIT.to_ne_bytes());
        });
        for i in 0..MAX_ITERS {
            let base = OFF_RECV + (i % 2) * 4096;
            side.qp
                .post_recv(1, &[side.mr.slice(base..base + 4096)])
                .map_err(e)?;
            side.qp.post_recv(2, &[]).map_err(e)?;
        }
    }
    let (stream, peer_ip) = match &o.server {
        Some(server) => {
            let addrs = (server.as_str(), o.port)
                .to_socket_addrs()
                .map_err(|err| format!("{server}: {err}"))?;
            let mut found = None;
            for a in addrs {
                if let Ok(s) = TcpStream::connect_timeout(&a, Duration::from_secs(10)) {
                    found = Some((s, a.ip()));
                    break;
                }
            }
            found.ok_or(format!("Couldn't connect to {server}:{}", o.port))?
        }
        None => {
            let listener = TcpListener::bind(("::", o.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", o.port)))
                .map_err(|err| format!("Couldn't listen to port {}: {err}", o.port))?;
            let (s, a) = listener.accept().map_err(|e| e.to_string())?;
            (s, a.ip())
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())?;
    let mut rd = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut wr = stream;
    let tcp_w = |wr: &mut TcpStream, s: &str| {
        wr.write_all(s.as_bytes())
            .map_err(|e| format!("TCP write: {e}"))
    };
    let me = |sgid: u8| -> Result<Peer, String> {
        Ok(Peer {
            qpn: side.qp.qp_num(),
            psn,
            gid: ctx.gid(sgid).ok_or(format!("no GID index {sgid}"))?,
            addr: side.mr.addr(),
            rkey: side.mr.rkey(),
        })
    };
    let pick = |ipv6: bool| -> Result<u8, String> {
        match o.gid_idx {
            Some(i) => Ok(i),
            None => ctx
                .gid_index_for(ipv6)
                .ok_or_else(|| format!("no {} GID", if ipv6 { "IPv6" } else { "IPv4" })),
        }
    };
    let connect = |rem: &Peer, sgid: u8| {
        side.qp
            .connect(
                &PeerInfo {
                    qpn: rem.qpn,
                    psn: rem.psn,
                    gid: rem.gid,
                },
                &ConnectOpts {
                    sgid_index: sgid,
                    ..conn
                },
            )
            .map_err(e)
    };
    let w = |out: &mut W, s: String| writeln!(out, "{s}").map_err(|e| e.to_string());
    if responder {
        let rem = decode(&read_line(&mut rd)?)?;
        let sgid = pick(rem.gid.to_ipv4_mapped().is_none())?;
        let mine = me(sgid)?;
        connect(&rem, sgid)?;
        tcp_w(&mut wr, &encode(&mine))?;
        w(
            out,
            format!(
                "local QPN 0x{:06x} PSN 0x{:06x}, remote QPN 0x{:06x} PSN 0x{:06x}",
                mine.qpn, mine.psn, rem.qpn, rem.psn
            ),
        )?;
        let cmd = read_line(&mut rd)?;
        if cmd != "check" {
            return Err(format!("requester gave up ({cmd:?})"));
        }
        let verdict = side.responder_check(o.iters);
        let line = match &verdict {
            Ok(()) => "ok".to_string(),
            Err(why) => format!("FAIL {why}"),
        };
        tcp_w(&mut wr, &format!("{line}\n"))?;
        w(out, format!("responder: {line}"))?;
        verdict
    } else {
        let v6 = match peer_ip {
            std::net::IpAddr::V6(v) => v.to_ipv4_mapped().is_none(),
            std::net::IpAddr::V4(_) => false,
        };
        let sgid = pick(v6)?;
        let mine = me(sgid)?;
        tcp_w(&mut wr, &encode(&mine))?;
        let rem = decode(&read_line(&mut rd)?)?;
        w(
            out,
            format!(
                "local QPN 0x{:06x} PSN 0x{:06x}, remote QPN 0x{:06x} PSN 0x{:06x}",
                mine.qpn, mine.psn, rem.qpn, rem.psn
            ),
        )?;
        connect(&rem, sgid)?;
        let mine_ok = side.requester(&rem, o.iters);
        tcp_w(
            &mut wr,
            if mine_ok.is_ok() {
                "check\n"
            } else {
                "abort\n"
            },
        )?;
        mine_ok?;
        let verdict = read_line(&mut rd)?;
        w(out, format!("responder: {verdict}"))?;
        if verdict != "ok" {
            return Err(format!("the responder found: {verdict}"));
        }
        w(out, format!("requester: {} x (WRITE 512+12000, READ 512+20000, SEND_WITH_IMM {SEND_LEN}, WRITE_WITH_IMM {WIMM_LEN}, FETCH_ADD) + 2 CMP_SWAP: all verified", o.iters))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_line_round_trips_and_rejects_garbage() {
        let p = Peer {
            qpn: 0x11,
            psn: 0xabcdef,
            gid: "::ffff:10.77.0.1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .into(),
            addr: 0x7f00_dead_beef_0000,
            rkey: 0x1234,
        };
        let line = encode(&p);
        assert_eq!(
            line,
            "000011:abcdef:00000000000000000000ffff0a4d0001:7f00deadbeef0000:00001234\n"
        );
        assert_eq!(decode(&line), Ok(p));
        for bad in [
            "",
            "000011:abcdef",
            "000011:abcdef:00000000000000000000ffff0a4d0001:7f00deadbeef0000:00001234:9",
            "00001x:abcdef:00000000000000000000ffff0a4d0001:7f00deadbeef0000:00001234",
            "000011:abcdef:0000000000000000000ffff0a4d0001:7f00deadbeef0000:00001234",
            "000011:abcdef:00000000000000000000ffff0a4d0001:17f00deadbeef0000:00001234",
            "000011:abcdef:00000000000000000000ffff0a4d00+1:7f00deadbeef0000:00001234",
            "1000011:abcdef:00000000000000000000ffff0a4d0001:7f00deadbeef0000:00001234",
            "000011:abcdef:00000000000000000000ffff0a4d00é:7f00deadbeef0000:00001234",
            // A 2-byte character across a byte-pair boundary of the GID.
            "000011:abcdef:0000000000000000000000000000é0:7f00deadbeef0000:00001234",
        ] {
            assert!(decode(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn pattern_matches_the_c_program() {
        // rdma_ops.c: (uint8_t)((i * 131u + seed) ^ (i >> 8))
        assert_eq!(pat(0xa5, 0), 0xa5);
        assert_eq!(pat(0xa5, 1), (131u32 + 0xa5) as u8);
        assert_eq!(pat(0x3c, 300), ((300u32 * 131 + 0x3c) ^ 1) as u8);
    }
}
