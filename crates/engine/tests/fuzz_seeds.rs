//! Replays `fuzz/seeds/engine/` through the engine fuzz target's oracle
//! (`fuzz/oracles/engine.rs`), so stable CI exercises it.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/engine.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}

#[test]
fn engine_seeds() {
    replay::replay("engine", oracles::engine);
    // The seeds (real rxe traffic aimed at live QPs) must reach the transport, not die
    // at the ICRC or the parser: otherwise this replay would prove nothing.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/engine");
    let (mut accepted, mut sent) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let c = oracles::run(&std::fs::read(entry.unwrap().path()).unwrap());
        assert_eq!(c.rx_icrc_errors, 0);
        accepted += c.rx_packets;
        sent += c.tx_packets;
    }
    assert!(
        accepted > 100 && sent > 100,
        "accepted {accepted}, sent {sent}"
    );
    // And a few synthetic inputs: empty, tiny, all zero, all 0xff.
    for data in [&[][..], &[0u8; 3][..], &[0u8; 300][..], &[0xffu8; 300][..]] {
        oracles::engine(data);
    }
}

mod mad_rx_oracle {
    include!("../../../fuzz/oracles/mad_rx.rs");
}

#[test]
fn mad_rx_seeds() {
    replay::replay("mad_rx", mad_rx_oracle::mad_rx);
    // The seeds reach the agents: replies, key drops, traps and GSI sends. (Replies
    // were 15 while a GetResp of another class version was answered too.)
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/mad_rx");
    let mut total = mad_rx_oracle::Reached::default();
    for entry in std::fs::read_dir(dir).unwrap() {
        let r = mad_rx_oracle::run(&std::fs::read(entry.unwrap().path()).unwrap());
        total.replies += r.replies;
        total.consumed += r.consumed;
        total.traps += r.traps;
        total.sent += r.sent;
    }
    assert!(
        total.replies >= 13 && total.consumed >= 3 && total.traps >= 2 && total.sent >= 10,
        "{total:?}"
    );
    for data in [
        &[][..],
        &[0u8; 3][..],
        &[0xffu8; 700][..],
        &[0x01u8; 303][..],
    ] {
        mad_rx_oracle::mad_rx(data);
    }
}
