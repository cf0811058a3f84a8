//! Reading classic pcap files in tests (shared by `tests/icrc_hardware.rs` and the
//! unit tests of `src/icrc.rs`).

use std::vec::Vec;

/// One record of a pcap file: the bytes captured and the packet's length on the wire
/// (longer when the snap length cut it).
pub struct Record<'a> {
    pub data: &'a [u8],
    pub orig_len: usize,
}

/// The link type and records of a classic pcap file (either byte order, micro- or
/// nanosecond timestamps). Panics on anything else: the files are test inputs.
pub fn pcap_records(file: &[u8]) -> (u32, Vec<Record<'_>>) {
    let magic = u32::from_le_bytes(file[..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        _ => panic!("not a classic pcap file"),
    };
    let u32_at = |at: usize| {
        let b: [u8; 4] = file[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let linktype = u32_at(20);
    let mut records = Vec::new();
    let mut at = 24;
    while at + 16 <= file.len() {
        let incl = u32_at(at + 8) as usize;
        records.push(Record {
            data: &file[at + 16..at + 16 + incl],
            orig_len: u32_at(at + 12) as usize,
        });
        at += 16 + incl;
    }
    assert_eq!(at, file.len(), "trailing bytes after the last record");
    (linktype, records)
}
