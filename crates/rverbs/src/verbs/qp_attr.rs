//! Typed `ibv_modify_qp` attributes: each setter stores one attribute and adds its bit
//! to the mask, so safe code never writes a raw attribute mask.

use crate::verbs::AccessFlags;
use rverbs_engine::modify::{AhAttr, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::{Mtu, QpState};

/// The attributes of one `ibv_modify_qp` call, built from typed setters; pass it to
/// [`crate::Qp::modify`]. Only what was set is sent (the mask is derived), and the
/// device checks the combination against the transition exactly as Linux does
/// (`ib_modify_qp_is_ok`): a missing required attribute or a forbidden one is EINVAL.
///
/// The RC connection path by hand (what [`crate::Qp::connect`] does):
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{AccessFlags, AhAttr, Mtu, QpInitAttr, QpModify, QpState, QpType};
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(16)?;
/// let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
/// # let (peer_qpn, peer_psn, peer_gid) = (0x11, 0, ctx.gid(1).unwrap());
/// qp.modify(&QpModify::to(QpState::Init).port(1).pkey_index(0).access(AccessFlags::ALL))?;
/// qp.modify(
///     &QpModify::to(QpState::Rtr)
///         .path(AhAttr::to(peer_gid, 1))
///         .path_mtu(Mtu::M1024)
///         .dest_qpn(peer_qpn)
///         .rq_psn(peer_psn)
///         .max_dest_rd_atomic(16)
///         .min_rnr_timer(12),
/// )?;
/// qp.modify(
///     &QpModify::to(QpState::Rts)
///         .sq_psn(0)
///         .timeout(14)
///         .retry_cnt(7)
///         .rnr_retry(7)
///         .max_rd_atomic(16),
/// )?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct QpModify {
    pub(crate) attr: QpAttr,
    pub(crate) mask: QpAttrMask,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty => $field:ident, $bit:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, v: $ty) -> Self {
                self.attr.$field = v;
                self.mask |= QpAttrMask::$bit;
                self
            }
        )*
    };
}

impl QpModify {
    /// A move to `state` (`IBV_QP_STATE`), with no other attribute yet.
    pub fn to(state: QpState) -> Self {
        QpModify {
            attr: QpAttr {
                qp_state: state,
                ..QpAttr::default()
            },
            mask: QpAttrMask::STATE,
        }
    }

    /// No state change: only the attributes set afterwards are modified (allowed in
    /// RTS/SQD for attributes such as `min_rnr_timer`; the state is left out of the mask).
    pub fn attrs_only() -> Self {
        QpModify {
            attr: QpAttr::default(),
            mask: QpAttrMask::EMPTY,
        }
    }

    setters! {
        /// `cur_qp_state`: the state the caller believes the QP is in.
        cur_state: QpState => cur_qp_state, CUR_STATE;
        /// `pkey_index`.
        pkey_index: u16 => pkey_index, PKEY_INDEX;
        /// `port_num` (this device has port 1).
        port: u8 => port_num, PORT;
        /// `qkey` (UD).
        qkey: u32 => qkey, QKEY;
        /// `path_mtu`.
        path_mtu: Mtu => path_mtu, PATH_MTU;
        /// `timeout`: local ACK timeout, 4.096 µs · 2^timeout (0 = infinite).
        timeout: u8 => timeout, TIMEOUT;
        /// `retry_cnt`: transport retries (3 bits).
        retry_cnt: u8 => retry_cnt, RETRY_CNT;
        /// `rnr_retry`: RNR retries (3 bits, 7 = infinite).
        rnr_retry: u8 => rnr_retry, RNR_RETRY;
        /// `rq_psn`: the first PSN expected from the peer.
        rq_psn: u32 => rq_psn, RQ_PSN;
        /// `max_rd_atomic`: READ/atomic requests outstanding as initiator.
        max_rd_atomic: u8 => max_rd_atomic, MAX_QP_RD_ATOMIC;
        /// `min_rnr_timer`: the RNR NAK timer code the peer is asked to wait.
        min_rnr_timer: u8 => min_rnr_timer, MIN_RNR_TIMER;
        /// `sq_psn`: the first PSN this QP sends.
        sq_psn: u32 => sq_psn, SQ_PSN;
        /// `max_dest_rd_atomic`: READ/atomic requests accepted as responder.
        max_dest_rd_atomic: u8 => max_dest_rd_atomic, MAX_DEST_RD_ATOMIC;
        /// `cap`: queue sizes.
        cap: QpCap => cap, CAP;
        /// `dest_qp_num`: the peer's QP number.
        dest_qpn: u32 => dest_qp_num, DEST_QPN;
        /// `en_sqd_async_notify`: report [`crate::AsyncEvent::SqDrained`] in SQD.
        sqd_async_notify: bool => en_sqd_async_notify, EN_SQD_ASYNC_NOTIFY;
        /// `rate_limit` in kbit/s (raw packet QPs).
        rate_limit: u32 => rate_limit, RATE_LIMIT;
    }

    /// `qp_access_flags`: what the peer may do to this side's memory through the QP.
    pub fn access(mut self, a: AccessFlags) -> Self {
        self.attr.qp_access_flags = a;
        self.mask |= QpAttrMask::ACCESS_FLAGS;
        self
    }

    /// `ah_attr`: the primary path to the peer (RC/UC, towards RTR).
    pub fn path(mut self, ah: AhAttr) -> Self {
        self.attr.ah_attr = Some(ah);
        self.mask |= QpAttrMask::AV;
        self
    }

    /// The attribute mask this call sends.
    pub fn mask(&self) -> QpAttrMask {
        self.mask
    }

    /// The attributes (only the fields in [`QpModify::mask`] are meaningful).
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_build_the_mask() {
        let m = QpModify::to(QpState::Rts)
            .sq_psn(5)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(1);
        assert_eq!(
            m.mask(),
            QpAttrMask::STATE
                | QpAttrMask::SQ_PSN
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC
        );
        assert_eq!(m.attr().sq_psn, 5);
        assert_eq!(m.attr().qp_state, QpState::Rts);
        assert!(QpModify::attrs_only().mask().is_empty());
    }
}
