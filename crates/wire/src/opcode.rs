//! The BTH opcode table (IBTA 9.2.1, table 35; kernel `include/rdma/ib_pack.h` and
//! `drivers/infiniband/sw/rxe/rxe_opcode.c` for the IBTA 1.5 FLUSH and ATOMIC WRITE
//! rows). One row per opcode says which extension headers follow the BTH, in wire
//! order, and what the packet means; header offsets are derived from it, never written
//! out per opcode.

use core::fmt;

/// An 8-bit BTH opcode: the transport in the top 3 bits, the operation in the low 5.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

/// Transport service of an opcode (its top 3 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (0b000).
    Rc,
    /// Unreliable Connected (0b001).
    Uc,
    /// Reliable Datagram (0b010): not supported by Linux or rverbs.
    Rd,
    /// Unreliable Datagram (0b011).
    Ud,
    /// Congestion Notification Packet (0b100, RoCE v2 Annex A17).
    Cnp,
    /// Extended Reliable Connected (0b101): not supported by rverbs.
    Xrc,
    /// Manufacturer-specific or reserved (0b110, 0b111).
    Other,
}

impl Transport {
    /// Short name as used in opcode names ("RC", "UC", ...).
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Other => "VENDOR",
        }
    }
}

/// What a packet does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// SEND (any segment, with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (any segment, with or without immediate).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response (any segment).
    RdmaReadResponse,
    /// ACKNOWLEDGE (ACK or NAK).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// CmpSwap atomic request.
    CompareSwap,
    /// FetchAdd atomic request.
    FetchAdd,
    /// FLUSH request (IBTA 1.5 memory placement extensions).
    Flush,
    /// ATOMIC WRITE request (IBTA 1.5).
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// How the responder answers a request (RC only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Response {
    /// Nothing answers this packet (UC, UD, CNP, and all responses).
    None,
    /// An ACKNOWLEDGE (possibly coalesced with later ones).
    Ack,
    /// RDMA READ RESPONSE packet(s) (READ, and FLUSH / ATOMIC WRITE with no payload).
    ReadResponse,
    /// An ATOMIC ACKNOWLEDGE carrying the original value.
    AtomicAck,
}

/// What may follow the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// No payload.
    None,
    /// Any number of bytes (with pad to a multiple of 4).
    Any,
    /// Exactly this many bytes (ATOMIC WRITE's 8 bytes; CNP's 16 reserved bytes).
    Fixed(u8),
}

/// The set of extension headers an opcode carries, as bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// Datagram ETH (Q_Key, source QP): 8 bytes.
    pub const DETH: Headers = Headers(1 << 0);
    /// Flush ETH (selectivity level, placement type): 4 bytes.
    pub const FETH: Headers = Headers(1 << 1);
    /// RDMA ETH (VA, R_Key, DMA length): 16 bytes.
    pub const RETH: Headers = Headers(1 << 2);
    /// Atomic ETH (VA, R_Key, swap/add, compare): 28 bytes.
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    /// ACK ETH (syndrome, MSN): 4 bytes.
    pub const AETH: Headers = Headers(1 << 4);
    /// Atomic ACK ETH (original remote data): 8 bytes.
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    /// Immediate data: 4 bytes.
    pub const IMMDT: Headers = Headers(1 << 6);
    /// Invalidate ETH (R_Key): 4 bytes.
    pub const IETH: Headers = Headers(1 << 7);
    /// No extension header.
    pub const NONE: Headers = Headers(0);

    /// Every header in the order it follows the BTH on the wire (IBTA 9.2), with its size.
    pub const WIRE_ORDER: [(Headers, usize); 8] = [
        (Headers::DETH, 8),
        (Headers::FETH, 4),
        (Headers::RETH, 16),
        (Headers::ATOMIC_ETH, 28),
        (Headers::AETH, 4),
        (Headers::ATOMIC_ACK_ETH, 8),
        (Headers::IMMDT, 4),
        (Headers::IETH, 4),
    ];

    /// The union of two sets.
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    /// True when every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    /// Offset of header `h` (one header) after the BTH, if this set has it: the length
    /// of the headers of this set that come before it on the wire, whose bits are the
    /// lower ones ([`Headers::WIRE_ORDER`] is bit order).
    pub const fn offset_of(self, h: Headers) -> Option<usize> {
        if !self.contains(h) || h.0.count_ones() != 1 {
            return None;
        }
        Some(Headers(self.0 & (h.0 - 1)).len())
    }

    /// Total length of the extension headers in this set (one table look-up: it runs
    /// several times per packet).
    pub const fn len(self) -> usize {
        LEN_OF_SET[(self.0 & 0xff) as usize] as usize
    }

    /// True for the empty set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// [`Headers::len`] of every set (index: the set's bits; all 8 headers fit in them).
