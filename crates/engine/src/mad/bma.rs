//! The baseboard management agent (class 0x05; IBTA Vol 1 16.1, Vol 2 13.6) with the
//! B_Key: ClassPortInfo (whose trap fields say where BM traps go) and BKeyInfo.
//!
//! The B_Key rules follow the one open BMA implementation, Intel opa-ff
//! `IbAccess/Common/Ibt/Bma/bmacallb.c` `BmaThreadCallback`: a MAD matches when the
//! port's B_Key is 0 or equals the MAD's B_Key. A Get never is a violation: the
//! B_KeyProtectBit only decides whether a Get with the wrong key sees the key
//! (clear: it does; set: Get(BKeyInfo) reports B_Key 0), the way M_Key protect
//! level 1 hides the M_Key. Any other method (Set, Send, TrapRepress) with the wrong
//! key is a violation: the MAD is dropped (`SUCCESS | CONSUMED`), B_KeyViolations
//! counts (saturating), the lease starts (its expiry clears the protect bit) and BM
//! Trap 259 names the offender from the received WC (QP, LID) and GRH (GID). With no
//! WC or GRH, or with [`flags::IGNORE_BKEY`](super::flags::IGNORE_BKEY), the check is
//! skipped, as the kernel skips it for locally generated MADs.

use super::{
    grh_dgid, grh_sgid, reply, reply_status, security_notice, trap_header, GrhArea, Mad, MadPort,
    MadResult, Trap,
};
use crate::types::{Nanos, Wc};
use rverbs_wire::grh::Gid;
use rverbs_wire::mad::bm::{BKeyInfo, BKeyInfoRepr};
use rverbs_wire::mad::notice::{
    trap, GsNotice, GsNoticeRepr, Trap259BKeyDetails, Trap259BKeyDetailsRepr,
};
use rverbs_wire::mad::pma::{
    capability, ClassPortInfo, ClassPortInfoRepr, GS_DATA_LEN, GS_DATA_OFFSET,
};
use rverbs_wire::mad::{attr, class, method, status, MadHeader};

/// The BMA's state.
#[derive(Debug, Clone)]
pub(crate) struct BmaState {
    pub(crate) b_key: u64,
    pub(crate) protect: bool,
    pub(crate) lease_period: u16,
    lease_deadline: Option<Nanos>,
    pub(crate) violations: u16,
    /// The trap fields of ClassPortInfo, as last set.
    cpi: ClassPortInfoRepr,
    tid: u64,
}

impl Default for BmaState {
    fn default() -> Self {
        BmaState {
            b_key: 0,
            protect: false,
            lease_period: 0,
            lease_deadline: None,
            violations: 0,
            cpi: super::pma::zero_cpi(),
            tid: 0,
        }
    }
}

impl BmaState {
    /// (TrapGID, TrapQP, TrapQKey) when a trap destination is set.
    pub(crate) fn trap_destination(&self) -> Option<(Gid, u32, u32)> {
        let gid = Gid(self.cpi.trap_gid);
        (gid != Gid::ZERO && self.cpi.trap_qp != 0).then_some((
            gid,
            self.cpi.trap_qp,
            self.cpi.trap_q_key,
        ))
    }
}

fn data_mut(mad: &mut Mad) -> &mut [u8] {
    &mut mad[GS_DATA_OFFSET..GS_DATA_OFFSET + GS_DATA_LEN]
}

fn bm_key(mad: &Mad) -> u64 {
    u64::from_be_bytes(mad[24..32].try_into().unwrap_or([0; 8]))
}

