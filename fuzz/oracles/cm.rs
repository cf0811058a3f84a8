// The CM receive path under arbitrary MADs (shared by the `cm_rx` fuzz target and
// `crates/cm/tests/fuzz_seeds.rs`): two `rverbs_cm::Cm` endpoints with a listener, a
// connection established through REQ/REP/RTU and a SIDR request outstanding take each
// input MAD, then exchange whatever they send in answer (the oracle plays both
// consumers: accept, RTU, answer DREQs and SIDR requests), with virtual time jumping so
// retries, time-outs and time wait fire.
//
// Input: records `[ctl, mad(256, zero-padded)]`. ctl bit 0: which endpoint receives it;
// bits 1-2: patch the MAD's communication IDs (bytes 24-31) with a live pair so hostile
// bytes reach real state (0: no patch, 1: the connection's, 2: swapped, 3: the SIDR
// request's ID); bits 3-7: virtual time jumps (x 250 ms).
// Checks: no panic; `rx` counts every MAD and no drop counter passes it; everything
// sent is a 256-byte CM MAD that `CmMadRepr` parses, to a known GID; traffic per input
// stays bounded; afterwards both endpoints still listen, connect and accept.

use rverbs_cm::cma::{service_id, PortSpace};
use rverbs_cm::{AcceptParams, Cm, CmId, CmStats, Config, ConnectParams, Event, Path};
use rverbs_wire::mad::cm::{CmMad, CmMadRepr};

const SID: u64 = service_id(PortSpace::Tcp, 4791);

fn gid(i: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12] = 10;
    g[15] = i + 1;
    g
}

/// What a run reached (the seed replay checks the seeds get somewhere).
#[derive(Debug, Default, Clone, Copy)]
pub struct Reached {
    pub events: u64,
    pub sent: u64,
    pub dropped: u64,
}

struct Pair {
    cm: [Cm; 2],
    now: u64,
    conn: (CmId, CmId),
    sidr: CmId,
    reached: Reached,
}

fn drops(s: &CmStats) -> u64 {
    s.malformed
        + s.wrong_class
        + s.bad_class_version
        + s.bad_method
        + s.unknown_attribute
        + s.unsupported_transport
        + s.unmatched
}

fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        qpn,
        starting_psn: 7,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        failover_accepted: 0,
        srq: false,
        flow_control: false,
        private_data: vec![],
    }
}

impl Pair {
    fn new() -> Self {
        let cfg = |i: u8| Config {
            ca_guid: 0x100 + i as u64,
            local_gid: gid(i),
            hi_tid: 1 + i as u32,
            id_xor: 0x4000_0000 * (i as u32 + 1),
            ..Config::default()
        };
        let mut cm = [Cm::new(cfg(0)), Cm::new(cfg(1))];
        let l = cm[1].create_id();
        cm[1].listen(l, SID, 4).unwrap();
        let u = cm[1].create_id();
        cm[1].listen(u, service_id(PortSpace::Udp, 1), 4).unwrap();
        let a = cm[0].create_id();
        let p = ConnectParams::rdma_cm(SID, 0x11, 0x22, Path::roce(gid(0), gid(1)));
        cm[0].connect(0, a, &p).unwrap();
        let sidr = cm[0].create_id();
        let mut pair = Pair {
            cm,
            now: 0,
            conn: (a, CmId(0)),
            sidr,
            reached: Reached::default(),
        };
        pair.exchange();
        let sp = rverbs_cm::SidrParams {
            service_id: service_id(PortSpace::Udp, 2),
            remote_gid: gid(1),
            pkey: 0xffff,
            timeout_ms: 100,
            max_cm_retries: 2,
            private_data: vec![],
        };
        pair.cm[0].sidr_request(0, sidr, &sp).unwrap();
        pair
    }

