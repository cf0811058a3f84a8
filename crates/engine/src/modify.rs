//! `ibv_modify_qp` validation: which QP state transitions are legal, which attributes
//! each one requires or allows, and the value ranges a RoCE soft device accepts.
//!
//! The transition graph is data ([`legal_transitions`]), transcribed from the Linux
//! kernel's `qp_state_table` in `drivers/infiniband/core/verbs.c` (the table behind
//! `ib_modify_qp_is_ok()`), restricted to the RC, UC and UD columns. The value checks
//! follow `rxe_qp_chk_attr()`/`rxe_qp_chk_cap()` in `drivers/infiniband/sw/rxe/rxe_qp.c`
//! and the generic checks of `_ib_modify_qp()` in `verbs.c`; the defaults of
//! [`ModifyLimits`] are rxe's (`drivers/infiniband/sw/rxe/rxe_param.h`).
//!
//! Where this module is deliberately stricter than Linux, the item says so.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use crate::types::{Access, AddressVector, Errno, Mtu, QpState, QpType, VerbError, VerbResult};

const VERB: &str = "modify_qp";

/// An `EINVAL` from `modify_qp`.
const fn inval(reason: &'static str) -> VerbError {
    VerbError::new(VERB, Errno::Inval, reason)
}

/// Which fields of a [`QpAttr`] a `modify_qp` call sets (`enum ibv_qp_attr_mask`, same
/// bit values as rdma-core's `libibverbs/verbs.h`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttrMask(pub u32);

