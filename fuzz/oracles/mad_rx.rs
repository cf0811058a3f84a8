// The MAD receive path under arbitrary bytes (shared by the `mad_rx` fuzz target and
// `crates/engine/tests/fuzz_seeds.rs`): `process_mad` with an arbitrary WC and GRH, the
// GSI receive path (`Engine::gsi_receive`) and the local SMP path, over a sequence of
// MADs so keys set by one MAD are checked against the next.
//
// Input: records `[ctl, wc(6), grh(40, when ctl & 1), mad(256, zero-padded)]`; ctl
// bits 1-2 are the process_mad flags, bit 3 says whether a WC is passed, bits 4-7 how
// far virtual time jumps (0.3 s steps, so leases and the trap rate limit expire).
// Checks: no panic; only the three result bits; a reply is a GetResp of the same
// class, attribute and TransactionID, and nothing else touches the MAD; a failure only
// for a base version other than 1; traps are Notice Trap MADs of class SM or BM; what
// the GSI sends is a valid UD packet from QP1 with a good ICRC, at most a few per MAD.

use rverbs_engine::mad::{flags, gsi, GrhArea, Mad, MadPort, MadResult, NodeIdentity};
use rverbs_engine::net::{icrc_ok, ip_to_gid};
use rverbs_engine::{Config, Counters, Engine, Wc, WcFlags, WcOpcode};
use rverbs_wire::packet::Packet;
use std::net::{IpAddr, Ipv4Addr};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

fn check_result(r: MadResult, inp: &Mad, out: &Mad, mkey_dropped: bool) {
    assert_eq!(r.0 & !7, 0, "unknown result bits {r:?}");
    if r == MadResult::FAILURE {
        // Only a bad base version, or an SMP dropped for its M_Key (qib/hfi1).
        assert!(inp[0] != 1 || mkey_dropped, "FAILURE for a base version 1 MAD");
    }
    if mkey_dropped {
        assert_eq!(r, MadResult::FAILURE);
        assert!(matches!(inp[1], 0x01 | 0x81));
    }
    if r.contains(MadResult::REPLY) {
        assert!(r.contains(MadResult::SUCCESS));
        assert!(!r.contains(MadResult::CONSUMED));
        assert_eq!(out[3], 0x81, "a reply is a GetResp");
        // A response (method with the R bit) is never answered: the answer could
        // bounce between two ports forever.
        assert_eq!(inp[3] & 0x80, 0, "a reply to response method {:#x}", inp[3]);
        assert_eq!(&out[..3], &inp[..3]);
        assert_eq!(&out[8..18], &inp[8..18]);
    } else {
        assert_eq!(&out[..], &inp[..], "a MAD not answered is left alone");
    }
}

fn check_transmit(t: &rverbs_engine::Transmit) {
    let p = Packet::new_checked(&t.payload[..]).expect("the GSI sends valid packets");
    assert_eq!(p.deth().map(|d| d.src_qp()), Some(gsi::GSI_QPN));
    assert_eq!(p.payload().len(), 256);
    assert!(icrc_ok(&t.as_received()));
}

/// What one input did, so the seed replay can show the seeds reach the agents.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reached {
    pub replies: u64,
    pub consumed: u64,
    pub traps: u64,
    pub sent: u64,
}

pub fn mad_rx(data: &[u8]) {
    run(data);
}

pub fn run(data: &[u8]) -> Reached {
    let mut reached = Reached::default();
    let id = NodeIdentity { node_guid: 0x0002_c9ff_fe00_0001, ..NodeIdentity::default() };
    let mut port = MadPort::new(id.clone());
    let mut engine = Engine::new(Config { gids: vec![ip_to_gid(LOCAL)], ..Config::default() });
    engine.mad_port_mut().node = id;
    let counters = Counters { tx_packets: 5, tx_bytes: 1400, rx_packets: 3, rx_bytes: 900, ..Counters::default() };
    let mut now = 0u64;
    let mut rest = data;
    let mut rounds = 0;
    while !rest.is_empty() && rounds < 64 {
        rounds += 1;
        let ctl = rest[0];
        rest = &rest[1..];
        let mut take = |n: usize| {
            let (a, b) = rest.split_at(n.min(rest.len()));
            rest = b;
            a
        };
        let w = take(6);
        let mut wb = [0u8; 6];
        wb[..w.len()].copy_from_slice(w);
        let wc = Wc {
            opcode: WcOpcode::Recv,
            qp_num: 1,
            src_qp: u32::from_be_bytes([0, wb[0], wb[1], wb[2]]),
            slid: u16::from_be_bytes([wb[3], wb[4]]),
            pkey_index: u16::from(wb[5]),
            wc_flags: WcFlags::GRH,
            byte_len: 296,
            ..Wc::default()
        };
        let grh: Option<GrhArea> = (ctl & 1 != 0).then(|| {
            let g = take(40);
            let mut a = [0u8; 40];
            a[..g.len()].copy_from_slice(g);
            a
        });
        let m = take(256);
        let mut mad = [0u8; 256];
        mad[..m.len()].copy_from_slice(m);
        let mad_flags = u32::from(ctl >> 1) & (flags::IGNORE_MKEY | flags::IGNORE_BKEY);
        let with_wc = ctl & 8 != 0;
        now += u64::from(ctl >> 4) * 300_000_000;

        let mkey_drops = port.stats.mkey_drops;
        let (r, out) = port.process_mad(
            now,
            &counters,
            mad_flags,
            1,
            with_wc.then_some(&wc),
            grh.as_ref(),
            &mad,
        );
        let mkey_dropped = port.stats.mkey_drops != mkey_drops;
        check_result(r, &mad, &out, mkey_dropped);
        reached.replies += u64::from(r.contains(MadResult::REPLY));
        // Dropped on purpose: consumed (B_Key) or failed for the M_Key.
        reached.consumed += u64::from(r.contains(MadResult::CONSUMED) || mkey_dropped);
        while let Some(t) = port.poll_trap() {
            reached.traps += 1;
            assert_eq!(t.mad[3], 0x05, "a trap is a Trap");
            assert!(matches!(t.class(), 0x01 | 0x05));
            assert!(matches!(t.number(), 256 | 259));
        }

        engine.gsi_receive(now, wc, grh.unwrap_or([0; 40]), mad);
        let mut sent = 0;
        while let Some(t) = engine.poll_transmit(now) {
            check_transmit(&t);
            sent += 1;
        }
        assert!(sent <= 2, "{sent} datagrams for one MAD");
        reached.sent += sent;
        if let Ok(resp) = engine.local_smp(now, &mad) {
            assert_eq!(resp[3], 0x81);
            assert_eq!(&resp[8..16], &mad[8..16]);
        }
        while engine.poll_trap().is_some() {}
    }
    reached
}
