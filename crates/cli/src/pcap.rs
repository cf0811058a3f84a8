//! `rverbs pcap decode`: one line per RoCE v2 packet of a pcap or pcapng capture.
//!
//! Capture files are read with the `pcap-parser` crate; link-layer headers are stripped
//! here; everything from the IP header on is decoded by `rverbs-wire`.

use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapNGPacketBlock;
use pcap_parser::{create_reader, Linktype, PcapBlockOwned, PcapError};
use rverbs_wire::frame::{self, Decoded};
use rverbs_wire::Error as WireError;
use std::fmt;
use std::io::{Read, Write};

/// What one captured record turned out to be.
#[derive(Debug)]
pub enum Record {
    /// Not RoCE v2 traffic: counted, not printed.
    NotRoce,
    /// A RoCE v2 packet: the decoded line (without the index) and whether the ICRC held.
    Roce {
        /// `<src> > <dst> <OPCODE> ... icrc=<ok|bad> [mad ...]` (the MAD summary for
        /// a MAD to or from QP1).
        line: String,
        /// ICRC verdict.
        icrc_ok: bool,
    },
    /// A record that could not be decoded, with the reason.
    Malformed(String),
}

fn reason(e: WireError) -> String {
    match e {
        WireError::Truncated(what) => format!("truncated {what}"),
        WireError::Malformed(why) => why.to_string(),
        WireError::Unsupported(what) => format!("unsupported {what}"),
    }
}

// Link-layer header types (tcpdump.org/linktypes.html).
const LINKTYPE_NULL: i32 = 0;
const LINKTYPE_ETHERNET: i32 = 1;
const LINKTYPE_RAW: i32 = 101;
const LINKTYPE_LOOP: i32 = 108;
const LINKTYPE_LINUX_SLL: i32 = 113;
const LINKTYPE_IPV4: i32 = 228;
const LINKTYPE_IPV6: i32 = 229;
const LINKTYPE_LINUX_SLL2: i32 = 276;

/// Decodes one captured record of the given link type.
pub fn decode_record(linktype: Linktype, data: &[u8]) -> Record {
    let ip = frame::parse_ip;
    let decoded = match linktype.0 {
        LINKTYPE_ETHERNET => frame::parse_ethernet(data),
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => ip(data),
        // BSD loopback: a 4-byte address family, then the IP packet (whose version
        // nibble parse_ip reads anyway).
        LINKTYPE_NULL | LINKTYPE_LOOP => match data.get(4..) {
            Some(d) => ip(d),
            None => return Record::Malformed("truncated loopback header".into()),
        },
        // Linux cooked capture v1: 16 bytes, protocol at 14..16.
        LINKTYPE_LINUX_SLL => match (data.get(14..16), data.get(16..)) {
            (Some([0x08, 0x00] | [0x86, 0xdd]), Some(d)) => ip(d),
            (Some(_), Some(_)) => return Record::NotRoce,
            _ => return Record::Malformed("truncated Linux cooked header".into()),
        },
        // Linux cooked capture v2: 20 bytes, protocol at 0..2.
        LINKTYPE_LINUX_SLL2 => match (data.get(0..2), data.get(20..)) {
            (Some([0x08, 0x00] | [0x86, 0xdd]), Some(d)) => ip(d),
            (Some(_), Some(_)) => return Record::NotRoce,
            _ => return Record::Malformed("truncated Linux cooked v2 header".into()),
        },
        other => return Record::Malformed(format!("unsupported link type {other}")),
    };
    match decoded {
        Ok(Decoded::NotRoce) => Record::NotRoce,
        Ok(Decoded::Roce(f)) => {
            let mut line = f.to_string();
            // MADs on the GSI (to or from QP1): the header in one line.
            let p = &f.packet;
            let gsi = p.bth().dest_qp() == 1 || p.deth().is_some_and(|d| d.src_qp() == 1);
            if gsi && p.deth().is_some() {
                if let Some(m) = crate::mad::summary(p.payload()) {
                    line.push(' ');
                    line.push_str(&m);
                }
            }
            Record::Roce {
                line,
                icrc_ok: f.icrc_ok,
            }
        }
        Err(e) => Record::Malformed(reason(e)),
    }
}