/// Declares the mask bits once and derives from them the constants, the name table used
/// by `Debug`, and the per-attribute error reasons (which must be `&'static str`).
macro_rules! attr_bits {
    ($($(#[$doc:meta])* $name:ident = $bit:expr;)*) => {
        impl QpAttrMask {
            $($(#[$doc])* pub const $name: QpAttrMask = QpAttrMask(1 << $bit);)*
            /// Every bit rdma-core defines.
            pub const ALL: QpAttrMask = QpAttrMask(0 $(| (1 << $bit))*);
        }

        /// (bit, name, "missing" reason, "not allowed" reason), in bit order.
        const ATTR_INFO: &[(QpAttrMask, &str, &str, &str)] = &[$((
            QpAttrMask::$name,
            stringify!($name),
            concat!("required attribute missing: ", stringify!($name)),
            concat!("attribute not allowed in this transition: ", stringify!($name)),
        ),)*];
    };
}

attr_bits! {
    /// `qp_state`: the state to move to.
    STATE = 0;
    /// `cur_qp_state`: the state the caller believes the QP is in.
    CUR_STATE = 1;
    /// `en_sqd_async_notify`.
    EN_SQD_ASYNC_NOTIFY = 2;
    /// `qp_access_flags`.
    ACCESS_FLAGS = 3;
    /// `pkey_index`.
    PKEY_INDEX = 4;
    /// `port_num`.
    PORT = 5;
    /// `qkey`.
    QKEY = 6;
    /// `ah_attr`: the primary path's address vector.
    AV = 7;
    /// `path_mtu`.
    PATH_MTU = 8;
    /// `timeout` (local ACK timeout).
    TIMEOUT = 9;
    /// `retry_cnt`.
    RETRY_CNT = 10;
    /// `rnr_retry`.
    RNR_RETRY = 11;
    /// `rq_psn`.
    RQ_PSN = 12;
    /// `max_rd_atomic` (outstanding READ/atomic requests as initiator).
    MAX_QP_RD_ATOMIC = 13;
    /// `alt_ah_attr` and friends (automatic path migration).
    ALT_PATH = 14;
    /// `min_rnr_timer`.
    MIN_RNR_TIMER = 15;
    /// `sq_psn`.
    SQ_PSN = 16;
    /// `max_dest_rd_atomic` (READ/atomic requests accepted as responder).
    MAX_DEST_RD_ATOMIC = 17;
    /// `path_mig_state`.
    PATH_MIG_STATE = 18;
    /// `cap` (queue sizes).
    CAP = 19;
    /// `dest_qp_num`.
    DEST_QPN = 20;
    /// `rate_limit` (raw packet QPs only).
    RATE_LIMIT = 25;
}

impl QpAttrMask {
    /// No attribute.
    pub const EMPTY: QpAttrMask = QpAttrMask(0);

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: QpAttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// True when any bit of `other` is set.
    pub const fn intersects(self, other: QpAttrMask) -> bool {
        self.0 & other.0 != 0
    }

    /// True when no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The union.
    pub const fn union(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 | other.0)
    }

    /// The bits of `self` that are not in `other`.
    pub const fn difference(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 & !other.0)
    }

    /// The rdma-core names (without the `IBV_QP_` prefix) of the known bits that are set,
    /// lowest bit first.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        ATTR_INFO
            .iter()
            .filter(move |(bit, ..)| self.contains(*bit))
            .map(|(_, name, ..)| *name)
    }
}

impl BitOr for QpAttrMask {
    type Output = QpAttrMask;
    fn bitor(self, o: QpAttrMask) -> QpAttrMask {
        self.union(o)
    }
}

impl BitOrAssign for QpAttrMask {
    fn bitor_assign(&mut self, o: QpAttrMask) {
        *self = self.union(o);
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QpAttrMask(")?;
        let mut first = true;
        for name in self.names() {
            if !first {
                f.write_str(" | ")?;
            }
            f.write_str(name)?;
            first = false;
        }
        let unknown = self.difference(QpAttrMask::ALL).0;
        if unknown != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{unknown:#x}")?;
            first = false;
        }
        if first {
            f.write_str("empty")?;
        }
        f.write_str(")")
    }
}

/// Path migration state (`enum ibv_mig_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MigState {
    /// Migrated (the only state without an armed alternate path).
    #[default]
    Migrated = 0,
    /// Rearm.
    Rearm = 1,
    /// Armed.
    Armed = 2,
}

/// Queue sizes (`struct ibv_qp_cap`).
///
/// `QpCap::default()` is a usable QP, the caps `rverbs::QpInitAttr::new` gives: 1024 WRs
/// in each queue, 4 SGEs per WR and 256 bytes of inline data. rdma-core's examples ask
/// for less (`ibv_rc_pingpong`: 1 send WR, 500 receives, 1 SGE; perftest's `ib_send_bw`:
/// 128 WRs, 1 SGE), rxe allows far more ([`ModifyLimits::default`]); these sit between,
/// deep enough for a pipelined sender and small enough to fit every device. (An all-zero
/// cap, which C's `memset` gives, takes no WR at all: build one explicitly to get it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather elements per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather elements per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        }
    }
}

/// The primary path of an RC/UC QP (`struct ibv_ah_attr` as `modify_qp` takes it): the
/// address vector and the local port it leaves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhAttr {
    /// Destination and GRH fields.
    pub av: AddressVector,
    /// Local port (1 on this device).
    pub port_num: u8,
}

