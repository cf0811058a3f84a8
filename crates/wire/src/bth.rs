//! The Base Transport Header (IBTA 9.2, figure 94).

use crate::field::{fixed_view, set_u16, set_u24, u16_at, u24_at};
use crate::opcode::Opcode;
use crate::psn::Psn;
use crate::{Error, Result};

/// Length of the BTH.
pub const BTH_LEN: usize = 12;
/// The only transport header version defined (IBTA 9.2.5).
pub const TVER: u8 = 0;
/// The default (full-membership) partition key.
pub const DEFAULT_PKEY: u16 = 0xffff;

fixed_view!(
    /// A checked view of a BTH.
    Bth,
    BTH_LEN,
    "BTH"
);

impl<T: AsRef<[u8]>> Bth<T> {
    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[0])
    }

    /// SE: solicited event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[1] & 0x80 != 0
    }

    /// M: migration state.
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[1] & 0x40 != 0
    }

    /// PadCnt: bytes of pad after the payload (0..=3).
    pub fn pad(&self) -> u8 {
        (self.buffer.as_ref()[1] >> 4) & 0x3
    }

    /// TVer: transport header version.
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x0f
    }

    /// P_Key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// FECN (IB) — in RoCE v2 the whole byte 4 is reserved and ECN lives in the IP header.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x80 != 0
    }

    /// BECN (IB), see [`Self::fecn`].
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x40 != 0
    }

    /// The six reserved bits after FECN/BECN.
    pub fn resv6(&self) -> u8 {
        self.buffer.as_ref()[4] & 0x3f
    }

    /// DestQP.
    pub fn dest_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 5)
    }

    /// A: acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[8] & 0x80 != 0
    }

    /// The seven reserved bits after A.
    pub fn resv7(&self) -> u8 {
        self.buffer.as_ref()[8] & 0x7f
    }

    /// PSN.
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.buffer.as_ref(), 9))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets OpCode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[0] = v.0;
    }

    /// Sets SE, M, PadCnt and TVer together.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad: u8, tver: u8) {
        self.buffer.as_mut()[1] = (u8::from(solicited) << 7)
            | (u8::from(mig_req) << 6)
            | ((pad & 3) << 4)
            | (tver & 0x0f);
    }

    /// Sets PadCnt, keeping the other bits of byte 1.
    pub fn set_pad(&mut self, pad: u8) {
        let b = &mut self.buffer.as_mut()[1];
        *b = (*b & !0x30) | ((pad & 3) << 4);
    }

    /// Sets P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    /// Sets FECN and BECN (reserved bits cleared).
    pub fn set_becn_fecn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[4] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }

    /// Sets DestQP (24 bits).
    pub fn set_dest_qp(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), 5, v);
    }

    /// Sets A (reserved bits cleared).
    pub fn set_ack_req(&mut self, v: bool) {
        self.buffer.as_mut()[8] = u8::from(v) << 7;
    }

    /// Sets the seven reserved bits after A, keeping A (IBTA 9.2: sent as 0 by a
    /// standard sender; see the engine's `selective` module for the one use).
    pub fn set_resv7(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[8];
        *b = (*b & 0x80) | (v & 0x7f);
    }

    /// Sets PSN.
    pub fn set_psn(&mut self, v: Psn) {
        set_u24(self.buffer.as_mut(), 9, v.value());
    }
}

/// An owned BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// SE.
    pub solicited: bool,
    /// M.
    pub mig_req: bool,
    /// PadCnt.
    pub pad: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// DestQP.
    pub dest_qp: u32,
    /// A.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// Reads a BTH. A TVer other than 0 is refused, as rxe does (`rxe_recv.c`,
    /// `hdr_check`); reserved bits are ignored on receive (IBTA 9.2: "ignored by the
    /// receiver").
    pub fn parse<T: AsRef<[u8]>>(b: &Bth<T>) -> Result<Self> {
        b.check_len()?;
        if b.tver() != TVER {
            return Err(Error::Malformed("BTH TVer is not 0"));
        }
        Ok(BthRepr {
            opcode: b.opcode(),
            solicited: b.solicited(),
            mig_req: b.mig_req(),
            pad: b.pad(),
            pkey: b.pkey(),
            fecn: b.fecn(),
            becn: b.becn(),
            dest_qp: b.dest_qp(),
            ack_req: b.ack_req(),
            psn: b.psn(),
        })
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes the BTH (reserved bits zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, b: &mut Bth<T>) {
        b.set_opcode(self.opcode);
        b.set_flags(self.solicited, self.mig_req, self.pad, TVER);
        b.set_pkey(self.pkey);
        b.set_becn_fecn(self.fecn, self.becn);
        b.set_dest_qp(self.dest_qp);
        b.set_ack_req(self.ack_req);
        b.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // RC SEND_ONLY to QP 0x11, AckReq, PSN 0, pad 3 (DESIGN §3 vector).
    const GOLDEN: [u8; 12] = [0x04, 0x30, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 0];

    #[test]
    fn deconstruct() {
        let b = Bth::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(b.opcode(), Opcode::RC_SEND_ONLY);
        assert_eq!(b.pad(), 3);
        assert!(!b.solicited() && !b.mig_req());
        assert_eq!(b.pkey(), DEFAULT_PKEY);
        assert_eq!(b.dest_qp(), 0x11);
        assert!(b.ack_req());
        assert_eq!(b.psn(), Psn::ZERO);
        let mut out = [0xaau8; 12];
        BthRepr::parse(&b)
            .unwrap()
            .emit(&mut Bth::new_unchecked(&mut out[..]));
        assert_eq!(out, GOLDEN);
    }

    /// Reserved bits after A: set without touching A or the PSN, ignored by parse.
    #[test]
    fn resv7_set_and_ignored() {
        let mut b = GOLDEN;
        Bth::new_unchecked(&mut b[..]).set_resv7(0x40);
        let v = Bth::new_checked(&b[..]).unwrap();
        assert_eq!((v.resv7(), v.ack_req(), v.psn()), (0x40, true, Psn::ZERO));
        assert_eq!(
            BthRepr::parse(&v),
            BthRepr::parse(&Bth::new_checked(&GOLDEN[..]).unwrap())
        );
        Bth::new_unchecked(&mut b[..]).set_resv7(0);
        assert_eq!(b, GOLDEN);
    }

    #[test]
    fn rejects_short_and_tver() {
        assert_eq!(
            Bth::new_checked(&GOLDEN[..11]).unwrap_err(),
            Error::Truncated("BTH")
        );
        let mut v = GOLDEN;
        v[1] |= 1;
        assert!(matches!(
            BthRepr::parse(&Bth::new_checked(&v[..]).unwrap()),
            Err(Error::Malformed(_))
        ));
    }

    proptest! {
        #[test]
        fn round_trip(op: u8, se: bool, m: bool, pad in 0u8..4, pkey: u16, fecn: bool,
                      becn: bool, qp in 0u32..0x100_0000, a: bool, psn in 0u32..0x100_0000) {
            let repr = BthRepr { opcode: Opcode(op), solicited: se, mig_req: m, pad, pkey,
                fecn, becn, dest_qp: qp, ack_req: a, psn: Psn::new(psn) };
            let mut buf = [0u8; 12];
            repr.emit(&mut Bth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(BthRepr::parse(&Bth::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
