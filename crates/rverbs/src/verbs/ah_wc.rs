//! `ibv_init_ah_from_wc` / `ibv_create_ah_from_wc`: an address handle that answers the
//! sender of a UD datagram, built from its work completion and the 40-byte network
//! header area at the start of its receive buffer.
//!
//! The algorithm and errors are libibverbs' (`libibverbs/verbs.c`: `get_grh_header_version`,
//! `set_ah_attr_by_ipv4`, `set_ah_attr_by_ipv6`, `ibv_find_gid_index`; DESIGN §3):
//!
//! * **Which IP version.** If the first nibble (the IPv6 version) is not 6, the area is
//!   IPv4 when the header at byte 20 has version 4, else EPROTONOSUPPORT. If it is 6, the
//!   area is still IPv4 when the header at byte 20 has IHL 5 and a valid header checksum
//!   (RoCE v2 writes 20 garbage-or-zero bytes then the IPv4 header), else IPv6.
//! * **IPv4.** A class-D (multicast) destination → EINVAL. The source GID index is that of
//!   the entry equal to `::ffff:<destination>` *of type RoCE v2*; the AH goes to
//!   `::ffff:<source>` with hop limit = TTL and traffic class = TOS.
//! * **IPv6.** A multicast destination GID → EINVAL. Next header 17 (UDP) means RoCE v2,
//!   0x1B (BTH) means IB / RoCE v1, anything else → EPROTONOSUPPORT. The source GID index
//!   is that of the entry equal to the destination GID of that type; the AH goes to the
//!   source GID with the header's hop limit and traffic class.
//! * The flow label is the low 20 bits of the area's first word in both cases (libibverbs
//!   reads it before deciding the version), so 0 for rxe-style IPv4 areas.
//! * **No matching local GID** → EINVAL: libibverbs' search walks the table until a query
//!   fails, and the first index past the table fails with EINVAL.
//!
//! Differences, each forced by this API: a completion without the GRH flag gives EINVAL
//! (libibverbs returns a non-global AH, which a RoCE device then refuses to create);
//! an area shorter than 40 bytes gives EINVAL; a matching entry beyond index 255 gives
//! EINVAL (`sgid_index` is 8 bits; C would truncate it).

use crate::gid::{GidTable, GidType};
use crate::verbs::{Ah, AhAttr, Pd};
use crate::{Context, Error, Result};
use rverbs_engine::AddressVector;
use rverbs_engine::{Errno, VerbError, Wc, WcFlags};
use rverbs_wire::grh::{Gid, GRH_LEN, NEXT_HEADER_BTH};
use rverbs_wire::ipv4::{Ipv4Packet, PROTO_UDP};
const VERB: &str = "init_ah_from_wc";

fn fail(errno: Errno, reason: &'static str) -> Error {
    Error::Verb(VerbError::new(VERB, errno, reason))
}

/// The IP version of a UD receive's network header area (4 or 6), decided as
/// libibverbs' `get_grh_header_version` does; EPROTONOSUPPORT when it is neither, EINVAL
/// when `grh` is shorter than 40 bytes.
pub fn grh_ip_version(grh: &[u8]) -> Result<u8> {
    let grh = grh
        .get(..GRH_LEN)
        .ok_or(fail(Errno::Inval, "the GRH area is shorter than 40 bytes"))?;
    let ip4 = Ipv4Packet::new_unchecked(&grh[20..]);
    if grh[0] >> 4 != 6 {
        return if ip4.version() == 4 {
            Ok(4)
        } else {
            Err(fail(
                Errno::ProtoNotSupported,
                "the GRH area holds neither an IPv6 nor an IPv4 header",
            ))
        };
    }
    // A version-6 first nibble may still be the 20 leading bytes of an IPv4 area: an
    // IPv4 header with IHL 5 and a valid checksum wins (RoCE v2 annex A17.4.5.1).
    if grh[20] & 0x0f != 5 {
        return Ok(6);
    }
    Ok(if ip4.verify_checksum() { 4 } else { 6 })
}

fn index_u8(i: u32) -> Result<u8> {
    u8::try_from(i).map_err(|_| {
        fail(
            Errno::Inval,
            "the matching GID's index does not fit sgid_index",
        )
    })
}

