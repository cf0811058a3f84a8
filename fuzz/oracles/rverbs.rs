// Fuzz oracles for `rverbs` (the public API crate), shared by the cargo-fuzz target
// `fuzz_targets/grh_ah.rs` and the stable replay test `crates/rverbs/tests/fuzz_seeds.rs`,
// which both `include!` this file. Each function must not panic on any input.

use rverbs::{ah_attrs_from_grh, grh_ip_version, Gid, GidTable, Wc, WcFlags};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `grh_ah`: byte 0 is control (bit 0: the completion has the GRH flag; bit 1: the
/// local table holds the header's IPv4 destination; bit 2: its IPv6 destination); the
/// rest is the receive buffer's GRH area (any length). `grh_ip_version` and
/// `ah_attrs_from_grh` must not panic, and an AH they build must answer the header:
/// its source GID index names the local entry equal to the header's destination, its
/// destination is the header's source, and its hop limit / traffic class are the
/// header's.
pub fn grh_ah(data: &[u8]) {
    let Some((&ctl, area)) = data.split_first() else {
        return;
    };
    let mut addrs = vec![IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3)), "fd00:77::3".parse().unwrap()];
    if area.len() >= 40 {
        if ctl & 2 != 0 {
            addrs.push(IpAddr::V4(Ipv4Addr::new(area[36], area[37], area[38], area[39])));
        }
        if ctl & 4 != 0 {
            let b: [u8; 16] = area[24..40].try_into().unwrap();
            addrs.push(IpAddr::V6(Ipv6Addr::from(b)));
        }
    }
    let default: Ipv6Addr = "fe80::5054:ff:fe77:3".parse().unwrap();
    let table = GidTable::new(1, 2, default.into(), &addrs);
    let wc = Wc {
        wc_flags: if ctl & 1 != 0 { WcFlags::GRH } else { WcFlags::default() },
        ..Wc::default()
    };
    let version = grh_ip_version(area);
    if let Ok(v) = version {
        assert!(v == 4 || v == 6);
    }
    let Ok(ah) = ah_attrs_from_grh(&table, &wc, area) else {
        return;
    };
    assert!(ctl & 1 != 0, "an AH without the GRH flag");
    let entry = table
        .query_ex(1, ah.av.sgid_index.into(), 0)
        .expect("the AH's sgid_index names a valid entry");
    match version.expect("an AH from an area of unknown version") {
        4 => {
            let ip = &area[20..40];
            assert_eq!(entry.gid, Gid::from(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19])));
            assert_eq!(ah.av.dgid, Gid::from(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15])));
            assert_eq!((ah.av.hop_limit, ah.av.traffic_class), (ip[8], ip[1]));
        }
        _ => {
            assert_eq!(&entry.gid.octets()[..], &area[24..40]);
            assert_eq!(&ah.av.dgid.octets()[..], &area[8..24]);
            assert_eq!(ah.av.hop_limit, area[7]);
            let word = u32::from_be_bytes([area[0], area[1], area[2], area[3]]);
            assert_eq!(ah.av.traffic_class, (word >> 20) as u8);
            assert!(!ah.av.dgid.is_multicast() || !entry.gid.is_multicast());
        }
    }
}

/// `same_host_ring`: the bytes are the memory of an inbound same-host ring (a 4 KiB
/// header, then a 4 KiB data area; short input is zero-filled), which the reader
/// drains as it would a peer's. It must never panic, and it can hand over no more
/// payload than its four passes over a 4 KiB area hold.
pub fn same_host_ring(data: &[u8]) {
    let n = rverbs::fuzz_same_host_ring(data);
    assert!(n <= 4 * 4096, "{n} payload bytes out of a 4 KiB ring");
}
