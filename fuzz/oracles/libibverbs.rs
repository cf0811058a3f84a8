// Fuzz oracle for the C library's QP attribute path (`crates/libibverbs`), shared by the
// cargo-fuzz target `fuzz_targets/c_qp_attr.rs` and the stable replay test
// `crates/libibverbs/tests/fuzz_seeds.rs`, which both `include!` this file.

use ibverbs::fuzzing::{QpHarness, QP_ATTR_LEN};

/// `enum ibv_qp_attr_mask`: every bit rdma-core defines (IBV_QP_STATE ..
/// IBV_QP_DEST_QPN, and IBV_QP_RATE_LIMIT).
const KNOWN_MASK: u32 = ((1 << 21) - 1) | (1 << 25);

/// `c_qp_attr`: byte 0 picks the QP type (RC, UC, UD); then records of a 4-byte
/// little-endian attribute mask and `sizeof(struct ibv_qp_attr)` bytes of attributes
/// (the last may be short: zeros follow), each given to `ibv_modify_qp` as a C caller
/// would. Each call returns 0, EINVAL or EOPNOTSUPP (never EIO, which is a panic caught
/// at the boundary); mask bits rdma-core does not define are EOPNOTSUPP whatever the
/// attributes say; a refused call leaves the QP's state as it was, an accepted one
/// moves it to `qp_state` when the mask names STATE and leaves it otherwise; and
/// `ibv_query_qp` and `ibv_qp.state` always agree.
pub fn c_qp_attr(data: &[u8]) {
    c_qp_attr_steps(data);
}

/// [`c_qp_attr`], returning each call's result and the state after it.
pub fn c_qp_attr_steps(data: &[u8]) -> Vec<(i32, u32)> {
    let mut steps = Vec::new();
    let Some((&ctl, mut rest)) = data.split_first() else {
        return steps;
    };
    let qp_type = [2u32, 3, 4][usize::from(ctl % 3)];
    let mut h = QpHarness::new(qp_type, [16, 16, 2, 2, 64])
        .unwrap_or_else(|e| panic!("creating a QP of type {qp_type}: errno {e}"));
    for _ in 0..64 {
        let Some((m, tail)) = rest.split_first_chunk::<4>() else {
            break;
        };
        let mask = u32::from_le_bytes(*m);
        let (attr, tail) = tail.split_at(tail.len().min(QP_ATTR_LEN));
        rest = tail;
        let before = h.state();
        let r = h.modify(attr, mask as i32);
        let after = h.state();
        assert!(
            r == 0 || r == libc::EINVAL || r == libc::EOPNOTSUPP,
            "ibv_modify_qp returned {r} (mask {mask:#x})"
        );
        if mask & !KNOWN_MASK != 0 {
            assert_eq!(r, libc::EOPNOTSUPP, "unknown mask bits {mask:#x}");
        }
        assert_eq!(after.0, after.1, "ibv_query_qp and ibv_qp.state disagree");
        if r == 0 && mask & 1 != 0 {
            let mut s = [0u8; 4];
            let n = attr.len().min(4);
            s[..n].copy_from_slice(&attr[..n]);
            let want = u32::from_ne_bytes(s);
            assert_eq!(after.0, want, "accepted modify to state {want}, mask {mask:#x}");
        } else {
            assert_eq!(after, before, "mask {mask:#x} (returned {r}) moved the QP");
        }
        steps.push((r, after.0));
    }
    steps
}