/// The AH attributes that answer the sender of a UD receive (`ibv_init_ah_from_wc`
/// on one port's table; see the module documentation for the rules and errors).
pub fn ah_attrs_from_grh(table: &GidTable, wc: &Wc, grh: &[u8]) -> Result<AhAttr> {
    if !wc.wc_flags.contains(WcFlags::GRH) {
        return Err(fail(
            Errno::Inval,
            "the completion has no GRH (RoCE address handles need one)",
        ));
    }
    let version = grh_ip_version(grh)?;
    let flow_label = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]) & 0xf_ffff;
    let not_found = || fail(Errno::Inval, "no local GID matches the destination");
    if version == 4 {
        let ip4 = Ipv4Packet::new_unchecked(&grh[20..GRH_LEN]);
        if ip4.dst_addr().is_multicast() {
            return Err(fail(
                Errno::Inval,
                "the destination is an IPv4 multicast address",
            ));
        }
        let sgid = Gid::from(ip4.dst_addr());
        let idx = table.find(&sgid, GidType::RoceV2).ok_or_else(not_found)?;
        return Ok(AhAttr {
            av: AddressVector {
                dgid: Gid::from(ip4.src_addr()),
                sgid_index: index_u8(idx)?,
                hop_limit: ip4.ttl(),
                traffic_class: ip4.tos(),
                flow_label,
            },
            port_num: 1,
        });
    }
    let mut dgid = [0u8; 16];
    dgid.copy_from_slice(&grh[24..40]);
    let dgid = Gid(dgid);
    if dgid.is_multicast() {
        return Err(fail(Errno::Inval, "the destination GID is multicast"));
    }
    let idx = match grh[6] {
        PROTO_UDP => table.find(&dgid, GidType::RoceV2),
        NEXT_HEADER_BTH => table
            .find(&dgid, GidType::RoceV1)
            .or_else(|| table.find(&dgid, GidType::Ib)),
        _ => {
            return Err(fail(
                Errno::ProtoNotSupported,
                "the GRH's next header is neither UDP nor BTH",
            ))
        }
    }
    .ok_or_else(not_found)?;
    let mut sgid = [0u8; 16];
    sgid.copy_from_slice(&grh[8..24]);
    let word = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
    Ok(AhAttr {
        av: AddressVector {
            dgid: Gid(sgid),
            sgid_index: index_u8(idx)?,
            hop_limit: grh[7],
            traffic_class: (word >> 20) as u8,
            flow_label,
        },
        port_num: 1,
    })
}

impl Context {
    /// `ibv_init_ah_from_wc`: the attributes of an AH that answers the sender of the UD
    /// receive `wc`, whose buffer starts with the 40-byte network header area `grh`.
    /// `port_num` must be 1 (EINVAL otherwise). Errors as libibverbs (module `ah_wc`):
    /// EPROTONOSUPPORT for a header that is neither IPv4 nor IPv6 or an unknown next
    /// header, EINVAL for a multicast destination or when no local GID of the right type
    /// matches the destination.
    pub fn init_ah_from_wc(&self, port_num: u8, wc: &Wc, grh: &[u8]) -> Result<AhAttr> {
        if port_num != 1 {
            return Err(fail(Errno::Inval, "no such port"));
        }
        let table = self.dev().gid_table();
        ah_attrs_from_grh(&table, wc, grh)
    }
}

impl Pd {
    /// `ibv_create_ah_from_wc`: [`Context::init_ah_from_wc`] then [`Pd::create_ah`].
    pub fn create_ah_from_wc(&self, port_num: u8, wc: &Wc, grh: &[u8]) -> Result<Ah> {
        let attr = self.context().init_ah_from_wc(port_num, wc, grh)?;
        self.create_ah(&attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_wire::ipv4::Ipv4Repr;
    use rverbs_wire::ipv6::{Ipv6Packet, Ipv6Repr};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// VM2's table from rxe-peer/reference/gid-table-vm2.txt.
    fn vm2() -> GidTable {
        let d: Ipv6Addr = "fe80::5054:ff:fe77:3".parse().unwrap();
        GidTable::new(1, 2, d.into(), &[ip("10.77.0.3"), ip("fd00:77::3")])
    }

    fn wc() -> Wc {
        Wc {
            wc_flags: WcFlags::GRH,
            ..Wc::default()
        }
    }

    fn v4_area(src: &str, dst: &str, ttl: u8, tos: u8) -> [u8; 40] {
        let mut a = [0u8; 40];
        Ipv4Repr {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            tos,
            ident: 0x1234,
            dont_frag: true,
            ttl,
            protocol: PROTO_UDP,
            payload_len: 100,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut a[20..]));
        a
    }

    fn v6_area(src: &str, dst: &str, hop: u8, tc: u8, fl: u32, nh: u8) -> [u8; 40] {
        let mut a = [0u8; 40];
        Ipv6Repr {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            traffic_class: tc,
            flow_label: fl,
            next_header: nh,
            hop_limit: hop,
            payload_len: 100,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut a[..]));
        a
    }

