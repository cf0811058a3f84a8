//! Management datagrams (MADs): the common header, the management class constants and
//! the per-class layouts built on top of it.
//!
//! A MAD is always [`MAD_LEN`] (256) bytes (IBTA 13.4.2). Its first [`MAD_HEADER_LEN`]
//! (24) bytes are the common header ([`MadHeader`]); what follows depends on the class:
//!
//! | class | module | layout after the header |
//! |---|---|---|
//! | SM LID routed `0x01` | [`smp`] | M_Key, 32 reserved, 64-byte data, 128 reserved |
//! | SM directed route `0x81` | [`smp`] | M_Key, DrSLID, DrDLID, 28 reserved, data, paths |
//! | Performance `0x04` | [`pma`] | 40 reserved, 192-byte data |
//! | Baseboard `0x05` | [`bm`] | BM_Key, 32 reserved, 192-byte data |
//! | Communication `0x07` | [`cm`] | 232-byte message |
//!
//! Attributes that several classes share ([`notice::Notice`],
//! [`pma::ClassPortInfo`]) are views over a data area, so the same type serves an SMP's
//! 64-byte data and a GS MAD's 192-byte data.
//!
//! Bit positions in this module use the IBTA convention (and rdma-core
//! `libibmad/fields.c`'s after its `BITSOFFS` normalisation): bit 0 is the most
//! significant bit of the field's first byte.

use crate::field;
use crate::{Error, Result};

pub mod bm;
pub mod cm;
pub mod notice;
pub mod pma;
pub mod sma;
pub mod smp;

/// Every MAD is exactly this long (IBTA 13.4.2; kernel `include/rdma/ib_mad.h`
/// `IB_MGMT_MAD_SIZE`).
pub const MAD_LEN: usize = 256;

/// Length of the common MAD header (IBTA 13.4.2).
pub const MAD_HEADER_LEN: usize = 24;

/// The only base version defined for InfiniBand MADs (OPA's 0x80 is not handled here).
pub const BASE_VERSION: u8 = 1;

/// Management class values (IBTA 13.4.4; kernel `include/rdma/ib_mad.h` `IB_MGMT_CLASS_*`).
pub mod class {
    /// Subnet management, LID routed.
    pub const SUBN_LID_ROUTED: u8 = 0x01;
    /// Subnet administration (SA).
    pub const SUBN_ADM: u8 = 0x03;
    /// Performance management (PMA).
    pub const PERF_MGMT: u8 = 0x04;
    /// Baseboard management (BMA).
    pub const BM: u8 = 0x05;
    /// Communication management (CM).
    pub const CM: u8 = 0x07;
    /// Subnet management, directed route.
    pub const SUBN_DIRECTED_ROUTE: u8 = 0x81;
}

/// Method values (IBTA 13.4.5; kernel `IB_MGMT_METHOD_*`). The response variants carry the
/// [`RESPONSE`](method::RESPONSE) bit, which is the top bit of the method byte.
pub mod method {
    /// The R bit: set in every response method.
    pub const RESPONSE: u8 = 0x80;
    /// Get.
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// Send (the only method CM uses).
    pub const SEND: u8 = 0x03;
    /// Trap (unsolicited notice to a manager).
    pub const TRAP: u8 = 0x05;
    /// Report (manager forwards a notice to a subscriber).
    pub const REPORT: u8 = 0x06;
    /// TrapRepress (manager tells the trap sender to stop repeating).
    pub const TRAP_REPRESS: u8 = 0x07;
    /// GetResp, the answer to Get and Set.
    pub const GET_RESP: u8 = 0x81;
    /// ReportResp, the answer to Report.
    pub const REPORT_RESP: u8 = 0x86;
}

/// Common status field values (IBTA 13.4.7; libibmad `ib_types.h`
/// `IB_MAD_STATUS_*`): the low byte is common to all classes, bits 8-14 are class
/// specific.
pub mod status {
    /// Busy: the request was discarded and may be retried.
    pub const BUSY: u16 = 0x0001;
    /// Redirect: see the ClassPortInfo in the data for where to go.
    pub const REDIRECT: u16 = 0x0002;
    /// Bad version: the base or class version is not supported.
    pub const BAD_VERSION: u16 = 0x0004;
    /// The method is not supported.
    pub const METHOD_UNSUPPORTED: u16 = 0x0008;
    /// The method/attribute combination is not supported.
    pub const METHOD_ATTR_UNSUPPORTED: u16 = 0x000C;
    /// One or more fields in the attribute or attribute modifier hold an invalid value.
    pub const INVALID_FIELD: u16 = 0x001C;
    /// Directed-route SMPs only: the D (direction) bit, the top bit of the status
    /// word; the status proper is the low 15 bits (IBTA 14.2.1.2; kernel
    /// `IB_SMP_DIRECTION`).
    pub const DR_DIRECTION: u16 = 0x8000;
}

