//! Management datagrams on an open device: a MAD agent API like libibumad's
//! (`umad_register`, `umad_send`, `umad_recv`, with request timeouts and retries), the
//! device's `process_mad` for local queries, local SMPs, trap listeners, and the MAD
//! and PMA counters.
//!
//! Every context has a GSI (QP1) that answers PMA, BM and the automatic "unsupported"
//! replies by itself (see [`rverbs_engine::mad`]); agents get what it does not answer.
//!
//! ```no_run
//! use rverbs::mad::{MadDest, Registration};
//! use std::time::Duration;
//!
//! let a = rverbs::device(None)?.open()?;
//! let b = rverbs::device(None)?.open()?;
//! // A PMA Get(PortCounters) from a's GSI to b's.
//! let agent = a.register_mad_agent(None)?;
//! let mut mad = rverbs::mad::request(rverbs::mad::class::PERF_MGMT, 0x0012, 0);
//! mad[65] = 1; // PortSelect
//! let resp = agent.request(MadDest::gsi(b.gid(1).unwrap()), &mad, Duration::from_millis(200), 3)?;
//! assert_eq!(resp.mad[3], 0x81); // GetResp
//! # Ok::<(), rverbs::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::verbs::Context;
use rverbs_engine::mad::gsi::AgentId;
use std::time::{Duration, Instant};

pub use rverbs_engine::mad::gsi::{
    GsiDest as MadDest, GsiRecv as MadRecv, Registration, GSI_QKEY, GSI_QPN,
};
pub use rverbs_engine::mad::pma::PortTotals;
pub use rverbs_engine::mad::{flags, GrhArea, Mad, MadResult, MadStats, NodeIdentity, Trap};
pub use rverbs_wire::mad::{attr, class, method, status};

/// A zeroed request MAD: base version 1, class version 1, method Get, the given class,
/// attribute and TransactionID (its high 32 bits are replaced by the agent's id when
/// sent).
pub fn request(mgmt_class: u8, attribute_id: u16, tid: u64) -> Mad {
    let mut m = [0u8; rverbs_wire::mad::MAD_LEN];
    m[0] = 1;
    m[1] = mgmt_class;
    m[2] = 1;
    m[3] = method::GET;
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&attribute_id.to_be_bytes());
    m
}

/// A registered MAD agent (`umad_register`); unregistered when dropped.
pub struct MadAgent {
    ctx: Context,
    id: AgentId,
    next_tid: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for MadAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MadAgent").field("id", &self.id.0).finish()
    }
}

impl Context {
    /// Registers a MAD agent for the requests `reg` names (`None`: only responses to
    /// its own requests). Fails with EINVAL when another agent has one of the methods.
    pub fn register_mad_agent(&self, reg: Option<Registration>) -> Result<MadAgent> {
        let id = self.dev().mad().register_agent(reg)?;
        Ok(MadAgent {
            ctx: self.clone(),
            id,
            next_tid: std::sync::atomic::AtomicU32::new(1),
        })
    }

    /// The device's `process_mad` (kernel semantics, see
    /// [`rverbs_engine::mad::MadPort::process_mad`]), as local tools call it.
    pub fn process_mad(
        &self,
        mad_flags: u32,
        port: u8,
        in_wc: Option<&crate::Wc>,
        in_grh: Option<&GrhArea>,
        in_mad: &Mad,
    ) -> (MadResult, Mad) {
        self.dev()
            .mad()
            .process_mad(mad_flags, port, in_wc, in_grh, in_mad)
    }

    /// Gives a locally built SMP to the port's SMA (no QP0 on RoCE): directed-route
    /// hop rules, the M_Key check, and the GetResp.
    pub fn local_smp(&self, smp: &Mad) -> Result<Mad> {
        self.dev().mad().local_smp(smp)
    }

    /// The next trap this port raised (Trap 256 for a bad M_Key, BM Trap 259 for a bad
    /// B_Key), oldest first: the local trap listener.
    pub fn poll_trap(&self) -> Option<Trap> {
        self.dev().mad().poll_trap()
    }