/// Counts over a whole capture.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Every packet record.
    pub packets: u64,
    /// Well-formed RoCE v2 packets (`icrc_ok + icrc_bad`).
    pub roce: u64,
    /// RoCE v2 packets whose ICRC matched.
    pub icrc_ok: u64,
    /// RoCE v2 packets whose ICRC did not match.
    pub icrc_bad: u64,
    /// Records that could not be decoded (truncated or garbled at any layer).
    pub malformed: u64,
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "packets={} roce={} icrc_ok={} icrc_bad={} malformed={}",
            self.packets, self.roce, self.icrc_ok, self.icrc_bad, self.malformed
        )
    }
}

/// Why a capture could not be read to its end.
#[derive(Debug)]
pub enum DecodeError {
    /// The input is neither pcap nor pcapng.
    NotACapture,
    /// The capture ends in the middle of a record or block.
    Truncated {
        /// Packets decoded before the cut.
        after_packets: u64,
    },
    /// A block or record header is garbled.
    Corrupt {
        /// Packets decoded before it.
        after_packets: u64,
        /// The parser's description.
        detail: String,
    },
    /// Reading the input or writing the output failed.
    Io(std::io::Error),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::NotACapture => f.write_str("not a pcap or pcapng capture"),
            DecodeError::Truncated { after_packets } => {
                write!(f, "capture is cut short after packet {after_packets}")
            }
            DecodeError::Corrupt {
                after_packets,
                detail,
            } => {
                write!(
                    f,
                    "capture is corrupt after packet {after_packets}: {detail}"
                )
            }
            DecodeError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<std::io::Error> for DecodeError {
    fn from(e: std::io::Error) -> Self {
        DecodeError::Io(e)
    }
}

/// Records larger than this are refused (pcap's usual snap length is 256 KiB).
const MAX_RECORD: usize = 1 << 20;
/// Consecutive refills that bring no new data before the capture counts as cut short.
const MAX_IDLE_REFILLS: u32 = 4;

/// Checks pcapng block lengths as the bytes stream past, before pcap-parser sees them:
/// a block shorter than its own 12-byte frame, or not a multiple of 4, ends the stream
/// with `InvalidData` (pcap-parser 0.17 underflows on such a block). Legacy pcap passes
/// through untouched.
struct BlockGuard<R> {
    inner: R,
    buf: Vec<u8>,
    /// Absolute offset of `buf[0]`.
    base: u64,
    /// Bytes of `buf` already handed out.
    given: usize,
    /// Absolute offset of the next block header not yet checked.
    next_block: u64,
    pcapng: Option<bool>,
    little_endian: bool,
    eof: bool,
    /// Why the stream was cut, for the caller (pcap-parser reports only "read error").
    fault: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl<R: Read> BlockGuard<R> {
    fn new(inner: R) -> Self {
        BlockGuard {
            inner,
            buf: Vec::new(),
            base: 0,
            given: 0,
            next_block: 0,
            pcapng: None,
            little_endian: true,
            eof: false,
            fault: Default::default(),
        }
    }

    fn fill(&mut self) -> std::io::Result<()> {
        if self.given > 0 && self.given == self.buf.len() {
            self.base += self.buf.len() as u64;
            self.buf.clear();
            self.given = 0;
        }
        let mut chunk = [0u8; 16384];
        let n = self.inner.read(&mut chunk)?;
        if n == 0 {
            self.eof = true;
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// How many buffered bytes may be released: up to the next unchecked header.
    fn releasable(&mut self) -> std::io::Result<usize> {
        loop {
            let end = self.base + self.buf.len() as u64;
            if self.pcapng.is_none() {
                if self.buf.len() >= 4 || self.eof {
                    self.pcapng = Some(self.buf.get(..4) == Some(&[0x0a, 0x0d, 0x0d, 0x0a]));
                } else {
                    self.fill()?;
                    continue;
                }
            }
            if self.pcapng != Some(true) {
                return Ok(self.buf.len());
            }
            if end < self.next_block + 12 {
                if self.eof {
                    if end > self.next_block {
                        // The capture ends inside a block header: nothing can check its
                        // length, so pcap-parser must not see it either.
                        let why = format!(
                            "capture ends inside the pcapng block header at byte {}",
                            self.next_block
                        );
                        *self.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                        let upto = (self.next_block - self.base) as usize;
                        if upto > self.given {
                            return Ok(upto);
                        }
                        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why));
                    }
                    return Ok(self.buf.len());
                }
                // Bytes of blocks already checked may go; the next header may lie
                // beyond what is buffered.
                let upto = (self.next_block.min(end) - self.base) as usize;
                if upto > self.given {
                    return Ok(upto);
                }
                self.fill()?;
                continue;
            }
            let at = (self.next_block - self.base) as usize;
            let h = &self.buf[at..at + 12];
            let kind = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            if kind == 0x0a0d_0d0a {
                self.little_endian = h[8..12] == [0x4d, 0x3c, 0x2b, 0x1a];
            }
            let raw = [h[4], h[5], h[6], h[7]];
            let len = if self.little_endian {
                u32::from_le_bytes(raw)
            } else {
                u32::from_be_bytes(raw)
            };
            if len < 12 || len % 4 != 0 {
                let why = format!("pcapng block at byte {} has length {len}", self.next_block);
                *self.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
            }
            self.next_block += u64::from(len);
        }
    }
}

impl<R: Read> Read for BlockGuard<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let limit = self.releasable()?;
            if limit > self.given {
                let n = (limit - self.given).min(out.len());
                out[..n].copy_from_slice(&self.buf[self.given..self.given + n]);
                self.given += n;
                return Ok(n);
            }
            if self.eof {
                return Ok(0);
            }
            self.fill()?;
        }
    }
}

