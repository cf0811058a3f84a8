//! The extension transport headers that follow the BTH (IBTA 9.3): RETH, AETH, DETH,
//! ImmDt, IETH, AtomicETH, AtomicAckETH, and FETH (IBTA 1.5 memory placement).
//! Which of them a packet carries, and in what order, comes from the opcode table.

use crate::field::{fixed_view, set_u24, set_u32, set_u64, u24_at, u32_at, u64_at};
use crate::Result;
use core::fmt;

fixed_view!(
    /// RDMA Extended Transport Header (IBTA 9.3.3): VA, R_Key, DMA length.
    Reth,
    16,
    "RETH"
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address.
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// DMA length of the whole message.
    pub fn dma_len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 12)
    }
}

/// An owned RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(RethRepr {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        })
    }
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        16
    }
    /// Writes the RETH into at least 16 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        set_u64(buf, 0, self.va);
        set_u32(buf, 8, self.rkey);
        set_u32(buf, 12, self.dma_len);
    }
}

fixed_view!(
    /// ACK Extended Transport Header (IBTA 9.3.5): syndrome and MSN.
    Aeth,
    4,
    "AETH"
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Message sequence number.
    pub fn msn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

/// NAK codes of the AETH syndrome (IBTA 9.7.5.2.x, table 43).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error (0).
    PsnSequenceError,
    /// Invalid request (1).
    InvalidRequest,
    /// Remote access error (2).
    RemoteAccessError,
    /// Remote operational error (3).
    RemoteOperationalError,
    /// Invalid RD request (4).
    InvalidRdRequest,
    /// A reserved code (5..=31).
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }

    const fn from_code(c: u8) -> Self {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// The meaning of an AETH syndrome byte (IBTA 9.3.5, table 42): bit 7 reserved, bits
/// 6..5 the type, bits 4..0 a credit count, RNR timer code or NAK code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK with an end-to-end credit count (0x1F: credits not tracked, as rxe sends).
    Ack {
        /// Credit count code.
        credits: u8,
    },
    /// RNR NAK with the RNR timer code (IBTA table 45).
    RnrNak {
        /// Timer code.
        timer: u8,
    },
    /// NAK.
    Nak(NakCode),
    /// The reserved type 0b10, or bit 7 set.
    Reserved(u8),
}

impl Syndrome {
    /// Syndrome of a plain ACK with no credit tracking (0x1F), as rxe sends.
    pub const ACK: Syndrome = Syndrome::Ack { credits: 0x1f };

    /// Decodes a syndrome byte.
    pub const fn from_byte(b: u8) -> Syndrome {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        match (b >> 5) & 3 {
            0 => Syndrome::Ack { credits: b & 0x1f },
            1 => Syndrome::RnrNak { timer: b & 0x1f },
            3 => Syndrome::Nak(NakCode::from_code(b)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(b) => b,
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Syndrome::Ack { .. } => "ACK",
            Syndrome::RnrNak { .. } => "RNR",
            Syndrome::Nak(_) => "NAK",
            Syndrome::Reserved(_) => "RESERVED",
        };
        write!(f, "{kind} syn={:#04x}", self.to_byte())
    }
}

/// An owned AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// MSN (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Aeth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(AethRepr {
            syndrome: Syndrome::from_byte(h.syndrome()),
            msn: h.msn(),
        })
    }
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes the AETH into at least 4 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.syndrome.to_byte();
        set_u24(buf, 1, self.msn);
    }
}

fixed_view!(
    /// Datagram Extended Transport Header (IBTA 9.3.2): Q_Key and source QP.
    Deth,
    8,
    "DETH"
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
    /// Source QP (24 bits).
    pub fn src_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 5)
    }
}

/// An owned DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key. Bit 31 set marks a privileged Q_Key (IBTA 10.2.4).
    pub qkey: u32,
    /// Source QP.
    pub src_qp: u32,
}

impl DethRepr {
    /// Reads a DETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(DethRepr {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        })
    }
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        8
    }
    /// Writes the DETH into at least 8 bytes (reserved byte zero).
    pub fn emit(&self, buf: &mut [u8]) {
        set_u32(buf, 0, self.qkey);
        buf[4] = 0;
        set_u24(buf, 5, self.src_qp);
    }
}

fixed_view!(
    /// Atomic Extended Transport Header (IBTA 9.3.4): VA, R_Key, swap/add, compare.
    AtomicEth,
    28,
    "AtomicETH"
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address (must be 8-byte aligned).
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// Swap (CmpSwap) or add (FetchAdd) data.
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 12)
    }
    /// Compare data (CmpSwap).
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 20)
    }
}

/// An owned AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap or add data.
    pub swap_add: u64,
    /// Compare data.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        28
    }
    /// Writes the AtomicETH into at least 28 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        set_u64(buf, 0, self.va);
        set_u32(buf, 8, self.rkey);
        set_u64(buf, 12, self.swap_add);
        set_u64(buf, 20, self.compare);
    }
}