const LEN_OF_SET: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut set = 0;
    while set < 256 {
        let mut total = 0;
        let mut i = 0;
        while i < Headers::WIRE_ORDER.len() {
            let (hdr, len) = Headers::WIRE_ORDER[i];
            if set & hdr.0 as usize != 0 {
                total += len;
            }
            i += 1;
        }
        t[set] = total as u8;
        set += 1;
    }
    t
};

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        f.write_str("Headers(")?;
        let mut first = true;
        for (i, (h, _)) in Headers::WIRE_ORDER.iter().enumerate() {
            if self.contains(*h) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(NAMES[i])?;
                first = false;
            }
        }
        f.write_str(")")
    }
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// IBTA name with its transport, e.g. `RC_RDMA_WRITE_FIRST`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// What the packet does.
    pub kind: OpKind,
    /// Extension headers after the BTH.
    pub headers: Headers,
    /// First packet of a message (FIRST or ONLY).
    pub starts_message: bool,
    /// Last packet of a message (LAST or ONLY).
    pub ends_message: bool,
    /// What may follow the headers.
    pub payload: Payload,
    /// Sent by a requester (true) or a responder (false).
    pub is_request: bool,
    /// How an RC responder answers it.
    pub response: Response,
}

impl OpcodeInfo {
    /// Total bytes of the extension headers.
    pub const fn headers_len(&self) -> usize {
        self.headers.len()
    }

    /// True when the packet carries immediate data.
    pub const fn has_immediate(&self) -> bool {
        self.headers.contains(Headers::IMMDT)
    }
}

// Operation codes within a transport (the low 5 bits), IBTA table 35.
const SEND_FIRST: u8 = 0x00;
const SEND_MIDDLE: u8 = 0x01;
const SEND_LAST: u8 = 0x02;
const SEND_LAST_IMM: u8 = 0x03;
const SEND_ONLY: u8 = 0x04;
const SEND_ONLY_IMM: u8 = 0x05;
const WRITE_FIRST: u8 = 0x06;
const WRITE_MIDDLE: u8 = 0x07;
const WRITE_LAST: u8 = 0x08;
const WRITE_LAST_IMM: u8 = 0x09;
const WRITE_ONLY: u8 = 0x0a;
const WRITE_ONLY_IMM: u8 = 0x0b;
const READ_REQUEST: u8 = 0x0c;
const READ_RESP_FIRST: u8 = 0x0d;
const READ_RESP_MIDDLE: u8 = 0x0e;
const READ_RESP_LAST: u8 = 0x0f;
const READ_RESP_ONLY: u8 = 0x10;
const ACKNOWLEDGE: u8 = 0x11;
const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
const COMPARE_SWAP: u8 = 0x13;
const FETCH_ADD: u8 = 0x14;
const SEND_LAST_INV: u8 = 0x16;
const SEND_ONLY_INV: u8 = 0x17;
const FLUSH: u8 = 0x1c;
const ATOMIC_WRITE: u8 = 0x1d;

const RC: u8 = 0x00;
const UC: u8 = 0x20;
const UD: u8 = 0x60;
const CNP_BASE: u8 = 0x80;

macro_rules! opcodes {
    ($($name:ident = $val:expr;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Opcode = Opcode($val);
            )*
        }
    };
}

