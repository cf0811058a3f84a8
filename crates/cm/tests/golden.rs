//! The engine's MADs against the kernel's: the REQ, REP, RTU, DREQ and DREP of a real
//! rping connection between two kernel rxe ports (`testdata`'s `rdmacm_rping.pcap`,
//! frames 1, 2, 3, 28 and 29; the same bytes the wire crate's golden tests decode).
//! Given the same IDs, GUIDs, QPNs and PSNs, every MAD must come out byte for byte.

use rverbs_cm::cma::{service_id, CmaHeader, PortSpace};
use rverbs_cm::consts::private_len;
use rverbs_cm::{AcceptParams, Cm, Config, ConnectParams, Event, Path, State};

/// Frame 1 of `rdmacm_rping.pcap`: the REQ MAD.
const GOLDEN_REQ: &str = include_str!("../../../testdata/cm/rping-req.hex");

/// Frame 2 of `rdmacm_rping.pcap`: the REP MAD.
const GOLDEN_REP: &str = include_str!("../../../testdata/cm/rping-rep.hex");

/// Frame 3 of `rdmacm_rping.pcap`: the RTU MAD.
const GOLDEN_RTU: &str = include_str!("../../../testdata/cm/rping-rtu.hex");

/// Frame 28 of `rdmacm_rping.pcap`: the DREQ MAD.
const GOLDEN_DREQ: &str = include_str!("../../../testdata/cm/rping-dreq.hex");

/// Frame 29 of `rdmacm_rping.pcap`: the DREP MAD.
const GOLDEN_DREP: &str = include_str!("../../../testdata/cm/rping-drep.hex");

/// Hex digits (whitespace between them ignored) as bytes.
fn hex(s: &str) -> Vec<u8> {
    let d: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    d.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// Compares and names the first differing byte.
fn same(what: &str, got: &[u8], want: &[u8]) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        panic!(
            "{what}: byte {i} differs: got {:02x?}, want {:02x?}",
            got.get(i),
            want.get(i)
        );
    }
}

#[test]
fn rping_handshake_and_teardown_match_kernel_rxe_byte_for_byte() {
    let client_gid = mapped([10, 77, 0, 3]);
    let server_gid = mapped([10, 77, 0, 2]);
    let mut client = Cm::new(Config {
        ca_guid: 0x5054_00ff_fe77_0003,
        local_gid: client_gid,
        ack_delay: 15,
        hi_tid: 2,
        id_xor: 0x1a4c_fd47,
        ..Config::default()
    });
    let mut server = Cm::new(Config {
        ca_guid: 0x5054_00ff_fe77_0002,
        local_gid: server_gid,
        ack_delay: 15,
        hi_tid: 7,
        // The listener takes the first ID, the connection the second.
        id_xor: 0x8d1f_2b6f ^ 1,
        ..Config::default()
    });
    let listener = server.create_id();
    let sid = service_id(PortSpace::Tcp, 7174);
    server.listen(listener, sid, 0).unwrap();

    // The capture's kernel used CMA_IBOE_PACKET_LIFETIME 18 and hashed flow label.
    let mut path = Path::roce(client_gid, server_gid);
    path.packet_life_time = 18;
    path.flow_label = 0x5252f;
    let hdr = CmaHeader {
        src_port: 0xadb7,
        src: "10.77.0.3".parse().unwrap(),
        dst: "10.77.0.2".parse().unwrap(),
    };
    let mut p = ConnectParams::rdma_cm(sid, 0x29, 0xa4_6f83, path);
    p.private_data = hdr.encode(&[], private_len::REQ).unwrap();
    let id = client.create_id();
    assert_eq!(id.0, 0x1a4c_fd47);
    client.connect(0, id, &p).unwrap();
    let req = client.poll_transmit().unwrap();
    assert_eq!(req.dest, server_gid);
    same("REQ", &req.mad[..], &hex(GOLDEN_REQ));

    server.handle_mad(10, client_gid, &req.mad[..]);
    let Some(Event::ConnectRequest {
        id: sid_conn,
        req: info,
    }) = server.poll_event()
    else {
        panic!("no connect request")
    };
    assert_eq!(sid_conn.0, 0x8d1f_2b6f);
    let (h, user) = CmaHeader::parse(&info.private_data).unwrap();
    assert_eq!((h, user.len()), (hdr, 56));
    assert_eq!((info.remote_qpn, info.starting_psn), (0x29, 0xa4_6f83));
    // The REQ's local ACK timeout 19 gives packet life time 18 back.
    assert_eq!(info.path.packet_life_time, 18);
    let a = AcceptParams {
        qpn: 0x29,
        starting_psn: 0x73_9acb,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        failover_accepted: 0,
        srq: false,
        flow_control: false,
        private_data: Vec::new(),
    };
    server.accept(20, sid_conn, &a).unwrap();
    let rep = server.poll_transmit().unwrap();
    assert_eq!(rep.dest, client_gid);
    same("REP", &rep.mad[..], &hex(GOLDEN_REP));

    client.handle_mad(30, server_gid, &rep.mad[..]);
    assert!(matches!(
        client.poll_event(),
        Some(Event::ConnectResponse { .. })
    ));
    client.rtu(40, id, &[]).unwrap();
    let rtu = client.poll_transmit().unwrap();
    same("RTU", &rtu.mad[..], &hex(GOLDEN_RTU));
    server.handle_mad(50, client_gid, &rtu.mad[..]);
    assert!(matches!(
        server.poll_event(),
        Some(Event::Established { .. })
    ));
    assert_eq!(server.state(sid_conn), Some(State::Established));

    client.disconnect(60, id, &[]).unwrap();
    let dreq = client.poll_transmit().unwrap();
    same("DREQ", &dreq.mad[..], &hex(GOLDEN_DREQ));
    server.handle_mad(70, client_gid, &dreq.mad[..]);
    assert!(matches!(
        server.poll_event(),
        Some(Event::DisconnectRequest { .. })
    ));
    server.disconnect(80, sid_conn, &[]).unwrap();
    let drep = server.poll_transmit().unwrap();
    same("DREP", &drep.mad[..], &hex(GOLDEN_DREP));
    client.handle_mad(90, server_gid, &drep.mad[..]);
    assert!(matches!(
        client.poll_event(),
        Some(Event::Disconnected {
            timed_out: false,
            ..
        })
    ));
    assert_eq!(client.state(id), Some(State::Timewait));
    assert_eq!(server.state(sid_conn), Some(State::Timewait));
}
