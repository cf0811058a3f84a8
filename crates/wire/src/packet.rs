//! The InfiniBand transport packet that RoCE v2 carries as its UDP payload: BTH,
//! extension headers (chosen by the opcode table), payload, pad and ICRC.

use crate::bth::{Bth, BthRepr, BTH_LEN};
use crate::ext::*;
use crate::icrc::ICRC_LEN;
use crate::opcode::{Headers, Opcode, OpcodeInfo, Payload};
use crate::{Error, Result};
use core::fmt;

/// A checked view of a transport packet (BTH through ICRC).
///
/// `new_checked` validates everything the layout implies: the opcode is one rverbs
/// speaks, every extension header the opcode names is present, the pad fits in the
/// payload, the packet is a whole number of 4-byte words, and opcodes without payload
/// carry none. After that no accessor panics.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// Smallest possible transport packet: BTH and ICRC.
pub const MIN_LEN: usize = BTH_LEN + ICRC_LEN;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer and validates the layout (see the type's documentation).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validates the layout.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < MIN_LEN {
            return Err(Error::Truncated("BTH"));
        }
        let Some(info) = self.opcode().info() else {
            return Err(Error::Unsupported("opcode"));
        };
        if len < BTH_LEN + info.headers_len() + ICRC_LEN {
            return Err(Error::Truncated(first_missing_header(info.headers, len)));
        }
        if len % 4 != 0 {
            return Err(Error::Malformed("packet length is not a multiple of 4"));
        }
        let body = len - BTH_LEN - info.headers_len() - ICRC_LEN;
        let pad = usize::from(self.bth().pad());
        if pad > body {
            return Err(Error::Malformed("pad count exceeds the payload"));
        }
        match info.payload {
            Payload::None if body != 0 => Err(Error::Malformed("payload on an opcode without one")),
            Payload::Fixed(n) if body != usize::from(n) || pad != 0 => Err(Error::Malformed(
                "payload length differs from the opcode's fixed size",
            )),
            _ => Ok(()),
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The BTH.
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.buffer.as_ref()[..BTH_LEN])
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[0])
    }

    /// The opcode's table row. Always `Some` after `new_checked`.
    pub fn info(&self) -> Option<&'static OpcodeInfo> {
        self.opcode().info()
    }

    fn headers(&self) -> Headers {
        self.info().map_or(Headers::NONE, |i| i.headers)
    }

    fn ext(&self, h: Headers, len: usize) -> Option<&[u8]> {
        let off = BTH_LEN + self.headers().offset_of(h)?;
        self.buffer.as_ref().get(off..off + len)
    }

    /// The RETH, if the opcode has one.
    pub fn reth(&self) -> Option<Reth<&[u8]>> {
        self.ext(Headers::RETH, 16).map(Reth::new_unchecked)
    }

    /// The AETH, if the opcode has one.
    pub fn aeth(&self) -> Option<Aeth<&[u8]>> {
        self.ext(Headers::AETH, 4).map(Aeth::new_unchecked)
    }

    /// The DETH, if the opcode has one.
    pub fn deth(&self) -> Option<Deth<&[u8]>> {
        self.ext(Headers::DETH, 8).map(Deth::new_unchecked)
    }

    /// The FETH, if the opcode has one.
    pub fn feth(&self) -> Option<Feth<&[u8]>> {
        self.ext(Headers::FETH, 4).map(Feth::new_unchecked)
    }

    /// The AtomicETH, if the opcode has one.
    pub fn atomic_eth(&self) -> Option<AtomicEth<&[u8]>> {
        self.ext(Headers::ATOMIC_ETH, 28)
            .map(AtomicEth::new_unchecked)
    }

    /// The AtomicAckETH, if the opcode has one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&[u8]>> {
        self.ext(Headers::ATOMIC_ACK_ETH, 8)
            .map(AtomicAckEth::new_unchecked)
    }

    /// The immediate data, if the opcode has it.
    pub fn immediate(&self) -> Option<u32> {
        self.ext(Headers::IMMDT, 4)
            .map(|b| ImmDt::new_unchecked(b).imm())
    }

    /// The IETH R_Key, if the opcode has one.
    pub fn ieth_rkey(&self) -> Option<u32> {
        self.ext(Headers::IETH, 4)
            .map(|b| Ieth::new_unchecked(b).rkey())
    }

    /// Length of BTH and extension headers.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.headers().len()
    }

    fn body_range(&self) -> core::ops::Range<usize> {
        let len = self.buffer.as_ref().len();
        let start = self.header_len().min(len);
        let end = len.saturating_sub(ICRC_LEN).max(start);
        start..end
    }

    /// Where the payload (without pad) lies in the buffer.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        let body = self.body_range();
        let pad = usize::from(self.bth().pad()).min(body.len());
        body.start..body.end - pad
    }

    /// Length of the payload (without pad).
    pub fn payload_len(&self) -> usize {
        self.payload_range().len()
    }

    /// The ICRC trailer, as the little-endian value [`crate::icrc`] computes.
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let at = b.len().saturating_sub(ICRC_LEN);
        let mut v = [0u8; 4];
        v.copy_from_slice(&b[at..at + ICRC_LEN]);
        u32::from_le_bytes(v)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload without pad.
    pub fn payload(&self) -> &'a [u8] {
        &T::as_ref(self.buffer)[self.payload_range()]
    }

    /// The pad bytes (their value is not checked: IBTA says the receiver ignores it).
    pub fn pad_bytes(&self) -> &'a [u8] {
        &T::as_ref(self.buffer)[self.payload_range().end..self.body_range().end]
    }

    /// Everything but the ICRC trailer (what the ICRC covers after the masked BTH).
    pub fn without_icrc(&self) -> &'a [u8] {
        let b = T::as_ref(self.buffer);
        &b[..b.len().saturating_sub(ICRC_LEN)]
    }
}