impl AhAttr {
    /// Towards `dgid` from the source GID at `sgid_index` of port 1, with hop limit 64,
    /// traffic class 0 and flow label 0.
    pub fn to(dgid: rverbs_wire::grh::Gid, sgid_index: u8) -> AhAttr {
        AhAttr {
            av: AddressVector {
                dgid,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            port_num: 1,
        }
    }
}

/// The fields of `struct ibv_qp_attr` that a RoCE soft device uses. Only the fields named
/// by the accompanying [`QpAttrMask`] are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Next state ([`QpAttrMask::STATE`]).
    pub qp_state: QpState,
    /// Assumed current state ([`QpAttrMask::CUR_STATE`]).
    pub cur_qp_state: QpState,
    /// Path MTU ([`QpAttrMask::PATH_MTU`]).
    pub path_mtu: Mtu,
    /// Path migration state ([`QpAttrMask::PATH_MIG_STATE`]).
    pub path_mig_state: MigState,
    /// Q_Key ([`QpAttrMask::QKEY`]).
    pub qkey: u32,
    /// Expected PSN of the next request received, 24 bits ([`QpAttrMask::RQ_PSN`]).
    pub rq_psn: u32,
    /// PSN of the next request sent, 24 bits ([`QpAttrMask::SQ_PSN`]).
    pub sq_psn: u32,
    /// Remote QPN, 24 bits ([`QpAttrMask::DEST_QPN`]).
    pub dest_qp_num: u32,
    /// Remote access rights ([`QpAttrMask::ACCESS_FLAGS`]).
    pub qp_access_flags: Access,
    /// Queue sizes ([`QpAttrMask::CAP`]).
    pub cap: QpCap,
    /// Primary path ([`QpAttrMask::AV`]); `None` with `AV` set is an error.
    pub ah_attr: Option<AhAttr>,
    /// P_Key table index ([`QpAttrMask::PKEY_INDEX`]).
    pub pkey_index: u16,
    /// Raise `SqDrained` when the SQ drains in SQD ([`QpAttrMask::EN_SQD_ASYNC_NOTIFY`]).
    pub en_sqd_async_notify: bool,
    /// Outstanding READ/atomic requests as initiator ([`QpAttrMask::MAX_QP_RD_ATOMIC`]).
    pub max_rd_atomic: u8,
    /// READ/atomic requests accepted as responder ([`QpAttrMask::MAX_DEST_RD_ATOMIC`]).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code, 5 bits ([`QpAttrMask::MIN_RNR_TIMER`]).
    pub min_rnr_timer: u8,
    /// Local port ([`QpAttrMask::PORT`]).
    pub port_num: u8,
    /// Local ACK timeout exponent, 5 bits ([`QpAttrMask::TIMEOUT`]).
    pub timeout: u8,
    /// Transport retry count, 3 bits ([`QpAttrMask::RETRY_CNT`]).
    pub retry_cnt: u8,
    /// RNR retry count, 3 bits, 7 = infinite ([`QpAttrMask::RNR_RETRY`]).
    pub rnr_retry: u8,
    /// Packet pacing rate in kbps ([`QpAttrMask::RATE_LIMIT`]; raw packet QPs only).
    pub rate_limit: u32,
}

impl Default for QpAttr {
    /// A zeroed `ibv_qp_attr`, except that the enums take their first valid value
    /// (`path_mtu` 256, as rxe initialises it).
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::M256,
            path_mig_state: MigState::Migrated,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: Access::NONE,
            // Zeroed like the rest (not `QpCap::default()`, a usable QP's caps).
            cap: QpCap {
                max_send_wr: 0,
                max_recv_wr: 0,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            ah_attr: None,
            pkey_index: 0,
            en_sqd_async_notify: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            rate_limit: 0,
        }
    }
}

/// Device and port limits the attribute values are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModifyLimits {
    /// The port's active MTU; `path_mtu` may not exceed it.
    pub active_mtu: Mtu,
    /// P_Key table length (`RXE_PORT_PKEY_TBL_LEN`).
    pub pkey_table_len: u16,
    /// GID table length (`RXE_PORT_GID_TBL_LEN`).
    pub gid_table_len: u32,
    /// Limit for `max_rd_atomic` (`RXE_MAX_QP_RD_ATOM`).
    pub max_qp_rd_atom: u32,
    /// Limit for `max_dest_rd_atomic` (`RXE_MAX_QP_INIT_RD_ATOM`).
    pub max_qp_init_rd_atom: u32,
    /// Limit for `max_send_wr` and `max_recv_wr` (`RXE_MAX_QP_WR`).
    pub max_qp_wr: u32,
    /// Limit for `max_send_sge` (`RXE_MAX_SGE`).
    pub max_send_sge: u32,
    /// Limit for `max_recv_sge` (`RXE_MAX_SGE`).
    pub max_recv_sge: u32,
    /// Limit for `max_inline_data` (`RXE_MAX_INLINE_DATA`).
    pub max_inline_data: u32,
}