    /// MAD statistics (GSI drops, traps, key violations).
    pub fn mad_stats(&self) -> MadStats {
        self.dev().mad().stats()
    }

    /// The PMA's counters (what PortCountersExtended reports, after resets).
    pub fn pma_counters(&self) -> PortTotals {
        self.dev().mad().pma_counters()
    }

    /// Sets the port's B_Key and protect bit (local administration).
    pub fn set_b_key(&self, key: u64, protect: bool) {
        self.dev().mad().set_b_key(key, protect);
    }

    /// Sets the port's M_Key and protect bits (local administration).
    pub fn set_m_key(&self, key: u64, protect_bits: u8) {
        self.dev().mad().set_m_key(key, protect_bits);
    }
}

fn timed_out(what: &'static str) -> Error {
    Error::io(what, std::io::Error::from_raw_os_error(libc::ETIMEDOUT))
}

impl MadAgent {
    /// The agent's id (the high 32 bits of its requests' TransactionIDs).
    pub fn id(&self) -> u32 {
        self.id.0
    }

    /// Sends a MAD (`umad_send`).
    pub fn send(&self, dest: MadDest, mad: &Mad) -> Result<()> {
        self.ctx.dev().mad().send(self.id, dest, mad)
    }

    /// Sends a MAD with its TransactionID untouched (for senders that form their own:
    /// the CM echoes the request's in its answers).
    pub fn send_as_is(&self, dest: MadDest, mad: &Mad) -> Result<()> {
        self.ctx.dev().mad().send_as_is(self.id, dest, mad)
    }

    /// The next MAD for this agent, waiting up to `timeout` (`umad_recv`).
    pub fn recv(&self, timeout: Duration) -> Option<MadRecv> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.ctx.dev().mad().try_recv(self.id) {
                return Some(r);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Sends a request and waits for its response, resending up to `retries` times
    /// after `timeout` each (the kernel MAD layer's `timeout_ms` and `retries`). A fresh
    /// TransactionID is used when the MAD's is 0. Requests that arrive meanwhile are put
    /// back for [`MadAgent::recv`]; responses to other (abandoned) requests are dropped.
    /// Fails with a timed-out I/O error when no response came.
    pub fn request(
        &self,
        dest: MadDest,
        mad: &Mad,
        timeout: Duration,
        retries: u32,
    ) -> Result<MadRecv> {
        let mut m = *mad;
        let mut tid = u64::from_be_bytes(m[8..16].try_into().unwrap_or([0; 8])) & 0xffff_ffff;
        if tid == 0 {
            tid = u64::from(
                self.next_tid
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            );
            m[8..16].copy_from_slice(&tid.to_be_bytes());
        }
        let mut kept = Vec::new();
        let result = (|| {
            for _ in 0..=retries {
                self.send(dest, &m)?;
                let deadline = Instant::now() + timeout;
                while let Some(r) = self.recv(deadline.saturating_duration_since(Instant::now())) {
                    let rtid = u64::from_be_bytes(r.mad[8..16].try_into().unwrap_or([0; 8]));
                    // A response as the kernel's ib_response_mad sees one (R bit,
                    // TrapRepress, BM Send with the response bit).
                    if rverbs_engine::mad::response_mad(&r.mad) {
                        if rtid & 0xffff_ffff == tid {
                            return Ok(r);
                        }
                        continue;
                    }
                    kept.push(r);
                }
            }
            Err(timed_out("waiting for a MAD response"))
        })();
        if !kept.is_empty() {
            // Requests that arrived while waiting go back to the agent's queue, in
            // their arrival order.
            self.ctx.dev().mad().requeue(self.id, kept);
        }
        result
    }
}

impl Drop for MadAgent {
    fn drop(&mut self) {
        self.ctx.dev().mad().unregister_agent(self.id);
    }
}
