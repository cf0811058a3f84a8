//! Golden tests: real RoCE v2 packets captured from the Linux kernel's Soft-RoCE driver
//! (`rdma_rxe`, Debian kernel 6.1) by the project's rxe-peer harness, checked into
//! `testdata/rxe/` (see its README). Every frame of every capture must
//!
//! 1. decode as RoCE v2 with a good ICRC;
//! 2. agree, field by field, with two decoders that share no code with this crate: the
//!    harness's `roce.py` (`icrc-verify.txt`, every packet) and Wireshark's `tshark`
//!    (`tshark-summary.txt`, every packet; `tshark-verbose.txt`, the first packet of
//!    each opcode per file, every header field);
//! 3. re-emit byte for byte from the Reprs alone;
//!
//! and for the first packet of each file, every single-bit flip from the IP header
//! through the ICRC must give exactly the outcome the layouts and the ICRC's mask
//! (IBTA Annex A17.3.3; `rxe_icrc.c`) predict.
//!
//! None of the captures carries immediate data, an IETH or a FETH (rxe's tools did not
//! send them), so those headers are covered only by the unit tests in `src/`.

mod common;

use common::{all, kv, load, num, read_text, sections, Capture, FILES};
use rverbs_wire::bth::BTH_LEN;
use rverbs_wire::checksum;
use rverbs_wire::ethernet::{ethertype, EthernetFrame};
use rverbs_wire::ext::Syndrome;
use rverbs_wire::frame::{parse_ethernet, Decoded, IpRepr, RoceFrame};
use rverbs_wire::icrc;
use rverbs_wire::ipv4::{self, Ipv4Packet};
use rverbs_wire::ipv6::{self, Ipv6Packet};
use rverbs_wire::opcode::{Headers, Opcode};
use rverbs_wire::packet::{Packet, PacketRepr};
use rverbs_wire::udp::{self, UdpPacket, ROCE_V2_PORT};
use rverbs_wire::Error;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Decodes a frame that must be RoCE v2.
fn roce<'a>(file: &str, index: usize, frame: &'a [u8]) -> RoceFrame<'a> {
    match parse_ethernet(frame) {
        Ok(Decoded::Roce(f)) => f,
        other => panic!("{file} frame {}: {other:?}", index + 1),
    }
}

/// Length of the Ethernet header of a decoded frame.
fn eth_len(f: &RoceFrame<'_>) -> usize {
    f.ethernet.expect("parsed from Ethernet").buffer_len()
}

/// Length of the IP datagram (header and payload, without link padding).
fn ip_total(f: &RoceFrame<'_>) -> usize {
    match f.ip {
        IpRepr::V4(r) => r.buffer_len() + r.payload_len,
        IpRepr::V6(r) => r.buffer_len() + r.payload_len,
    }
}

#[test]
fn testdata_holds_exactly_the_fifteen_captures() {
    let mut found: Vec<String> = std::fs::read_dir(common::testdata())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    found.sort();
    assert_eq!(found, FILES);
}

// --- 1. Every packet is RoCE v2 with a good ICRC -------------------------------------

#[test]
fn every_frame_is_roce_v2_with_a_good_icrc() {
    // Frame counts as the harness recorded them (`icrc-verify.txt` section headers).
    let verify = read_text("icrc-verify.txt");
    let expected: BTreeMap<String, usize> = verify
        .lines()
        .filter(|l| l.starts_with("== "))
        .map(|l| {
            let file = l
                .split_whitespace()
                .nth(1)
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap();
            let n = l
                .split('(')
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            (file.to_string(), n.parse().unwrap())
        })
        .collect();
    assert_eq!(expected.len(), FILES.len());
    let (mut total, mut udp_checksums) = (0, 0);
    for cap in all() {
        assert_eq!(cap.frames.len(), expected[cap.name], "{}", cap.name);
        for (i, frame) in cap.frames.iter().enumerate() {
            let f = roce(cap.name, i, frame);
            assert!(f.icrc_ok, "{} frame {}: ICRC", cap.name, i + 1);
            let eth = f.ethernet.unwrap();
            assert_eq!(eth.vlan_tci, None);
            let want_type = match f.ip {
                IpRepr::V4(_) => ethertype::IPV4,
                IpRepr::V6(_) => ethertype::IPV6,
            };
            assert_eq!(eth.ethertype, want_type);
            assert_eq!(f.udp.dst_port, ROCE_V2_PORT);
            let ip = &frame[eth_len(&f)..];
            let ip_len = ip_total(&f) - f.udp.buffer_len() - f.udp.payload_len;
            let u = UdpPacket::new_checked(&ip[ip_len..]).unwrap();
            let csum_ok = u.verify_checksum(f.ip.src(), f.ip.dst());
            if f.udp.checksum == 0 {
                // rxe sends no UDP checksum; zero means "not computed" and passes.
                assert!(csum_ok, "{} frame {}", cap.name, i + 1);
            } else {
                // The harness's host probes were sent from a UDP socket with checksum
                // offload, and tcpdump saw them before the offload ran
                // (CHECKSUM_PARTIAL): the field holds only the folded pseudo-header sum
                // (addresses, protocol 17, UDP length), not a checksum. So it must not
                // verify; the ICRC does not cover it, so the ICRC still holds.
                let (IpAddr::V4(src), IpAddr::V4(dst)) = (f.ip.src(), f.ip.dst()) else {
                    panic!("host probes are IPv4");
                };
                let len = (udp::HEADER_LEN + f.udp.payload_len) as u32;
                let acc = checksum::sum(&src.octets(), 17 + len);
                let pseudo = checksum::sum(&dst.octets(), acc) as u16;
                assert_eq!(f.udp.checksum, pseudo, "{} frame {}", cap.name, i + 1);
                assert!(!csum_ok, "{} frame {}", cap.name, i + 1);
                // The finished checksums, computed independently (Python, RFC 768).
                let want = match (cap.name, i + 1) {
                    ("host_rc_probe.pcap", 1) => 0xc6a5,
                    ("host_rc_probe.pcap", 4) => 0xb021,
                    ("host_ud_probe.pcap", 1) => 0x56ca,
                    other => panic!("unexpected UDP checksum in {other:?}"),
                };
                let mut d = ip[ip_len..].to_vec();
                let mut u = UdpPacket::new_checked(&mut d[..]).unwrap();
                u.fill_checksum(f.ip.src(), f.ip.dst());
                assert_eq!(u.checksum(), want, "{} frame {}", cap.name, i + 1);
                assert!(u.verify_checksum(f.ip.src(), f.ip.dst()));
                udp_checksums += 1;
            }
            // No link padding in these captures (the smallest frame is 62 bytes), so the
            // re-emit comparison below covers the whole frame.
            assert_eq!(frame.len(), eth_len(&f) + ip_total(&f));
            total += 1;
        }
    }
    // README of the harness: "All 165 packets in the pcaps verify", 162 of them sent by
    // the kernel; the other three (host probes) carry a UDP checksum.
    assert_eq!((total, udp_checksums), (165, 3));
}