/// Attribute IDs used by the layouts in this module. Attribute IDs are per class:
/// 0x0010 is NodeDescription for the SM, BKeyInfo for the BM and REQ for the CM.
pub mod attr {
    /// ClassPortInfo, common to all GS classes (IBTA 13.4.8.1).
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Notice, for Trap/Report/TrapRepress in SM and GS classes (IBTA 13.4.8.2).
    pub const NOTICE: u16 = 0x0002;
    /// InformInfo (IBTA 13.4.8.3); listed for completeness.
    pub const INFORM_INFO: u16 = 0x0003;
    /// PMA PortCounters (kernel `ib_pma.h` `IB_PMA_PORT_COUNTERS`).
    pub const PMA_PORT_COUNTERS: u16 = 0x0012;
    /// PMA PortCountersExtended (kernel `ib_pma.h` `IB_PMA_PORT_COUNTERS_EXT`).
    pub const PMA_PORT_COUNTERS_EXT: u16 = 0x001D;
    /// BM BKeyInfo (IBTA 16.1; Intel opa-ff `ib_bm.h` `BM_ATTRIB_ID_BKEY_INFO`).
    pub const BM_BKEY_INFO: u16 = 0x0010;
    /// CM ConnectRequest (IBTA 12.6; kernel `CM_*_ATTR_ID`).
    pub const CM_REQ: u16 = 0x0010;
    /// CM MessageReceiptAcknowledgement (IBTA 12.6; kernel `CM_*_ATTR_ID`).
    pub const CM_MRA: u16 = 0x0011;
    /// CM ConnectReject (IBTA 12.6; kernel `CM_*_ATTR_ID`).
    pub const CM_REJ: u16 = 0x0012;
    /// CM ConnectReply (IBTA 12.6; kernel `CM_*_ATTR_ID`).
    pub const CM_REP: u16 = 0x0013;
    /// CM ReadyToUse (IBTA 12.6; kernel `CM_*_ATTR_ID`).
    pub const CM_RTU: u16 = 0x0014;
    /// CM DisconnectRequest (IBTA 12.6; kernel `CM_*_ATTR_ID`).
    pub const CM_DREQ: u16 = 0x0015;
    /// CM DisconnectReply (IBTA 12.6; kernel `CM_*_ATTR_ID`).
    pub const CM_DREP: u16 = 0x0016;
    /// CM ServiceIDResolutionRequest (IBTA 12.11; kernel `CM_*_ATTR_ID`).
    pub const CM_SIDR_REQ: u16 = 0x0017;
    /// CM ServiceIDResolutionResponse (IBTA 12.11; kernel `CM_*_ATTR_ID`).
    pub const CM_SIDR_REP: u16 = 0x0018;
}

/// Where one field of a layout sits: `width` bits starting `bit` bits into byte
/// `byte` (bit 0 is that byte's most significant bit), as IBTA tables give it.
///
/// Every layout's repr publishes its table as `FIELDS`, so a later layer can ask for a
/// counter's width (to saturate it) without restating the specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldSpec {
    /// The field's name (the repr's field name).
    pub name: &'static str,
    /// Byte offset of the field's first bit inside the layout.
    pub byte: usize,
    /// Bit offset inside that byte, 0 = most significant bit.
    pub bit: usize,
    /// Width in bits.
    pub width: u32,
}

impl FieldSpec {
    /// The largest value the field can hold (all ones), saturated to `u64::MAX` for
    /// fields of 64 bits or more.
    pub const fn max_value(&self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }
}

/// Looks a field up by name in a `FIELDS` table.
pub fn find_field(fields: &[FieldSpec], name: &str) -> Option<FieldSpec> {
    fields.iter().copied().find(|f| f.name == name)
}

/// How a Rust value is read from / written to a field given as
/// `(byte, bit, width)`. Implemented for the integer types (bit fields), `bool`
/// (one bit), `u64` and byte arrays (byte aligned), and every repr (a nested
/// layout), so the layout tables below can mix all of them.
pub(crate) trait FieldValue: Sized {
    fn read(b: &[u8], at: usize, bit: usize, width: u32) -> Self;
    fn write(&self, b: &mut [u8], at: usize, bit: usize, width: u32);
}