impl Default for ModifyLimits {
    /// rxe's values (`rxe_param.h`) on a netdev with the usual 1500-byte MTU.
    fn default() -> Self {
        ModifyLimits {
            // rxe_set_mtu(): eth_mtu_int_to_enum(1500) = IB_MTU_1024.
            active_mtu: Mtu::M1024,
            pkey_table_len: 1,
            gid_table_len: 1024,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            // DEFAULT_MAX_VALUE.
            max_qp_wr: 1 << 20,
            max_send_sge: 32,
            max_recv_sge: 32,
            // RXE_MAX_SGE * sizeof(struct ib_sge).
            max_inline_data: 32 * 16,
        }
    }
}

/// Builds a mask from bare bit names: `m!(AV | PATH_MTU)`.
macro_rules! m {
    () => { QpAttrMask::EMPTY };
    ($($b:ident)|+) => { QpAttrMask(0 $(| QpAttrMask::$b.0)+) };
}

/// What one transition requires and allows for one QP type.
#[derive(Clone, Copy)]
struct Spec {
    req: QpAttrMask,
    opt: QpAttrMask,
}

const fn s(req: QpAttrMask, opt: QpAttrMask) -> Option<Spec> {
    Some(Spec { req, opt })
}

/// A transition legal for every type with no attribute but `STATE`.
const BARE: [Option<Spec>; 3] = [s(m!(), m!()); 3];

use QpState::{
    Err as ERR, Init as INIT, Reset as RESET, Rtr as RTR, Rts as RTS, Sqd as SQD, Sqe as SQE,
};

/// The transition table: (from, to, [RC, UC, UD]), `None` where the type may not make the
/// transition.
///
/// Transcribed from `qp_state_table` in Linux `drivers/infiniband/core/verbs.c`
/// (`ib_modify_qp_is_ok()`), columns `IB_QPT_RC`, `IB_QPT_UC`, `IB_QPT_UD`. A pair absent
/// here has `.valid = 0` there (notably RESET→ERR). One deliberate difference: the kernel
/// marks SQE→RTS valid for every type and merely lists no attributes for RC, so it would
/// accept a bare SQE→RTS on an RC QP; RC QPs have no SQE state (IBTA 10.3.1), so the RC
/// cell is `None` here.
#[rustfmt::skip]
const TABLE: &[(QpState, QpState, [Option<Spec>; 3])] = &[
    (RESET, RESET, BARE),
    (RESET, INIT, [
        s(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
        s(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
        s(m!(PKEY_INDEX | PORT | QKEY), m!()),
    ]),
    (INIT, RESET, BARE),
    (INIT, INIT, [
        s(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
        s(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
        s(m!(), m!(PKEY_INDEX | PORT | QKEY)),
    ]),
    (INIT, RTR, [
        s(m!(AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER),
          m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX)),
        s(m!(AV | PATH_MTU | DEST_QPN | RQ_PSN),
          m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX)),
        s(m!(), m!(PKEY_INDEX | QKEY)),
    ]),
    (INIT, ERR, BARE),
    (RTR, RESET, BARE),
    (RTR, RTS, [
        s(m!(TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC),
          m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE)),
        s(m!(SQ_PSN), m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE)),
        s(m!(SQ_PSN), m!(CUR_STATE | QKEY)),
    ]),
    (RTR, ERR, BARE),
    (RTS, RESET, BARE),
    (RTS, RTS, [
        s(m!(), m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER)),
        s(m!(), m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE)),
        s(m!(), m!(CUR_STATE | QKEY)),
    ]),
    (RTS, SQD, [s(m!(), m!(EN_SQD_ASYNC_NOTIFY)); 3]),
    (RTS, ERR, BARE),
    (SQD, RESET, BARE),
    (SQD, RTS, [
        s(m!(), m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE)),
        s(m!(), m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE)),
        s(m!(), m!(CUR_STATE | QKEY)),
    ]),
    (SQD, SQD, [
        s(m!(), m!(PORT | AV | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC
                   | MAX_DEST_RD_ATOMIC | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX
                   | MIN_RNR_TIMER | PATH_MIG_STATE)),
        s(m!(), m!(AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE)),
        s(m!(), m!(PKEY_INDEX | QKEY)),
    ]),
    (SQD, ERR, BARE),
    (SQE, RESET, BARE),
    (SQE, RTS, [
        None,
        s(m!(), m!(CUR_STATE | ACCESS_FLAGS)),
        s(m!(), m!(CUR_STATE | QKEY)),
    ]),
    (SQE, ERR, BARE),
    (ERR, RESET, BARE),
    (ERR, ERR, BARE),
];