// --- 2a. Against the harness's decoder, every packet ---------------------------------

/// `icrc-verify.txt` (written by the harness's `roce.py verify`) has one line per packet:
/// `  1 10.77.0.1:4791 -> 10.77.0.2  RC SEND_ONLY dqpn=0x2c psn=0xcbfa69 a=1 se=0 pad=0
/// pkey=0xffff len=80 udpcsum=0x1506 id=0x0000 df=1 ttl=64 tos=0x00 ICRC=25828c8d OK`
/// (`hlim=` instead of `id`/`df`/`ttl`/`tos` for IPv6). The ICRC there is the value whose
/// little-endian bytes are the trailer, as `Packet::icrc` returns it.
#[test]
fn every_frame_matches_the_harness_decode() {
    let text = read_text("icrc-verify.txt");
    let secs = sections(&text, "== ");
    assert_eq!(secs.len(), FILES.len());
    let mut checked = 0;
    for (file, lines) in secs {
        let cap = load(FILES.iter().find(|f| **f == file).unwrap());
        // The last section ends with the harness's "ICRC mismatches: 0" line.
        let lines: Vec<&str> = lines
            .into_iter()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("ICRC mismatches"))
            .collect();
        assert_eq!(lines.len(), cap.frames.len(), "{file}");
        for (i, line) in lines.iter().enumerate() {
            let ctx = format!("{file} frame {}: {line}", i + 1);
            let f = roce(&file, i, &cap.frames[i]);
            let w: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(w[0], (i + 1).to_string(), "{ctx}");
            let (src, sport) = w[1].rsplit_once(':').unwrap();
            assert_eq!(f.ip.src(), src.parse::<IpAddr>().unwrap(), "{ctx}");
            assert_eq!(u64::from(f.udp.src_port), num(sport), "{ctx}");
            assert_eq!(w[2], "->");
            assert_eq!(f.ip.dst(), w[3].parse::<IpAddr>().unwrap(), "{ctx}");
            let p = &f.packet;
            let bth = p.bth();
            assert_eq!(
                bth.opcode().to_string(),
                format!("{}_{}", w[4], w[5]),
                "{ctx}"
            );
            assert_eq!(
                u64::from(bth.dest_qp()),
                num(kv(line, "dqpn").unwrap()),
                "{ctx}"
            );
            assert_eq!(u64::from(bth.psn().value()), num(kv(line, "psn").unwrap()));
            assert_eq!(
                u64::from(bth.ack_req()),
                num(kv(line, "a").unwrap()),
                "{ctx}"
            );
            assert_eq!(u64::from(bth.solicited()), num(kv(line, "se").unwrap()));
            assert_eq!(u64::from(bth.pad()), num(kv(line, "pad").unwrap()), "{ctx}");
            assert_eq!(
                u64::from(bth.pkey()),
                num(kv(line, "pkey").unwrap()),
                "{ctx}"
            );
            assert_eq!(
                f.udp.payload_len as u64,
                num(kv(line, "len").unwrap()),
                "{ctx}"
            );
            assert_eq!(u64::from(f.udp.checksum), num(kv(line, "udpcsum").unwrap()));
            match f.ip {
                IpRepr::V4(r) => {
                    assert_eq!(u64::from(r.ident), num(kv(line, "id").unwrap()), "{ctx}");
                    assert_eq!(u64::from(r.dont_frag), num(kv(line, "df").unwrap()));
                    assert_eq!(u64::from(r.ttl), num(kv(line, "ttl").unwrap()), "{ctx}");
                    assert_eq!(u64::from(r.tos), num(kv(line, "tos").unwrap()), "{ctx}");
                }
                IpRepr::V6(r) => {
                    assert_eq!(u64::from(r.hop_limit), num(kv(line, "hlim").unwrap()));
                }
            }
            let carried = u32::from_str_radix(kv(line, "ICRC").unwrap(), 16).unwrap();
            assert_eq!(p.icrc(), carried, "{ctx}");
            assert_eq!(w.last(), Some(&"OK"), "{ctx}");
            checked += 1;
        }
    }
    assert_eq!(checked, 165);
}

// --- 2b. Against tshark's one-line summary, every packet -----------------------------

