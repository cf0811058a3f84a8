//! Replays `fuzz/seeds/cm_rx/` through the `cm_rx` fuzz target's oracle
//! (`fuzz/oracles/cm.rs`) on the stable toolchain, plus pseudo-random inputs.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/cm.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}

#[test]
fn cm_rx_seeds() {
    replay::replay("cm_rx", oracles::cm_rx);
    // The seeds reach state: events, answers and counted drops.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/cm_rx");
    let mut total = oracles::Reached::default();
    for entry in std::fs::read_dir(dir).unwrap() {
        let r = oracles::run(&std::fs::read(entry.unwrap().path()).unwrap());
        total.events += r.events;
        total.sent += r.sent;
        total.dropped += r.dropped;
    }
    assert!(
        total.events > 50 && total.sent > 100 && total.dropped > 5,
        "{total:?}"
    );
}

/// Random records, and mutations of a valid exchange, never break the oracle's
/// invariants.
#[test]
fn cm_rx_random_inputs() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/cm_rx");
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    for round in 0..300 {
        let mut data = if round % 2 == 0 {
            seeds[next() as usize % seeds.len()].clone()
        } else {
            let n = 1 + next() as usize % 600;
            (0..n).map(|_| next() as u8).collect()
        };
        for _ in 0..next() % 8 {
            if data.is_empty() {
                break;
            }
            let i = next() as usize % data.len();
            data[i] = next() as u8;
        }
        // Keep it a CM MAD most of the time so it gets past the header checks.
        if data.len() > 18 && round % 3 != 0 {
            data[1] = 1;
            data[2] = 0x07;
            data[3] = 2;
            data[4] = 3;
            data[17] = 0x10 + (next() % 9) as u8;
        }
        oracles::cm_rx(&data);
    }
}