/// Reads a bit field, taking the byte-aligned fast paths of `field` when it can.
#[inline]
fn read_bits(b: &[u8], at: usize, bit: usize, width: u32) -> u32 {
    match (bit, width) {
        (0, 8) => u32::from(b[at]),
        (0, 16) => u32::from(field::u16_at(b, at)),
        (0, 24) => field::u24_at(b, at),
        (0, 32) => field::u32_at(b, at),
        _ => field::bits_at(b, at, bit, width),
    }
}

/// Writes a bit field; the counterpart of [`read_bits`].
#[inline]
fn write_bits(b: &mut [u8], at: usize, bit: usize, width: u32, v: u32) {
    match (bit, width) {
        (0, 8) => b[at] = v as u8,
        (0, 16) => field::set_u16(b, at, v as u16),
        (0, 24) => field::set_u24(b, at, v & 0x00FF_FFFF),
        (0, 32) => field::set_u32(b, at, v),
        _ => field::set_bits(b, at, bit, width, v),
    }
}

macro_rules! bit_field_value {
    ($($ty:ty),*) => {$(
        impl FieldValue for $ty {
            #[inline]
            fn read(b: &[u8], at: usize, bit: usize, width: u32) -> Self {
                debug_assert!(width <= <$ty>::BITS);
                read_bits(b, at, bit, width) as $ty
            }
            #[inline]
            fn write(&self, b: &mut [u8], at: usize, bit: usize, width: u32) {
                debug_assert!(width <= <$ty>::BITS);
                write_bits(b, at, bit, width, u32::from(*self));
            }
        }
    )*};
}
bit_field_value!(u8, u16, u32);

impl FieldValue for bool {
    #[inline]
    fn read(b: &[u8], at: usize, bit: usize, width: u32) -> Self {
        debug_assert_eq!(width, 1);
        field::bits_at(b, at, bit, 1) != 0
    }
    #[inline]
    fn write(&self, b: &mut [u8], at: usize, bit: usize, width: u32) {
        debug_assert_eq!(width, 1);
        field::set_bits(b, at, bit, 1, u32::from(*self));
    }
}

impl FieldValue for u64 {
    #[inline]
    fn read(b: &[u8], at: usize, bit: usize, width: u32) -> Self {
        debug_assert!(bit == 0 && width == 64);
        field::u64_at(b, at)
    }
    #[inline]
    fn write(&self, b: &mut [u8], at: usize, bit: usize, width: u32) {
        debug_assert!(bit == 0 && width == 64);
        field::set_u64(b, at, *self);
    }
}

impl<const N: usize> FieldValue for [u8; N] {
    #[inline]
    fn read(b: &[u8], at: usize, bit: usize, width: u32) -> Self {
        debug_assert!(bit == 0 && width as usize == N * 8);
        let mut v = [0u8; N];
        v.copy_from_slice(&b[at..at + N]);
        v
    }
    #[inline]
    fn write(&self, b: &mut [u8], at: usize, bit: usize, width: u32) {
        debug_assert!(bit == 0 && width as usize == N * 8);
        b[at..at + N].copy_from_slice(self);
    }
}