/// `tshark-summary.txt`: `    1   0.000000    10.77.0.1 → 10.77.0.2    RRoCE 122 RC Send
/// Only QP=0x00002c` (frame length, addresses and destination QP). CM packets read
/// `... RRoCE 322 CM: ConnectRequest` and have no `QP=`; they are UD SENDs to QP1.
#[test]
fn every_frame_matches_the_tshark_summary() {
    let text = read_text("tshark-summary.txt");
    let secs = sections(&text, "== ");
    assert_eq!(secs.len(), FILES.len());
    let (mut checked, mut cm) = (0, 0);
    for (file, lines) in secs {
        let cap = load(FILES.iter().find(|f| **f == file).unwrap());
        assert_eq!(lines.len(), cap.frames.len(), "{file}");
        for (i, line) in lines.iter().enumerate() {
            let ctx = format!("{file} frame {}: {line}", i + 1);
            let f = roce(&file, i, &cap.frames[i]);
            let w: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(w[0], (i + 1).to_string(), "{ctx}");
            let arrow = w.iter().position(|t| *t == "→").unwrap();
            // tshark shows the CM REQ's source as "LID: 65535"; compare addresses only.
            if let Ok(src) = w[arrow - 1].parse::<IpAddr>() {
                assert_eq!(f.ip.src(), src, "{ctx}");
            }
            assert_eq!(f.ip.dst(), w[arrow + 1].parse::<IpAddr>().unwrap(), "{ctx}");
            let proto = w.iter().position(|t| *t == "RRoCE").unwrap();
            assert_eq!(cap.frames[i].len() as u64, num(w[proto + 1]), "{ctx}");
            match kv(line, "QP") {
                Some(qp) => assert_eq!(u64::from(f.packet.bth().dest_qp()), num(qp), "{ctx}"),
                None => {
                    assert_eq!(w[proto + 2], "CM:", "{ctx}");
                    assert_eq!(f.packet.opcode(), Opcode::UD_SEND_ONLY, "{ctx}");
                    assert_eq!(f.packet.bth().dest_qp(), 1, "{ctx}");
                    cm += 1;
                }
            }
            checked += 1;
        }
    }
    assert_eq!((checked, cm), (165, 5)); // REQ, REP, RTU, DREQ, DREP
}

// --- 3. Header fields against tshark's full decode ------------------------------------

/// One frame of `tshark-verbose.txt`: its number, its top-level lines and its
/// `(section, key, value)` fields. A section is a line indented by four spaces without a
/// `": "` (`    RETH - RDMA Extended Transport Header`); a field is `Key: Value`, and for
/// bit fields (`0... .... = Solicited Event: False`) the key is what follows `" = "`.
struct VerboseFrame {
    file: String,
    number: usize,
    top: Vec<String>,
    fields: Vec<(String, String, String)>,
}

fn tshark_verbose() -> Vec<VerboseFrame> {
    let text = read_text("tshark-verbose.txt");
    let mut out: Vec<VerboseFrame> = Vec::new();
    for (file, lines) in sections(&text, "################ ") {
        let mut section = String::new();
        for line in lines {
            if let Some(rest) = line.strip_prefix("Frame ") {
                let number = rest.split(':').next().unwrap().parse().unwrap();
                out.push(VerboseFrame {
                    file: file.clone(),
                    number,
                    top: vec![line.to_string()],
                    fields: Vec::new(),
                });
                section.clear();
                continue;
            }
            let Some(fr) = out.last_mut().filter(|f| f.file == file) else {
                continue;
            };
            let indent = line.len() - line.trim_start().len();
            let body = line.trim();
            if body.is_empty() {
                continue;
            }
            if indent == 0 {
                fr.top.push(body.to_string());
                continue;
            }
            if indent == 4 && !body.contains(": ") {
                section = body.split(" - ").next().unwrap().to_string();
                continue;
            }
            let body = body.split_once(" = ").map_or(body, |(_, b)| b);
            if let Some((k, v)) = body.split_once(": ") {
                let section = if indent == 4 { "" } else { section.as_str() };
                fr.fields
                    .push((section.to_string(), k.to_string(), v.to_string()));
            }
        }
    }
    out
}

fn flag(v: &str) -> bool {
    match v {
        "True" => true,
        "False" => false,
        _ => panic!("not a flag: {v}"),
    }
}

/// The leading number of `64 (0x00000040)`, `31, Ack` or `Send() (0x03)`-style values
/// (for the last, the number in parentheses).
fn lead(v: &str) -> u64 {
    let first = v.split([' ', ',']).next().unwrap();
    if first.ends_with("()") {
        return num(v.split('(').nth(2).unwrap().trim_end_matches(')'));
    }
    num(first)
}