const fn type_index(t: QpType) -> usize {
    match t {
        QpType::Rc => 0,
        QpType::Uc => 1,
        // Not used for RAW_PACKET: see `raw_packet_spec`.
        QpType::Ud | QpType::RawPacket => 2,
    }
}

/// The IB_QPT_RAW_PACKET column of the kernel's `qp_state_table` (drivers/infiniband/
/// core/verbs.c, `ib_modify_qp_is_ok()`), for a pair that table marks valid — its
/// `.valid` does not depend on the type, so RAW_PACKET has the same pairs as every type
/// (RTS→SQD, SQD→RTS and SQD→SQD included; RESET→ERR not). Its `req_param` names only
/// `IB_QP_PORT` on RESET→INIT, its `opt_param` only `IB_QP_RATE_LIMIT` on RTR→RTS and
/// RTS→RTS; everything else is empty, so INIT→INIT takes no attribute and
/// `IB_QP_CUR_STATE` is refused everywhere.
fn raw_packet_spec(from: QpState, to: QpState) -> Option<Spec> {
    match (from, to) {
        (QpState::Reset, QpState::Init) => s(m!(PORT), m!()),
        (QpState::Rtr, QpState::Rts) | (QpState::Rts, QpState::Rts) => s(m!(), m!(RATE_LIMIT)),
        _ => s(m!(), m!()),
    }
}

/// Every legal transition for `qp_type` as `(from, to, required, optional)`, ordered by
/// `from` then `to`. `STATE` is implied and appears in neither mask.
pub fn legal_transitions(
    qp_type: QpType,
) -> impl Iterator<Item = (QpState, QpState, QpAttrMask, QpAttrMask)> {
    let i = type_index(qp_type);
    let raw = qp_type == QpType::RawPacket;
    TABLE.iter().filter_map(move |(from, to, specs)| {
        // Every row of TABLE is a pair the kernel marks valid.
        let spec = if raw {
            raw_packet_spec(*from, *to)
        } else {
            specs[i]
        };
        spec.map(|sp| (*from, *to, sp.req, sp.opt))
    })
}

/// The (required, optional) masks of one transition, or `None` when it is illegal.
pub fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<(QpAttrMask, QpAttrMask)> {
    legal_transitions(qp_type)
        .find(|(f, t, ..)| (*f, *t) == (from, to))
        .map(|(_, _, r, o)| (r, o))
}

/// The attributes a transition requires (`STATE` included), or `None` if it is not
/// legal: what a caller that sets exactly the mandatory attributes passes as the mask.
pub fn required(qp_type: QpType, from: QpState, to: QpState) -> Option<QpAttrMask> {
    transition(qp_type, from, to).map(|(r, _)| r | QpAttrMask::STATE)
}

/// The access rights a QP may grant: the four of [`Access`]. (rxe's
/// `RXE_ACCESS_SUPPORTED_QP` also tolerates MR-only bits such as `MW_BIND`; this device
/// has none of them, so they are rejected.)
const QP_ACCESS_KNOWN: u32 = Access::LOCAL_WRITE.0
    | Access::REMOTE_WRITE.0
    | Access::REMOTE_READ.0
    | Access::REMOTE_ATOMIC.0;

const PSN_MAX: u32 = 0x00ff_ffff;
const QPN_MAX: u32 = 0x00ff_ffff;
/// This device has one port, numbered 1 (`rdma_is_port_valid()`).
const PORT_NUM: u8 = 1;

