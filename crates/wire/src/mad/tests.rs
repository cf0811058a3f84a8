//! Test helpers shared by the MAD layout tests.

use super::FieldSpec;
use std::vec::Vec;

/// Every field lies inside `len` bytes and no two fields share a bit.
pub(crate) fn check_fields(fields: &[FieldSpec], len: usize) {
    let mut spans: Vec<(usize, usize, &str)> = fields
        .iter()
        .map(|f| {
            let start = f.byte * 8 + f.bit;
            (start, start + f.width as usize, f.name)
        })
        .collect();
    spans.sort();
    for &(start, end, name) in &spans {
        assert!(end <= len * 8, "{name} ends at bit {end}, past {len} bytes");
        assert!(start < end, "{name} is empty");
    }
    for pair in spans.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "{} overlaps {}",
            pair[0].2,
            pair[1].2
        );
    }
}

/// Decodes a hex string (whitespace ignored) for golden-byte tests.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() % 2 == 0, "odd hex length");
    digits
        .chunks(2)
        .map(|p| {
            let s = core::str::from_utf8(p).unwrap();
            u8::from_str_radix(s, 16).unwrap()
        })
        .collect()
}

/// Generates the layout tests every view/repr pair gets:
///
/// * `new_checked` rejects every buffer shorter than `LEN` with `Error::Truncated`
///   and accepts `LEN`;
/// * the `FIELDS` table fits in `LEN` and has no overlapping fields;
/// * on random bytes of any length >= `LEN`, `new_checked` succeeds and `parse` (which
///   calls every getter) never panics;
/// * `parse(emit(repr)) == repr`, where `repr` is parsed from random bytes (after the
///   optional `fixup` forces the class/version bytes a class check wants). Parsing
///   random bytes reaches every valid repr, because every field is an independent
///   bit range and every bit pattern of it is a valid value, so this is the property
///   over all reprs, with each field drawn uniformly from its own width.
macro_rules! layout_tests {
    ($name:ident: $view:ident, $repr:ident $(, fixup = $fix:expr)?) => {
        mod $name {
            use super::*;
            #[allow(unused_imports)]
            use proptest::prelude::*;
            use std::vec;

            const LEN: usize = $view::<&[u8]>::LEN;

            #[test]
            fn short_buffers_are_truncated() {
                let buf = [0u8; 600];
                for n in 0..LEN {
                    assert!(matches!(
                        $view::new_checked(&buf[..n]),
                        Err($crate::Error::Truncated(_))
                    ));
                }
                assert!($view::new_checked(&buf[..LEN]).is_ok());
            }

            #[test]
            fn field_table_is_consistent() {
                $crate::mad::tests::check_fields($repr::FIELDS, LEN);
            }

            proptest! {
                #[test]
                fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), LEN..LEN + 24)) {
                    let view = $view::new_checked(&bytes[..]).unwrap();
                    let _ = $repr::parse(&view);
                }

                #[test]
                fn parse_emit_round_trip(bytes in prop::collection::vec(any::<u8>(), LEN..LEN + 8)) {
                    $( let mut bytes = bytes; ($fix)(&mut bytes[..]); )?
                    let repr = $repr::parse(&$view::new_checked(&bytes[..]).unwrap()).unwrap();
                    let mut out = vec![0xA5u8; repr.buffer_len()];
                    repr.emit(&mut $view::new_unchecked(&mut out[..]));
                    let again = $repr::parse(&$view::new_checked(&out[..]).unwrap()).unwrap();
                    prop_assert_eq!(again, repr);
                    let mut twice = vec![0u8; repr.buffer_len()];
                    again.emit(&mut $view::new_unchecked(&mut twice[..]));
                    prop_assert_eq!(twice, out);
                }
            }
        }
    };
}
pub(crate) use layout_tests;

layout_tests!(header: MadHeader, MadHeaderRepr);

use super::*;

#[test]
fn header_bits_follow_libibmad() {
    // libibmad/fields.c: IB_MAD_METHOD_F (7 bits) and IB_MAD_RESPONSE_F share byte 3;
    // IB_DRSMP_DIRECTION_F is the MSB of byte 4 above the 15-bit IB_DRSMP_STATUS_F;
    // IB_DRSMP_HOPPTR_F is byte 6 and IB_DRSMP_HOPCNT_F byte 7.
    let mut b = [0u8; MAD_HEADER_LEN];
    let mut h = MadHeader::new_checked(&mut b[..]).unwrap();
    h.set_method(method::GET);
    h.set_response(true);
    h.set_dr_status(status::INVALID_FIELD);
    h.set_dr_direction(true);
    h.set_hop_pointer(2);
    h.set_hop_count(3);
    h.set_transaction_id(0x0102_0304_0506_0708);
    h.set_attribute_id(attr::NOTICE);
    h.set_attribute_modifier(0xdead_beef);
    assert_eq!(h.method(), method::GET_RESP);
    assert!(h.is_response());
    assert_eq!(
        &b[..],
        &[
            0, 0, 0, 0x81, 0x80, 0x1c, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x02, 0, 0, 0xde, 0xad,
            0xbe, 0xef
        ]
    );
    let r = MadHeaderRepr::parse(&MadHeader::new_checked(&b[..]).unwrap()).unwrap();
    assert!(r.is_response() && r.dr_direction());
    assert_eq!(r.dr_status(), status::INVALID_FIELD);
    assert_eq!((r.hop_pointer(), r.hop_count()), (2, 3));
    assert_eq!(MadHeaderRepr::dr_status_word(true, 0x1c), 0x801c);
    assert_eq!(MadHeaderRepr::dr_class_specific(2, 3), 0x0203);
}

#[test]
fn field_spec_max_value() {
    let f = FieldSpec {
        name: "x",
        byte: 0,
        bit: 0,
        width: 4,
    };
    assert_eq!(f.max_value(), 0xF);
    let f = FieldSpec {
        name: "x",
        byte: 0,
        bit: 0,
        width: 64,
    };
    assert_eq!(f.max_value(), u64::MAX);
    assert_eq!(
        find_field(MadHeaderRepr::FIELDS, "status").unwrap().width,
        16
    );
    assert!(find_field(MadHeaderRepr::FIELDS, "nope").is_none());
}