#[test]
fn header_fields_match_tshark_verbose() {
    let frames = tshark_verbose();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for vf in &frames {
        let cap = load(FILES.iter().find(|f| **f == vf.file).unwrap());
        let frame = &cap.frames[vf.number - 1];
        let f = roce(&vf.file, vf.number - 1, frame);
        let p = &f.packet;
        let bth = p.bth();
        let ctx = |what: &str| format!("{} frame {}: {what}", vf.file, vf.number);
        *seen.entry("frames".into()).or_default() += 1;

        // Top-level lines: frame length, IP addresses, UDP ports, payload length.
        for line in &vf.top {
            if let Some(rest) = line.strip_prefix("Internet Protocol Version ") {
                let src = rest
                    .split("Src: ")
                    .nth(1)
                    .unwrap()
                    .split(',')
                    .next()
                    .unwrap();
                let dst = rest.split("Dst: ").nth(1).unwrap();
                assert_eq!(f.ip.src(), src.parse::<IpAddr>().unwrap(), "{}", ctx(line));
                assert_eq!(f.ip.dst(), dst.parse::<IpAddr>().unwrap(), "{}", ctx(line));
            } else if let Some(rest) = line.strip_prefix("User Datagram Protocol, ") {
                let sp = rest.split("Src Port: ").nth(1).unwrap().split(',').next();
                let dp = rest.split("Dst Port: ").nth(1).unwrap();
                assert_eq!(u64::from(f.udp.src_port), num(sp.unwrap()), "{}", ctx(line));
                assert_eq!(u64::from(f.udp.dst_port), num(dp), "{}", ctx(line));
            } else if let Some(rest) = line.strip_prefix("Data (") {
                let n = rest.split_whitespace().next().unwrap();
                assert_eq!(p.payload_len() as u64, num(n), "{}", ctx(line));
                *seen.entry("Data".into()).or_default() += 1;
            } else if line.starts_with("Frame ") {
                let n = line.split(": ").nth(1).unwrap().split_whitespace().next();
                assert_eq!(frame.len() as u64, num(n.unwrap()), "{}", ctx(line));
            }
        }

        let mut checked_here = 0;
        for (section, key, value) in &vf.fields {
            let what = ctx(&format!("{section} {key}: {value}"));
            let v = value.as_str();
            match (section.as_str(), key.as_str()) {
                ("Base Transport Header", "Opcode") => {
                    let code = v.rsplit('(').next().unwrap().trim_end_matches(')');
                    assert_eq!(u64::from(bth.opcode().0), num(code), "{what}");
                }
                ("Base Transport Header", "Solicited Event") => {
                    assert_eq!(bth.solicited(), flag(v), "{what}")
                }
                ("Base Transport Header", "MigReq") => assert_eq!(bth.mig_req(), flag(v)),
                ("Base Transport Header", "Pad Count") => {
                    assert_eq!(u64::from(bth.pad()), num(v), "{what}")
                }
                ("Base Transport Header", "Header Version") => {
                    assert_eq!(u64::from(bth.tver()), num(v), "{what}")
                }
                ("Base Transport Header", "Partition Key") => {
                    assert_eq!(u64::from(bth.pkey()), num(v), "{what}")
                }
                // BTH byte 4 (FECN, BECN, resv6), shown in hex without "0x".
                ("Base Transport Header", "Reserved") => {
                    let byte = u8::from_str_radix(v, 16).unwrap();
                    let ours = (u8::from(bth.fecn()) << 7) | (u8::from(bth.becn()) << 6);
                    assert_eq!(ours | bth.resv6(), byte, "{what}");
                }
                ("Base Transport Header", "Destination Queue Pair") => {
                    assert_eq!(u64::from(bth.dest_qp()), num(v), "{what}")
                }
                ("Base Transport Header", "Acknowledge Request") => {
                    assert_eq!(bth.ack_req(), flag(v), "{what}")
                }
                ("Base Transport Header", "Reserved (7 bits)") => {
                    assert_eq!(u64::from(bth.resv7()), num(v), "{what}")
                }
                ("Base Transport Header", "Packet Sequence Number") => {
                    assert_eq!(u64::from(bth.psn().value()), num(v), "{what}")
                }
                ("RETH", k) => {
                    let h = p.reth().unwrap_or_else(|| panic!("no RETH: {what}"));
                    let ours = match k {
                        "Virtual Address" => h.va(),
                        "Remote Key" => u64::from(h.rkey()),
                        "DMA Length" => u64::from(h.dma_len()),
                        _ => panic!("unexpected {what}"),
                    };
                    assert_eq!(ours, lead(v), "{what}");
                }
                ("AETH", k) => {
                    let h = p.aeth().unwrap_or_else(|| panic!("no AETH: {what}"));
                    let syn = Syndrome::from_byte(h.syndrome());
                    match k {
                        "Syndrome" => {
                            assert_eq!(u64::from(h.syndrome()), lead(v), "{what}");
                            let kind = v.split(", ").nth(1).unwrap();
                            assert_eq!(kind, "Ack", "{what}");
                            assert!(matches!(syn, Syndrome::Ack { .. }), "{what}");
                        }
                        "Reserved" => assert_eq!(u64::from(h.syndrome() >> 7), num(v)),
                        "OpCode" => assert_eq!(u64::from((h.syndrome() >> 5) & 3), lead_paren(v)),
                        "Credit Count" => {
                            assert_eq!(
                                syn,
                                Syndrome::Ack {
                                    credits: num(v) as u8
                                },
                                "{what}"
                            )
                        }
                        "Message Sequence Number" => {
                            assert_eq!(u64::from(h.msn()), num(v), "{what}")
                        }
                        _ => panic!("unexpected {what}"),
                    }
                }
                ("DETH", k) => {
                    let h = p.deth().unwrap_or_else(|| panic!("no DETH: {what}"));
                    match k {
                        "Queue Key" => assert_eq!(u64::from(h.qkey()), num(v), "{what}"),
                        "Source Queue Pair" => {
                            assert_eq!(u64::from(h.src_qp()), num(v), "{what}")
                        }
                        // DETH byte 4, hex without "0x"; DethRepr drops it (reserved).
                        "Reserved" => {
                            let headers = p.info().unwrap().headers;
                            let deth_at = BTH_LEN + headers.offset_of(Headers::DETH).unwrap();
                            let raw = p.clone().into_inner()[deth_at + 4];
                            assert_eq!(raw, u8::from_str_radix(v, 16).unwrap(), "{what}");
                        }
                        _ => panic!("unexpected {what}"),
                    }
                }
                ("AtomicETH", k) => {
                    let h = p
                        .atomic_eth()
                        .unwrap_or_else(|| panic!("no AtomicETH: {what}"));
                    let ours = match k {
                        "Virtual Address" => h.va(),
                        "Remote Key" => u64::from(h.rkey()),
                        "Swap (Or Add) Data" => h.swap_add(),
                        "Compare Data" => h.compare(),
                        _ => panic!("unexpected {what}"),
                    };
                    assert_eq!(ours, num(v), "{what}");
                }
                ("ATOMICACKETH", "Original Remote Data") => {
                    let h = p.atomic_ack_eth().expect("AtomicAckETH");
                    assert_eq!(h.orig(), num(v), "{what}");
                }
                // The CM MAD is the UD SEND's payload (IBTA 13.4.2, MAD common header).
                ("MAD Header", k) => {
                    let mad = p.payload();
                    assert_eq!(mad.len(), 256, "{what}");
                    let ours = match k {
                        "Base Version" => u64::from(mad[0]),
                        "Management Class" => u64::from(mad[1]),
                        "Class Version" => u64::from(mad[2]),
                        "Method" => u64::from(mad[3]),
                        "Status" => u64::from(u16::from_be_bytes([mad[4], mad[5]])),
                        "Class Specific" => u64::from(u16::from_be_bytes([mad[6], mad[7]])),
                        "Transaction ID" => u64::from_be_bytes(mad[8..16].try_into().unwrap()),
                        "Attribute ID" => u64::from(u16::from_be_bytes([mad[16], mad[17]])),
                        "Reserved" => u64::from(u16::from_be_bytes([mad[18], mad[19]])),
                        "Attribute Modifier" => {
                            u64::from(u32::from_be_bytes(mad[20..24].try_into().unwrap()))
                        }
                        "MAD Data Payload" => {
                            // tshark prints the first 36 bytes of the data, then "…".
                            let shown = v.trim_end_matches('…');
                            let ours: String = mad[24..24 + shown.len() / 2]
                                .iter()
                                .map(|b| format!("{b:02x}"))
                                .collect();
                            assert_eq!(ours, shown, "{what}");
                            checked_here += 1;
                            *seen.entry(section.clone()).or_default() += 1;
                            continue;
                        }
                        _ => panic!("unexpected {what}"),
                    };
                    assert_eq!(ours, lead(v), "{what}");
                }
                // ICRC: tshark reads the trailer as a big-endian number.
                ("", "Invariant CRC") => {
                    assert_eq!(u64::from(p.icrc().swap_bytes()), num(v), "{what}")
                }
                // The CM message body (REQ fields, ...) is not a wire-crate layout.
                (s, _) if s.starts_with("CM ") || s.starts_with("IP CM") => continue,
                _ => panic!("field not modelled: {what}"),
            }
            checked_here += 1;
            let key = if section.is_empty() { key } else { section };
            *seen.entry(key.clone()).or_default() += 1;
        }
        assert!(checked_here >= 12, "{}", ctx("too few fields checked"));
        assert_eq!(p.immediate(), None);
        assert_eq!(p.ieth_rkey(), None);
    }
    // How many frames (and header instances) the verbose decode has, so that a parser
    // slip cannot quietly check nothing. Field counts are per field line.
    let want: BTreeMap<String, usize> = [
        ("frames", 37),
        ("Base Transport Header", 37 * 11),
        ("Invariant CRC", 37),
        ("Data", 21),
        ("RETH", 6 * 3),
        ("AETH", 14 * 5),
        ("DETH", 3 * 3),
        ("AtomicETH", 2 * 4),
        ("ATOMICACKETH", 2),
        ("MAD Header", 11),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(seen, want);
}

/// The number in parentheses of `Ack (0)`.
fn lead_paren(v: &str) -> u64 {
    num(v.rsplit('(').next().unwrap().trim_end_matches(')'))
}

/// A few values copied by hand from `tshark-verbose.txt`, so that a reader sees real
/// numbers and the check does not rest on the parser above alone.
#[test]
fn hand_copied_tshark_values() {
    let first = |file: &'static str, n: usize| load(file).frames[n - 1].clone();

    // rc_read_segmented.pcap frame 1: RC RDMA READ Request (12), QP 0x25, PSN 10245654,
    // RETH va 0x0000559043cdb000 rkey 0x000018f2 len 2500.
    let fr = first("rc_read_segmented.pcap", 1);
    let f = roce("rc_read_segmented.pcap", 0, &fr);
    assert_eq!(f.packet.opcode(), Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!(f.packet.bth().dest_qp(), 0x25);
    assert_eq!(f.packet.bth().psn().value(), 10245654);
    let reth = f.packet.reth().unwrap();
    assert_eq!(
        (reth.va(), reth.rkey(), reth.dma_len()),
        (0x5590_43cd_b000, 0x18f2, 2500)
    );
    assert_eq!(f.packet.icrc().swap_bytes(), 0x90c4_54e5);

    // rc_read_segmented.pcap frame 8: READ response Last (15), PSN 10245656, AETH
    // syndrome 31 (ACK), MSN 1, 452 bytes of data.
    let fr = first("rc_read_segmented.pcap", 8);
    let f = roce("rc_read_segmented.pcap", 7, &fr);
    assert_eq!(f.packet.opcode(), Opcode::RC_RDMA_READ_RESPONSE_LAST);
    assert_eq!(f.packet.bth().psn().value(), 10245656);
    let aeth = f.packet.aeth().unwrap();
    assert_eq!(Syndrome::from_byte(aeth.syndrome()), Syndrome::ACK);
    assert_eq!(aeth.msn(), 1);
    assert_eq!(f.packet.payload_len(), 452);

    // host_ud_probe.pcap frame 1: UD SEND only (100) to QP 0x2b, PSN 466274, DETH Q_Key
    // 0x11111111, source QP 0xabc.
    let fr = first("host_ud_probe.pcap", 1);
    let f = roce("host_ud_probe.pcap", 0, &fr);
    assert_eq!(f.packet.opcode(), Opcode::UD_SEND_ONLY);
    assert_eq!(
        (f.packet.bth().dest_qp(), f.packet.bth().psn().value()),
        (0x2b, 466274)
    );
    let deth = f.packet.deth().unwrap();
    assert_eq!((deth.qkey(), deth.src_qp()), (0x1111_1111, 0xabc));

    // rdmacm_rping.pcap frame 1: CM REQ as a UD SEND to QP1 with Q_Key 0x80010000 from
    // QP1, UDP source port 55410; MAD class 0x07, attribute 0x0010, TID 0x247fd4c1a.
    let fr = first("rdmacm_rping.pcap", 1);
    let f = roce("rdmacm_rping.pcap", 0, &fr);
    let deth = f.packet.deth().unwrap();
    assert_eq!((deth.qkey(), deth.src_qp()), (0x8001_0000, 1));
    assert_eq!(f.udp.src_port, 55410);
    let mad = f.packet.payload();
    assert_eq!(&mad[..4], &[0x01, 0x07, 0x02, 0x03]);
    assert_eq!(
        &mad[8..18],
        &[0, 0, 0, 0x02, 0x47, 0xfd, 0x4c, 0x1a, 0x00, 0x10]
    );

    // rc_atomic_cswap.pcap frame 1: CmpSwap (19), AtomicETH va 0x0000561ff3e01000,
    // rkey 0x00001b93, swap 0, compare 0; frame 4: ATOMIC Acknowledge (18), original
    // remote data 3430921698382044454.
    let fr = first("rc_atomic_cswap.pcap", 1);
    let f = roce("rc_atomic_cswap.pcap", 0, &fr);
    assert_eq!(f.packet.opcode(), Opcode::RC_COMPARE_SWAP);
    let a = f.packet.atomic_eth().unwrap();
    assert_eq!(
        (a.va(), a.rkey(), a.swap_add(), a.compare()),
        (0x561f_f3e0_1000, 0x1b93, 0, 0)
    );
    let fr = first("rc_atomic_cswap.pcap", 4);
    let f = roce("rc_atomic_cswap.pcap", 3, &fr);
    assert_eq!(f.packet.opcode(), Opcode::RC_ATOMIC_ACKNOWLEDGE);
    assert_eq!(
        f.packet.atomic_ack_eth().unwrap().orig(),
        3430921698382044454
    );

    // rc_atomic_fadd.pcap frame 1: FetchAdd (20), add 1, rkey 0x00001afa.
    let fr = first("rc_atomic_fadd.pcap", 1);
    let f = roce("rc_atomic_fadd.pcap", 0, &fr);
    assert_eq!(f.packet.opcode(), Opcode::RC_FETCH_ADD);
    let a = f.packet.atomic_eth().unwrap();
    assert_eq!(
        (a.va(), a.rkey(), a.swap_add()),
        (0x55f3_14e5_1000, 0x1afa, 1)
    );

    // rc_send_ipv6.pcap frame 1: fd00:77::3 -> fd00:77::2, RC SEND Only (4) to QP 0x2a,
    // PSN 1734210, 64 bytes; ICRC shown by tshark as 0xf2bb5af4.
    let fr = first("rc_send_ipv6.pcap", 1);
    let f = roce("rc_send_ipv6.pcap", 0, &fr);
    assert_eq!(f.ip.src(), "fd00:77::3".parse::<IpAddr>().unwrap());
    assert_eq!(f.packet.opcode(), Opcode::RC_SEND_ONLY);
    assert_eq!(
        (f.packet.bth().dest_qp(), f.packet.bth().psn().value()),
        (0x2a, 1734210)
    );
    assert_eq!(f.packet.payload_len(), 64);
    assert_eq!(f.packet.icrc().to_be_bytes(), [0xf4, 0x5a, 0xbb, 0xf2]);
    // On the wire the trailer is least significant byte first, which tshark then reads
    // as a big-endian number.
    assert_eq!(&fr[fr.len() - 4..], &[0xf2, 0xbb, 0x5a, 0xf4]);

    // uc_send_pingpong.pcap frame 1: UC SEND Only (36) to QP 0x20, PSN 12675610.
    let fr = first("uc_send_pingpong.pcap", 1);
    let f = roce("uc_send_pingpong.pcap", 0, &fr);
    assert_eq!(f.packet.opcode(), Opcode::UC_SEND_ONLY);
    assert_eq!(
        (f.packet.bth().dest_qp(), f.packet.bth().psn().value()),
        (0x20, 12675610)
    );
}

// --- 4. Re-emit from the Reprs alone ---------------------------------------------------

/// Builds the frame again from `EthernetRepr`, `Ipv4Repr`/`Ipv6Repr`, `UdpRepr` and
/// `PacketRepr::parse` of the transport packet, into a fresh zeroed buffer, then fills
/// the ICRC with `icrc::fill`.
///
/// What the Reprs drop, by design: IPv4 options (emit writes IHL 5), the IPv4 reserved
/// flag bit, the BTH's TVer (parse refuses non-zero) and reserved bits (`resv6`,
/// `resv7`), the DETH's reserved byte, and the pad bytes' values (emitted as zero). The
/// captures hold none of these (rxe writes zeros and no options), which
/// `captured_bits_the_reprs_drop_are_zero` checks, so the comparison below can be, and
/// is, over every byte of the frame.
fn re_emit(f: &RoceFrame<'_>) -> Vec<u8> {
    let eth = f.ethernet.expect("parsed from Ethernet");
    let eth_len = eth.buffer_len();
    let mut buf = vec![0u8; eth_len + ip_total(f)];
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    let ip_len = match f.ip {
        IpRepr::V4(r) => {
            r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[eth_len..]));
            r.buffer_len()
        }
        IpRepr::V6(r) => {
            r.emit(&mut Ipv6Packet::new_unchecked(&mut buf[eth_len..]));
            r.buffer_len()
        }
    };
    let udp_at = eth_len + ip_len;
    f.udp
        .emit(&mut UdpPacket::new_unchecked(&mut buf[udp_at..]));
    let pkt = PacketRepr::parse(&f.packet).expect("PacketRepr::parse");
    let at = udp_at + udp::HEADER_LEN;
    assert_eq!(pkt.buffer_len(), f.udp.payload_len);
    pkt.emit(&mut buf[at..at + pkt.buffer_len()])
        .expect("PacketRepr::emit");
    icrc::fill(&mut buf[eth_len..]).expect("icrc::fill");
    buf
}

