//! What two programs send each other before their first packet: [`PeerInfo`] (QP
//! number, first PSN, GID) and [`RemoteBuf`] (address, R_Key, length), in a text form
//! (`Display` / `FromStr`, one line each) and a bytes form (`to_bytes` / `from_bytes`,
//! fixed layout, big-endian). rdma-core leaves this to each program (`ibv_rc_pingpong`
//! sends `LID:QPN:PSN:GID` text, perftest a struct); these are the crate's own, the
//! same on every host whatever its byte order.

use super::{PeerInfo, RemoteBuf};
use crate::error::{Error, Result};
use rverbs_engine::{Errno, VerbError};
use rverbs_wire::grh::Gid;
use std::fmt;
use std::str::FromStr;

/// The largest QPN or PSN: both are 24 bits (IBTA 9.2: BTH DestQP and PSN).
const MAX_24: u32 = 0xff_ffff;

fn bad(verb: &'static str, why: &'static str) -> Error {
    VerbError::new(verb, Errno::Inval, why).into()
}

/// A number in decimal or `0x` hex.
fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The values of `keys` in `s` (whitespace-separated `key=value` tokens, each key
/// exactly once, in any order, nothing else).
fn fields<'a, const N: usize>(
    verb: &'static str,
    s: &'a str,
    keys: [&str; N],
) -> Result<[&'a str; N]> {
    let mut out: [Option<&str>; N] = [None; N];
    for tok in s.split_whitespace() {
        let (k, v) = tok
            .split_once('=')
            .ok_or_else(|| bad(verb, "a field is not key=value"))?;
        let i = keys
            .iter()
            .position(|&key| key == k)
            .ok_or_else(|| bad(verb, "an unknown key"))?;
        if out[i].replace(v).is_some() {
            return Err(bad(verb, "a key given twice"));
        }
    }
    let mut vals = [""; N];
    for (v, o) in vals.iter_mut().zip(out) {
        *v = o.ok_or_else(|| bad(verb, "a key is missing"))?;
    }
    Ok(vals)
}

/// `value` as a number of at most `max`.
fn bounded(verb: &'static str, value: &str, max: u64, what: &'static str) -> Result<u64> {
    let n = number(value).ok_or_else(|| bad(verb, what))?;
    if n > max {
        return Err(VerbError::new(verb, Errno::Inval, what)
            .with_limit(n, max, "", "the field takes at most")
            .into());
    }
    Ok(n)
}

/// The exchange forms of a [`PeerInfo`] (and of a [`RemoteBuf`]): text with
/// `to_string()` / `parse()`, bytes with [`PeerInfo::to_bytes`] /
/// [`PeerInfo::from_bytes`].
///
/// ```
/// use rverbs::{AccessFlags, ConnectOpts, PeerInfo, QpInitAttr, QpType, RemoteBuf, SendRequest, Wc};
///
/// // Both sides, in one process here; across hosts the text or bytes go over TCP.
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(16)?;
/// let (a, b) = (
///     pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?,
///     pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?,
/// );
/// let opts = ConnectOpts::default();
/// let gid = ctx.gid(opts.sgid_index).expect("a GID at the default index");
/// let (mr_a, mr_b) = (pd.reg_mr(64, AccessFlags::ALL)?, pd.reg_mr(64, AccessFlags::ALL)?);
///
/// // B tells A, as text: "qpn=0x00abcd psn=0x000000 gid=::ffff:127.0.0.7" and
/// // "addr=0x... rkey=0x... len=64".
/// let b_line = PeerInfo { qpn: b.qp_num(), psn: opts.psn, gid }.to_string();
/// let b_buf = mr_b.remote(0..64).to_string();
/// // A tells B, as bytes (24 of them).
/// let a_bytes = PeerInfo { qpn: a.qp_num(), psn: opts.psn, gid }.to_bytes();
///
/// a.connect(&b_line.parse()?, &opts)?;
/// b.connect(&PeerInfo::from_bytes(&a_bytes)?, &opts)?;
/// let remote: RemoteBuf = b_buf.parse()?;
/// mr_a.write(0, &[7; 64]);
/// a.post_send(&SendRequest::write(1, &[mr_a.slice(0..64)], remote))?;
/// let mut wc = [Wc::default()];
/// assert_eq!(cq.poll_wait(&mut wc, std::time::Duration::from_secs(5))?, 1);
/// assert_eq!(mr_b.to_vec(), [7; 64]);
/// # Ok::<(), rverbs::Error>(())
/// ```
impl PeerInfo {
    /// Length of [`PeerInfo::to_bytes`].
    pub const BYTES: usize = 24;

