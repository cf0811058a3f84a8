//! Raw mode: RAW_PACKET QPs and flow steering through the verbs API, backed by an
//! [`rverbs_raw::RawDevice`] on the context's interface.
//!
//! A context opened with [`crate::OpenOptions::raw_interface`] owns a raw device bound to
//! that interface (an `AF_PACKET` socket with a `TPACKET_V3` ring and the
//! [`rverbs_flow`] classifier; see the `rverbs-raw` crate). A RAW_PACKET [`crate::Qp`]
//! is a queue of that device: its posted receive buffers are filled with whole frames
//! by the device's receive thread, and its completions are moved into the QP's rverbs
//! [`crate::Cq`]s by the context's driver thread (woken by the receive thread) or by the
//! next [`crate::Cq::poll`], so polling, `req_notify` and completion channels work as
//! for any other QP. The RoCE engine's RC/UC/UD datapath does not see raw QPs at all.
//! The context's own RoCE frames (v2, v1, ARP, ND) do not pass through the device's
//! queues: they come through a socket of their own, read inline (`rawnet.rs`).

use crate::carrier::raw::v1::V1Port;
use crate::carrier::raw::NetPort;
use crate::error::Result;
use rverbs_engine::{CqId, Engine, Memory, QpState, Wc, WcFlags, WcOpcode, WcStatus};
use rverbs_raw::{RawDevice, RawQp, RawRecvWr, RawWc, RawWcOpcode, RawWcStatus};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The raw side of a context.
pub(crate) struct RawMode {
    /// The interface the context is bound to.
    pub(crate) ifname: String,
    /// The device, or `None` when the process lacked CAP_NET_RAW when the context was
    /// opened (creating a RAW_PACKET QP or a flow is then EPERM, as in the kernel).
    pub(crate) dev: Option<RawDevice>,
    /// Live raw QPs, whose completions the driver moves into their CQs.
    pub(crate) qps: Mutex<Vec<Weak<RawQpInner>>>,
}

/// How the raw device receives for RAW_PACKET QPs and flows: the TPACKET_V3 ring
/// (default: fewest wake-ups and the best packet rate; a partly filled block waits up
/// to 2 ms, which only raw QPs see — RoCE itself comes through its own socket,
/// `rawnet.rs`), or `RVERBS_RAW_RX=plain` (one `recvmsg` per frame, handed over at
/// once).
fn rx_mode() -> crate::Result<rverbs_raw::RxMode> {
    crate::device::options::raw_rx(crate::device::options::var("RVERBS_RAW_RX").as_deref())
}

impl RawMode {
    /// Moves the completions of every live raw QP into their CQs; true if any moved.
    pub(crate) fn drain_qps(&self, engine: &mut Engine) -> bool {
        let qps: Vec<Arc<RawQpInner>> = {
            let mut l = self.qps.lock().unwrap_or_else(|e| e.into_inner());
            l.retain(|w| w.strong_count() > 0);
            l.iter().filter_map(Weak::upgrade).collect()
        };
        let mut any = false;
        for q in qps {
            any |= q.drain(engine);
        }
        any
    }

    /// Opens raw mode on `ifname`: the device when the process holds CAP_NET_RAW, and
    /// with it the raw carrier's ports: RoCE v1, and with `v2` RoCE v2 too
    /// (`carrier::raw`): sent through the device, received on a socket of their own.
    pub(crate) fn open(ifname: &str, v2: bool) -> Result<(RawMode, Option<(V1Port, NetPort)>)> {
        let dev = if rverbs_raw::has_cap_net_raw() {
            Some(
                RawDevice::open_with(ifname, rx_mode()?)
                    .map_err(|e| crate::Error::io("opening the raw device (AF_PACKET)", e))?,
            )
        } else {
            None
        };
        let ports = match &dev {
            Some(d) => Some((V1Port::open(ifname)?, NetPort::open(d, ifname, v2)?)),
            None => None,
        };
        let mode = RawMode {
            ifname: ifname.to_string(),
            dev,
            qps: Mutex::new(Vec::new()),
        };
        Ok((mode, ports))
    }
}