opcodes! {
    RC_SEND_FIRST = RC | SEND_FIRST;
    RC_SEND_MIDDLE = RC | SEND_MIDDLE;
    RC_SEND_LAST = RC | SEND_LAST;
    RC_SEND_LAST_WITH_IMMEDIATE = RC | SEND_LAST_IMM;
    RC_SEND_ONLY = RC | SEND_ONLY;
    RC_SEND_ONLY_WITH_IMMEDIATE = RC | SEND_ONLY_IMM;
    RC_RDMA_WRITE_FIRST = RC | WRITE_FIRST;
    RC_RDMA_WRITE_MIDDLE = RC | WRITE_MIDDLE;
    RC_RDMA_WRITE_LAST = RC | WRITE_LAST;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = RC | WRITE_LAST_IMM;
    RC_RDMA_WRITE_ONLY = RC | WRITE_ONLY;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = RC | WRITE_ONLY_IMM;
    RC_RDMA_READ_REQUEST = RC | READ_REQUEST;
    RC_RDMA_READ_RESPONSE_FIRST = RC | READ_RESP_FIRST;
    RC_RDMA_READ_RESPONSE_MIDDLE = RC | READ_RESP_MIDDLE;
    RC_RDMA_READ_RESPONSE_LAST = RC | READ_RESP_LAST;
    RC_RDMA_READ_RESPONSE_ONLY = RC | READ_RESP_ONLY;
    RC_ACKNOWLEDGE = RC | ACKNOWLEDGE;
    RC_ATOMIC_ACKNOWLEDGE = RC | ATOMIC_ACKNOWLEDGE;
    RC_COMPARE_SWAP = RC | COMPARE_SWAP;
    RC_FETCH_ADD = RC | FETCH_ADD;
    RC_SEND_LAST_WITH_INVALIDATE = RC | SEND_LAST_INV;
    RC_SEND_ONLY_WITH_INVALIDATE = RC | SEND_ONLY_INV;
    RC_FLUSH = RC | FLUSH;
    RC_ATOMIC_WRITE = RC | ATOMIC_WRITE;
    UC_SEND_FIRST = UC | SEND_FIRST;
    UC_SEND_MIDDLE = UC | SEND_MIDDLE;
    UC_SEND_LAST = UC | SEND_LAST;
    UC_SEND_LAST_WITH_IMMEDIATE = UC | SEND_LAST_IMM;
    UC_SEND_ONLY = UC | SEND_ONLY;
    UC_SEND_ONLY_WITH_IMMEDIATE = UC | SEND_ONLY_IMM;
    UC_RDMA_WRITE_FIRST = UC | WRITE_FIRST;
    UC_RDMA_WRITE_MIDDLE = UC | WRITE_MIDDLE;
    UC_RDMA_WRITE_LAST = UC | WRITE_LAST;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = UC | WRITE_LAST_IMM;
    UC_RDMA_WRITE_ONLY = UC | WRITE_ONLY;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = UC | WRITE_ONLY_IMM;
    UD_SEND_ONLY = UD | SEND_ONLY;
    UD_SEND_ONLY_WITH_IMMEDIATE = UD | SEND_ONLY_IMM;
    CNP = CNP_BASE | 0x01;
}

/// One table row, described by the operation (low 5 bits) alone; the transport fills in
/// the rest (`row` below).
#[derive(Clone, Copy)]
struct Op {
    kind: OpKind,
    headers: Headers,
    starts: bool,
    ends: bool,
    payload: Payload,
    request: bool,
    rc_response: Response,
}

const fn op(
    kind: OpKind,
    headers: Headers,
    (starts, ends): (bool, bool),
    payload: Payload,
    rc_response: Response,
) -> Op {
    let request = !matches!(
        kind,
        OpKind::RdmaReadResponse | OpKind::Acknowledge | OpKind::AtomicAcknowledge
    );
    Op {
        kind,
        headers,
        starts,
        ends,
        payload,
        request,
        rc_response,
    }
}

const FIRST: (bool, bool) = (true, false);
const MIDDLE: (bool, bool) = (false, false);
const LAST: (bool, bool) = (false, true);
const ONLY: (bool, bool) = (true, true);
const H0: Headers = Headers::NONE;
const IMM: Headers = Headers::IMMDT;
const RETH: Headers = Headers::RETH;
const RETH_IMM: Headers = Headers::RETH.with(Headers::IMMDT);