    fn errno(r: Result<AhAttr>) -> i32 {
        r.unwrap_err().errno()
    }

    #[test]
    fn ipv4_area() {
        let a =
            ah_attrs_from_grh(&vm2(), &wc(), &v4_area("10.77.0.2", "10.77.0.3", 17, 0x2e)).unwrap();
        assert_eq!(a.av.dgid, Gid::from(Ipv4Addr::new(10, 77, 0, 2)));
        assert_eq!(
            (
                a.av.sgid_index,
                a.av.hop_limit,
                a.av.traffic_class,
                a.av.flow_label
            ),
            (1, 17, 0x2e, 0)
        );
        // A version-6 nibble in front of a valid IPv4 header: still IPv4.
        let mut b = v4_area("10.77.0.2", "10.77.0.3", 1, 0);
        b[0] = 0x60;
        assert_eq!(grh_ip_version(&b).unwrap(), 4);
        assert_eq!(
            ah_attrs_from_grh(&vm2(), &wc(), &b).unwrap().av.sgid_index,
            1
        );
        // ... but with a broken checksum it is read as IPv6 (and finds nothing).
        b[30] ^= 0xff;
        assert_eq!(grh_ip_version(&b).unwrap(), 6);
    }

    #[test]
    fn ipv6_area() {
        let area = v6_area("fd00:77::2", "fd00:77::3", 9, 0xb8, 0xabcde, 17);
        assert_eq!(grh_ip_version(&area).unwrap(), 6);
        let a = ah_attrs_from_grh(&vm2(), &wc(), &area).unwrap();
        assert_eq!(
            a.av.dgid,
            Gid::from("fd00:77::2".parse::<Ipv6Addr>().unwrap())
        );
        assert_eq!(
            (
                a.av.sgid_index,
                a.av.hop_limit,
                a.av.traffic_class,
                a.av.flow_label
            ),
            (2, 9, 0xb8, 0xabcde)
        );
        // The default GID as destination.
        let a = ah_attrs_from_grh(
            &vm2(),
            &wc(),
            &v6_area("fe80::1", "fe80::5054:ff:fe77:3", 1, 0, 0, 17),
        )
        .unwrap();
        assert_eq!(a.av.sgid_index, 0);
    }

    #[test]
    fn every_error_path() {
        let t = vm2();
        // No GRH flag; a short area.
        assert_eq!(
            errno(ah_attrs_from_grh(&t, &Wc::default(), &[0u8; 40])),
            libc::EINVAL
        );
        assert_eq!(
            errno(ah_attrs_from_grh(&t, &wc(), &[0x60; 39])),
            libc::EINVAL
        );
        // Neither version: all zeros (IPv6 nibble 0, IPv4 version 0).
        assert_eq!(
            errno(ah_attrs_from_grh(&t, &wc(), &[0u8; 40])),
            libc::EPROTONOSUPPORT
        );
        // IPv4 multicast destination; IPv4 destination not in the table.
        assert_eq!(
            errno(ah_attrs_from_grh(
                &t,
                &wc(),
                &v4_area("10.77.0.2", "239.1.2.3", 1, 0)
            )),
            libc::EINVAL
        );
        assert_eq!(
            errno(ah_attrs_from_grh(
                &t,
                &wc(),
                &v4_area("10.77.0.2", "10.77.0.9", 1, 0)
            )),
            libc::EINVAL
        );
        // IPv6 multicast destination; unknown next header; not in the table.
        assert_eq!(
            errno(ah_attrs_from_grh(
                &t,
                &wc(),
                &v6_area("fd00:77::2", "ff02::1", 1, 0, 0, 17)
            )),
            libc::EINVAL
        );
        assert_eq!(
            errno(ah_attrs_from_grh(
                &t,
                &wc(),
                &v6_area("fd00:77::2", "fd00:77::3", 1, 0, 0, 6)
            )),
            libc::EPROTONOSUPPORT
        );
        assert_eq!(
            errno(ah_attrs_from_grh(
                &t,
                &wc(),
                &v6_area("fd00:77::2", "fd00:77::9", 1, 0, 0, 17)
            )),
            libc::EINVAL
        );
        // BTH next header (RoCE v1 / IB): the GID exists, but only as RoCE v2 → not found
        // (the lookup is by GID *and* type).
        assert_eq!(
            errno(ah_attrs_from_grh(
                &t,
                &wc(),
                &v6_area("fd00:77::2", "fd00:77::3", 1, 0, 0, 0x1b)
            )),
            libc::EINVAL
        );
        // The IPv4-mapped destination written as an IPv6 header with next header UDP:
        // found as RoCE v2, as libibverbs does.
        let a = ah_attrs_from_grh(
            &t,
            &wc(),
            &v6_area("::ffff:10.77.0.2", "::ffff:10.77.0.3", 1, 0, 0, 17),
        )
        .unwrap();
        assert_eq!(a.av.sgid_index, 1);
    }