    /// The bytes form: QPN (4 bytes), PSN (4 bytes), both big-endian with the top
    /// byte 0, then the GID's 16 bytes as on the wire.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0; Self::BYTES];
        b[0..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..8].copy_from_slice(&self.psn.to_be_bytes());
        b[8..24].copy_from_slice(&self.gid.0);
        b
    }

    /// Reads [`PeerInfo::to_bytes`]: EINVAL unless `b` is exactly
    /// [`PeerInfo::BYTES`] long with a QPN and a PSN of 24 bits.
    pub fn from_bytes(b: &[u8]) -> Result<PeerInfo> {
        const VERB: &str = "PeerInfo::from_bytes";
        let b: &[u8; Self::BYTES] = b.try_into().map_err(|_| {
            Error::from(
                VerbError::new(VERB, Errno::Inval, "wrong length").with_limit(
                    b.len() as u64,
                    Self::BYTES as u64,
                    "bytes",
                    "the form has",
                ),
            )
        })?;
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (qpn, psn) = (word(0), word(4));
        if qpn > MAX_24 || psn > MAX_24 {
            return Err(bad(VERB, "a QPN or PSN above 24 bits"));
        }
        let mut gid = [0; 16];
        gid.copy_from_slice(&b[8..24]);
        Ok(PeerInfo {
            qpn,
            psn,
            gid: Gid(gid),
        })
    }
}

/// The text form, one line: `qpn=0x00abcd psn=0x123456 gid=fe80::1` (QPN and PSN as
/// six hex digits, the GID as [`Gid`]'s `Display`, an IPv4 one as `::ffff:a.b.c.d`).
impl fmt::Display for PeerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "qpn={:#08x} psn={:#08x} gid={}",
            self.qpn, self.psn, self.gid
        )
    }
}

/// Reads the text form: the keys `qpn`, `psn` and `gid` once each, in any order,
/// separated by whitespace; numbers in decimal or `0x` hex, of 24 bits; the GID in any
/// form [`Gid`]'s `FromStr` takes. Anything else is EINVAL.
impl FromStr for PeerInfo {
    type Err = Error;

    fn from_str(s: &str) -> Result<PeerInfo> {
        const VERB: &str = "PeerInfo::from_str";
        let [qpn, psn, gid] = fields(VERB, s, ["qpn", "psn", "gid"])?;
        Ok(PeerInfo {
            qpn: bounded(VERB, qpn, MAX_24.into(), "qpn is not a 24-bit number")? as u32,
            psn: bounded(VERB, psn, MAX_24.into(), "psn is not a 24-bit number")? as u32,
            gid: gid.parse().map_err(|_| bad(VERB, "gid is not a GID"))?,
        })
    }
}

impl RemoteBuf {
    /// Length of [`RemoteBuf::to_bytes`].
    pub const BYTES: usize = 16;

    /// The bytes form: address (8 bytes), R_Key (4 bytes), length (4 bytes), each
    /// big-endian (the order of a RETH, IBTA 9.4.3).
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0; Self::BYTES];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Reads [`RemoteBuf::to_bytes`]: EINVAL unless `b` is exactly
    /// [`RemoteBuf::BYTES`] long.
    pub fn from_bytes(b: &[u8]) -> Result<RemoteBuf> {
        let b: &[u8; Self::BYTES] =
            b.try_into().map_err(|_| {
                Error::from(
                    VerbError::new("RemoteBuf::from_bytes", Errno::Inval, "wrong length")
                        .with_limit(b.len() as u64, Self::BYTES as u64, "bytes", "the form has"),
                )
            })?;
        let mut addr = [0; 8];
        addr.copy_from_slice(&b[0..8]);
        Ok(RemoteBuf {
            addr: u64::from_be_bytes(addr),
            rkey: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            len: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
        })
    }
}

/// The text form, one line: `addr=0x00007f0012345000 rkey=0x00001234 len=4096`
/// (address and R_Key in hex, the length in decimal).
impl fmt::Display for RemoteBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "addr={:#018x} rkey={:#010x} len={}",
            self.addr, self.rkey, self.len
        )
    }
}

/// Reads the text form: the keys `addr`, `rkey` and `len` once each, in any order,
/// separated by whitespace; numbers in decimal or `0x` hex that fit their fields (64,
/// 32 and 32 bits). Anything else is EINVAL.
impl FromStr for RemoteBuf {
    type Err = Error;

