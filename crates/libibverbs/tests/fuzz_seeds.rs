//! Replays every seed under `fuzz/seeds/c_qp_attr/` through the oracle the cargo-fuzz
//! target runs (`fuzz/oracles/libibverbs.rs`), so stable CI exercises it and every
//! crash the fuzzer found (kept as a seed) stays fixed.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/libibverbs.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}

#[test]
fn c_qp_attr() {
    replay::replay("c_qp_attr", oracles::c_qp_attr);
}

/// The committed seeds reach what they were written for: the connection paths of RC,
/// UC and UD accepted step by step, and each bad mask or value refused with
/// libibverbs' errno.
#[test]
fn c_qp_attr_seeds_reach_their_states_and_errors() {
    let seed = |name: &str| {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/seeds/c_qp_attr")
            .join(name);
        oracles::c_qp_attr_steps(&std::fs::read(p).unwrap())
    };
    let (ok, inval, nosup) = (0, libc::EINVAL, libc::EOPNOTSUPP);
    let ok_to = |states: &[u32]| states.iter().map(|&s| (ok, s)).collect::<Vec<_>>();
    assert_eq!(seed("rc_path"), ok_to(&[1, 2, 3, 4, 6, 0, 1]));
    assert_eq!(seed("uc_path"), ok_to(&[1, 2, 3, 6]));
    assert_eq!(seed("ud_path"), ok_to(&[1, 2, 3, 3, 6]));
    assert_eq!(
        seed("bad_masks"),
        [
            (nosup, 0), // an undefined mask bit
            (nosup, 0), // bit 31, with a state out of the enum
            (inval, 0), // RATE_LIMIT alone: not a legal attribute of RESET -> RESET
            (inval, 0), // RESET -> RTS
            (inval, 0), // INIT without PORT
            (ok, 1),
            (inval, 1), // CUR_STATE in INIT
            (inval, 1), // ALT_PATH on RoCE
        ]
    );
    assert_eq!(
        seed("bad_values"),
        [
            (inval, 0), // port 2
            (inval, 0), // pkey_index beyond the table
            (inval, 0), // an undefined access flag
            (ok, 1),
            (inval, 1), // path_mtu 9
            (inval, 1), // sgid_index beyond the GID table
            (ok, 2),
            (inval, 2), // timeout 32
            (inval, 2), // max_rd_atomic over the device's
        ]
    );
}