fn layer_at(f: &RoceFrame<'_>, off: usize) -> &'static str {
    let eth = eth_len(f);
    let ip = match f.ip {
        IpRepr::V4(_) => ipv4::HEADER_LEN,
        IpRepr::V6(_) => ipv6::HEADER_LEN,
    };
    let bth = eth + ip + udp::HEADER_LEN;
    let end = eth + ip_total(f);
    match off {
        o if o < eth => "Ethernet",
        o if o < eth + ip => "IP",
        o if o < bth => "UDP",
        o if o < bth + BTH_LEN => "BTH",
        o if o < bth + f.packet.header_len() => "extension headers",
        o if o < end - icrc::ICRC_LEN => "payload/pad",
        _ => "ICRC",
    }
}

#[test]
fn every_frame_re_emits_byte_identically() {
    let mut n = 0;
    for Capture { name, frames } in all() {
        for (i, frame) in frames.iter().enumerate() {
            let f = roce(name, i, frame);
            let ours = re_emit(&f);
            let end = eth_len(&f) + ip_total(&f); // Ethernet padding excluded (there is none)
            if ours[..] != frame[..end] {
                let at = ours.iter().zip(frame).position(|(a, b)| a != b).unwrap();
                panic!(
                    "{name} frame {}: byte {at} ({}) differs: ours {:#04x}, captured {:#04x}",
                    i + 1,
                    layer_at(&f, at),
                    ours[at],
                    frame[at]
                );
            }
            n += 1;
        }
    }
    assert_eq!(n, 165);
}

/// The bits the Reprs cannot carry (see [`re_emit`]) are zero in every capture, so that
/// byte-identical re-emission is a fair demand rather than luck.
#[test]
fn captured_bits_the_reprs_drop_are_zero() {
    for Capture { name, frames } in all() {
        for (i, frame) in frames.iter().enumerate() {
            let f = roce(name, i, frame);
            let ip = &frame[eth_len(&f)..];
            if let IpRepr::V4(_) = f.ip {
                let p = Ipv4Packet::new_checked(ip).unwrap();
                assert_eq!(p.header_len(), ipv4::HEADER_LEN, "{name} {i}: IPv4 options");
                assert_eq!(ip[6] & 0x80, 0, "{name} {i}: IPv4 reserved flag");
            }
            let b = f.packet.bth();
            assert_eq!((b.tver(), b.resv6(), b.resv7()), (0, 0, 0), "{name} {i}");
            assert!(!b.fecn() && !b.becn(), "{name} {i}");
            if f.packet.deth().is_some() {
                let raw = f.packet.clone().into_inner();
                assert_eq!(raw[BTH_LEN + 4], 0, "{name} {i}: DETH reserved byte");
            }
            assert!(
                f.packet.pad_bytes().iter().all(|b| *b == 0),
                "{name} {i}: pad"
            );
        }
    }
}

// --- 5. Single-bit flips ---------------------------------------------------------------

/// What `parse_ethernet` makes of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Decoded as RoCE v2; the ICRC matched or not.
    Roce { icrc_ok: bool },
    /// Decoded, but not as RoCE v2 (IP protocol or UDP port changed).
    NotRoce,
    /// Refused with this error.
    Err(Error),
}

