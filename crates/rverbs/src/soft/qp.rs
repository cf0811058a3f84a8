//! A queue pair of the soft device (RC, UC, UD): the engine's QP, with the RC
//! window sharing of loopback peers (`window.rs`), UD flow steering and multicast
//! groups. RAW_PACKET QPs are in `raw_qp.rs`.

use super::cq::SoftCq;
use super::flow::SoftFlow;
use super::Shared;
use crate::device::ops::{DeviceFlow, DeviceQp, QpCreate};
use crate::device::wr::{sge_lens_fit, LocalBuf, SendRequest};
use crate::error::{Error, Result};
use rverbs_engine::modify::{QpAttr, QpAttrMask};
use rverbs_engine::net::gid_to_ip;
use rverbs_engine::{PdId, QpInit, QpState, QpType, RecvWr};
use rverbs_wire::grh::Gid;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) struct SoftQp {
    shared: Arc<Shared>,
    qpn: u32,
    qp_type: QpType,
}

/// `ibv_create_qp` of an RC, UC or UD QP.
pub(crate) fn create(
    shared: &Arc<Shared>,
    pd: PdId,
    init: &QpCreate<'_>,
) -> Result<Box<dyn DeviceQp>> {
    let q = QpInit {
        pd,
        qp_type: init.qp_type,
        send_cq: init.send_cq.handle(),
        recv_cq: init.recv_cq.handle(),
        srq: init.srq,
        cap: init.cap,
        sq_sig_all: init.sq_sig_all,
    };
    let qpn = shared.lock_verb("create_qp")?.create_qp(q)?;
    for cq in [init.send_cq, init.recv_cq] {
        if let Some(c) = SoftCq::of(cq) {
            c.roce.store(true, Ordering::Relaxed);
        }
    }
    if init.qp_type == QpType::Ud {
        // Its receives carry a GRH with the datagram's TTL / TOS.
        shared.udp.recv_meta_user(true);
    }
    Ok(Box::new(SoftQp {
        shared: shared.clone(),
        qpn,
        qp_type: init.qp_type,
    }))
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        let qpn = self.qpn;
        let ud = self.qp_type == QpType::Ud;
        self.shared.destroy(move |s, e| {
            if ud {
                // Destroying a QP destroys its flows.
                s.ud_steering.remove_qp(qpn);
                s.udp.recv_meta_user(false);
            }
            // ACKs this QP still owes its peer (deferred, `progress.rs`) leave first:
            // a program that exits right after its last completion must not leave the
            // peer retrying.
            s.flush_deferred(e);
            let dgid = e.qp_dgid(qpn);
            let _ = e.destroy_qp(qpn);
            // Out of the sharing of its loopback peer's buffer: the QPs still
            // connected there get wider windows, and what the narrower ones held
            // back goes at once.
            if dgid.is_some_and(|g| s.reshare_peer(e, g)) {
                s.flush(e, s.now());
            }
        });
    }
}

/// `ibv_attach_mcast` of QP `qpn`: the engine's member list, then the IP group.
pub(crate) fn attach_mcast(s: &Shared, qpn: u32, gid: &Gid) -> Result<()> {
    s.lock().attach_mcast(qpn, *gid)?;
    if let Err(e) = s.udp.join_group(gid_to_ip(*gid)) {
        let _ = s.lock().detach_mcast(qpn, gid);
        return Err(Error::io("joining the IP multicast group", e));
    }
    s.wake();
    Ok(())
}

/// `ibv_detach_mcast` of QP `qpn`; the group's socket closes with its last member.
pub(crate) fn detach_mcast(s: &Shared, qpn: u32, gid: &Gid) -> Result<()> {
    s.lock().detach_mcast(qpn, gid)?;
    s.prune_groups();
    s.wake();
    Ok(())
}