    /// Moves MADs both ways and plays both consumers, a bounded number of rounds.
    fn exchange(&mut self) {
        for _ in 0..8 {
            let mut moved = 0;
            for from in 0..2 {
                let mut sent = 0;
                while let Some(t) = self.cm[from].poll_transmit() {
                    sent += 1;
                    assert!(sent <= 64, "endpoint {from} floods");
                    assert_eq!(t.mad.len(), 256);
                    let repr = CmMadRepr::parse(&CmMad::new_checked(&t.mad[..]).unwrap())
                        .expect("the CM sends only well-formed CM MADs");
                    assert_eq!(repr.header.class_version, 2);
                    assert!(t.dest == gid(0) || t.dest == gid(1) || t.dest == [0; 16]);
                    self.reached.sent += 1;
                    let to = 1 - from;
                    if t.dest == gid(to as u8) {
                        self.cm[to].handle_mad(self.now, gid(from as u8), &t.mad[..]);
                        moved += 1;
                    }
                }
            }
            for side in 0..2 {
                while let Some(e) = self.cm[side].poll_event() {
                    self.reached.events += 1;
                    let now = self.now;
                    let cm = &mut self.cm[side];
                    // Consumer calls may fail in states the hostile input caused; they
                    // must fail with an error, never a panic.
                    let _ = match e {
                        Event::ConnectRequest { id, req } => {
                            if self.conn.1 == CmId(0) {
                                self.conn.1 = id;
                            }
                            cm.accept(now, id, &accept_params(req.remote_qpn ^ 0x55))
                        }
                        Event::ConnectResponse { id, .. } => cm.rtu(now, id, b"rtu"),
                        Event::DisconnectRequest { id, .. } => cm.disconnect(now, id, &[]),
                        Event::SidrRequest { id, .. } => cm.sidr_reply(
                            now,
                            id,
                            &rverbs_cm::SidrReply {
                                qpn: 0x99,
                                qkey: 0x1234,
                                ..rverbs_cm::SidrReply::status(0)
                            },
                        ),
                        _ => Ok(()),
                    };
                }
            }
            if moved == 0 {
                break;
            }
        }
    }

    fn step(&mut self, ctl: u8, mad: &mut [u8; 256]) {
        let to = (ctl & 1) as usize;
        let (a, p) = self.conn;
        let (mine, theirs) = if to == 0 { (a.0, p.0) } else { (p.0, a.0) };
        match (ctl >> 1) & 3 {
            1 => {
                mad[24..28].copy_from_slice(&theirs.to_be_bytes());
                mad[28..32].copy_from_slice(&mine.to_be_bytes());
            }
            2 => {
                mad[24..28].copy_from_slice(&mine.to_be_bytes());
                mad[28..32].copy_from_slice(&theirs.to_be_bytes());
            }
            3 => mad[24..28].copy_from_slice(&self.sidr.0.to_be_bytes()),
            _ => {}
        }
        let before = self.cm[to].stats();
        self.cm[to].handle_mad(self.now, gid(1 - to as u8), &mad[..]);
        let after = self.cm[to].stats();
        assert_eq!(after.rx, before.rx + 1);
        assert!(
            drops(&after) - drops(&before) <= 1,
            "{before:?} -> {after:?}"
        );
        self.reached.dropped += drops(&after) - drops(&before);
        self.exchange();
        self.now += (ctl >> 3) as u64 * 250_000_000;
        for cm in &mut self.cm {
            if cm.poll_timeout().is_some_and(|t| t <= self.now) {
                cm.handle_timeout(self.now);
            }
            assert!(cm.poll_timeout().is_none_or(|t| t > self.now));
        }
        self.exchange();
    }
}

/// Runs the input; returns what it reached.
pub fn run(data: &[u8]) -> Reached {
    let mut pair = Pair::new();
    for rec in data.chunks(257).take(64) {
        let mut mad = [0u8; 256];
        let body = &rec[1..];
        mad[..body.len()].copy_from_slice(body);
        pair.step(rec[0], &mut mad);
    }
    // Both still work: a fresh connection on a fresh service ID.
    let now = pair.now;
    let l = pair.cm[1].create_id();
    pair.cm[1].listen(l, SID + 1, 0).unwrap();
    let a = pair.cm[0].create_id();
    let p = ConnectParams::rdma_cm(SID + 1, 0x77, 1, Path::roce(gid(0), gid(1)));
    pair.cm[0].connect(now, a, &p).unwrap();
    pair.exchange();
    assert!(pair.cm[0].state(a).is_some());
    pair.reached
}

/// The fuzz entry point.
pub fn cm_rx(data: &[u8]) {
    run(data);
}