/// One scatter entry of a posted receive: a range of a region (the region's bytes stay
/// alive while the request is posted).
pub(crate) struct Target {
    /// The region's key when posted: a receive whose region was deregistered since
    /// completes with LOC_PROT_ERR and writes nothing (rule 4 of the crate docs).
    pub(crate) lkey: u32,
    /// The region's memory; `None` when the key or range named none when posted (the
    /// receive then completes with LOC_PROT_ERR, as rxe finds a bad SGE on arrival).
    pub(crate) region: Option<Arc<dyn Memory>>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// A RAW_PACKET QP's state beside its [`RawQp`].
pub(crate) struct RawQpInner {
    pub(crate) raw: RawQp,
    /// The QP's protection domain: its receive buffers must be in it (and allow local
    /// write), as the engine checks for its own QPs.
    pub(crate) pd: rverbs_engine::PdId,
    pub(crate) send_cq: CqId,
    pub(crate) recv_cq: CqId,
    pub(crate) sq_sig_all: bool,
    pub(crate) max_recv_wr: usize,
    /// The QP's `cap` (scatter/gather and inline limits are checked as the engine does).
    pub(crate) cap: rverbs_engine::modify::QpCap,
    pub(crate) st: Mutex<RawQpState>,
    /// `st.state`, readable without `st`'s lock: the driver holds that lock while it
    /// waits for a region's lock to scatter a frame, so [`crate::Qp::state`] called
    /// inside that region's [`crate::Mr::with`] must not take it.
    pub(crate) state_now: AtomicU8,
}

const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

pub(crate) struct RawQpState {
    pub(crate) state: QpState,
    /// Receives posted before RTR: handed to the device when the QP reaches RTR (a raw
    /// QP's receive queue takes frames only from RTR on).
    pub(crate) held: VecDeque<(u64, Vec<Target>)>,
    /// Receives handed to the device, in order (the device completes them in order).
    pub(crate) posted: VecDeque<(u64, Vec<Target>)>,
    /// Completions made here (flushes), waiting to be moved into the CQs.
    pub(crate) local: VecDeque<(CqId, Wc)>,
}

impl RawQpInner {
    /// The QP's state, without taking `st`'s lock.
    pub(crate) fn state(&self) -> QpState {
        STATES[usize::from(self.state_now.load(Ordering::Acquire)).min(STATES.len() - 1)]
    }