pub(crate) fn process(
    p: &mut MadPort,
    now: Nanos,
    mad_flags: u32,
    wc: Option<&Wc>,
    grh: Option<&GrhArea>,
    out: &mut Mad,
) -> MadResult {
    let h = MadHeader::new_unchecked(&out[..]);
    let (m, attr_id, attr_mod) = (h.method(), h.attribute_id(), h.attribute_modifier());
    if matches!(
        m,
        method::GET_RESP | method::TRAP | method::REPORT | method::REPORT_RESP
    ) {
        return MadResult::SUCCESS;
    }
    // The lease runs out whichever way the MAD came: a local Get(BKeyInfo) after the
    // lease ended shows the protect bit cleared, as a remote one does (the M_Key lease
    // is likewise checked under IGNORE_MKEY, `sma.rs`).
    expire_lease(p, now);
    if let (Some(wc), Some(grh), 0) = (wc, grh, mad_flags & super::flags::IGNORE_BKEY) {
        if check_bkey(p, now, wc, grh, out) {
            return MadResult::SUCCESS | MadResult::CONSUMED;
        }
    }
    if m == method::TRAP_REPRESS {
        // The BMA sends each trap once, so a repress of one of its traps (its TID:
        // the port's own counter, high half 0, as no agent has id 0) needs nothing
        // more and is consumed: left to the agents, none owned it and it counted as a
        // dropped QP1 MAD. Other represses go on to the agents (opa-ff checks the
        // B_Key all the same).
        let tid = h.transaction_id();
        if tid >> 32 == 0 && tid != 0 && tid <= p.bma.tid {
            return MadResult::SUCCESS | MadResult::CONSUMED;
        }
        return MadResult::SUCCESS;
    }
    match (m, attr_id) {
        (method::GET, attr::CLASS_PORT_INFO) => get_class_port_info(p, attr_mod, out),
        (method::SET, attr::CLASS_PORT_INFO) => {
            if attr_mod == 0 {
                let v = ClassPortInfo::new_unchecked(&out[GS_DATA_OFFSET..GS_DATA_OFFSET + 72]);
                if let Ok(c) = ClassPortInfoRepr::parse(&v) {
                    let cpi = &mut p.bma.cpi;
                    cpi.trap_gid = c.trap_gid;
                    cpi.trap_tc = c.trap_tc;
                    cpi.trap_sl = c.trap_sl;
                    cpi.trap_fl = c.trap_fl;
                    cpi.trap_lid = c.trap_lid;
                    cpi.trap_p_key = c.trap_p_key;
                    cpi.trap_hl = c.trap_hl;
                    cpi.trap_qp = c.trap_qp;
                    cpi.trap_q_key = c.trap_q_key;
                }
            }
            get_class_port_info(p, attr_mod, out)
        }
        (method::GET, attr::BM_BKEY_INFO) => get_bkey_info(p, attr_mod, out),
        (method::SET, attr::BM_BKEY_INFO) => {
            if attr_mod == 0 {
                let v = BKeyInfo::new_unchecked(&out[GS_DATA_OFFSET..GS_DATA_OFFSET + 14]);
                if let Ok(k) = BKeyInfoRepr::parse(&v) {
                    let b = &mut p.bma;
                    b.b_key = k.b_key;
                    b.protect = k.b_key_protect_bit;
                    b.lease_period = k.b_key_lease_period;
                    if k.b_key_violations == 0 {
                        b.violations = 0;
                    }
                }
            }
            get_bkey_info(p, attr_mod, out)
        }
        (method::GET | method::SET, _) => reply_status(out, status::METHOD_ATTR_UNSUPPORTED),
        // BMSend and the rest belong to registered agents.
        _ => MadResult::SUCCESS,
    }
}

/// Ends the B_Key lease when its deadline has passed: the protect bit clears (the
/// B_KeyLeasePeriod of BKeyInfo, IBTA Vol 1 16.1; opa-ff `bmacallb.c`).
fn expire_lease(p: &mut MadPort, now: Nanos) {
    let b = &mut p.bma;
    if b.lease_deadline.is_some_and(|t| now >= t) {
        b.lease_deadline = None;
        b.protect = false;
    }
}