/// Checks queue sizes against the device limits, as `rxe_qp_chk_cap()` does (shared with
/// `create_qp`; errors name `modify_qp`, a `create_qp` caller renames the verb). With an
/// SRQ the receive sizes are ignored.
pub fn check_cap(cap: &QpCap, has_srq: bool, limits: &ModifyLimits) -> VerbResult<()> {
    let over = |reason, asked: u32, max: u32, unit| {
        Err(inval(reason).with_limit(asked.into(), max.into(), unit, "the device takes at most"))
    };
    if cap.max_send_wr > limits.max_qp_wr {
        return over(
            "cap.max_send_wr exceeds the device's max_qp_wr",
            cap.max_send_wr,
            limits.max_qp_wr,
            "WRs",
        );
    }
    if cap.max_send_sge > limits.max_send_sge {
        return over(
            "cap.max_send_sge exceeds the device's max_send_sge",
            cap.max_send_sge,
            limits.max_send_sge,
            "SGEs",
        );
    }
    if !has_srq {
        if cap.max_recv_wr > limits.max_qp_wr {
            return over(
                "cap.max_recv_wr exceeds the device's max_qp_wr",
                cap.max_recv_wr,
                limits.max_qp_wr,
                "WRs",
            );
        }
        if cap.max_recv_sge > limits.max_recv_sge {
            return over(
                "cap.max_recv_sge exceeds the device's max_recv_sge",
                cap.max_recv_sge,
                limits.max_recv_sge,
                "SGEs",
            );
        }
    }
    if cap.max_inline_data > limits.max_inline_data {
        return over(
            "cap.max_inline_data exceeds the device's max_inline_data",
            cap.max_inline_data,
            limits.max_inline_data,
            "bytes",
        );
    }
    Ok(())
}

/// Validates `ibv_modify_qp(qp, attr, mask)` on a QP of type `qp_type` now in `current`
/// and returns the state it moves to. Nothing is changed; the caller applies `attr`.
///
/// In order:
/// 1. mask bits rdma-core does not define → `EOPNOTSUPP` (drivers' `attr_mask &
///    ~IB_QP_ATTR_STANDARD_BITS` check; that mask stops at bit 20, so drivers also answer
///    `EOPNOTSUPP` to `RATE_LIMIT`, which here falls to step 4 and gets `EINVAL`);
/// 2. with `CUR_STATE`: `cur_qp_state` must equal `current`, and `current` must be RTR,
///    RTS, SQD or SQE (`ib_modify_qp_is_ok()`);
/// 3. the next state is `qp_state` with `STATE`, else `current` (the kernel checks the
///    `current → current` row then); the pair must be in the table;
/// 4. every required attribute present, nothing outside required ∪ optional ∪ `STATE`;
/// 5. the value of every attribute present is in range.
///
/// Stricter than Linux: drivers take `cur_qp_state` *instead of* the real state (rxe's
/// `__qp_chk_state()`), whereas the engine knows the real state and rejects a mismatch;
/// `_ib_modify_qp()` masks PSNs above 24 bits with a warning, this rejects them; rxe
/// checks `path_mtu` against the port's max MTU (4096), this against the active MTU.
pub fn check_modify(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: QpAttrMask,
    limits: &ModifyLimits,
) -> VerbResult<QpState> {
    if !QpAttrMask::ALL.contains(mask) {
        return Err(VerbError::new(
            VERB,
            Errno::NotSupported,
            "unknown attribute mask bits",
        ));
    }

    if mask.contains(QpAttrMask::CUR_STATE) {
        if attr.cur_qp_state != current {
            return Err(inval("cur_qp_state does not match the QP's current state"));
        }
        if !matches!(current, RTR | RTS | SQD | SQE) {
            return Err(inval(
                "cur_qp_state may only be given in RTR, RTS, SQD or SQE",
            ));
        }
    }

    let next = if mask.contains(QpAttrMask::STATE) {
        attr.qp_state
    } else {
        current
    };
    let Some((req, opt)) = transition(qp_type, current, next) else {
        return Err(inval("illegal QP state transition"));
    };

    let missing = req.difference(mask);
    if let Some((.., why, _)) = ATTR_INFO.iter().find(|(bit, ..)| missing.contains(*bit)) {
        return Err(inval(why));
    }
    let extra = mask.difference(req | opt | QpAttrMask::STATE);
    if let Some((.., why)) = ATTR_INFO.iter().find(|(bit, ..)| extra.contains(*bit)) {
        return Err(inval(why));
    }

    check_values(attr, mask, limits)?;
    Ok(next)
}