    /// Sets the state (under `st`'s lock, so both copies agree).
    pub(crate) fn set_state(&self, st: &mut RawQpState, to: QpState) {
        st.state = to;
        let i = STATES
            .iter()
            .position(|s| *s == to)
            .unwrap_or(STATES.len() - 1);
        self.state_now.store(i as u8, Ordering::Release);
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, RawQpState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wc(&self, w: &RawWc) -> Wc {
        let mut flags = WcFlags::default();
        let mut flow_tag = 0;
        if let Some(t) = w.flow_tag {
            flags = WcFlags(flags.0 | WcFlags::WITH_FLOW_TAG.0);
            flow_tag = t;
        }
        if w.csum_ok {
            flags = WcFlags(flags.0 | WcFlags::IP_CSUM_OK.0);
        }
        Wc {
            wr_id: w.wr_id,
            status: match w.status {
                RawWcStatus::Success => WcStatus::Success,
                RawWcStatus::LocLenErr => WcStatus::LocLenErr,
                RawWcStatus::WrFlushErr => WcStatus::WrFlushErr,
            },
            opcode: match w.opcode {
                RawWcOpcode::Send => WcOpcode::Send,
                RawWcOpcode::Recv => WcOpcode::Recv,
            },
            byte_len: w.byte_len,
            qp_num: self.raw.qp_num(),
            wc_flags: flags,
            flow_tag,
            ..Wc::default()
        }
    }

    /// Moves this QP's completions into its CQs: received frames are scattered into
    /// the posted regions first (region lock after the engine lock, the device's order).
    pub(crate) fn drain(&self, engine: &mut Engine) -> bool {
        let mut st = self.lock();
        self.drain_locked(engine, &mut st)
    }

    /// [`RawQpInner::drain`] with the state already locked (engine lock first, then
    /// the state: the order every path takes).
    fn drain_locked(&self, engine: &mut Engine, st: &mut RawQpState) -> bool {
        let mut any = false;
        while let Some((cq, wc)) = st.local.pop_front() {
            let _ = engine.push_wc(cq, wc, false);
            any = true;
        }
        for w in self.raw.poll_cq(usize::MAX) {
            any = true;
            let wc = self.wc(&w);
            if w.opcode == RawWcOpcode::Recv {
                let Some((wr_id, targets)) = st.posted.pop_front() else {
                    continue;
                };
                debug_assert_eq!(wr_id, w.wr_id);
                let mut wc = wc;
                if w.status == RawWcStatus::Success {
                    let ok = |t: &Target| {
                        t.region.is_some()
                            && engine.lkey_allows(
                                t.lkey,
                                self.pd,
                                rverbs_engine::Access::LOCAL_WRITE,
                            )
                    };
                    if targets.iter().all(ok) {
                        scatter(&w.buf[..w.byte_len as usize], &targets);
                    } else {
                        wc.status = WcStatus::LocProtErr;
                    }
                }
                let _ = engine.push_wc(self.recv_cq, wc, false);
            } else {
                let _ = engine.push_wc(self.send_cq, wc, false);
            }
        }
        any
    }

    /// Flushes every receive (held or posted) with WR_FLUSH_ERR, as entering ERR does.
    ///
    /// Receives the device completed before the flush (frames already in their
    /// buffers, completions not yet moved into the CQ by the driver thread) keep their
    /// SUCCESS and come first: the device's queue is taken back at once, then what it
    /// completed is drained (those are the oldest entries of `posted`, the device
    /// completes in order), and only the rest is flushed.
    pub(crate) fn flush(&self, engine: &mut Engine, st: &mut RawQpState) {
        let from_device = self.raw.flush_recv();
        self.drain_locked(engine, st);
        let mut flushed: Vec<u64> = st.held.drain(..).map(|(id, _)| id).collect();
        debug_assert_eq!(st.posted.len(), from_device.len());
        st.posted.clear();
        flushed.extend(from_device.iter().map(|w| w.wr_id));
        for wr_id in flushed {
            st.local.push_back((
                self.recv_cq,
                Wc {
                    wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    qp_num: self.raw.qp_num(),
                    ..Wc::default()
                },
            ));
        }
    }

    /// Discards every receive without a completion, as entering RESET does; receives
    /// the device completed before still complete (their frames are in place).
    pub(crate) fn reset(&self, engine: &mut Engine, st: &mut RawQpState) {
        self.raw.flush_recv();
        self.drain_locked(engine, st);
        st.posted.clear();
        st.held.clear();
    }

    /// Hands `wr` to the device's receive queue.
    pub(crate) fn post_to_device(
        &self,
        st: &mut RawQpState,
        wr_id: u64,
        targets: Vec<Target>,
    ) -> std::io::Result<()> {
        let len: usize = targets.iter().map(|t| t.len).sum();
        self.raw.post_recv(RawRecvWr {
            wr_id,
            buf: vec![0; len],
        })?;
        st.posted.push_back((wr_id, targets));
        Ok(())
    }
}

/// Copies `frame` into the scatter list `targets`, in order.
fn scatter(mut frame: &[u8], targets: &[Target]) {
    for t in targets {
        if frame.is_empty() {
            break;
        }
        let n = t.len.min(frame.len());
        if let Some(r) = &t.region {
            r.write(t.offset, &frame[..n]);
        }
        frame = &frame[n..];
    }
}
