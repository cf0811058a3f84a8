//! The object verbs of an [`Engine`]: protection domains, memory regions, completion
//! queues, shared receive queues and address handles (`ibv_alloc_pd` .. `ibv_destroy_ah`).

use super::{err, Engine};
use crate::config::MrKeys;
use crate::memory::Memory;
use crate::objects::*;
use crate::types::*;
use rverbs_wire::grh::Gid;
use std::collections::VecDeque;
use std::sync::Arc;

impl Engine {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> PdId {
        PdId(self.pds.insert(Pd { users: 0 }))
    }

    /// `ibv_dealloc_pd`: EBUSY while MRs, QPs, SRQs or AHs use it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> VerbResult<()> {
        let p = self
            .pds
            .get(pd.0)
            .ok_or(err("dealloc_pd", Errno::Inval, "no such PD"))?;
        if p.users > 0 {
            return Err(err("dealloc_pd", Errno::Busy, "the PD still has objects"));
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    pub(super) fn pd_use(&mut self, pd: PdId, verb: &'static str, delta: i32) -> VerbResult<()> {
        let p = self
            .pds
            .get_mut(pd.0)
            .ok_or(err(verb, Errno::Inval, "no such PD"))?;
        p.users = p.users.saturating_add_signed(delta);
        Ok(())
    }

    /// `ibv_reg_mr`: registers `mem` at virtual address `iova` with `access` rights.
    /// Remote write or atomic access requires local write (IBTA 10.6.3.1, EINVAL).
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        mem: Arc<dyn Memory>,
        iova: u64,
        access: Access,
    ) -> VerbResult<MrKeys> {
        const VERB: &str = "reg_mr";
        if access.0 & !0x1f != 0 {
            return Err(err(VERB, Errno::Inval, "unknown access flags"));
        }
        if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(err(
                VERB,
                Errno::Inval,
                "remote write/atomic access needs local write",
            ));
        }
        if iova.checked_add(mem.len() as u64).is_none() {
            return Err(err(
                VERB,
                Errno::Inval,
                "the region wraps the address space",
            ));
        }
        if self.mrs.len() as u32 >= MAX_MR - 1 {
            return Err(err(VERB, Errno::NoMem, "too many MRs"));
        }
        self.pd_use(pd, VERB, 1)?;
        let slot = self.mrs.insert(Mr {
            pd: pd.0,
            iova,
            access,
            key: 0,
            len: mem.len() as u64,
            mem,
        });
        // A new tag for the slot, never the one of its previous MR, as KEY_TAG_BITS
        // promises: the key of a deregistered MR must stay invalid (IBTA 10.6.3), so it
        // must not name the slot's new region. (rxe draws 8 random bits per MR.)
        let old_tag = self.mr_freed_tags.remove(&slot);
        let key = make_key(slot, &mut self.rng, old_tag);
        if let Some(m) = self.mrs.get_mut(slot) {
            m.key = key;
        }
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    /// `ibv_alloc_mw`: a window of `kind` in `pd`, with its ID and its first R_Key
    /// (`index << 8 | key`, a random key as rxe's `rxe_alloc_mw`). A type-1 window is
    /// valid and grants nothing until bound; a type-2 one is free.
    pub fn alloc_mw(&mut self, pd: PdId, kind: MwType) -> VerbResult<(MwId, u32)> {
        const VERB: &str = "alloc_mw";
        if self.mws.len() as u32 >= MAX_MW {
            return Err(err(VERB, Errno::NoMem, "too many memory windows"));
        }
        self.pd_use(pd, VERB, 1)?;
        let slot = self.mws.insert(Mw {
            pd: pd.0,
            kind,
            state: match kind {
                MwType::Type1 => MwState::Valid,
                MwType::Type2 => MwState::Free,
            },
            rkey: 0,
            qp: None,
            mr: None,
            addr: 0,
            length: 0,
            access: Access::NONE,
        });
        let key = (make_key(0, &mut self.rng, None) & 0xff) as u8;
        let rkey = mw_key(slot, key);
        if let Some(w) = self.mws.get_mut(slot) {
            w.rkey = rkey;
        }
        Ok((MwId(slot), rkey))
    }