/// Decodes every record of a capture read from `input`, writing one line per RoCE v2
/// or malformed record and then the totals line to `out`. On a read error the totals
/// of what was decoded are still written before the error is returned.
pub fn decode<R: Read + Send, W: Write>(input: R, out: &mut W) -> Result<Totals, DecodeError> {
    let mut totals = Totals::default();
    let result = decode_into(input, out, &mut totals);
    writeln!(out, "{totals}")?;
    result.map(|()| totals)
}

fn decode_into<R: Read + Send, W: Write>(
    input: R,
    out: &mut W,
    totals: &mut Totals,
) -> Result<(), DecodeError> {
    let guard = BlockGuard::new(input);
    let fault = guard.fault.clone();
    let result = decode_guarded(guard, out, totals);
    let fault = fault.lock().unwrap_or_else(|e| e.into_inner()).take();
    match (result, fault) {
        (Err(DecodeError::Io(_) | DecodeError::Corrupt { .. }), Some(detail)) => {
            Err(DecodeError::Corrupt {
                after_packets: totals.packets,
                detail,
            })
        }
        (r, _) => r,
    }
}

fn decode_guarded<R: Read + Send, W: Write>(
    input: R,
    out: &mut W,
    totals: &mut Totals,
) -> Result<(), DecodeError> {
    let mut reader = match create_reader(MAX_RECORD * 2, input) {
        Ok(r) => r,
        Err(PcapError::ReadError) => {
            return Err(DecodeError::Io(std::io::Error::other("read failed")));
        }
        Err(PcapError::Incomplete(_)) | Err(PcapError::Eof) => {
            return Err(DecodeError::NotACapture)
        }
        Err(_) => return Err(DecodeError::NotACapture),
    };
    // pcapng: one link type per interface, in order of the Interface Description Blocks
    // of the current section.
    let mut interfaces: Vec<Linktype> = Vec::new();
    let mut legacy_linktype = Linktype(LINKTYPE_ETHERNET);
    let mut idle_refills = 0;
    loop {
        let (consumed, record) = match reader.next() {
            Ok((offset, block)) => {
                idle_refills = 0;
                let record = match block {
                    PcapBlockOwned::LegacyHeader(h) => {
                        legacy_linktype = h.network;
                        None
                    }
                    PcapBlockOwned::Legacy(b) => Some(decode_record(legacy_linktype, b.data)),
                    PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                        interfaces.clear();
                        None
                    }
                    PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                        interfaces.push(idb.linktype);
                        None
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                        Some(match interfaces.get(epb.if_id as usize) {
                            Some(lt) => decode_record(*lt, epb.packet_data()),
                            None => Record::Malformed(format!(
                                "packet names interface {} with no description",
                                epb.if_id
                            )),
                        })
                    }
                    PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                        Some(match interfaces.first() {
                            Some(lt) => decode_record(*lt, spb.packet_data()),
                            None => Record::Malformed("simple packet with no interface".into()),
                        })
                    }
                    PcapBlockOwned::NG(_) => None,
                };
                (offset, record)
            }
            Err(PcapError::Eof) => return Ok(()),
            Err(PcapError::Incomplete(_)) => {
                idle_refills += 1;
                if idle_refills > MAX_IDLE_REFILLS {
                    return Err(DecodeError::Truncated {
                        after_packets: totals.packets,
                    });
                }
                reader
                    .refill()
                    .map_err(|_| std::io::Error::other("read failed"))?;
                continue;
            }
            Err(PcapError::UnexpectedEof) => {
                return Err(DecodeError::Truncated {
                    after_packets: totals.packets,
                });
            }
            Err(e) => {
                let detail = match e {
                    PcapError::BufferTooSmall => "record larger than 1 MiB".to_string(),
                    PcapError::ReadError => "read failed".to_string(),
                    other => format!("{other:?}"),
                };
                return Err(DecodeError::Corrupt {
                    after_packets: totals.packets,
                    detail,
                });
            }
        };
        if let Some(record) = record {
            totals.packets += 1;
            let index = totals.packets;
            match record {
                Record::NotRoce => {}
                Record::Roce { line, icrc_ok } => {
                    totals.roce += 1;
                    if icrc_ok {
                        totals.icrc_ok += 1;
                    } else {
                        totals.icrc_bad += 1;
                    }
                    writeln!(out, "{index} {line}")?;
                }
                Record::Malformed(why) => {
                    totals.malformed += 1;
                    writeln!(out, "{index} malformed: {why}")?;
                }
            }
        }
        reader.consume(consumed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DESIGN §3 vector (IPv4 RC SEND_ONLY "hello" with its ICRC).
    fn datagram() -> Vec<u8> {
        let s = "4500003400004000401126b70a0000010a000002c00012b7002000000430ffff000000118000000068656c6c6f00000006451676";
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn legacy_pcap(linktype: u32, records: &[Vec<u8>]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&linktype.to_le_bytes());
        for r in records {
            f.extend_from_slice(&[0; 8]);
            f.extend_from_slice(&(r.len() as u32).to_le_bytes());
            f.extend_from_slice(&(r.len() as u32).to_le_bytes());
            f.extend_from_slice(r);
        }
        f
    }

    fn run(capture: &[u8]) -> (Result<Totals, DecodeError>, String) {
        let mut out = Vec::new();
        let r = decode(capture, &mut out);
        (r, String::from_utf8(out).unwrap())
    }

    /// Found by `cargo fuzz run pcap_file`: a pcapng Process Information Block
    /// (type 0x80000001) whose length is below 12 makes pcap-parser 0.17.0 compute
    /// `block_len1 - 12` and overflow (`pcapng/block.rs:162`). In release builds that
    /// wraps and the capture ends as truncated; with overflow checks (debug, tests,
    /// fuzzing) it panics. Not fixed yet: needs an upstream fix or a block-screening
    /// reader in front of pcap-parser.
    /// A capture that ends inside a pcapng block header whose length would underflow
    /// pcap-parser (found by the `pcap_file` fuzz target).
    #[test]
    fn pcapng_ends_inside_a_block_header() {
        let capture = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/seeds/pcap_file/partial-block-header.pcapng"
        ))
        .unwrap();
        let (r, _) = run(&capture);
        assert!(matches!(r, Err(DecodeError::Corrupt { .. })), "{r:?}");
    }

    /// A pcapng block whose length points past the buffered bytes (found by the
    /// `pcap_file` fuzz target in `BlockGuard` itself).
    #[test]
    fn pcapng_block_longer_than_the_buffer() {
        let mut capture = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/seeds/pcap_file/block-past-buffer.pcapng"
        ))
        .unwrap();
        let (r, _) = run(&capture);
        assert!(r.is_err());
        capture.truncate(40);
        assert!(run(&capture).0.is_err());
    }

    /// pcap-parser 0.17.0 underflows on a pcapng block shorter than 12 bytes (found by
    /// the `pcap_file` fuzz target); [`BlockGuard`] rejects such blocks first.
    #[test]
    fn pcapng_short_process_information_block() {
        let capture = [
            0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1c, 0, 0, 0, 1, 0, 0, 0, 0x14, 0, 0, 0, 0, 0xa1,
            0x14, 0, 1, 0, 0, 0, 0x14, 0, 0, 0, 1, 0, 0, 0x80, 4, 0, 0, 0, 0, 0, 0, 0, 0x26, 0x11,
            0, 0xff,
        ];
        let (r, _) = run(&capture);
        assert!(r.is_err());
    }

    #[test]
    fn raw_ip_capture() {
        let mut bad = datagram();
        bad[45] ^= 0x20;
        let cap = legacy_pcap(
            101,
            &[datagram(), bad, datagram()[..30].to_vec(), vec![0x60]],
        );
        let (r, text) = run(&cap);
        let totals = r.unwrap();
        assert_eq!(
            text,
            "1 10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qpn=0x11 psn=0 ackreq pad=3 payload=5 icrc=ok\n\
             2 10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qpn=0x11 psn=0 ackreq pad=3 payload=5 icrc=bad\n\
             3 malformed: truncated IPv4 payload\n\
             4 malformed: truncated IPv6 header\n\
             packets=4 roce=2 icrc_ok=1 icrc_bad=1 malformed=2\n"
        );
        assert_eq!(totals.malformed, 2);
    }

    #[test]
    fn cooked_and_loopback_link_types() {
        let mut sll = vec![0u8; 16];
        sll[14] = 0x08;
        sll.extend_from_slice(&datagram());
        assert!(matches!(
            decode_record(Linktype(113), &sll),
            Record::Roce { icrc_ok: true, .. }
        ));
        let mut sll2 = vec![0u8; 20];
        sll2[0] = 0x08;
        sll2.extend_from_slice(&datagram());
        assert!(matches!(
            decode_record(Linktype(276), &sll2),
            Record::Roce { icrc_ok: true, .. }
        ));
        sll2[0] = 0x08;
        sll2[1] = 0x06;
        assert!(matches!(
            decode_record(Linktype(276), &sll2),
            Record::NotRoce
        ));
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&datagram());
        assert!(matches!(
            decode_record(Linktype(0), &null),
            Record::Roce { .. }
        ));
        assert!(matches!(
            decode_record(Linktype(0), &[2]),
            Record::Malformed(_)
        ));
        assert!(matches!(
            decode_record(Linktype(147), &null),
            Record::Malformed(_)
        ));
    }

    #[test]
    fn not_a_capture_and_cut_short() {
        let (r, text) = run(b"this is not a capture file at all, just some text......");
        assert!(matches!(r, Err(DecodeError::NotACapture)), "{r:?}");
        assert_eq!(text, "packets=0 roce=0 icrc_ok=0 icrc_bad=0 malformed=0\n");
        let (r, _) = run(b"");
        assert!(matches!(r, Err(DecodeError::NotACapture)));

        let cap = legacy_pcap(101, &[datagram(), datagram()]);
        let (r, text) = run(&cap[..cap.len() - 10]);
        assert!(
            matches!(r, Err(DecodeError::Truncated { after_packets: 1 })),
            "{r:?}"
        );
        assert!(text.ends_with("packets=1 roce=1 icrc_ok=1 icrc_bad=0 malformed=0\n"));

        // A record claiming 2 GiB.
        let mut huge = legacy_pcap(101, &[datagram()]);
        huge[32..36].copy_from_slice(&0x8000_0000u32.to_le_bytes());
        let (r, _) = run(&huge);
        assert!(r.is_err());
    }

    #[test]
    fn pcapng_with_two_interfaces() {
        fn block(kind: u32, body: &[u8]) -> Vec<u8> {
            let len = 12 + body.len().div_ceil(4) * 4;
            let mut b = kind.to_le_bytes().to_vec();
            b.extend_from_slice(&(len as u32).to_le_bytes());
            b.extend_from_slice(body);
            b.resize(len - 4, 0);
            b.extend_from_slice(&(len as u32).to_le_bytes());
            b
        }
        let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&1u16.to_le_bytes());
        shb.extend_from_slice(&0u16.to_le_bytes());
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        let idb = |lt: u16| {
            let mut b = lt.to_le_bytes().to_vec();
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&65535u32.to_le_bytes());
            b
        };
        let epb = |ifid: u32, data: &[u8]| {
            let mut b = ifid.to_le_bytes().to_vec();
            b.extend_from_slice(&[0; 8]);
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(data);
            b
        };
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&datagram());
        let mut cap = block(0x0a0d_0d0a, &shb);
        cap.extend(block(1, &idb(1)));
        cap.extend(block(1, &idb(101)));
        cap.extend(block(6, &epb(0, &eth)));
        cap.extend(block(6, &epb(1, &datagram())));
        cap.extend(block(6, &epb(7, &datagram())));
        let (r, text) = run(&cap);
        let t = r.unwrap();
        assert_eq!(
            (t.packets, t.roce, t.icrc_ok, t.malformed),
            (3, 2, 2, 1),
            "{text}"
        );
        assert!(text.contains("3 malformed: packet names interface 7 with no description"));
    }
}