/// Declares a checked view (and, unless only `view` is given, its repr) from one
/// table of fields `getter / setter: Type = (byte, bit, width)`.
///
/// Generated for the view: `LEN`, `new_unchecked`, `new_checked`, `check_len`,
/// `into_inner`, `as_bytes`, one getter per field (never panics once `check_len`
/// passed, since every field lies inside `LEN`), one setter per field.
/// Generated for the repr: a `Copy` struct with one public field per table row,
/// `parse` (runs `check_len`, then the optional `check` function), `emit` (zeroes the
/// layout's `LEN` bytes, then writes every field, so reserved bits go out as zero),
/// `buffer_len`, and `FIELDS`.
macro_rules! layout {
    (
        $(#[$vmeta:meta])* view $view:ident;
        $(#[$rmeta:meta])* repr $repr:ident;
        len $len:expr; what $what:literal;
        $(check $check:path;)?
        fields $fields:tt
    ) => {
        layout!(@view [$(#[$vmeta])*] $view, $len, $what, $fields);
        layout!(@repr [$(#[$rmeta])*] $repr, $view, $len, [$($check)?], $fields);
    };
    (
        $(#[$vmeta:meta])* view $view:ident;
        len $len:expr; what $what:literal;
        fields $fields:tt
    ) => {
        layout!(@view [$(#[$vmeta])*] $view, $len, $what, $fields);
    };
    (@view [$($vmeta:tt)*] $view:ident, $len:expr, $what:literal, {
        $( $(#[$doc:meta])* $get:ident / $set:ident : $ty:ty = ($at:expr, $bit:expr, $w:expr); )*
    }) => {
        $($vmeta)*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Bytes this layout occupies; `check_len` requires at least this many.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after checking it is long enough for every field.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// Fails with [`Error::Truncated`](crate::Error::Truncated) when the buffer is
            /// shorter than [`Self::LEN`].
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err($crate::Error::Truncated($what))
                } else {
                    Ok(())
                }
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The whole underlying buffer (it may be longer than [`Self::LEN`]).
            pub fn as_bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }

            $(
                $(#[$doc])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::mad::FieldValue>::read(self.buffer.as_ref(), $at, $bit, $w)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Writes the field [`Self::", stringify!($get), "`] reads.")]
                #[inline]
                pub fn $set(&mut self, value: $ty) {
                    $crate::mad::FieldValue::write(&value, self.buffer.as_mut(), $at, $bit, $w)
                }
            )*

            /// The whole underlying buffer, mutably.
            pub fn as_bytes_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
    (@repr [$($rmeta:tt)*] $repr:ident, $view:ident, $len:expr, [$($check:path)?], {
        $( $(#[$doc:meta])* $get:ident / $set:ident : $ty:ty = ($at:expr, $bit:expr, $w:expr); )*
    }) => {
        $($rmeta)*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $repr {
            $( $(#[$doc])* pub $get: $ty, )*
        }

        impl $repr {
            /// The layout table: name, byte, bit and width of every field.
            pub const FIELDS: &'static [$crate::mad::FieldSpec] = &[
                $( $crate::mad::FieldSpec { name: stringify!($get), byte: $at, bit: $bit, width: $w }, )*
            ];

            /// Reads every field of a view (checking its length first).
            pub fn parse<T: AsRef<[u8]>>(view: &$view<T>) -> $crate::Result<Self> {
                view.check_len()?;
                let repr = Self::read_fields(view);
                $( $check(&repr)?; )?
                Ok(repr)
            }

            /// Zeroes the layout's bytes and writes every field.
            ///
            /// # Panics
            /// If the view's buffer is shorter than the layout (see `check_len`).
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut $view<T>) {
                view.as_bytes_mut()[..$len].fill(0);
                self.write_fields(view);
            }

            /// Bytes [`Self::emit`] writes.
            pub const fn buffer_len(&self) -> usize {
                $len
            }

            fn read_fields<T: AsRef<[u8]>>(view: &$view<T>) -> Self {
                Self { $( $get: view.$get(), )* }
            }

            fn write_fields<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut $view<T>) {
                $( view.$set(self.$get); )*
            }
        }

        impl $crate::mad::FieldValue for $repr {
            fn read(b: &[u8], at: usize, bit: usize, width: u32) -> Self {
                debug_assert!(bit == 0 && width as usize == $len * 8);
                Self::read_fields(&$view::new_unchecked(&b[at..at + $len]))
            }
            fn write(&self, b: &mut [u8], at: usize, bit: usize, width: u32) {
                debug_assert!(bit == 0 && width as usize == $len * 8);
                self.write_fields(&mut $view::new_unchecked(&mut b[at..at + $len]))
            }
        }
    };
}
pub(crate) use layout;

layout! {
    /// The common MAD header (IBTA 13.4.2; kernel `struct ib_mad_hdr`;
    /// libibmad `IB_MAD_*_F`), over the first 24 bytes of a MAD.
    ///
    /// The view also accepts a whole 256-byte MAD: see [`MadHeader::payload`].
    view MadHeader;
    /// The common MAD header, owned.
    ///
    /// `method` is the whole method byte, response bit included, so it compares
    /// directly with the [`method`] constants; `status` and `class_specific` are the raw
    /// 16-bit words (see [`MadHeaderRepr::dr_direction`] and friends for the
    /// directed-route meaning of their bits).
    repr MadHeaderRepr;
    len MAD_HEADER_LEN; what "MAD header";
    fields {
        /// BaseVersion (byte 0); [`BASE_VERSION`] for InfiniBand.
        base_version / set_base_version: u8 = (0, 0, 8);
        /// MgmtClass (byte 1), one of [`class`].
        mgmt_class / set_mgmt_class: u8 = (1, 0, 8);
        /// ClassVersion (byte 2).
        class_version / set_class_version: u8 = (2, 0, 8);
        /// The method byte (byte 3): R bit (MSB) and the 7-bit method.
        method / set_method: u8 = (3, 0, 8);
        /// Status (bytes 4-5).
        status / set_status: u16 = (4, 0, 16);
        /// ClassSpecific (bytes 6-7): hop pointer and hop count in DR SMPs.
        class_specific / set_class_specific: u16 = (6, 0, 16);
        /// TransactionID (bytes 8-15).
        transaction_id / set_transaction_id: u64 = (8, 0, 64);
        /// AttributeID (bytes 16-17); bytes 18-19 are reserved.
        attribute_id / set_attribute_id: u16 = (16, 0, 16);
        /// AttributeModifier (bytes 20-23).
        attribute_modifier / set_attribute_modifier: u32 = (20, 0, 32);
    }
}

impl<T: AsRef<[u8]>> MadHeader<T> {
    /// The R bit: set in responses (libibmad `IB_MAD_RESPONSE_F`).
    pub fn is_response(&self) -> bool {
        FieldValue::read(self.buffer.as_ref(), 3, 0, 1)
    }

    /// Directed-route SMPs: the D bit, top bit of the status word
    /// (libibmad `IB_DRSMP_DIRECTION_F`).
    pub fn dr_direction(&self) -> bool {
        FieldValue::read(self.buffer.as_ref(), 4, 0, 1)
    }

    /// Directed-route SMPs: the 15-bit status below the D bit
    /// (libibmad `IB_DRSMP_STATUS_F`).
    pub fn dr_status(&self) -> u16 {
        FieldValue::read(self.buffer.as_ref(), 4, 1, 15)
    }

    /// Directed-route SMPs: the hop pointer, byte 6 (libibmad `IB_DRSMP_HOPPTR_F`).
    pub fn hop_pointer(&self) -> u8 {
        self.buffer.as_ref()[6]
    }

    /// Directed-route SMPs: the hop count, byte 7 (libibmad `IB_DRSMP_HOPCNT_F`).
    pub fn hop_count(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    /// Everything after the 24-byte header (empty if the buffer is just the header).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[MAD_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MadHeader<T> {
    /// Sets or clears the R bit, keeping the 7-bit method.
    pub fn set_response(&mut self, value: bool) {
        value.write(self.buffer.as_mut(), 3, 0, 1)
    }

    /// Sets the directed-route D bit, keeping the 15-bit status.
    pub fn set_dr_direction(&mut self, value: bool) {
        value.write(self.buffer.as_mut(), 4, 0, 1)
    }

    /// Sets the directed-route 15-bit status, keeping the D bit.
    pub fn set_dr_status(&mut self, value: u16) {
        value.write(self.buffer.as_mut(), 4, 1, 15)
    }

    /// Sets the directed-route hop pointer.
    pub fn set_hop_pointer(&mut self, value: u8) {
        self.buffer.as_mut()[6] = value;
    }

    /// Sets the directed-route hop count.
    pub fn set_hop_count(&mut self, value: u8) {
        self.buffer.as_mut()[7] = value;
    }

    /// Everything after the 24-byte header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[MAD_HEADER_LEN..]
    }
}

impl MadHeaderRepr {
    /// The R bit of [`Self::method`].
    pub const fn is_response(&self) -> bool {
        self.method & method::RESPONSE != 0
    }

    /// Directed-route SMPs: the D bit of [`Self::status`].
    pub const fn dr_direction(&self) -> bool {
        self.status & status::DR_DIRECTION != 0
    }

    /// Directed-route SMPs: the 15-bit status proper.
    pub const fn dr_status(&self) -> u16 {
        self.status & !status::DR_DIRECTION
    }

    /// Directed-route SMPs: the hop pointer (high byte of [`Self::class_specific`]).
    pub const fn hop_pointer(&self) -> u8 {
        (self.class_specific >> 8) as u8
    }

    /// Directed-route SMPs: the hop count (low byte of [`Self::class_specific`]).
    pub const fn hop_count(&self) -> u8 {
        self.class_specific as u8
    }

    /// Builds the directed-route status word from the D bit and a 15-bit status.
    pub const fn dr_status_word(direction: bool, status: u16) -> u16 {
        (if direction { status::DR_DIRECTION } else { 0 }) | (status & !status::DR_DIRECTION)
    }

    /// Builds the directed-route class-specific word from hop pointer and count.
    pub const fn dr_class_specific(hop_pointer: u8, hop_count: u8) -> u16 {
        ((hop_pointer as u16) << 8) | hop_count as u16
    }
}

/// Checks shared by every class-level repr: base version 1 and the expected class.
pub(crate) fn check_class(header: &MadHeaderRepr, class: u8, what: &'static str) -> Result<()> {
    if header.base_version != BASE_VERSION {
        return Err(Error::Unsupported("MAD base version"));
    }
    if header.mgmt_class != class {
        return Err(Error::Malformed(what));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