    /// `ibv_dealloc_mw`: the window goes, bound or not; its key grants nothing after.
    pub fn dealloc_mw(&mut self, mw: MwId) -> VerbResult<()> {
        let w = self.mws.remove(mw.0).ok_or(err(
            "dealloc_mw",
            Errno::Inval,
            "no such memory window",
        ))?;
        self.pd_use(PdId(w.pd), "dealloc_mw", -1)
    }

    /// The current R_Key of a window (a bind changes its low 8 bits).
    pub fn mw_rkey(&self, mw: MwId) -> Option<u32> {
        self.mws.get(mw.0).map(|w| w.rkey)
    }

    /// `ibv_dereg_mr`. Work requests already started keep their buffers; later use of
    /// the key fails (LOC_PROT_ERR locally, REM_ACCESS_ERR remotely).
    pub fn dereg_mr(&mut self, lkey: u32) -> VerbResult<()> {
        let slot = key_slot(lkey);
        match self.mrs.get(slot) {
            Some(m) if m.key == lkey => {
                if self.mws.iter().any(|w| w.mr == Some(lkey)) {
                    return Err(err(
                        "dereg_mr",
                        Errno::Busy,
                        "memory windows are bound to the MR",
                    ));
                }
                let pd = PdId(m.pd);
                self.mrs.remove(slot);
                self.mr_freed_tags
                    .insert(slot, lkey & ((1 << KEY_TAG_BITS) - 1));
                self.pd_use(pd, "dereg_mr", -1)
            }
            _ => Err(err("dereg_mr", Errno::Inval, "no MR with this key")),
        }
    }

