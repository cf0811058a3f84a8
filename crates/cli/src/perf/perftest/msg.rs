//! What the two sides of a perftest run exchange: the `pingpong_dest` keys, the
//! version string, the MTU and `sys` lines, and the bandwidth report.

use super::*;

/// One `pingpong_dest` as perftest prints it with a GID (`KEY_PRINT_FMT_GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding READs / atomics the side accepts.
    pub out_reads: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// R_Key of the buffer.
    pub rkey: u32,
    /// Address of the buffer the peer writes to / reads from.
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

/// Parses a peer's 108-byte key message (what `ethernet_read_keys` reads).
pub fn decode(m: &[u8]) -> Result<Dest, String> {
    let text = std::str::from_utf8(m)
        .map_err(|_| "perftest key is not text")?
        .trim_end_matches('\0');
    let f: Vec<&str> = text.split(':').collect();
    if f.len() < 23 {
        return Err(format!("perftest key has {} fields, want 23", f.len()));
    }
    let hex = |i: usize, what: &str, max: u64| {
        u64::from_str_radix(f[i], 16)
            .ok()
            .filter(|v| *v <= max)
            .ok_or(format!("perftest key: bad {what} {:?}", f[i]))
    };
    let mut gid = [0u8; 16];
    for (k, b) in gid.iter_mut().enumerate() {
        *b = hex(6 + k, "GID byte", 0xff)? as u8;
    }
    Ok(Dest {
        lid: hex(0, "LID", 0xffff)? as u16,
        out_reads: hex(1, "out_reads", 0xffff)? as u16,
        qpn: hex(2, "QPN", 0xff_ffff)? as u32,
        psn: hex(3, "PSN", 0xff_ffff)? as u32,
        rkey: hex(4, "rkey", u32::MAX as u64)? as u32,
        vaddr: hex(5, "vaddr", u64::MAX)?,
        gid: Gid(gid),
        srqn: hex(22, "SRQN", u32::MAX as u64)? as u32,
    })
}

/// The peer's version field (NUL-padded text such as `6.06`), read the way perftest's
/// `atof` does: the leading decimal number. Returned in hundredths (6.06 → 606).
pub fn parse_version(b: &[u8]) -> Result<u32, String> {
    let text = String::from_utf8_lossy(b);
    let t = text.trim_start_matches([' ', '\t']);
    let end = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (c == '.' && !t[..i].contains('.'))))
        .map_or(t.len(), |(i, _)| i);
    let v: f64 = t[..end]
        .parse()
        .map_err(|_| format!("the peer sent no perftest version ({:?})", text))?;
    if !(0.0..1e6).contains(&v) {
        return Err(format!("perftest version {v} is not plausible"));
    }
    Ok((v * 100.0).round() as u32)
}

/// The peer's `check_mtu` field: the MTU enum (1..5) as text; perftest ignores what is
/// not a valid enum (`valid_mtu_size`) and keeps its own.
pub fn parse_mtu(b: &[u8]) -> Option<Mtu> {
    let t: String = b
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .map(|&c| c as char)
        .collect();
    t.parse::<u8>().ok().and_then(Mtu::from_enum)
}

/// The peer's `check_sys_data` fields: its cycle buffer (page size) and cache line, as
/// big-endian ints; perftest takes the larger of both sides'. We refuse values no
/// machine has rather than size a buffer by them.
pub fn parse_sys(cycle: &[u8], line: &[u8]) -> Result<(usize, usize), String> {
    let int = |b: &[u8]| -> Option<i32> { Some(i32::from_be_bytes(b.try_into().ok()?)) };
    let c = int(cycle).ok_or("short page size")?;
    let l = int(line).ok_or("short cache line")?;
    if !(1..=1 << 26).contains(&c) || !(1..=4096).contains(&l) {
        return Err(format!(
            "the peer's page size {c} / cache line {l} are not plausible"
        ));
    }
    Ok((c.max(PAGE) as usize, l.max(CACHE_LINE) as usize))
}

/// `struct bw_report_data` as `xchg_bw_reports` sends it (per-port fields off): five
/// big-endian 8-byte fields, each its own exchange.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations measured.
    pub iters: u64,
    /// Peak bandwidth, MB/s (2^20 bytes).
    pub bw_peak: f64,
    /// Average bandwidth, MB/s.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five fields in exchange order.
    pub fn fields(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// From the five fields; a report whose figures are not finite, non-negative
    /// numbers is an error.
    pub fn from_fields(f: &[[u8; 8]; 5]) -> Result<BwReport, String> {
        let d = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        let r = BwReport {
            size: u64::from_be_bytes(f[0]),
            iters: u64::from_be_bytes(f[1]),
            bw_peak: d(f[2]),
            bw_avg: d(f[3]),
            msg_rate: d(f[4]),
        };
        if [r.bw_peak, r.bw_avg, r.msg_rate]
            .iter()
            .any(|v| !v.is_finite() || *v < 0.0)
        {
            return Err(format!("the peer's bandwidth report is not valid: {r:?}"));
        }
        Ok(r)
    }

    /// Our figures of one size sent (`me`), as perftest reports them.
    pub(super) fn of(size: usize, me: &Side) -> BwReport {
        let secs = me.secs.max(1e-9);
        let mbs = me.sent as f64 * size as f64 / secs / 1_048_576.0;
        BwReport {
            size: size as u64,
            iters: me.sent,
            bw_peak: mbs,
            bw_avg: mbs,
            msg_rate: me.sent as f64 / secs / 1e6,
        }
    }

    /// As a [`Report`] (the peer's figures; no CPU times).
    pub(super) fn report(&self) -> Report {
        let bytes = self.iters.saturating_mul(self.size);
        let secs = if self.bw_avg > 0.0 {
            bytes as f64 / (self.bw_avg * 1_048_576.0)
        } else {
            0.0
        };
        Report {
            size: self.size as usize,
            msgs: self.iters,
            bytes,
            secs,
            cpu_local: 0.0,
            cpu_peer: 0.0,
            cpu_util: 0.0,
            lat: None,
            resent: 0,
            recovery: Default::default(),
        }
    }
}