/// The operations of table 35, by low 5 bits (shared by RC, UC and UD where valid).
const OPS: [Option<Op>; 32] = {
    use OpKind::*;
    use Payload::{Any, Fixed};
    use Response::{Ack, AtomicAck, ReadResponse};
    let mut t: [Option<Op>; 32] = [None; 32];
    t[SEND_FIRST as usize] = Some(op(Send, H0, FIRST, Any, Ack));
    t[SEND_MIDDLE as usize] = Some(op(Send, H0, MIDDLE, Any, Ack));
    t[SEND_LAST as usize] = Some(op(Send, H0, LAST, Any, Ack));
    t[SEND_LAST_IMM as usize] = Some(op(Send, IMM, LAST, Any, Ack));
    t[SEND_ONLY as usize] = Some(op(Send, H0, ONLY, Any, Ack));
    t[SEND_ONLY_IMM as usize] = Some(op(Send, IMM, ONLY, Any, Ack));
    t[WRITE_FIRST as usize] = Some(op(RdmaWrite, RETH, FIRST, Any, Ack));
    t[WRITE_MIDDLE as usize] = Some(op(RdmaWrite, H0, MIDDLE, Any, Ack));
    t[WRITE_LAST as usize] = Some(op(RdmaWrite, H0, LAST, Any, Ack));
    t[WRITE_LAST_IMM as usize] = Some(op(RdmaWrite, IMM, LAST, Any, Ack));
    t[WRITE_ONLY as usize] = Some(op(RdmaWrite, RETH, ONLY, Any, Ack));
    t[WRITE_ONLY_IMM as usize] = Some(op(RdmaWrite, RETH_IMM, ONLY, Any, Ack));
    t[READ_REQUEST as usize] = Some(op(RdmaReadRequest, RETH, ONLY, Payload::None, ReadResponse));
    let aeth = Headers::AETH;
    let resp = Response::None;
    t[READ_RESP_FIRST as usize] = Some(op(RdmaReadResponse, aeth, FIRST, Any, resp));
    t[READ_RESP_MIDDLE as usize] = Some(op(RdmaReadResponse, H0, MIDDLE, Any, resp));
    t[READ_RESP_LAST as usize] = Some(op(RdmaReadResponse, aeth, LAST, Any, resp));
    t[READ_RESP_ONLY as usize] = Some(op(RdmaReadResponse, aeth, ONLY, Any, resp));
    t[ACKNOWLEDGE as usize] = Some(op(Acknowledge, aeth, ONLY, Payload::None, resp));
    t[ATOMIC_ACKNOWLEDGE as usize] = Some(op(
        AtomicAcknowledge,
        aeth.with(Headers::ATOMIC_ACK_ETH),
        ONLY,
        Payload::None,
        resp,
    ));
    let atomic = Headers::ATOMIC_ETH;
    t[COMPARE_SWAP as usize] = Some(op(CompareSwap, atomic, ONLY, Payload::None, AtomicAck));
    t[FETCH_ADD as usize] = Some(op(FetchAdd, atomic, ONLY, Payload::None, AtomicAck));
    let ieth = Headers::IETH;
    t[SEND_LAST_INV as usize] = Some(op(Send, ieth, LAST, Any, Ack));
    t[SEND_ONLY_INV as usize] = Some(op(Send, ieth, ONLY, Any, Ack));
    // rxe answers FLUSH and ATOMIC WRITE with a zero-length READ RESPONSE ONLY
    // (rxe_comp.c check_ack).
    let feth_reth = Headers::FETH.with(Headers::RETH);
    t[FLUSH as usize] = Some(op(Flush, feth_reth, ONLY, Payload::None, ReadResponse));
    t[ATOMIC_WRITE as usize] = Some(op(AtomicWrite, RETH, ONLY, Fixed(8), ReadResponse));
    t
};

/// Which operations each transport has (IBTA table 35; `true` = valid).
const fn valid_for(transport: Transport, low: u8) -> bool {
    match transport {
        Transport::Rc => OPS[low as usize].is_some(),
        Transport::Uc => matches!(low, SEND_FIRST..=WRITE_ONLY_IMM),
        Transport::Ud => matches!(low, SEND_ONLY | SEND_ONLY_IMM),
        _ => false,
    }
}

const fn transport_of(code: u8) -> Transport {
    match code >> 5 {
        0 => Transport::Rc,
        1 => Transport::Uc,
        2 => Transport::Rd,
        3 => Transport::Ud,
        4 => Transport::Cnp,
        5 => Transport::Xrc,
        _ => Transport::Other,
    }
}

const fn concat_name(transport: Transport, low: u8) -> &'static str {
    // Names are static strings; spelled out per transport so no allocation is needed.
    match (transport, low) {
        (Transport::Rc, _) => RC_NAMES[low as usize],
        (Transport::Uc, _) => UC_NAMES[low as usize],
        (Transport::Ud, SEND_ONLY) => "UD_SEND_ONLY",
        (Transport::Ud, SEND_ONLY_IMM) => "UD_SEND_ONLY_WITH_IMMEDIATE",
        _ => "",
    }
}