    /// `ibv_rereg_mr`: the region of key `lkey` becomes `mem` at `iova` in `pd` with
    /// `access`, under the same key (as rxe keeps its MR object). Checked as
    /// [`Engine::reg_mr`] checks a new region; on an error nothing changes. Work already
    /// started keeps the memory it had.
    pub fn rereg_mr(
        &mut self,
        lkey: u32,
        pd: PdId,
        mem: Arc<dyn Memory>,
        iova: u64,
        access: Access,
    ) -> VerbResult<()> {
        const VERB: &str = "rereg_mr";
        let slot = key_slot(lkey);
        let old_pd = match self.mrs.get(slot) {
            Some(m) if m.key == lkey => PdId(m.pd),
            _ => return Err(err(VERB, Errno::Inval, "no MR with this key")),
        };
        if access.0 & !0x1f != 0 {
            return Err(err(VERB, Errno::Inval, "unknown access flags"));
        }
        if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(err(
                VERB,
                Errno::Inval,
                "remote write/atomic access needs local write",
            ));
        }
        if iova.checked_add(mem.len() as u64).is_none() {
            return Err(err(
                VERB,
                Errno::Inval,
                "the region wraps the address space",
            ));
        }
        if pd != old_pd {
            self.pd_use(pd, VERB, 1)?;
            self.pd_use(old_pd, VERB, -1)?;
        }
        if let Some(m) = self.mrs.get_mut(slot) {
            m.pd = pd.0;
            m.iova = iova;
            m.access = access;
            m.len = mem.len() as u64;
            m.mem = mem;
        }
        Ok(())
    }

    /// True while `lkey` names a registered memory region (for work that rverbs runs
    /// outside the engine: RAW_PACKET receives).
    pub fn lkey_valid(&self, lkey: u32) -> bool {
        self.mrs.get(key_slot(lkey)).is_some_and(|m| m.key == lkey)
    }

    /// True while `lkey` names a registered memory region of protection domain `pd`
    /// that allows `need` (IBTA 10.6.3.1: a work request's local buffers must belong
    /// to the QP's PD, and a receive's must allow local write), for work rverbs runs
    /// outside the engine (RAW_PACKET QPs).
    pub fn lkey_allows(&self, lkey: u32, pd: PdId, need: Access) -> bool {
        self.mrs
            .get(key_slot(lkey))
            .is_some_and(|m| m.key == lkey && m.pd == pd.0 && m.access.contains(need))
    }

    /// The memory and offset an SGE names (key, address and length inside the region),
    /// when its region is of `pd` and allows `need`: for work rverbs runs outside the
    /// engine on buffers named by key (RAW_PACKET posts from the C library).
    pub fn local_region(
        &self,
        sge: &crate::Sge,
        pd: PdId,
        need: Access,
    ) -> Option<(Arc<dyn Memory>, usize)> {
        let m = self.mrs.get(key_slot(sge.lkey))?;
        if m.key != sge.lkey || m.pd != pd.0 || !m.access.contains(need) {
            return None;
        }
        let off = m.offset_of(sge.addr, u64::from(sge.length))?;
        Some((m.mem.clone(), off))
    }

    /// `ibv_create_cq` with room for `cqe` completions.
    pub fn create_cq(&mut self, cqe: u32) -> VerbResult<CqId> {
        if cqe == 0 || cqe > self.cfg.max_cqe {
            return Err(err(
                "create_cq",
                Errno::Inval,
                "cqe is 0 or above the device limit",
            ));
        }
        Ok(CqId(self.cqs.insert(Cq {
            capacity: cqe as usize,
            entries: VecDeque::new(),
            overflowed: false,
            armed: None,
            users: 0,
        })))
    }

    /// `ibv_destroy_cq`: EBUSY while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqId) -> VerbResult<()> {
        let c = self
            .cqs
            .get(cq.0)
            .ok_or(err("destroy_cq", Errno::Inval, "no such CQ"))?;
        if c.users > 0 {
            return Err(err("destroy_cq", Errno::Busy, "a QP still uses the CQ"));
        }
        self.cqs.remove(cq.0);
        Ok(())
    }

    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out`, returning how many.
    /// An overflowed CQ reports EIO-like failure through [`AsyncEvent::CqErr`]; its
    /// remaining completions can still be polled.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Wc]) -> VerbResult<usize> {
        let c = self
            .cqs
            .get_mut(cq.0)
            .ok_or(err("poll_cq", Errno::Inval, "no such CQ"))?;
        let n = out.len().min(c.entries.len());
        for (slot, wc) in out.iter_mut().zip(c.entries.drain(..n)) {
            *slot = wc;
        }
        Ok(n)
    }

    /// Adds a completion made outside the engine (a RAW_PACKET QP of a raw-mode device)
    /// to `cq`, with the engine's CQ rules: a full or overflowed CQ loses it (counted in
    /// `cq_overflows`, one [`AsyncEvent::CqErr`]) and `Ok(false)` is returned; an armed
    /// CQ queues its completion event. EINVAL for an unknown CQ.
    pub fn push_wc(&mut self, cq: CqId, wc: Wc, solicited: bool) -> VerbResult<bool> {
        let c = self
            .cqs
            .get_mut(cq.0)
            .ok_or(err("push_wc", Errno::Inval, "no such CQ"))?;
        if c.overflowed || c.entries.len() >= c.capacity {
            self.counters.cq_overflows += 1;
            if !c.overflowed {
                c.overflowed = true;
                self.events.push_back(AsyncEvent::CqErr(cq));
            }
            return Ok(false);
        }
        c.entries.push_back(wc);
        if let Some(solicited_only) = c.armed {
            if !solicited_only || solicited || wc.status != WcStatus::Success {
                c.armed = None;
                self.comp_events.push_back(cq);
            }
        }
        Ok(true)
    }

    /// `ibv_req_notify_cq`: one completion event when the next (solicited, if asked)
    /// completion arrives; see [`Engine::poll_completion_event`].
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> VerbResult<()> {
        let c = self
            .cqs
            .get_mut(cq.0)
            .ok_or(err("req_notify_cq", Errno::Inval, "no such CQ"))?;
        c.armed = Some(solicited_only);
        Ok(())
    }

    /// True while some CQ is armed ([`Engine::req_notify_cq`]) and its event has not
    /// fired yet: a thread probably waits for that event rather than polling.
    pub fn any_cq_armed(&self) -> bool {
        self.cqs.iter().any(|c| c.armed.is_some())
    }

    /// True when [`Engine::poll_completion_event`] has something.
    pub fn has_completion_events(&self) -> bool {
        !self.comp_events.is_empty()
    }

    /// The next CQ that has a completion event for its channel.
    pub fn poll_completion_event(&mut self) -> Option<CqId> {
        self.comp_events.pop_front()
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// `ibv_create_srq`.
    pub fn create_srq(
        &mut self,
        pd: PdId,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> VerbResult<SrqId> {
        const VERB: &str = "create_srq";
        let l = &self.cfg.limits;
        if max_wr == 0
            || max_wr > l.max_qp_wr
            || max_sge == 0
            || max_sge > l.max_recv_sge
            || limit > max_wr
        {
            return Err(err(
                VERB,
                Errno::Inval,
                "max_wr, max_sge or srq_limit out of range",
            ));
        }
        self.pd_use(pd, VERB, 1)?;
        Ok(SrqId(self.srqs.insert(Srq {
            pd: pd.0,
            max_wr,
            max_sge,
            limit,
            queue: VecDeque::new(),
            users: 0,
        })))
    }

    /// `ibv_modify_srq` (IBV_SRQ_LIMIT): arms the limit event.
    pub fn arm_srq(&mut self, srq: SrqId, limit: u32) -> VerbResult<()> {
        let s = self
            .srqs
            .get_mut(srq.0)
            .ok_or(err("modify_srq", Errno::Inval, "no such SRQ"))?;
        if limit > s.max_wr {
            return Err(err("modify_srq", Errno::Inval, "srq_limit above max_wr"));
        }
        s.limit = limit;
        Ok(())
    }

    /// `ibv_destroy_srq`: EBUSY while a QP uses it.
    pub fn destroy_srq(&mut self, srq: SrqId) -> VerbResult<()> {
        let s = self
            .srqs
            .get(srq.0)
            .ok_or(err("destroy_srq", Errno::Inval, "no such SRQ"))?;
        if s.users > 0 {
            return Err(err("destroy_srq", Errno::Busy, "a QP still uses the SRQ"));
        }
        let pd = PdId(s.pd);
        self.srqs.remove(srq.0);
        self.pd_use(pd, "destroy_srq", -1)
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> VerbResult<()> {
        let s =
            self.srqs
                .get_mut(srq.0)
                .ok_or(err("post_srq_recv", Errno::Inval, "no such SRQ"))?;
        if wr.sg_list.len() > s.max_sge as usize {
            return Err(
                err("post_srq_recv", Errno::Inval, "too many SGEs").with_limit(
                    wr.sg_list.len() as u64,
                    s.max_sge.into(),
                    "SGEs",
                    "the SRQ takes at most",
                ),
            );
        }
        if s.queue.len() >= s.max_wr as usize {
            return Err(
                err("post_srq_recv", Errno::NoMem, "the SRQ is full").with_limit(
                    s.queue.len() as u64 + 1,
                    s.max_wr.into(),
                    "WRs",
                    "the SRQ takes at most",
                ),
            );
        }
        s.queue.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sg_list,
        });
        Ok(())
    }

    pub(super) fn check_av(&self, av: &AddressVector, verb: &'static str) -> VerbResult<()> {
        let sgid = self.cfg.gids.get(usize::from(av.sgid_index)).ok_or(err(
            verb,
            Errno::Inval,
            "sgid_index beyond the GID table",
        ))?;
        if *sgid == Gid::ZERO {
            return Err(err(
                verb,
                Errno::Inval,
                "the source GID table entry is empty",
            ));
        }
        if sgid.to_ipv4_mapped().is_some() != av.dgid.to_ipv4_mapped().is_some() {
            return Err(err(
                verb,
                Errno::Inval,
                "source and destination GIDs are of different IP families",
            ));
        }
        if av.dgid == Gid::ZERO {
            return Err(err(verb, Errno::Inval, "the destination GID is zero"));
        }
        Ok(())
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&mut self, pd: PdId, av: AddressVector) -> VerbResult<AhId> {
        self.check_av(&av, "create_ah")?;
        self.pd_use(pd, "create_ah", 1)?;
        Ok(AhId(self.ahs.insert(Ah { pd: pd.0, av })))
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhId) -> VerbResult<()> {
        let a = self
            .ahs
            .remove(ah.0)
            .ok_or(err("destroy_ah", Errno::Inval, "no such AH"))?;
        self.pd_use(PdId(a.pd), "destroy_ah", -1)
    }
}