impl DeviceQp for SoftQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn state(&self) -> QpState {
        self.shared
            .lock()
            .qp_state(self.qpn)
            .unwrap_or(QpState::Err)
    }

    fn query(&self) -> Result<QpAttr> {
        Ok(self.shared.lock_verb("query_qp")?.query_qp(self.qpn)?)
    }

    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let s = &self.shared;
        let av = attr.ah_attr.filter(|_| mask.contains(QpAttrMask::AV));
        // Over loopback an RC peer is a socket on this machine whose receive buffer
        // the kernel shows (asked before the engine lock is taken): the QPs connected
        // to a peer with less room than ours get windows its buffer takes together
        // (`peer_window`).
        let peer_rcvbuf = match av {
            // (With the same-host carrier the datagrams wait in its ring, no
            // larger than this, instead: `same_host.rs`.)
            Some(h) if self.qp_type == QpType::Rc && s.info.is_loopback() => {
                super::window::peer_rcvbuf(h.av.dgid).map(|b| match &s.rings {
                    Some(_) => b.min(crate::carrier::same_host::RING_ROOM),
                    None => b,
                })
            }
            _ => None,
        };
        let mut e = s.lock_verb("modify_qp")?;
        // Under the engine lock, as in `Pd::create_ah` (the re-scan may reuse a slot).
        if let Some(h) = &av {
            s.check_sgid(h.av.sgid_index, "modify_qp")?;
        }
        let now = s.now();
        let old_dgid = e.qp_dgid(self.qpn);
        e.modify_qp(self.qpn, attr, mask, now)?;
        if let Some(h) = av.filter(|_| self.qp_type == QpType::Rc) {
            // The peer's window if it is tighter than the engine's (our buffer's),
            // with our READ pieces (the responses come to us); else the engine's. The
            // peer's buffer is shared by every QP connected to it, this one included:
            // their windows are set again for one more sharer (and again for one less
            // when a QP leaves: below, `SoftQp::drop`, `Shared::dispatch`).
            match peer_rcvbuf {
                Some(b) => {
                    s.peer_rcvbufs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(h.av.dgid, b);
                    super::window::share_peer_buffer(&mut e, h.av.dgid, b)?;
                }
                // Without the peer's buffer only this QP's window is known (the
                // engine's).
                None => e.set_qp_window(self.qpn, None)?,
            }
            // A QP moved to another peer (a new address vector) leaves its old one.
            if let Some(old) = old_dgid.filter(|&o| o != h.av.dgid) {
                s.reshare_peer(&mut e, old);
            }
        } else if mask.contains(QpAttrMask::STATE)
            && matches!(attr.qp_state, QpState::Reset | QpState::Err)
        {
            // Out of the sharing: the QPs left connected to its peer take its share
            // (and send what it lets go with the flush below).
            if let Some(old) = old_dgid {
                s.reshare_peer(&mut e, old);
            }
        }
        s.flush(&mut e, now);
        drop(e);
        s.wake();
        Ok(())
    }

    fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        sge_lens_fit("post_send", wr.bufs.as_slice().iter().map(|b| b.len))?;
        wr.check_remote_len()?;
        let s = &self.shared;
        let mut e = s.lock_verb("post_send")?;
        let now = s.now();
        e.post_send(self.qpn, wr.to_engine(), now)?;
        s.flush(&mut e, now);
        s.wake_if_needed(&e);
        Ok(())
    }

    fn post_send_list(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), (usize, Error)> {
        let s = &self.shared;
        let mut e = s.lock_verb("post_send").map_err(|e| (0, e))?;
        let now = s.now();
        let mut failed = None;
        for (i, wr) in wrs.iter().enumerate() {
            let fits = sge_lens_fit("post_send", wr.bufs.as_slice().iter().map(|b| b.len))
                .and_then(|()| wr.check_remote_len());
            if let Err(err) = fits.and_then(|()| Ok(e.post_send(self.qpn, wr.to_engine(), now)?)) {
                failed = Some((i, err));
                break;
            }
        }
        s.flush(&mut e, now);
        s.wake_if_needed(&e);
        failed.map_or(Ok(()), Err)
    }

    fn bind_mw(&self, wr: &SendRequest<'_>) -> Result<u32> {
        // As rdma-core's rxe provider: the bind is a BIND_MW request with the next key.
        self.post_send(wr)?;
        Ok(wr.bind.map_or(0, |(_, k)| k))
    }

    fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        sge_lens_fit("post_recv", bufs.iter().map(|b| b.len))?;
        let s = &self.shared;
        let wr = RecvWr {
            wr_id,
            sg_list: bufs.iter().map(LocalBuf::sge).collect(),
        };
        let mut e = s.lock_verb("post_recv")?;
        // Posting a receive starts no timer and sends nothing (the engine only
        // queues it, or completes it at once on a QP in error), so the clock is read
        // only when `settle` flushes; while answers are deferred (flush_pending,
        // written under the engine lock held here) the time they were deferred at
        // stands for it. (A ping-pong reposts a receive between taking the request
        // and answering it: one clock read less on its critical path.)
        let now = match s.flush_pending.load(std::sync::atomic::Ordering::Relaxed) {
            0 => s.now(),
            at => at,
        };
        e.post_recv(self.qpn, wr, now)?;
        // A receive posted to a QP in error completes at once: let pollers see it.
        // Deferred acknowledgements stay deferred: a receive is usually reposted
        // just before the reply that will carry them.
        s.settle(&mut e, now);
        Ok(())
    }

    fn attach_mcast(&self, gid: &Gid) -> Result<()> {
        attach_mcast(&self.shared, self.qpn, gid)
    }

    fn detach_mcast(&self, gid: &Gid) -> Result<()> {
        detach_mcast(&self.shared, self.qpn, gid)
    }

    fn create_flow(&self, attr: &rverbs_flow::attr::FlowAttr) -> Result<Box<dyn DeviceFlow>> {
        let id = self.shared.ud_steering.insert(self.qpn, attr)?;
        Ok(Box::new(SoftFlow::Ud {
            id,
            shared: Some(Arc::downgrade(&self.shared)),
        }))
    }
}
