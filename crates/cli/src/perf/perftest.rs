//! `rverbs perf write bw SERVER --perftest`: the client side of perftest's own
//! out-of-band exchange (its "Ethernet" exchange over TCP, perftest 5.70 .. 6.27, e.g.
//! Debian's 4.5+0.17 = version 6.06), so an unmodified `ib_write_bw` server can be
//! the peer. The sequence and byte layouts follow perftest's
//! `src/perftest_communication.c` (`exchange_versions`, `check_sys_data`,
//! `check_mtu`, `ctx_hand_shake`, `xchg_bw_reports`, `ctx_close_connection`) and the
//! order of `src/write_bw.c`; every step the client sends first, then reads.

use super::{Opts, Report, Side};
use rverbs::{
    device, AccessFlags, ConnectOpts, Gid, Mtu, PeerInfo, QpInitAttr, QpType, RemoteBuf,
    SendRequest, Wc, WcStatus,
};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What we announce: a version perftest accepts (>= 5.70) and that asks for no
/// parameter negotiation (those arrived in 6.28).
const VERSION: &str = "6.06";
const MAX_VERSION: usize = 16;
const KEY_MSG_SIZE_GID: usize = 108;

/// One `pingpong_dest` as perftest prints it with a GID (`KEY_PRINT_FMT_GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding READs the side allows.
    pub out_reads: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// R_Key of the buffer.
    pub rkey: u32,
    /// Address of the buffer.
    pub vaddr: u64,
    /// GID.
    pub gid: Gid,
    /// SRQ number (0).
    pub srqn: u32,
}

/// `"%04x:%04x:%06x:%06x:%08x:%016llx:"` + 16 × `"%02x:"` + `"%08x:"` and a NUL: 108 bytes.
pub fn encode(d: &Dest) -> [u8; KEY_MSG_SIZE_GID] {
    let mut t = format!(
        "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
        d.lid, d.out_reads, d.qpn, d.psn, d.rkey, d.vaddr
    );
    for b in d.gid.octets() {
        t.push_str(&format!("{b:02x}:"));
    }
    t.push_str(&format!("{:08x}:", d.srqn));
    let mut m = [0u8; KEY_MSG_SIZE_GID];
    let n = t.len().min(KEY_MSG_SIZE_GID - 1);
    m[..n].copy_from_slice(&t.as_bytes()[..n]);
    m
}

/// Parses a peer's 108-byte key message.
pub fn decode(m: &[u8]) -> Result<Dest, String> {
    let text = std::str::from_utf8(m)
        .map_err(|_| "perftest key is not text")?
        .trim_end_matches('\0');
    let f: Vec<&str> = text.split(':').collect();
    if f.len() < 23 {
        return Err(format!("perftest key has {} fields, want 23", f.len()));
    }
    let hex = |i: usize, what: &str| {
        u64::from_str_radix(f[i], 16).map_err(|_| format!("perftest key: bad {what}"))
    };
    let mut gid = [0u8; 16];
    for (k, b) in gid.iter_mut().enumerate() {
        *b = hex(6 + k, "GID")? as u8;
    }
    Ok(Dest {
        lid: hex(0, "LID")? as u16,
        out_reads: hex(1, "out_reads")? as u16,
        qpn: hex(2, "QPN")? as u32 & 0xff_ffff,
        psn: hex(3, "PSN")? as u32 & 0xff_ffff,
        rkey: hex(4, "rkey")? as u32,
        vaddr: hex(5, "vaddr")?,
        gid: Gid(gid),
        srqn: hex(22, "SRQN")? as u32,
    })
}

/// `ctx_xchg_data` on the client: send ours, then read theirs of the same size.
fn xchg(s: &mut TcpStream, mine: &[u8]) -> Result<Vec<u8>, String> {
    s.write_all(mine)
        .map_err(|e| format!("perftest exchange: {e}"))?;
    let mut theirs = vec![0u8; mine.len()];
    s.read_exact(&mut theirs)
        .map_err(|e| format!("perftest exchange: {e}"))?;
    Ok(theirs)
}