fn outcome(frame: &[u8]) -> Outcome {
    match parse_ethernet(frame) {
        Ok(Decoded::Roce(f)) => Outcome::Roce { icrc_ok: f.icrc_ok },
        Ok(Decoded::NotRoce) => Outcome::NotRoce,
        Err(e) => Outcome::Err(e),
    }
}

const ICRC_BAD: Outcome = Outcome::Roce { icrc_ok: false };
const ICRC_GOOD: Outcome = Outcome::Roce { icrc_ok: true };
const IPV4_CSUM: Outcome = Outcome::Err(Error::Malformed("IPv4 header checksum"));

fn be16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

/// The expected outcome of flipping bit `bit` (0 = least significant) of byte `off` of
/// the IP datagram `ip` (header through ICRC, no padding), and whether the ICRC masks
/// that bit (IBTA A17.3.3; `rxe_icrc.c`: IPv4 TOS, TTL, header checksum; IPv6 traffic
/// class, flow label, hop limit; UDP checksum; BTH byte 4).
///
/// The model follows the checks `parse_ip` makes, in order: IP version and lengths, the
/// IP protocol or next header, IPv4 fragmentation and header checksum, the UDP length
/// and port, the transport layout, the ICRC. A single-bit flip always changes an
/// IPv4 header checksum sum, so every IPv4 header bit that gets that far is refused
/// there, masked or not.
fn expected(ip: &[u8], off: usize, bit: u8) -> (Outcome, bool) {
    let m = 1u8 << bit;
    let v4 = ip[0] >> 4 == 4;
    let hl = if v4 {
        ipv4::HEADER_LEN
    } else {
        ipv6::HEADER_LEN
    };
    let len = ip.len();
    let flipped_len = |at: usize| be16(ip, at) ^ (usize::from(m) << if off == at { 8 } else { 0 });
    if v4 {
        let total = be16(ip, 2);
        assert_eq!(total, len);
        match off {
            0 => {
                let e = match bit {
                    // Version 6: read as an IPv6 header, whose payload length is the IPv4
                    // Identification and whose next header is the flags byte.
                    5 if len < ipv6::HEADER_LEN => Outcome::Err(Error::Truncated("IPv6 header")),
                    5 if ipv6::HEADER_LEN + be16(ip, 4) > len => {
                        Outcome::Err(Error::Truncated("IPv6 payload"))
                    }
                    5 if ip[6] != ipv4::PROTO_UDP => Outcome::NotRoce,
                    4 | 6 | 7 => Outcome::Err(Error::Malformed("IPv4 version is not 4")),
                    // IHL 4 or 1.
                    0 | 2 => Outcome::Err(Error::Malformed("IPv4 IHL below 5")),
                    // IHL 7: 28 header bytes, whose sum is no longer 0xffff.
                    1 => IPV4_CSUM,
                    // IHL 13: 52 header bytes.
                    3 if len < 52 => Outcome::Err(Error::Truncated("IPv4 options")),
                    3 => IPV4_CSUM,
                    _ => unreachable!("IPv4 byte 0 bit {bit} not modelled"),
                };
                (e, false)
            }
            1 | 8 | 10 | 11 => (IPV4_CSUM, true), // TOS, TTL, checksum: masked
            2 | 3 => {
                let t = flipped_len(2);
                let e = if t < hl {
                    Outcome::Err(Error::Malformed("IPv4 total length below header length"))
                } else if t > len {
                    Outcome::Err(Error::Truncated("IPv4 payload"))
                } else {
                    IPV4_CSUM
                };
                (e, false)
            }
            6 if m & 0xc0 != 0 => (IPV4_CSUM, false), // reserved flag, DF
            6 | 7 => (
                Outcome::Err(Error::Unsupported("fragmented IPv4 packet")),
                false,
            ),
            9 => (Outcome::NotRoce, false), // protocol
            4 | 5 | 12..=19 => (IPV4_CSUM, false),
            _ => transport_expected(ip, hl, off - hl, bit),
        }
    } else {
        match off {
            // Version nibble: 4 is read as IPv4 with IHL = the traffic class's high
            // nibble (0 here); anything else is not 6, so the IPv4 path refuses it.
            0 if bit >= 4 => {
                let e = if (6 ^ (m >> 4)) == 4 {
                    assert_eq!(ip[0] & 0x0f, 0, "modelled for traffic class 0");
                    Outcome::Err(Error::Malformed("IPv4 IHL below 5"))
                } else {
                    Outcome::Err(Error::Malformed("IPv4 version is not 4"))
                };
                (e, false)
            }
            0..=3 | 7 => (ICRC_GOOD, true), // traffic class, flow label, hop limit
            4 | 5 => {
                let pl = flipped_len(4);
                let e = if ipv6::HEADER_LEN + pl > len {
                    Outcome::Err(Error::Truncated("IPv6 payload"))
                } else if pl < udp::HEADER_LEN {
                    Outcome::Err(Error::Truncated("UDP header"))
                } else {
                    // Shorter than the UDP length field says.
                    Outcome::Err(Error::Truncated("UDP payload"))
                };
                (e, false)
            }
            6 => (Outcome::NotRoce, false), // next header
            8..=39 => (ICRC_BAD, false),    // addresses
            _ => transport_expected(ip, hl, off - hl, bit),
        }
    }
}