/// Returns `true` when the MAD is a B_Key violation (and has been dealt with).
fn check_bkey(p: &mut MadPort, now: Nanos, wc: &Wc, grh: &GrhArea, mad: &Mad) -> bool {
    expire_lease(p, now);
    let b = &mut p.bma;
    let key = bm_key(mad);
    let valid = b.b_key == 0 || b.b_key == key;
    if valid {
        b.lease_deadline = None;
        return false;
    }
    // A Get is never a violation, whatever the protect bit (opa-ff bmacallb.c counts
    // and drops only non-Get methods); the protect bit hides the key in the answer.
    if mad[3] == method::GET {
        return false;
    }
    b.violations = b.violations.saturating_add(1);
    if b.lease_deadline.is_none() && b.lease_period != 0 {
        b.lease_deadline = Some(now.saturating_add(u64::from(b.lease_period) * 1_000_000_000));
    }
    p.stats.bkey_drops += 1;
    let t = bad_bkey_trap(p, wc, grh, mad);
    p.raise_trap(now, t);
    true
}

/// BM Trap 259, bad B_Key (IBTA 16.1; `Bad B_Key, <B_Key> from
/// <LIDADDR>/<GIDADDR>/<QP> attempted <METHOD> with <ATTRIBUTEID> and
/// <ATTRIBUTEMODIFIER>`): the offender's LID and QP from the WC, its GID from the GRH;
/// IssuerGID is the GID the MAD was sent to.
pub(crate) fn bad_bkey_trap(p: &mut MadPort, wc: &Wc, grh: &GrhArea, mad: &Mad) -> Trap {
    let h = MadHeader::new_unchecked(&mad[..]);
    let details = Trap259BKeyDetailsRepr {
        lidaddr: wc.slid,
        method: h.method(),
        attribute_id: h.attribute_id(),
        attribute_modifier: h.attribute_modifier(),
        qp: wc.src_qp & 0xff_ffff,
        b_key: bm_key(mad),
        gidaddr: grh_sgid(grh).0,
    };
    let mut notice = security_notice(trap::BM_BAD_B_KEY, p.sma.lid);
    details.emit(&mut Trap259BKeyDetails::new_unchecked(
        &mut notice.data_details[..],
    ));
    let issuer = grh_dgid(grh);
    let issuer = if issuer == Gid::ZERO {
        p.port_gid
    } else {
        issuer
    };
    p.bma.tid = p.bma.tid.wrapping_add(1);
    let mut out = [0u8; rverbs_wire::mad::MAD_LEN];
    trap_header(class::BM, p.bma.tid).emit(&mut MadHeader::new_unchecked(&mut out[..]));
    GsNoticeRepr {
        notice,
        issuer_gid: issuer.0,
    }
    .emit(&mut GsNotice::new_unchecked(data_mut(&mut out)));
    Trap { mad: out }
}

fn get_class_port_info(p: &MadPort, attr_mod: u32, out: &mut Mad) -> MadResult {
    data_mut(out).fill(0);
    if attr_mod != 0 {
        return reply_status(out, status::INVALID_FIELD);
    }
    ClassPortInfoRepr {
        base_version: 1,
        class_version: 1,
        capability_mask: capability::IS_TRAP_SUPPORTED,
        capability_mask2: 0,
        resp_time_value: 18,
        ..p.bma.cpi
    }
    .emit(&mut ClassPortInfo::new_unchecked(data_mut(out)));
    reply(out)
}

fn get_bkey_info(p: &MadPort, attr_mod: u32, out: &mut Mad) -> MadResult {
    let key = bm_key(out);
    data_mut(out).fill(0);
    if attr_mod != 0 {
        return reply_status(out, status::INVALID_FIELD);
    }
    let b = &p.bma;
    // The protect bit hides the key from a requester that does not know it.
    let hide = b.protect && key != b.b_key;
    BKeyInfoRepr {
        b_key: if hide { 0 } else { b.b_key },
        b_key_protect_bit: b.protect,
        b_key_lease_period: b.lease_period,
        b_key_violations: b.violations,
    }
    .emit(&mut BKeyInfo::new_unchecked(data_mut(out)));
    reply(out)
}
