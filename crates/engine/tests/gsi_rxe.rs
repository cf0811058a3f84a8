//! The GSI on real kernel traffic: the CM MADs of the rxe `rdma_cm` capture
//! (`testdata/rxe/rdmacm_rping.pcap`, QP1 to QP1 with a GRH, Q_Key 0x80010000) reach the
//! GSI, are dropped and counted while nobody listens (CM Send gets no automatic reply),
//! and are delivered with the sender's GID and QP to a CM agent.

use rverbs_engine::mad::gsi::Registration;
use rverbs_engine::net::{self, Datagram};
use rverbs_engine::{Config, Engine};
use rverbs_wire::frame::{self, Decoded, IpRepr};
use rverbs_wire::mad::{class, method};

/// The records of a little-endian microsecond pcap file with Ethernet link type.
fn records(bytes: &[u8]) -> Vec<&[u8]> {
    assert_eq!(&bytes[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
    assert_eq!(u32::from_le_bytes(bytes[20..24].try_into().unwrap()), 1);
    let mut at = 24;
    let mut v = Vec::new();
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        v.push(&bytes[at + 16..at + 16 + len]);
        at += 16 + len;
    }
    v
}

#[test]
fn rxe_cm_mads_on_the_gsi() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/rxe/rdmacm_rping.pcap"
    );
    let bytes = std::fs::read(path).unwrap();
    let frames: Vec<_> = records(&bytes)
        .into_iter()
        .filter_map(|r| match frame::parse_ethernet(r) {
            Ok(Decoded::Roce(f)) if f.packet.bth().dest_qp() == 1 => Some(f),
            _ => None,
        })
        .collect();
    assert!(frames.len() >= 5, "the capture has CM MADs on QP1");
    for listen in [false, true] {
        // One engine per destination address seen.
        let mut engines: Vec<(std::net::IpAddr, Engine)> = Vec::new();
        let mut agents = Vec::new();
        for f in &frames {
            let dst = f.ip.dst();
            if !engines.iter().any(|(a, _)| *a == dst) {
                let mut e = Engine::new(Config {
                    gids: vec![net::ip_to_gid(dst)],
                    ..Config::default()
                });
                if listen {
                    let reg = Registration {
                        mgmt_class: class::CM,
                        class_version: 2,
                        methods: 1 << method::SEND,
                    };
                    agents.push(e.gsi_register(Some(reg)).unwrap());
                }
                engines.push((dst, e));
            }
        }
        for f in &frames {
            let e = &mut engines
                .iter_mut()
                .find(|(a, _)| *a == f.ip.dst())
                .unwrap()
                .1;
            let d = Datagram {
                src: f.ip.src(),
                dst: f.ip.dst(),
                src_port: f.udp.src_port,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                ipv4_id: match f.ip {
                    IpRepr::V4(r) => Some(r.ident),
                    IpRepr::V6(_) => None,
                },
                roce_v1: false,
                icrc_checked: false,
                payload: f.packet.clone().into_inner(),
            };
            e.handle_datagram(0, &d);
            assert!(e.poll_transmit(0).is_none(), "no reply to a CM Send");
        }
        let (mut received, mut dropped, mut delivered) = (0, 0, 0);
        for (i, (_, e)) in engines.iter_mut().enumerate() {
            let s = e.mad_port().stats.clone();
            assert_eq!(e.counters().rx_icrc_errors, 0);
            received += s.gsi_received;
            dropped += s.gsi_dropped;
            if listen {
                while let Some(r) = e.gsi_recv(agents[i]) {
                    assert_eq!(
                        (r.wc.src_qp, r.mad[1], r.mad[3]),
                        (1, class::CM, method::SEND)
                    );
                    assert_ne!(r.src_gid(), net::ip_to_gid(engines_addr_of(&r)));
                    delivered += 1;
                }
            }
        }
        assert_eq!(received as usize, frames.len());
        if listen {
            assert_eq!((dropped, delivered), (0, frames.len()));
        } else {
            assert_eq!(dropped as usize, frames.len());
        }
    }
}

/// The destination address of a received MAD (from its GRH area).
fn engines_addr_of(r: &rverbs_engine::mad::gsi::GsiRecv) -> std::net::IpAddr {
    net::gid_to_ip(rverbs_engine::mad::grh_dgid(&r.grh))
}