/// [`expected`] from the UDP header on; `off` is relative to the UDP header.
fn transport_expected(ip: &[u8], hl: usize, off: usize, bit: u8) -> (Outcome, bool) {
    let m = 1u8 << bit;
    let udp = &ip[hl..];
    let pkt = &udp[udp::HEADER_LEN..];
    match off {
        0 | 1 => (ICRC_BAD, false),         // source port
        2 | 3 => (Outcome::NotRoce, false), // destination port
        4 | 5 => {
            let l = be16(udp, 4) ^ (usize::from(m) << if off == 4 { 8 } else { 0 });
            let e = if l < udp::HEADER_LEN {
                Outcome::Err(Error::Malformed("UDP length below 8"))
            } else if l > udp.len() {
                Outcome::Err(Error::Truncated("UDP payload"))
            } else {
                // A shorter UDP length cuts the transport packet short: the layout check
                // of the shorter packet decides (packet.rs has the unit tests for it),
                // and if it passes, the ICRC is read from the wrong place.
                match Packet::new_checked(&pkt[..l - udp::HEADER_LEN]) {
                    Err(e) => Outcome::Err(e),
                    Ok(_) => ICRC_BAD,
                }
            };
            (e, false)
        }
        6 | 7 => (ICRC_GOOD, true), // UDP checksum: masked, and not verified
        _ => {
            let t = off - udp::HEADER_LEN;
            match t {
                // Another opcode implies another layout; again the layout check decides.
                0 => {
                    let mut p = pkt.to_vec();
                    p[0] ^= m;
                    let e = match Packet::new_checked(&p[..]) {
                        Err(e) => Outcome::Err(e),
                        Ok(_) => ICRC_BAD,
                    };
                    (e, false)
                }
                // PadCnt: more pad than payload is malformed (no fixed-size opcode here).
                1 if m & 0x30 != 0 => {
                    let info = Opcode(pkt[0]).info().unwrap();
                    let body = pkt.len() - BTH_LEN - info.headers_len() - icrc::ICRC_LEN;
                    let pad = usize::from(((pkt[1] ^ m) >> 4) & 3);
                    let e = if pad > body {
                        Outcome::Err(Error::Malformed("pad count exceeds the payload"))
                    } else {
                        ICRC_BAD
                    };
                    (e, false)
                }
                4 => (ICRC_GOOD, true), // BTH byte 4 (FECN, BECN, resv6): masked
                // Everything else, TVer included (the frame parser checks the layout;
                // BthRepr::parse refuses TVer != 0), is caught by the ICRC alone.
                _ => (ICRC_BAD, false),
            }
        }
    }
}