/// Runs RDMA WRITE bandwidth as the client of an `ib_write_bw` server.
pub fn write_bw_client(o: &Opts, server: &str) -> Result<Report, String> {
    let e = |e: rverbs::Error| e.to_string();
    let addr = (server, o.port)
        .to_socket_addrs()
        .map_err(|e| format!("{server}: {e}"))?
        .next()
        .ok_or(format!("{server}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| format!("couldn't connect to {addr}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));

    // exchange_versions
    let mut v = [0u8; MAX_VERSION];
    v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    let rv = xchg(&mut s, &v)?;
    let rem_version: f64 = std::str::from_utf8(&rv)
        .unwrap_or("")
        .trim_end_matches('\0')
        .trim()
        .parse()
        .map_err(|_| "perftest peer sent no version")?;
    // In hundredths: 5.70 is the oldest perftest accepts, 6.28 added the parameter
    // negotiation this client does not speak.
    if !(570..628).contains(&((rem_version * 100.0).round() as i64)) {
        return Err(format!(
            "perftest {rem_version} on the peer: this client speaks 5.70 .. 6.27"
        ));
    }
    // check_sys_data: cycle buffer (page size) and cache line, big-endian ints.
    xchg(&mut s, &4096i32.to_be_bytes())?;
    xchg(&mut s, &64i32.to_be_bytes())?;

    let dev = device(o.dev.as_deref()).map_err(e)?;
    let ctx = dev.open().map_err(e)?;
    // check_mtu: the MTU enum as text in 2 bytes; the path takes the smaller.
    let mine = if o.mtu == 0 {
        dev.active_mtu()
    } else {
        Mtu::from_enum(match o.mtu {
            256 => 1,
            512 => 2,
            1024 => 3,
            2048 => 4,
            _ => 5,
        })
        .unwrap_or(Mtu::M1024)
    };
    let r = xchg(&mut s, &[b'0' + mine as u8, 0])?;
    let theirs = Mtu::from_enum(r[0].wrapping_sub(b'0')).unwrap_or(mine);
    let mtu = mine.min(theirs);

    let pd = ctx.alloc_pd().map_err(e)?;
    let cq = ctx.create_cq(o.depth as u32 + 16).map_err(e)?;
    let mr = pd.reg_mr(o.size.max(1), AccessFlags::ALL).map_err(e)?;
    let mut attr = QpInitAttr::new(QpType::Rc, &cq);
    attr.cap.max_send_wr = o.depth as u32 + 1;
    attr.cap.max_recv_wr = 1;
    let qp = pd.create_qp(&attr).map_err(e)?;
    let sgid = match o.gid_idx {
        Some(i) => i,
        None => ctx
            .gid_index_for(addr.is_ipv6())
            .ok_or("no GID of the server's address family")?,
    };
    let psn = std::process::id() & 0xff_ffff;
    let me = Dest {
        lid: 0,
        out_reads: 1,
        qpn: qp.qp_num(),
        psn,
        rkey: mr.rkey(),
        vaddr: mr.addr(),
        gid: ctx.gid(sgid).ok_or("no such GID index")?,
        srqn: 0,
    };
    let hand_shake =
        |s: &mut TcpStream| -> Result<Dest, String> { decode(&xchg(s, &encode(&me))?) };
    let rem = hand_shake(&mut s)?;
    let copts = ConnectOpts {
        sgid_index: sgid,
        mtu,
        psn,
        rd_atomic: 1,
        ..ConnectOpts::default()
    };
    qp.connect(
        &PeerInfo {
            qpn: rem.qpn,
            psn: rem.psn,
            gid: rem.gid,
        },
        &copts,
    )
    .map_err(e)?;
    // "An additional handshake is required after moving qp to RTR."
    hand_shake(&mut s)?;

    // The traffic: o.iters WRITEs of o.size bytes into the server's buffer.
    let remote = RemoteBuf {
        addr: rem.vaddr,
        rkey: rem.rkey,
        len: o.size as u32,
    };
    let cq_mod = (o.depth / 4).clamp(1, 100) as u64;
    let (start, cpu0) = (Instant::now(), super::cpu_seconds());
    let (mut posted, mut completed) = (0u64, 0u64);
    let mut wcs = vec![Wc::default(); 32];
    let mut last = Instant::now();
    while completed < o.iters {
        while posted < o.iters && posted - completed < o.depth as u64 {
            posted += 1;
            let sig = posted % cq_mod == 0 || posted == o.iters;
            qp.post_send(&SendRequest::write(posted, &[mr.slice(0..o.size)], remote).signaled(sig))
                .map_err(e)?;
        }
        let n = cq
            .wait(&mut wcs, o.spin, Duration::from_millis(1))
            .map_err(e)?;
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(format!("WRITE {} completed with {:?}", wc.wr_id, wc.status));
            }
            completed = completed.max(wc.wr_id);
            last = Instant::now();
        }
        if last.elapsed() > super::STALL {
            return Err("the perftest server stopped answering".into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = super::cpu_seconds() - cpu0;

    // The client's closing steps: handshakes, bandwidth report, close. (Debian's
    // perftest 6.06 server reads two handshakes here, upstream's write_bw.c one: with
    // two, both agree.)
    hand_shake(&mut s)?;
    hand_shake(&mut s)?;
    let bytes = o.iters * o.size as u64;
    let mbs = bytes as f64 / secs / 1_048_576.0;
    xchg(&mut s, &(o.size as u64).to_be_bytes())?;
    xchg(&mut s, &o.iters.to_be_bytes())?;
    xchg(&mut s, &mbs.to_bits().to_be_bytes())?;
    xchg(&mut s, &mbs.to_bits().to_be_bytes())?;
    xchg(
        &mut s,
        &(o.iters as f64 / secs / 1e6).to_bits().to_be_bytes(),
    )?;
    hand_shake(&mut s)?;
    let me = Side {
        sent: o.iters,
        rx: 0,
        secs,
        cpu,
        wall: secs,
    };
    Ok(Report::new(o.size, &me, &Side::default(), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_message_round_trips_in_perftests_layout() {
        let d = Dest {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x5555_0000_1000,
            gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2]),
            srqn: 0,
        };
        let m = encode(&d);
        let text = std::str::from_utf8(&m[..107]).unwrap();
        assert_eq!(
            text,
            "0000:0010:000011:abcdef:00001234:0000555500001000:\
             00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:"
        );
        assert_eq!(m[107], 0);
        assert_eq!(decode(&m), Ok(d));
        assert!(decode(b"0000:0010").is_err());
        assert!(decode(&[0xff; 108]).is_err());
        let mut bad = m;
        bad[0] = b'z';
        assert!(decode(&bad).is_err());
    }
}