fn first_missing_header(headers: Headers, len: usize) -> &'static str {
    const NAMES: [&str; 8] = [
        "DETH",
        "FETH",
        "RETH",
        "AtomicETH",
        "AETH",
        "AtomicAckETH",
        "ImmDt",
        "IETH",
    ];
    let mut end = BTH_LEN;
    for (i, (h, hlen)) in Headers::WIRE_ORDER.iter().enumerate() {
        if headers.contains(*h) {
            end += hlen;
            if len < end + ICRC_LEN {
                return NAMES[i];
            }
        }
    }
    "ICRC"
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The BTH, mutably.
    pub fn bth_mut(&mut self) -> Bth<&mut [u8]> {
        Bth::new_unchecked(&mut self.buffer.as_mut()[..BTH_LEN])
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.payload_range();
        &mut self.buffer.as_mut()[r]
    }

    /// Writes the ICRC trailer (a value from [`crate::icrc::compute_parts`]).
    pub fn set_icrc(&mut self, icrc: u32) {
        let b = self.buffer.as_mut();
        let at = b.len() - ICRC_LEN;
        b[at..].copy_from_slice(&icrc.to_le_bytes());
    }
}

/// An owned transport packet: every header, and the payload borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr<'a> {
    /// The BTH. On emit its `pad` is replaced by the pad the payload needs.
    pub bth: BthRepr,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (WRITE FIRST/ONLY, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (ACK, READ response FIRST/LAST/ONLY, ATOMIC ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immediate: Option<u32>,
    /// IETH R_Key.
    pub ieth_rkey: Option<u32>,
    /// The payload (without pad).
    pub payload: &'a [u8],
}

impl<'a> PacketRepr<'a> {
    /// A packet with only a BTH; add headers with struct update syntax.
    pub const fn new(bth: BthRepr, payload: &'a [u8]) -> Self {
        PacketRepr {
            bth,
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immediate: None,
            ieth_rkey: None,
            payload,
        }
    }

    /// Reads every header of a checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&'a T>) -> Result<Self> {
        p.check_len()?;
        Ok(PacketRepr {
            bth: BthRepr::parse(&p.bth())?,
            deth: p.deth().map(|h| DethRepr::parse(&h)).transpose()?,
            feth: p.feth().map(|h| FethRepr::parse(&h)).transpose()?,
            reth: p.reth().map(|h| RethRepr::parse(&h)).transpose()?,
            atomic_eth: p
                .atomic_eth()
                .map(|h| AtomicEthRepr::parse(&h))
                .transpose()?,
            aeth: p.aeth().map(|h| AethRepr::parse(&h)).transpose()?,
            atomic_ack_eth: p
                .atomic_ack_eth()
                .map(|h| AtomicAckEthRepr::parse(&h))
                .transpose()?,
            immediate: p.immediate(),
            ieth_rkey: p.ieth_rkey(),
            payload: p.payload(),
        })
    }

    /// The pad this payload needs: `(-len) & 3`.
    pub const fn pad(&self) -> usize {
        self.payload.len().wrapping_neg() & 3
    }

    /// Bytes the whole packet occupies, ICRC included.
    pub const fn buffer_len(&self) -> usize {
        let headers = match self.bth.opcode.info() {
            Some(i) => i.headers_len(),
            None => 0,
        };
        BTH_LEN + headers + self.payload.len() + self.pad() + ICRC_LEN
    }

    /// Checks that the headers present are exactly those the opcode needs and that the
    /// payload suits it.
    pub fn validate(&self) -> Result<()> {
        let Some(info) = self.bth.opcode.info() else {
            return Err(Error::Unsupported("opcode"));
        };
        // (One compare of the sets, not one per header: this runs for every packet.)
        let have = [
            (Headers::DETH, self.deth.is_some()),
            (Headers::FETH, self.feth.is_some()),
            (Headers::RETH, self.reth.is_some()),
            (Headers::ATOMIC_ETH, self.atomic_eth.is_some()),
            (Headers::AETH, self.aeth.is_some()),
            (Headers::ATOMIC_ACK_ETH, self.atomic_ack_eth.is_some()),
            (Headers::IMMDT, self.immediate.is_some()),
            (Headers::IETH, self.ieth_rkey.is_some()),
        ]
        .into_iter()
        .fold(
            Headers::NONE,
            |set, (h, present)| {
                if present {
                    set.with(h)
                } else {
                    set
                }
            },
        );
        if have != info.headers {
            return Err(Error::Malformed(
                "extension headers do not match the opcode",
            ));
        }
        match info.payload {
            Payload::None if !self.payload.is_empty() => {
                Err(Error::Malformed("payload on an opcode without one"))
            }
            Payload::Fixed(n) if self.payload.len() != usize::from(n) => Err(Error::Malformed(
                "payload length differs from the opcode's fixed size",
            )),
            _ => Ok(()),
        }
    }

    /// Writes the packet into `buf` (exactly [`Self::buffer_len`] bytes): headers,
    /// payload, zero pad, and a zero ICRC for the caller to fill (see [`crate::icrc`]).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        self.validate()?;
        if buf.len() != self.buffer_len() {
            return Err(Error::Malformed(
                "emit buffer length differs from buffer_len",
            ));
        }
        let mut bth = self.bth;
        bth.pad = self.pad() as u8;
        bth.emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]));
        let headers = self.bth.opcode.info().map_or(Headers::NONE, |i| i.headers);
        let at = |h: Headers| BTH_LEN + headers.offset_of(h).unwrap_or(0);
        if let Some(h) = self.deth {
            h.emit(&mut buf[at(Headers::DETH)..]);
        }
        if let Some(h) = self.feth {
            h.emit(&mut buf[at(Headers::FETH)..]);
        }
        if let Some(h) = self.reth {
            h.emit(&mut buf[at(Headers::RETH)..]);
        }
        if let Some(h) = self.atomic_eth {
            h.emit(&mut buf[at(Headers::ATOMIC_ETH)..]);
        }
        if let Some(h) = self.aeth {
            h.emit(&mut buf[at(Headers::AETH)..]);
        }
        if let Some(h) = self.atomic_ack_eth {
            h.emit(&mut buf[at(Headers::ATOMIC_ACK_ETH)..]);
        }
        if let Some(imm) = self.immediate {
            ImmDtRepr { imm }.emit(&mut buf[at(Headers::IMMDT)..]);
        }
        if let Some(rkey) = self.ieth_rkey {
            IethRepr { rkey }.emit(&mut buf[at(Headers::IETH)..]);
        }
        let start = BTH_LEN + headers.len();
        let end = start + self.payload.len();
        buf[start..end].copy_from_slice(self.payload);
        buf[end..].fill(0);
        Ok(())
    }
}