#[test]
fn every_single_bit_flip_is_caught_except_the_masked_ones() {
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for Capture { name, frames } in all() {
        let frame = &frames[0];
        let f = roce(name, 0, frame);
        let eth = eth_len(&f);
        assert_eq!(outcome(frame), ICRC_GOOD);
        let ip = &frame[eth..];
        for off in 0..ip.len() {
            for bit in 0..8u8 {
                let mut c = frame.clone();
                c[eth + off] ^= 1 << bit;
                let layer = layer_at(&f, eth + off);
                let ctx = format!("{name} frame 1: IP byte {off} bit {bit} ({layer})");
                let (want, masked) = expected(ip, off, bit);
                let got = outcome(&c);
                assert_eq!(got, want, "{ctx}");
                // The ICRC by itself, framing aside: masked bits keep it, the others
                // break it (or the framing icrc::verify needs).
                let alone = icrc::verify(&c[eth..]);
                if masked {
                    assert_eq!(alone, Ok(true), "{ctx}");
                    // IPv4 TOS and TTL: once the header checksum is repaired, the frame
                    // parses and the ICRC still holds.
                    if let IpRepr::V4(_) = f.ip {
                        if off == 1 || off == 8 {
                            Ipv4Packet::new_unchecked(&mut c[eth..]).fill_checksum();
                            assert_eq!(outcome(&c), ICRC_GOOD, "{ctx}, checksum repaired");
                        }
                    }
                } else {
                    assert_ne!(alone, Ok(true), "{ctx}");
                    assert_ne!(got, ICRC_GOOD, "{ctx}");
                }
                *tally.entry(format!("{got:?}")).or_default() += 1;
            }
        }
    }
    // Every class of outcome turns up somewhere.
    for k in [
        "Roce { icrc_ok: true }",
        "Roce { icrc_ok: false }",
        "NotRoce",
    ] {
        assert!(tally.contains_key(k), "{k} never seen: {tally:?}");
    }
    assert!(tally.len() > 8, "{tally:?}");
}