    /// Classic pcap, Ethernet link type: the IP packets of every record.
    fn pcap_ip_packets(name: &str) -> Vec<Vec<u8>> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/rxe")
            .join(name);
        let b = std::fs::read(p).unwrap();
        assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        let mut off = 24;
        let mut out = Vec::new();
        while off + 16 <= b.len() {
            let incl = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
            let frame = &b[off + 16..off + 16 + incl];
            out.push(frame[14..].to_vec());
            off += 16 + incl;
        }
        out
    }

    /// The GRH area rxe writes for a received packet: the IPv6 header, or 20 zero bytes
    /// and the IPv4 header.
    fn area_of(pkt: &[u8]) -> [u8; 40] {
        let mut a = [0u8; 40];
        if pkt[0] >> 4 == 4 {
            a[20..].copy_from_slice(&pkt[..20]);
        } else {
            a.copy_from_slice(&pkt[..40]);
        }
        a
    }

    #[test]
    fn rxe_captured_ud_ipv4_packets() {
        // ibv_ud_pingpong between VM1 (10.77.0.2) and VM2 (10.77.0.3): every datagram
        // answered through an AH built from its header reaches its sender back.
        let vm1 = {
            let d: Ipv6Addr = "fe80::5054:ff:fe77:2".parse().unwrap();
            GidTable::new(1, 2, d.into(), &[ip("10.77.0.2"), ip("fd00:77::2")])
        };
        let pkts = pcap_ip_packets("ud_send_pingpong.pcap");
        assert!(pkts.len() >= 2);
        for p in &pkts {
            let area = area_of(p);
            assert_eq!(grh_ip_version(&area).unwrap(), 4);
            let ip4 = Ipv4Packet::new_unchecked(&p[..20]);
            let table = if ip4.dst_addr() == Ipv4Addr::new(10, 77, 0, 3) {
                vm2()
            } else {
                vm1.clone()
            };
            let a = ah_attrs_from_grh(&table, &wc(), &area).unwrap();
            assert_eq!(a.av.dgid, Gid::from(ip4.src_addr()));
            assert_eq!(
                (a.av.sgid_index, a.av.hop_limit, a.av.traffic_class),
                (1, 64, 0)
            );
        }
    }

    #[test]
    fn rxe_captured_ipv6_packets() {
        // RC over IPv6 between fd00:77::2 and fd00:77::3: the header parser is the same
        // for any transport.
        let pkts = pcap_ip_packets("rc_send_ipv6.pcap");
        let mut seen = 0;
        for p in pkts.iter().filter(|p| p[0] >> 4 == 6) {
            let area = area_of(p);
            let dst = Ipv6Packet::new_unchecked(&p[..]).dst_addr();
            if dst != "fd00:77::3".parse::<Ipv6Addr>().unwrap() {
                continue;
            }
            let a = ah_attrs_from_grh(&vm2(), &wc(), &area).unwrap();
            assert_eq!(
                a.av.dgid,
                Gid::from("fd00:77::2".parse::<Ipv6Addr>().unwrap())
            );
            assert_eq!((a.av.sgid_index, a.av.hop_limit), (2, 64));
            seen += 1;
        }
        assert!(seen > 0);
    }

    #[test]
    fn engine_grh_area_round_trips() {
        // The area the engine writes for a UD receive parses back to the sender.
        for (src, dst) in [("10.77.0.2", "10.77.0.3"), ("fd00:77::2", "fd00:77::3")] {
            let d = rverbs_engine::Datagram {
                src: ip(src),
                dst: ip(dst),
                src_port: 0xc000,
                hop_limit: 3,
                traffic_class: 0x10,
                flow_label: if src.contains(':') { 0x12345 } else { 0 },
                ipv4_id: Some(7),
                roce_v1: false,
                icrc_checked: false,
                payload: &[0u8; 32],
            };
            let area = rverbs_engine::grh_area(&d, 32);
            let a = ah_attrs_from_grh(&vm2(), &wc(), &area).unwrap();
            assert_eq!(a.av.dgid, rverbs_engine::net::ip_to_gid(ip(src)));
            assert_eq!(
                (a.av.hop_limit, a.av.traffic_class, a.av.flow_label),
                (3, 0x10, d.flow_label)
            );
        }
    }
}