/// Range checks of the attributes named by `mask`.
fn check_values(attr: &QpAttr, mask: QpAttrMask, limits: &ModifyLimits) -> VerbResult<()> {
    let has = |bit| mask.contains(bit);
    // `_ib_modify_qp()`: "the core code can only handle alternate paths and APM for IB.
    // Ban them in roce mode."
    if has(QpAttrMask::ALT_PATH) {
        return Err(inval("alternate paths are not supported on RoCE"));
    }
    if has(QpAttrMask::PORT) && attr.port_num != PORT_NUM {
        return Err(inval("port_num must be 1"));
    }
    if has(QpAttrMask::PKEY_INDEX) && attr.pkey_index >= limits.pkey_table_len {
        return Err(inval("pkey_index beyond the P_Key table"));
    }
    if has(QpAttrMask::ACCESS_FLAGS) && attr.qp_access_flags.0 & !QP_ACCESS_KNOWN != 0 {
        return Err(inval("qp_access_flags has unknown bits"));
    }
    if has(QpAttrMask::AV) {
        let Some(ah) = attr.ah_attr else {
            return Err(inval("AV given without ah_attr"));
        };
        if ah.port_num != PORT_NUM {
            return Err(inval("ah_attr.port_num must be 1"));
        }
        if u32::from(ah.av.sgid_index) >= limits.gid_table_len {
            return Err(inval("ah_attr.sgid_index beyond the GID table"));
        }
    }
    if has(QpAttrMask::PATH_MTU) && attr.path_mtu > limits.active_mtu {
        return Err(inval("path_mtu exceeds the port's active MTU"));
    }
    if has(QpAttrMask::TIMEOUT) && attr.timeout > 31 {
        return Err(inval("timeout exceeds 31"));
    }
    if has(QpAttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
        return Err(inval("retry_cnt exceeds 7"));
    }
    if has(QpAttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
        return Err(inval("rnr_retry exceeds 7"));
    }
    if has(QpAttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return Err(inval("min_rnr_timer exceeds 31"));
    }
    if has(QpAttrMask::RQ_PSN) && attr.rq_psn > PSN_MAX {
        return Err(inval("rq_psn exceeds 24 bits"));
    }
    if has(QpAttrMask::SQ_PSN) && attr.sq_psn > PSN_MAX {
        return Err(inval("sq_psn exceeds 24 bits"));
    }
    if has(QpAttrMask::DEST_QPN) && attr.dest_qp_num > QPN_MAX {
        return Err(inval("dest_qp_num exceeds 24 bits"));
    }
    if has(QpAttrMask::MAX_QP_RD_ATOMIC)
        && u32::from(attr.max_rd_atomic) > limits.max_qp_init_rd_atom
    {
        return Err(inval(
            "max_rd_atomic exceeds the device's max_qp_init_rd_atom",
        ));
    }
    if has(QpAttrMask::MAX_DEST_RD_ATOMIC)
        && u32::from(attr.max_dest_rd_atomic) > limits.max_qp_rd_atom
    {
        return Err(inval(
            "max_dest_rd_atomic exceeds the device's max_qp_rd_atom",
        ));
    }
    // Never reached through the table (no RC/UC/UD transition allows CAP), kept so the
    // rule holds if a row ever does.
    if has(QpAttrMask::CAP) {
        check_cap(&attr.cap, false, limits)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
