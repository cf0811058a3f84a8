//! The connected sockets against real sockets on loopback.

use super::*;

fn to(local: IpAddr, peer: IpAddr, meta: Meta) -> Path {
    Path { local, peer, meta }
}

/// Sends one 8-byte SEND ONLY from `local` to `peer` (default TTL and TOS) through
/// `conn`.
fn send_one(
    conn: &mut ConnTx,
    scratch: &mut sys::SendScratch,
    local: IpAddr,
    peer: IpAddr,
) -> Option<(u16, usize)> {
    let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
    let one = [msg(peer, 0, &[24])];
    conn.send_whole(to(local, peer, DEF), &one, &[0], &mut ts, scratch)
}

/// Checks that `conn` refuses a packet from `local` to `peer` (the caller sends it
/// through the unconnected socket) without rewriting it.
fn assert_goes_unconnected(
    conn: &mut ConnTx,
    scratch: &mut sys::SendScratch,
    local: IpAddr,
    peer: IpAddr,
) {
    let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
    let before = ts[0].payload.clone();
    let one = [msg(peer, 0, &[24])];
    assert!(conn
        .send_whole(to(local, peer, DEF), &one, &[0], &mut ts, scratch)
        .is_none());
    assert_eq!(ts[0].payload, before, "nothing rewritten");
}

const DEF: Meta = Meta {
    hop_limit: 64,
    traffic_class: 0,
};

/// A "peer": a UDP socket on a free 127.0.0.x:4791, x at most `top` (the device's
/// own addresses are 127.0.0.2..=254 too; any free one will do). Tests that free
/// and take their address again start from their own `top`.
fn peer_below(top: u8) -> (Ipv4Addr, UdpSocket) {
    for x in (100..=top).rev() {
        let a = Ipv4Addr::new(127, 0, 0, x);
        if let Ok(s) = UdpSocket::bind(SocketAddr::new(IpAddr::V4(a), ROCE_PORT)) {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            return (a, s);
        }
    }
    panic!("no free 127.0.0.x:4791");
}

/// The set-up of most tests: 127.0.0.1 sending to a fresh peer (its address at most
/// 127.0.0.`top`), an empty `ConnTx` and send scratch.
fn rig(top: u8) -> (IpAddr, IpAddr, UdpSocket, ConnTx, sys::SendScratch) {
    let (peer_ip, peer_sock) = peer_below(top);
    let (local, peer) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(peer_ip));
    (
        local,
        peer,
        peer_sock,
        ConnTx::default(),
        sys::SendScratch::default(),
    )
}

impl ConnTx {
    /// [`ConnTx::send`] of a batch without bodies (every test packet is whole).
    fn send_whole(
        &mut self,
        path: Path,
        msgs: &[sys::Outgoing],
        order: &[usize],
        ts: &mut [Transmit],
        scratch: &mut sys::SendScratch,
    ) -> Option<(u16, usize)> {
        self.send(path, msgs, order, ts, &[], scratch)
    }
}

/// A packet as the engine hands it over: a BTH (opcode `op`), `n` payload bytes, an
/// ICRC for the unconnected socket (port 4791, ID 0) that the send must replace.
fn packet(local: IpAddr, peer: IpAddr, op: u8, n: usize, fill: u8) -> Transmit {
    let mut payload = vec![fill; 12 + n + 4];
    payload[0] = op;
    payload[1] = 0x40;
    payload[4] = 0;
    rverbs_engine::net::fill_icrc(local, peer, ROCE_PORT, &mut payload);
    Transmit {
        src: local,
        dst: peer,
        src_port: ROCE_PORT,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        roce_v1: false,
        payload,
        body: None,
    }
}

fn msg(dst: IpAddr, first: usize, lens: &[usize]) -> sys::Outgoing {
    sys::Outgoing {
        dst: SocketAddr::new(dst, ROCE_PORT),
        first,
        count: lens.len(),
        segment: if lens.len() > 1 { lens[0] as u16 } else { 0 },
        first_len: lens[0],
        last_len: *lens.last().unwrap(),
        bytes: lens.iter().sum(),
    }
}