/// One-line summary: `<OPCODE> qpn=0x<hex> psn=<n> [ackreq] [se] [pad=<n>] [feth ...]
/// [reth ...] [aeth ...] [deth ...] [imm=0x<hex>] [ieth rkey=0x<hex>] [atomic ...]
/// [atomic_ack orig=0x<hex>] payload=<n>`.
impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bth = self.bth();
        write!(
            f,
            "{} qpn={:#x} psn={}",
            bth.opcode(),
            bth.dest_qp(),
            bth.psn()
        )?;
        if bth.ack_req() {
            f.write_str(" ackreq")?;
        }
        if bth.solicited() {
            f.write_str(" se")?;
        }
        if bth.pad() != 0 {
            write!(f, " pad={}", bth.pad())?;
        }
        if let Some(h) = self.feth() {
            write!(f, " feth sel={} plt={}", h.selectivity(), h.placement())?;
        }
        if let Some(h) = self.reth() {
            write!(
                f,
                " reth va={:#x} rkey={:#x} len={}",
                h.va(),
                h.rkey(),
                h.dma_len()
            )?;
        }
        if let Some(h) = self.aeth() {
            write!(
                f,
                " aeth {} msn={}",
                Syndrome::from_byte(h.syndrome()),
                h.msn()
            )?;
        }
        if let Some(h) = self.deth() {
            write!(f, " deth qkey={:#x} srcqp={:#x}", h.qkey(), h.src_qp())?;
        }
        if let Some(imm) = self.immediate() {
            write!(f, " imm={imm:#x}")?;
        }
        if let Some(rkey) = self.ieth_rkey() {
            write!(f, " ieth rkey={rkey:#x}")?;
        }
        if let Some(h) = self.atomic_eth() {
            write!(
                f,
                " atomic va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}",
                h.va(),
                h.rkey(),
                h.swap_add(),
                h.compare()
            )?;
        }
        if let Some(h) = self.atomic_ack_eth() {
            write!(f, " atomic_ack orig={:#x}", h.orig())?;
        }
        write!(f, " payload={}", self.payload_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psn::Psn;
    use proptest::prelude::*;
    use std::string::ToString;
    use std::vec;

    fn bth(op: Opcode) -> BthRepr {
        BthRepr {
            opcode: op,
            solicited: false,
            mig_req: false,
            pad: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: Psn::ZERO,
        }
    }

    #[test]
    fn send_only_hello() {
        let repr = PacketRepr::new(bth(Opcode::RC_SEND_ONLY), b"hello");
        assert_eq!(repr.buffer_len(), 12 + 5 + 3 + 4);
        let mut buf = vec![0xaa; repr.buffer_len()];
        repr.emit(&mut buf).unwrap();
        assert_eq!(
            &buf[..12],
            &[0x04, 0x30, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 0]
        );
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.pad_bytes(), &[0, 0, 0]);
        assert_eq!(
            p.to_string(),
            "RC_SEND_ONLY qpn=0x11 psn=0 ackreq pad=3 payload=5"
        );
        let mut parsed = PacketRepr::parse(&p).unwrap();
        parsed.bth.pad = 0;
        assert_eq!(parsed, repr);
    }

    #[test]
    fn ud_send_with_imm_and_display() {
        let repr = PacketRepr {
            deth: Some(DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0xabc,
            }),
            immediate: Some(0xdead_beef),
            ..PacketRepr::new(bth(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE), &[1, 2, 3, 4])
        };
        let mut buf = vec![0; repr.buffer_len()];
        repr.emit(&mut buf).unwrap();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            p.to_string(),
            "UD_SEND_ONLY_WITH_IMMEDIATE qpn=0x11 psn=0 ackreq deth qkey=0x11111111 srcqp=0xabc \
             imm=0xdeadbeef payload=4"
        );
    }

    #[test]
    fn layout_errors() {
        let repr = PacketRepr {
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 7,
                dma_len: 8,
            }),
            ..PacketRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST), &[])
        };
        let mut buf = vec![0; repr.buffer_len()];
        repr.emit(&mut buf).unwrap();
        assert!(Packet::new_checked(&buf[..]).is_ok());
        assert_eq!(
            Packet::new_checked(&buf[..31]).unwrap_err(),
            Error::Truncated("RETH")
        );
        assert_eq!(
            Packet::new_checked(&buf[..15]).unwrap_err(),
            Error::Truncated("BTH")
        );
        let mut longer = buf.clone();
        longer.extend_from_slice(&[0; 4]);
        assert_eq!(
            Packet::new_checked(&longer[..]).unwrap_err(),
            Error::Malformed("payload on an opcode without one")
        );
        longer.push(0);
        assert_eq!(
            Packet::new_checked(&longer[..]).unwrap_err(),
            Error::Malformed("packet length is not a multiple of 4")
        );
        let mut unknown = buf.clone();
        unknown[0] = 0x15;
        assert_eq!(
            Packet::new_checked(&unknown[..]).unwrap_err(),
            Error::Unsupported("opcode")
        );
        // Pad larger than the payload.
        let send = PacketRepr::new(bth(Opcode::RC_SEND_ONLY), &[]);
        let mut s = vec![0; send.buffer_len()];
        send.emit(&mut s).unwrap();
        s[1] |= 0x30;
        assert_eq!(
            Packet::new_checked(&s[..]).unwrap_err(),
            Error::Malformed("pad count exceeds the payload")
        );
        // Emit refuses headers that do not match the opcode.
        let wrong = PacketRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::ACK,
                msn: 1,
            }),
            ..send
        };
        assert!(wrong.emit(&mut vec![0; wrong.buffer_len()]).is_err());
        // CNP carries exactly 16 bytes.
        let cnp = PacketRepr::new(bth(Opcode::CNP), &[0; 15]);
        assert!(cnp.validate().is_err());
        let cnp = PacketRepr::new(bth(Opcode::CNP), &[0; 16]);
        let mut c = vec![0; cnp.buffer_len()];
        cnp.emit(&mut c).unwrap();
        assert_eq!(Packet::new_checked(&c[..]).unwrap().payload().len(), 16);
    }

    fn any_repr() -> impl Strategy<Value = (u8, std::vec::Vec<u8>, [u64; 4], u32)> {
        let ops: std::vec::Vec<u8> = Opcode::all().map(|(o, _)| o.0).collect();
        (
            proptest::sample::select(ops),
            proptest::collection::vec(any::<u8>(), 0..64),
            any::<[u64; 4]>(),
            0u32..0x100_0000,
        )
    }

    fn build(op: u8, payload: &[u8], w: [u64; 4], qp: u32) -> PacketRepr<'_> {
        let info = Opcode(op).info().unwrap();
        let h = info.headers;
        let payload = match info.payload {
            Payload::None => &payload[..0],
            Payload::Fixed(n) => &payload[..usize::from(n).min(payload.len())],
            Payload::Any => payload,
        };
        PacketRepr {
            bth: BthRepr {
                dest_qp: qp,
                psn: Psn::new(w[0] as u32),
                solicited: w[1] & 1 != 0,
                ..bth(Opcode(op))
            },
            deth: h.contains(Headers::DETH).then_some(DethRepr {
                qkey: w[1] as u32,
                src_qp: qp,
            }),
            feth: h.contains(Headers::FETH).then_some(FethRepr {
                selectivity: 1,
                placement: 2,
            }),
            reth: h.contains(Headers::RETH).then_some(RethRepr {
                va: w[0],
                rkey: w[2] as u32,
                dma_len: w[3] as u32,
            }),
            atomic_eth: h.contains(Headers::ATOMIC_ETH).then_some(AtomicEthRepr {
                va: w[0],
                rkey: 1,
                swap_add: w[2],
                compare: w[3],
            }),
            aeth: h.contains(Headers::AETH).then_some(AethRepr {
                syndrome: Syndrome::from_byte(w[3] as u8),
                msn: qp,
            }),
            atomic_ack_eth: h
                .contains(Headers::ATOMIC_ACK_ETH)
                .then_some(AtomicAckEthRepr { orig: w[2] }),
            immediate: h.contains(Headers::IMMDT).then_some(w[1] as u32),
            ieth_rkey: h.contains(Headers::IETH).then_some(w[2] as u32),
            payload,
        }
    }

    proptest! {
        #[test]
        fn round_trip((op, payload, w, qp) in any_repr()) {
            let mut repr = build(op, &payload, w, qp);
            if let Payload::Fixed(n) = Opcode(op).info().unwrap().payload {
                prop_assume!(repr.payload.len() == usize::from(n));
            }
            repr.bth.pad = repr.pad() as u8;
            let mut buf = vec![0; repr.buffer_len()];
            repr.emit(&mut buf).unwrap();
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(PacketRepr::parse(&p).unwrap(), repr);
            prop_assert_eq!(p.payload(), repr.payload);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = p.to_string();
                let _ = (p.payload(), p.pad_bytes(), p.icrc(), p.without_icrc(), p.header_len());
                let _ = PacketRepr::parse(&p);
            }
            // Views used without a check must not panic either where they return Options.
            let p = Packet::new_unchecked(&data[..]);
            if data.len() >= MIN_LEN {
                let _ = (p.reth().map(|r| r.va()), p.deth().map(|d| d.qkey()), p.immediate());
            }
        }
    }
}