    fn from_str(s: &str) -> Result<RemoteBuf> {
        const VERB: &str = "RemoteBuf::from_str";
        let [addr, rkey, len] = fields(VERB, s, ["addr", "rkey", "len"])?;
        let u32_max = u32::MAX.into();
        Ok(RemoteBuf {
            addr: bounded(VERB, addr, u64::MAX, "addr is not a 64-bit number")?,
            rkey: bounded(VERB, rkey, u32_max, "rkey is not a 32-bit number")? as u32,
            len: bounded(VERB, len, u32_max, "len is not a 32-bit number")? as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> PeerInfo {
        PeerInfo {
            qpn: 0xab_cdef,
            psn: 0x12,
            gid: Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 7)),
        }
    }

    fn buf() -> RemoteBuf {
        RemoteBuf {
            addr: 0x7f00_1234_5000,
            rkey: 0x1234,
            len: 4096,
        }
    }

    #[test]
    fn text_forms() {
        let p = peer();
        assert_eq!(
            p.to_string(),
            "qpn=0xabcdef psn=0x000012 gid=::ffff:127.0.0.7"
        );
        assert_eq!(p.to_string().parse::<PeerInfo>().unwrap(), p);
        // Any order, decimal, other GID forms, extra whitespace.
        let q: PeerInfo = " gid=0000:0000:0000:0000:0000:ffff:7f00:0007\tpsn=18  qpn=11259375 "
            .parse()
            .unwrap();
        assert_eq!(q, p);
        let b = buf();
        assert_eq!(
            b.to_string(),
            "addr=0x00007f0012345000 rkey=0x00001234 len=4096"
        );
        assert_eq!(b.to_string().parse::<RemoteBuf>().unwrap(), b);
    }

    #[test]
    fn bad_text_is_einval_with_a_reason() {
        for (s, why) in [
            ("", "a key is missing"),
            ("qpn=1 psn=2", "a key is missing"),
            ("qpn=1 psn=2 gid=::1 gid=::2", "a key given twice"),
            ("qpn=1 psn=2 gid=::1 x=3", "an unknown key"),
            ("qpn=1 psn=2 gid ::1", "not key=value"),
            (
                "qpn=0x1000000 psn=2 gid=::1",
                "qpn is not a 24-bit number (16777216, the field takes at most 16777215)",
            ),
            ("qpn=1 psn=-2 gid=::1", "psn is not a 24-bit number"),
            ("qpn=1 psn=2 gid=fe80::1::2", "gid is not a GID"),
            ("qpn=0x psn=2 gid=::1", "qpn is not a 24-bit number"),
        ] {
            let e = s.parse::<PeerInfo>().unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{s:?}");
            assert!(e.to_string().contains(why), "{s:?}: {e}");
        }
        for (s, why) in [
            ("addr=1 rkey=2", "a key is missing"),
            (
                "addr=1 rkey=0x100000000 len=3",
                "rkey is not a 32-bit number",
            ),
            (
                "addr=0x10000000000000000 rkey=2 len=3",
                "addr is not a 64-bit number",
            ),
            ("addr=1 rkey=2 len=4096x", "len is not a 32-bit number"),
        ] {
            let e = s.parse::<RemoteBuf>().unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{s:?}");
            assert!(e.to_string().contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn odd_text_is_an_error_not_a_panic() {
        // Multi-byte characters where digits or separators belong, and empty values.
        for s in [
            "qpn=é psn=0 gid=::1",
            "qpn=0xé psn=0 gid=::1",
            "qpn= psn= gid=",
            "==== psn=0 gid=::1",
            "qpn=1 psn=2 gid=ff\u{80}80::1",
            "\u{1f980}",
        ] {
            assert!(s.parse::<PeerInfo>().is_err(), "{s:?}");
            assert!(s.parse::<RemoteBuf>().is_err(), "{s:?}");
        }
    }

    #[test]
    fn bytes_forms() {
        let p = peer();
        let b = p.to_bytes();
        assert_eq!(&b[..8], &[0, 0xab, 0xcd, 0xef, 0, 0, 0, 0x12]);
        assert_eq!(&b[8..], &p.gid.0);
        assert_eq!(PeerInfo::from_bytes(&b).unwrap(), p);
        let r = buf();
        let rb = r.to_bytes();
        assert_eq!(
            rb,
            [0, 0, 0x7f, 0, 0x12, 0x34, 0x50, 0, 0, 0, 0x12, 0x34, 0, 0, 0x10, 0]
        );
        assert_eq!(RemoteBuf::from_bytes(&rb).unwrap(), r);
    }

    #[test]
    fn bad_bytes_are_einval() {
        let b = peer().to_bytes();
        let e = PeerInfo::from_bytes(&b[..23]).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("(23 bytes, the form has 24)"), "{e}");
        let mut high = b;
        high[0] = 1;
        let e = PeerInfo::from_bytes(&high).unwrap_err();
        assert!(e.to_string().contains("above 24 bits"), "{e}");
        high = b;
        high[4] = 0x80;
        assert!(PeerInfo::from_bytes(&high).is_err());
        let e = RemoteBuf::from_bytes(&[0; 17]).unwrap_err();
        assert!(e.to_string().contains("(17 bytes, the form has 16)"), "{e}");
        assert!(RemoteBuf::from_bytes(&[]).is_err());
    }
}