macro_rules! names {
    ($prefix:literal) => {{
        let mut n: [&str; 32] = [""; 32];
        n[SEND_FIRST as usize] = concat!($prefix, "SEND_FIRST");
        n[SEND_MIDDLE as usize] = concat!($prefix, "SEND_MIDDLE");
        n[SEND_LAST as usize] = concat!($prefix, "SEND_LAST");
        n[SEND_LAST_IMM as usize] = concat!($prefix, "SEND_LAST_WITH_IMMEDIATE");
        n[SEND_ONLY as usize] = concat!($prefix, "SEND_ONLY");
        n[SEND_ONLY_IMM as usize] = concat!($prefix, "SEND_ONLY_WITH_IMMEDIATE");
        n[WRITE_FIRST as usize] = concat!($prefix, "RDMA_WRITE_FIRST");
        n[WRITE_MIDDLE as usize] = concat!($prefix, "RDMA_WRITE_MIDDLE");
        n[WRITE_LAST as usize] = concat!($prefix, "RDMA_WRITE_LAST");
        n[WRITE_LAST_IMM as usize] = concat!($prefix, "RDMA_WRITE_LAST_WITH_IMMEDIATE");
        n[WRITE_ONLY as usize] = concat!($prefix, "RDMA_WRITE_ONLY");
        n[WRITE_ONLY_IMM as usize] = concat!($prefix, "RDMA_WRITE_ONLY_WITH_IMMEDIATE");
        n[READ_REQUEST as usize] = concat!($prefix, "RDMA_READ_REQUEST");
        n[READ_RESP_FIRST as usize] = concat!($prefix, "RDMA_READ_RESPONSE_FIRST");
        n[READ_RESP_MIDDLE as usize] = concat!($prefix, "RDMA_READ_RESPONSE_MIDDLE");
        n[READ_RESP_LAST as usize] = concat!($prefix, "RDMA_READ_RESPONSE_LAST");
        n[READ_RESP_ONLY as usize] = concat!($prefix, "RDMA_READ_RESPONSE_ONLY");
        n[ACKNOWLEDGE as usize] = concat!($prefix, "ACKNOWLEDGE");
        n[ATOMIC_ACKNOWLEDGE as usize] = concat!($prefix, "ATOMIC_ACKNOWLEDGE");
        n[COMPARE_SWAP as usize] = concat!($prefix, "COMPARE_SWAP");
        n[FETCH_ADD as usize] = concat!($prefix, "FETCH_ADD");
        n[SEND_LAST_INV as usize] = concat!($prefix, "SEND_LAST_WITH_INVALIDATE");
        n[SEND_ONLY_INV as usize] = concat!($prefix, "SEND_ONLY_WITH_INVALIDATE");
        n[FLUSH as usize] = concat!($prefix, "FLUSH");
        n[ATOMIC_WRITE as usize] = concat!($prefix, "ATOMIC_WRITE");
        n
    }};
}

const RC_NAMES: [&str; 32] = names!("RC_");
const UC_NAMES: [&str; 32] = names!("UC_");

const fn row(code: u8) -> Option<OpcodeInfo> {
    let transport = transport_of(code);
    if let Transport::Cnp = transport {
        if code == Opcode::CNP.0 {
            // RoCE v2 Annex A17.9.2: BTH, 16 reserved bytes, ICRC.
            return Some(OpcodeInfo {
                name: "CNP",
                transport,
                kind: OpKind::Cnp,
                headers: Headers::NONE,
                starts_message: true,
                ends_message: true,
                payload: Payload::Fixed(16),
                is_request: false,
                response: Response::None,
            });
        }
        return None;
    }
    let low = code & 0x1f;
    if !valid_for(transport, low) {
        return None;
    }
    let Some(o) = OPS[low as usize] else {
        return None;
    };
    let mut headers = o.headers;
    if let Transport::Ud = transport {
        headers = headers.with(Headers::DETH);
    }
    Some(OpcodeInfo {
        name: concat_name(transport, low),
        transport,
        kind: o.kind,
        headers,
        starts_message: o.starts,
        ends_message: o.ends,
        payload: o.payload,
        is_request: o.request,
        response: if let Transport::Rc = transport {
            o.rc_response
        } else {
            Response::None
        },
    })
}

const TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t: [Option<OpcodeInfo>; 256] = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = row(i as u8);
        i += 1;
    }
    t
};

impl Opcode {
    /// The table row, or `None` for reserved opcodes and for transports rverbs does not
    /// speak (RD, XRC, vendor-specific).
    pub const fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// The transport bits, whether or not the opcode is known.
    pub const fn transport(self) -> Transport {
        transport_of(self.0)
    }