/// The copies looped back to the link's error queue: (IPv4 ID, UDP payload) of each
/// sent skb, the UDP payload found from its UDP header's length.
fn looped(conn: &ConnTx, local: IpAddr, peer: IpAddr) -> Vec<(u16, [u8; 28], Vec<u8>)> {
    let link = conn
        .links
        .iter()
        .find(|l| l.local == local && l.peer == peer)
        .unwrap();
    let sock = link.sock.as_ref().unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match sys::recv_error_queue(sock, &mut buf) {
            Ok(n) => {
                // Ethernet header on loopback, then IPv4 (no options) and UDP.
                let ip = &buf[14..n];
                let udp_len = usize::from(u16::from_be_bytes([ip[24], ip[25]]));
                let mut h = [0u8; 28];
                h.copy_from_slice(&ip[..28]);
                out.push((
                    u16::from_be_bytes([ip[4], ip[5]]),
                    h,
                    ip[28..20 + udp_len].to_vec(),
                ));
            }
            Err(_) if !out.is_empty() => break,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    out
}

/// Checks a looped skb: each segment of `seg` bytes carries the ICRC of the real
/// header with the skb's ID plus the segment's index.
fn check_icrc(id: u16, h: &[u8; 28], udp_payload: &[u8], seg: usize) {
    for (k, p) in udp_payload.chunks(seg).enumerate() {
        let mut ip = [0u8; 20];
        ip.copy_from_slice(&h[..20]);
        ip[2..4].copy_from_slice(&((28 + p.len()) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
        let mut udp = [0u8; 8];
        udp.copy_from_slice(&h[20..]);
        udp[4..6].copy_from_slice(&((8 + p.len()) as u16).to_be_bytes());
        let n = p.len() - 4;
        let want = icrc::compute_parts(&ip, &udp, &p[..n]).unwrap();
        assert_eq!(
            u32::from_le_bytes(p[n..].try_into().unwrap()),
            want,
            "segment {k} of skb with ID {id}"
        );
    }
}

#[test]
fn sends_carry_the_icrc_of_their_real_ipv4_header() {
    let (local, peer, peer_sock, mut conn, mut scratch) = rig(250);
    // A single datagram, a train of three (24, 24, 20 bytes) and another single.
    let mut ts = vec![
        packet(local, peer, 0x04, 8, 1),
        packet(local, peer, 0x04, 8, 2),
        packet(local, peer, 0x04, 8, 3),
        packet(local, peer, 0x11, 4, 4),
        packet(local, peer, 0x04, 100, 5),
    ];
    let order = [0, 1, 2, 3, 4];
    let first = [msg(peer, 0, &[24])];
    assert!(conn
        .send_whole(to(local, peer, DEF), &first, &order, &mut ts, &mut scratch)
        .is_some());
    assert_eq!(conn.connected(), 1);
    assert_eq!(
        conn.probes, 2,
        "a probe learns the counter, a second confirms it"
    );
    // From here on every sent skb is looped back with its real header.
    let sock = conn.links[0].sock.as_ref().unwrap();
    sys::set_tx_loop(sock, true).unwrap();
    let predicted = conn.links[0].next_id.unwrap();
    let rest = [msg(peer, 1, &[24, 24, 20]), msg(peer, 4, &[116])];
    assert!(conn
        .send_whole(to(local, peer, DEF), &rest, &order, &mut ts, &mut scratch)
        .is_some());
    let got = looped(&conn, local, peer);
    // TX_SCHED and TX_SOFTWARE: each skb may come back twice; keep one per ID.
    let mut skbs: Vec<_> = got.into_iter().collect();
    skbs.dedup_by_key(|(id, _, _)| *id);
    assert_eq!(skbs.len(), 2, "two skbs: the train and the last datagram");
    assert_eq!(skbs[0].0, predicted);
    assert_eq!(skbs[1].0, predicted.wrapping_add(1));
    check_icrc(skbs[0].0, &skbs[0].1, &skbs[0].2, 24);
    check_icrc(skbs[1].0, &skbs[1].1, &skbs[1].2, 116);
    assert_eq!(conn.links[0].next_id, Some(predicted.wrapping_add(2)));
    // The peer got all five datagrams (the train cut up on receipt), from the
    // link's port.
    let mut buf = [0u8; 256];
    let mut lens = Vec::new();
    for _ in 0..5 {
        let (n, from) = peer_sock.recv_from(&mut buf).unwrap();
        assert_eq!(from.port(), conn.links[0].port);
        lens.push(n);
    }
    assert_eq!(lens, [24, 24, 24, 20, 116]);
    // A second probe finds the counter where the sends left it.
    conn.links[0].next_id = None;
    let old = predicted.wrapping_add(2);
    let before = conn.probes;
    assert!(conn
        .send_whole(to(local, peer, DEF), &first, &order, &mut ts, &mut scratch)
        .is_some());
    assert_eq!(conn.probes, before + 2);
    assert_eq!(
        conn.links[0].next_id,
        Some(old.wrapping_add(3)),
        "the probes took IDs {old} and the next, the datagram after them the next"
    );
}

#[test]
fn a_link_per_ttl_and_tos_sends_with_them() {
    let (local, peer, peer_sock, mut conn, mut scratch) = rig(250);
    let hop1 = Meta {
        hop_limit: 1,
        traffic_class: 0x10,
    };
    let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
    let one = [msg(peer, 0, &[24])];
    assert!(conn
        .send_whole(to(local, peer, hop1), &one, &[0], &mut ts, &mut scratch)
        .is_some());
    assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
    assert_eq!(conn.connected(), 2, "one socket per (peer, TTL, TOS)");
    let i = conn.links.iter().position(|l| l.meta == hop1).unwrap();
    sys::set_tx_loop(conn.links[i].sock.as_ref().unwrap(), true).unwrap();
    let predicted = conn.links[i].next_id.unwrap();
    assert!(conn
        .send_whole(to(local, peer, hop1), &one, &[0], &mut ts, &mut scratch)
        .is_some());
    let link = &conn.links[i];
    let sock = link.sock.as_ref().unwrap();
    let mut buf = [0u8; 256];
    let mut got = None;
    for _ in 0..2000 {
        if let Ok(n) = sys::recv_error_queue(sock, &mut buf) {
            got = Some(n);
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let n = got.expect("the copy came back");
    let ip = &buf[14..n];
    assert_eq!((ip[8], ip[1]), (1, 0x10), "TTL 1, TOS 0x10 on the wire");
    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), predicted);
    let mut h = [0u8; 28];
    h.copy_from_slice(&ip[..28]);
    check_icrc(predicted, &h, &ip[28..28 + 24], 24);
    let mut b = [0u8; 64];
    for _ in 0..3 {
        peer_sock.recv_from(&mut b).unwrap();
    }
}

#[test]
fn a_refused_send_relearns_the_counter() {
    // (Its address is freed and taken again: away from the other tests' range.)
    let (local, peer, peer_sock, mut conn, mut scratch) = rig(180);
    assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
    // The peer goes away: the next datagram draws an ICMP port unreachable, and
    // the send after it is refused (ECONNREFUSED) without taking an ID.
    drop(peer_sock);
    let mut refused = false;
    for _ in 0..20 {
        assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
        if conn.links[0].next_id.is_none() {
            refused = true;
            break;
        }
    }
    assert!(refused, "a refused send makes the counter unknown");
    // The peer is back; the next send probes again and is right on the wire.
    let _peer_sock = UdpSocket::bind(SocketAddr::new(peer, ROCE_PORT)).unwrap();
    let probes = conn.probes;
    let sock = conn.links[0].sock.as_ref().unwrap();
    sys::set_tx_loop(sock, true).unwrap();
    // (The probe turns the loop-back off when it is done; turn it on again after.)
    assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
    assert!(conn.probes > probes);
    let sock = conn.links[0].sock.as_ref().unwrap();
    sys::set_tx_loop(sock, true).unwrap();
    let predicted = conn.links[0].next_id.unwrap();
    assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
    let got = looped(&conn, local, peer);
    assert_eq!(got[0].0, predicted);
    check_icrc(got[0].0, &got[0].1, &got[0].2, 24);
}

/// Waits until `sock` holds a pending error (an ICMP port unreachable), without
/// taking it: nothing is received on a link's socket, and its error queue is empty
/// outside probes, so readiness is the error.
fn error_pending(sock: &Socket) -> bool {
    use std::os::fd::AsRawFd;
    let mut ready = Vec::new();
    sys::poll_readable(&[sock.as_raw_fd()], 500, &mut ready).is_ok() && ready[0]
}

#[test]
fn no_datagram_leaves_after_a_refused_one() {
    // Three messages (one `sendmmsg`), the first of them refused.
    refused_batch_leaves_nothing(150, &[msg_at(0, &[24]), msg_at(1, &[24]), msg_at(2, &[24])]);
}

#[test]
fn a_refused_train_leaves_nothing() {
    // One 3-segment train (gathered into one buffer, one `sendmsg`), refused.
    refused_batch_leaves_nothing(140, &[msg_at(0, &[24, 24, 24])]);
}

/// `msg` to the peer `refused_batch_leaves_nothing` fills in.
fn msg_at(first: usize, lens: &[usize]) -> sys::Outgoing {
    msg(IpAddr::V4(Ipv4Addr::UNSPECIFIED), first, lens)
}

/// With an ICMP error pending on the path's socket, `batch` (3 packets of 24
/// bytes) is refused at its first message: none of it leaves the connected
/// socket (it would carry ICRCs for guessed IDs), the counter is learned again.
fn refused_batch_leaves_nothing(top: u8, batch: &[sys::Outgoing]) {
    // (Its address is freed and taken again: away from the other tests' ranges.)
    let (local, peer, peer_sock, mut conn, mut scratch) = rig(top);
    let batch: Vec<_> = batch
        .iter()
        .map(|m| sys::Outgoing {
            dst: SocketAddr::new(peer, ROCE_PORT),
            ..*m
        })
        .collect();
    let mut one = vec![packet(local, peer, 0x04, 8, 1)];
    let single = [msg(peer, 0, &[24])];
    assert!(conn
        .send_whole(to(local, peer, DEF), &single, &[0], &mut one, &mut scratch)
        .is_some());
    // The peer goes away; a datagram to it leaves an ECONNREFUSED pending on the
    // socket, which the next send (the batch's first message) reports without
    // taking an ID.
    drop(peer_sock);
    let mut pending = false;
    for _ in 0..20 {
        conn.send_whole(to(local, peer, DEF), &single, &[0], &mut one, &mut scratch);
        let link = &conn.links[0];
        if link.next_id.is_some() && error_pending(link.sock.as_ref().unwrap()) {
            pending = true;
            break;
        }
    }
    assert!(pending, "an ICMP error is pending on the socket");
    // The peer is back (the error stays pending): every skb that leaves is looped
    // back with its real header.
    let _peer_sock = UdpSocket::bind(SocketAddr::new(peer, ROCE_PORT)).unwrap();
    sys::set_tx_loop(conn.links[0].sock.as_ref().unwrap(), true).unwrap();
    let mut ts: Vec<_> = (0..3)
        .map(|x| packet(local, peer, 0x04, 8, 10 + x))
        .collect();
    let (port, sent) = conn
        .send_whole(
            to(local, peer, DEF),
            &batch,
            &[0, 1, 2],
            &mut ts,
            &mut scratch,
        )
        .unwrap();
    assert_eq!(port, conn.links[0].port);
    assert_eq!(
        sent, 0,
        "the first is refused: it and the rest are the caller's"
    );
    assert_eq!(conn.links[0].next_id, None, "the counter is learned again");
    // Nothing left after the refused message with an ICRC for a guessed ID.
    let sock = conn.links[0].sock.as_ref().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut buf = [0u8; 256];
    let mut left = Vec::new();
    while let Ok(n) = sys::recv_error_queue(sock, &mut buf) {
        let ip = &buf[14..n];
        let mut h = [0u8; 28];
        h.copy_from_slice(&ip[..28]);
        let id = u16::from_be_bytes([ip[4], ip[5]]);
        check_icrc(id, &h, &ip[28..], 24);
        left.push(id);
    }
    assert!(
        left.is_empty(),
        "datagrams left the connected socket: {left:?}"
    );
}

#[test]
fn a_socket_that_refuses_its_probes_is_given_up_only_after_several() {
    let (local, peer, _peer_sock, mut conn, mut scratch) = rig(250);
    let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
    let one = [msg(peer, 0, &[24])];
    assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
    // From now on the socket refuses every datagram (EPIPE), as a full send buffer
    // refuses them for a while; the counter must be learned again.
    let sock = conn.links[0].sock.as_ref().unwrap();
    sock.shutdown(std::net::Shutdown::Write).unwrap();
    conn.links[0].next_id = None;
    for n in 1..REFUSED_PROBES {
        assert!(
            conn.send_whole(to(local, peer, DEF), &one, &[0], &mut ts, &mut scratch)
                .is_none(),
            "batch {n} goes through the unconnected socket"
        );
        assert_eq!(conn.connected(), 1, "kept after {n} refused probes");
    }
    assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
    assert_eq!(conn.connected(), 0, "given up");
}

#[test]
fn sockets_are_made_only_in_the_devices_namespace() {
    let (peer_ip, _peer_sock) = peer_below(250);
    let (local, peer) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(peer_ip));
    let mut scratch = sys::SendScratch::default();
    // A device of another namespace (no namespace has device and inode 0).
    let mut conn = ConnTx {
        netns: Some((0, 0)),
        ..ConnTx::default()
    };
    assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
    assert_eq!(
        (conn.links.len(), conn.probes),
        (0, 0),
        "nothing made, nothing kept"
    );
    // Back on a thread of the device's namespace, the socket is made.
    conn.netns = current_netns();
    assert!(conn.netns.is_some());
    assert!(send_one(&mut conn, &mut scratch, local, peer).is_some());
    assert_eq!(conn.connected(), 1);
}

#[test]
fn a_peer_without_a_socket_goes_through_the_unconnected_one() {
    let mut conn = ConnTx::default();
    let mut scratch = sys::SendScratch::default();
    // IPv4 from an IPv6 address: no connected socket can be made.
    let (local, peer) = (
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    );
    assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
    assert_eq!(conn.connected(), 0);
    // Asked again, it does not try again.
    assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
    assert_eq!(conn.links.len(), 1);
}

#[test]
fn without_looped_copies_ipv4_peers_use_the_unconnected_socket() {
    let (peer_ip, _peer_sock) = peer_below(250);
    let (local, peer) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(peer_ip));
    let mut conn = ConnTx {
        no_loop: true,
        ..ConnTx::default()
    };
    let mut scratch = sys::SendScratch::default();
    assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
    assert_eq!(
        (conn.probes, conn.links.len()),
        (0, 0),
        "no socket, no probe"
    );
}

#[test]
fn at_most_max_connected_peers_get_a_socket() {
    // Peers need not listen for the first datagram: only the cap is checked.
    let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut conn = ConnTx::default();
    let mut scratch = sys::SendScratch::default();
    let mut connected = 0;
    for x in 0..=MAX_CONNECTED as u8 {
        let peer = IpAddr::V4(Ipv4Addr::new(127, 1, 2, x + 1));
        let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
        let one = [msg(peer, 0, &[24])];
        if conn
            .send_whole(to(local, peer, DEF), &one, &[0], &mut ts, &mut scratch)
            .is_some()
        {
            connected += 1;
        }
    }
    assert_eq!(connected, MAX_CONNECTED);
    assert_eq!(conn.connected(), MAX_CONNECTED);
}

/// With every slot taken, a new path gets the slot of one idle for
/// `IDLE_BATCHES` batches (its socket closed), never that of a path in use; the
/// evicted path, used again, is set up afresh (a new port, a new probe) and its
/// packets carry the ICRC of their real header.
#[test]
fn an_idle_path_gives_its_slot_to_a_new_one() {
    let (local, hot, hot_sock, mut conn, mut scratch) = rig(250);
    assert!(send_one(&mut conn, &mut scratch, local, hot).is_some());
    let hot_port = conn.links[0].port;
    let idle = |x: u8| IpAddr::V4(Ipv4Addr::new(127, 1, 3, x));
    // The path that comes back has a listener (no ICMP error refuses its sends).
    let back = UdpSocket::bind(SocketAddr::new(idle(1), ROCE_PORT)).unwrap();
    for x in 1..MAX_CONNECTED as u8 {
        let peer = idle(x);
        let mut ts = vec![packet(local, peer, 0x04, 8, 1)];
        let one = [msg(peer, 0, &[24])];
        assert!(conn
            .send_whole(to(local, peer, DEF), &one, &[0], &mut ts, &mut scratch)
            .is_some());
    }
    assert_eq!(conn.connected(), MAX_CONNECTED);
    let newcomer = IpAddr::V4(Ipv4Addr::new(127, 1, 3, 200));
    let one = [msg(newcomer, 0, &[24])];
    let try_newcomer = |conn: &mut ConnTx, scratch: &mut sys::SendScratch| {
        let mut ts = vec![packet(local, newcomer, 0x04, 8, 1)];
        conn.send_whole(to(local, newcomer, DEF), &one, &[0], &mut ts, scratch)
    };
    assert!(
        try_newcomer(&mut conn, &mut scratch).is_none(),
        "every path was used within the last IDLE_BATCHES batches"
    );
    // The hot path stays busy while the others idle.
    let mut b = [0u8; 64];
    for _ in 0..IDLE_BATCHES {
        assert!(send_one(&mut conn, &mut scratch, local, hot).is_some());
        hot_sock.recv_from(&mut b).unwrap();
    }
    let probes = conn.probes;
    assert!(try_newcomer(&mut conn, &mut scratch).is_some());
    assert_eq!(conn.probes, probes + 2, "the new socket was probed");
    assert_eq!(conn.connected(), MAX_CONNECTED);
    assert_eq!(conn.links.len(), MAX_CONNECTED);
    assert!(
        !conn.links.iter().any(|l| l.peer == idle(1)),
        "the longest-idle path gave its slot"
    );
    let h = conn.links.iter().find(|l| l.peer == hot).unwrap();
    assert_eq!(h.port, hot_port, "the path in use kept its socket");
    // The evicted path comes back as a new one (evicting the next idle one), and
    // what it sends is right on the wire.
    assert!(send_one(&mut conn, &mut scratch, local, idle(1)).is_some());
    let i = conn.links.iter().position(|l| l.peer == idle(1)).unwrap();
    assert!(!conn.links.iter().any(|l| l.peer == idle(2)));
    sys::set_tx_loop(conn.links[i].sock.as_ref().unwrap(), true).unwrap();
    let predicted = conn.links[i].next_id.unwrap();
    assert!(send_one(&mut conn, &mut scratch, local, idle(1)).is_some());
    // (TX_SCHED and TX_SOFTWARE: the skb may come back twice.)
    let mut copies = looped(&conn, local, idle(1));
    copies.dedup_by_key(|(id, _, _)| *id);
    assert_eq!(copies.len(), 1);
    let (id, h, body) = &copies[0];
    assert_eq!(*id, predicted);
    check_icrc(*id, h, body, 24);
    for _ in 0..3 {
        assert_eq!(back.recv_from(&mut b).unwrap().0, 24);
    }
}

#[test]
fn a_counter_that_does_not_step_by_one_gets_no_socket() {
    let (local, peer, _peer_sock, mut conn, mut scratch) = rig(250);
    conn.skew_probes = true;
    assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
    assert_eq!((conn.probes, conn.links.len(), conn.connected()), (2, 1, 0));
    // Given up: no further probe for this path.
    assert_goes_unconnected(&mut conn, &mut scratch, local, peer);
    assert_eq!(conn.probes, 2);
}

#[test]
fn ipv6_needs_no_probe() {
    let Ok(peer_sock) = UdpSocket::bind("[::1]:0") else {
        eprintln!("skipped: no IPv6 loopback");
        return;
    };
    // The link connects to port 4791; a socket there may not be free, so this only
    // checks the rewrite and the absence of a probe (the datagram may be refused).
    drop(peer_sock);
    let local = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    let mut conn = ConnTx::default();
    let mut scratch = sys::SendScratch::default();
    let mut ts = vec![packet(local, local, 0x04, 8, 1)];
    let one = [msg(local, 0, &[24])];
    assert!(conn
        .send_whole(to(local, local, DEF), &one, &[0], &mut ts, &mut scratch)
        .is_some());
    assert_eq!(conn.probes, 0);
    let port = conn.links[0].port;
    let n = ts[0].payload.len() - 4;
    let want = icrc::compute_addrs(local, local, 0, port, &ts[0].payload[..n]).unwrap();
    assert_eq!(ts[0].payload[n..], want.to_le_bytes());
}