/// Reads the single big-endian integer that makes up ImmDt, IETH and AtomicAckETH.
macro_rules! scalar_header {
    ($(#[$doc:meta])* $view:ident, $repr:ident, $len:expr, $what:literal, $field:ident: $ty:ty,
     $get:ident, $set:ident, $fdoc:literal) => {
        fixed_view!($(#[$doc])* $view, $len, $what);

        impl<T: AsRef<[u8]>> $view<T> {
            #[doc = $fdoc]
            pub fn $field(&self) -> $ty {
                $get(self.buffer.as_ref(), 0)
            }
        }

        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $repr {
            #[doc = $fdoc]
            pub $field: $ty,
        }

        impl $repr {
            /// Reads the header.
            pub fn parse<T: AsRef<[u8]>>(h: &$view<T>) -> Result<Self> {
                h.check_len()?;
                Ok($repr { $field: h.$field() })
            }
            /// Header bytes.
            pub const fn buffer_len(&self) -> usize {
                $len
            }
            /// Writes the header.
            pub fn emit(&self, buf: &mut [u8]) {
                $set(buf, 0, self.$field);
            }
        }
    };
}

scalar_header!(
    /// Immediate data (IBTA 9.3.6), carried opaquely in network byte order.
    ImmDt, ImmDtRepr, 4, "ImmDt", imm: u32, u32_at, set_u32,
    "The immediate value as a big-endian integer."
);
scalar_header!(
    /// Invalidate Extended Transport Header (IBTA 9.3.7): the R_Key to invalidate.
    Ieth, IethRepr, 4, "IETH", rkey: u32, u32_at, set_u32, "R_Key to invalidate."
);
scalar_header!(
    /// Atomic ACK Extended Transport Header (IBTA 9.3.6): original remote data.
    AtomicAckEth, AtomicAckEthRepr, 8, "AtomicAckETH", orig: u64, u64_at, set_u64,
    "The value at the target address before the atomic ran."
);

fixed_view!(
    /// Flush Extended Transport Header (IBTA 1.5 A19; rxe `FETH_*` masks): selectivity
    /// level (bits 5..4) and placement type (bits 3..0) of a 32-bit word.
    Feth,
    4,
    "FETH"
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// Selectivity level (0 = the memory region range, 1 = the whole region).
    pub fn selectivity(&self) -> u8 {
        (u32_at(self.buffer.as_ref(), 0) >> 4) as u8 & 0x3
    }
    /// Placement type bits (1 = global visibility, 2 = persistence).
    pub fn placement(&self) -> u8 {
        u32_at(self.buffer.as_ref(), 0) as u8 & 0x0f
    }
}

/// An owned FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Selectivity level (2 bits).
    pub selectivity: u8,
    /// Placement type (4 bits).
    pub placement: u8,
}

impl FethRepr {
    /// Reads a FETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Feth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(FethRepr {
            selectivity: h.selectivity(),
            placement: h.placement(),
        })
    }
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes the FETH into at least 4 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let w = (u32::from(self.selectivity & 3) << 4) | u32::from(self.placement & 0x0f);
        set_u32(buf, 0, w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    #[test]
    fn syndromes() {
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::ACK);
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x61),
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 0x0e });
        assert_eq!(Syndrome::from_byte(0x40), Syndrome::Reserved(0x40));
        assert_eq!(Syndrome::from_byte(0x9f), Syndrome::Reserved(0x9f));
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
        assert_eq!(
            std::format!("{}", Syndrome::from_byte(0x20)),
            "RNR syn=0x20"
        );
    }

    #[test]
    fn golden_atomic_eth() {
        // Field order of IBTA figure 99: VA, R_Key, SwapAdd, Compare.
        let mut b = [0u8; 28];
        AtomicEthRepr {
            va: 0x1122_3344_5566_7788,
            rkey: 0xaabb_ccdd,
            swap_add: 1,
            compare: 2,
        }
        .emit(&mut b);
        assert_eq!(
            &b[..12],
            &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd]
        );
        assert_eq!(b[19], 1);
        assert_eq!(b[27], 2);
        assert_eq!(
            AtomicEth::new_checked(&b[..27]).unwrap_err(),
            Error::Truncated("AtomicETH")
        );
    }

    #[test]
    fn deth_reserved_byte() {
        let b = [0x80, 0x01, 0x00, 0x00, 0xee, 0x00, 0x00, 0x01];
        let d = DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            d,
            DethRepr {
                qkey: 0x8001_0000,
                src_qp: 1
            }
        );
    }

    proptest! {
        #[test]
        fn round_trips(va: u64, rkey: u32, len: u32, syn: u8, msn in 0u32..0x100_0000,
                       qkey: u32, qp in 0u32..0x100_0000, sa: u64, cmp: u64, imm: u32,
                       sel in 0u8..4, plt in 0u8..16) {
            let mut b = [0u8; 28];
            let r = RethRepr { va, rkey, dma_len: len };
            r.emit(&mut b);
            prop_assert_eq!(RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()).unwrap(), r);
            let a = AethRepr { syndrome: Syndrome::from_byte(syn), msn };
            a.emit(&mut b);
            prop_assert_eq!(AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()).unwrap(), a);
            let d = DethRepr { qkey, src_qp: qp };
            d.emit(&mut b);
            prop_assert_eq!(DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()).unwrap(), d);
            let at = AtomicEthRepr { va, rkey, swap_add: sa, compare: cmp };
            at.emit(&mut b);
            prop_assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()).unwrap(), at);
            let ack = AtomicAckEthRepr { orig: sa };
            ack.emit(&mut b);
            prop_assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&b[..]).unwrap()).unwrap(), ack);
            let i = ImmDtRepr { imm };
            i.emit(&mut b);
            prop_assert_eq!(ImmDtRepr::parse(&ImmDt::new_checked(&b[..]).unwrap()).unwrap(), i);
            let ie = IethRepr { rkey };
            ie.emit(&mut b);
            prop_assert_eq!(IethRepr::parse(&Ieth::new_checked(&b[..]).unwrap()).unwrap(), ie);
            let f = FethRepr { selectivity: sel, placement: plt };
            f.emit(&mut b);
            prop_assert_eq!(FethRepr::parse(&Feth::new_checked(&b[..]).unwrap()).unwrap(), f);
        }
    }
}