    /// Every opcode the table knows, in numeric order.
    pub fn all() -> impl Iterator<Item = (Opcode, &'static OpcodeInfo)> {
        TABLE
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (Opcode(i as u8), r)))
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => f.write_str(i.name),
            None => write!(f, "{}_OPCODE_{:#04x}", self.transport().name(), self.0),
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opcode({self}={:#04x})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

    #[test]
    fn table_has_every_rc_uc_ud_opcode_and_cnp() {
        let codes: Vec<u8> = Opcode::all().map(|(o, _)| o.0).collect();
        let mut expect: Vec<u8> = (0x00..=0x14).chain([0x16, 0x17, 0x1c, 0x1d]).collect();
        expect.extend(0x20..=0x2b);
        expect.extend([0x64, 0x65, 0x81]);
        assert_eq!(codes, expect);
        for (o, i) in Opcode::all() {
            assert_eq!(o.to_string(), i.name);
            assert!(!i.name.is_empty());
        }
    }

    #[test]
    fn rows_match_ibta_table_35() {
        let w = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(w.name, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
        assert_eq!(w.headers, Headers::RETH.with(Headers::IMMDT));
        assert_eq!(w.headers.offset_of(Headers::IMMDT), Some(16));
        assert_eq!(w.headers_len(), 20);
        assert!(w.starts_message && w.ends_message && w.is_request);
        assert_eq!(w.response, Response::Ack);

        let ud = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(ud.headers.offset_of(Headers::DETH), Some(0));
        assert_eq!(ud.headers.offset_of(Headers::IMMDT), Some(8));
        assert_eq!(ud.response, Response::None);

        let aa = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(aa.headers_len(), 12);
        assert_eq!(aa.headers.offset_of(Headers::ATOMIC_ACK_ETH), Some(4));
        assert!(!aa.is_request);

        let cs = Opcode::RC_COMPARE_SWAP.info().unwrap();
        assert_eq!(cs.headers_len(), 28);
        assert_eq!(cs.response, Response::AtomicAck);
        assert_eq!(cs.payload, Payload::None);

        let fl = Opcode::RC_FLUSH.info().unwrap();
        assert_eq!(fl.headers.offset_of(Headers::FETH), Some(0));
        assert_eq!(fl.headers.offset_of(Headers::RETH), Some(4));

        let mid = Opcode::UC_RDMA_WRITE_MIDDLE.info().unwrap();
        assert!(!mid.starts_message && !mid.ends_message);
        assert_eq!(mid.response, Response::None);

        let first = Opcode::RC_RDMA_READ_RESPONSE_FIRST.info().unwrap();
        assert!(first.headers.contains(Headers::AETH) && !first.is_request);
        assert!(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
            .info()
            .unwrap()
            .headers
            .is_empty());

        assert_eq!(Opcode::CNP.info().unwrap().payload, Payload::Fixed(16));
        assert_eq!(
            Opcode::RC_SEND_LAST_WITH_INVALIDATE.info().unwrap().headers,
            Headers::IETH
        );
    }

    #[test]
    fn header_lengths_and_offsets_follow_the_wire_order_for_every_set() {
        // The table look-ups rely on WIRE_ORDER being bit order.
        for (i, (h, _)) in Headers::WIRE_ORDER.iter().enumerate() {
            assert_eq!(h.0, 1 << i);
        }
        for bits in 0..256u16 {
            let set = Headers(bits);
            let mut off = 0;
            for (h, len) in Headers::WIRE_ORDER {
                if set.contains(h) {
                    assert_eq!(set.offset_of(h), Some(off), "{set:?} {h:?}");
                    off += len;
                } else {
                    assert_eq!(set.offset_of(h), None);
                }
            }
            assert_eq!(set.len(), off, "{set:?}");
            // Not one header: no offset.
            assert_eq!(set.offset_of(Headers::NONE), None);
            assert_eq!(set.offset_of(Headers::RETH.with(Headers::IMMDT)), None);
        }
    }

    #[test]
    fn unknown_opcodes() {
        for code in [
            0x15u8, 0x18, 0x1f, 0x2c, 0x31, 0x40, 0x60, 0x66, 0x80, 0x82, 0xa0, 0xff,
        ] {
            assert!(Opcode(code).info().is_none(), "{code:#x}");
        }
        assert_eq!(Opcode(0x40).to_string(), "RD_OPCODE_0x40");
        assert_eq!(Opcode(0xc0).transport(), Transport::Other);
    }
}
