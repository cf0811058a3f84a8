//! A hand-cranked network for tests that read like packet traces: no `Sim::step`, the
//! test moves every datagram itself (and so may drop, duplicate or reorder any of them
//! by index), advances virtual time to the engines' own deadlines, and looks at each
//! packet's opcode, PSN and AETH.
#![allow(dead_code)]

use rverbs_engine::sim::Sim;
use rverbs_engine::*;
use rverbs_wire::bth::BthRepr;
use rverbs_wire::ext::{NakCode, Syndrome};
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::{Packet, PacketRepr};
use rverbs_wire::psn::Psn;

/// A datagram one engine sent.
#[derive(Clone)]
pub struct Pkt {
    pub from: usize,
    pub t: Transmit,
}

impl Pkt {
    pub fn packet(&self) -> Packet<&[u8]> {
        Packet::new_checked(&self.t.payload[..]).expect("engine output parses")
    }
    pub fn repr(&self) -> PacketRepr<'_> {
        PacketRepr::parse(&self.packet()).expect("engine output parses")
    }
    pub fn opcode(&self) -> Opcode {
        self.packet().bth().opcode()
    }
    pub fn psn(&self) -> u32 {
        self.packet().bth().psn().value()
    }
    pub fn payload(&self) -> Vec<u8> {
        self.packet().payload().to_vec()
    }
    /// One trace line: `OPCODE PSN`, then the AETH as `ACK|RNR t=N|NAK-SEQ|NAK-INV|
    /// NAK-ACC|NAK-OP msn=N` when there is one.
    pub fn line(&self) -> String {
        let mut s = format!("{} {}", self.opcode(), self.psn());
        if let Some(a) = self.packet().aeth() {
            let syn = match Syndrome::from_byte(a.syndrome()) {
                Syndrome::Ack { .. } => "ACK".to_string(),
                Syndrome::RnrNak { timer } => format!("RNR t={timer}"),
                Syndrome::Nak(NakCode::PsnSequenceError) => "NAK-SEQ".into(),
                Syndrome::Nak(NakCode::InvalidRequest) => "NAK-INV".into(),
                Syndrome::Nak(NakCode::RemoteAccessError) => "NAK-ACC".into(),
                Syndrome::Nak(NakCode::RemoteOperationalError) => "NAK-OP".into(),
                other => format!("{other:?}"),
            };
            s += &format!(" {syn} msn={}", a.msn());
        }
        s
    }
}

/// Trace lines of packets.
pub fn lines(ps: &[Pkt]) -> Vec<String> {
    ps.iter().map(Pkt::line).collect()
}

/// Everything engine `from` wants to send now.
pub fn tx(sim: &mut Sim, from: usize) -> Vec<Pkt> {
    let mut out = Vec::new();
    while let Some(t) = sim.engines[from].poll_transmit(sim.now) {
        out.push(Pkt { from, t });
    }
    out
}

/// Delivers one packet to the engine that owns its destination address.
pub fn rx(sim: &mut Sim, p: &Pkt) {
    let to = (0..sim.engines.len())
        .find(|&i| sim.addr(i) == p.t.dst)
        .expect("a destination engine");
    let d = Datagram {
        src: p.t.src,
        dst: p.t.dst,
        src_port: p.t.src_port,
        hop_limit: p.t.hop_limit,
        traffic_class: p.t.traffic_class,
        flow_label: p.t.flow_label,
        ipv4_id: Some(0),
        roce_v1: false,
        icrc_checked: false,
        payload: &p.t.payload,
    };
    let now = sim.now;
    sim.engines[to].handle_datagram(now, &d);
}

/// Delivers packets in order.
pub fn rx_all(sim: &mut Sim, ps: &[Pkt]) {
    for p in ps {
        rx(sim, p);
    }
}

/// Advances virtual time to engine `i`'s next deadline and fires it; returns that time.
pub fn fire(sim: &mut Sim, i: usize) -> Nanos {
    let at = sim.engines[i].poll_timeout().expect("a pending timer");
    sim.now = sim.now.max(at);
    let now = sim.now;
    sim.engines[i].handle_timeout(now);
    now
}

/// A hand-built packet from engine `from`'s address to engine `to`'s, with a valid ICRC.
pub fn craft(sim: &Sim, from: usize, to: usize, repr: &PacketRepr<'_>) -> Pkt {
    let mut payload = vec![0u8; repr.buffer_len()];
    repr.emit(&mut payload).expect("a consistent repr");
    let (src, dst) = (sim.addr(from), sim.addr(to));
    net::fill_icrc(src, dst, 0xc000, &mut payload);
    Pkt {
        from,
        t: Transmit {
            src,
            dst,
            src_port: 0xc000,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            roce_v1: false,
            payload,
            body: None,
        },
    }
}

/// Every pending asynchronous event of engine `i`.
pub fn events(sim: &mut Sim, i: usize) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| sim.engines[i].poll_event()).collect()
}

/// A BTH for a hand-made packet to QP `qpn` at PSN `psn` (P_Key default, AckReq and
/// MigReq set, as a requester sends them).
pub fn bth(opcode: Opcode, qpn: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: true,
        pad: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: qpn,
        ack_req: true,
        psn: Psn::new(psn),
    }
}
