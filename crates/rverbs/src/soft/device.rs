//! The soft device behind the device interface (`crate::device::ops`): the
//! context-level verbs and MADs. Completion channels, CQs and QPs are in `channel.rs`,
//! `cq.rs`, `qp.rs` and `raw_qp.rs`.

use super::channel::SoftChannel;
use super::cq::SoftCq;
use super::Shared;
use crate::device::attrs::{device_attr, port_attr, DeviceAttr, PortAttr};
use crate::device::ops::{
    CqOwner, Device, DeviceChannel, DeviceCq, DeviceMad, DeviceQp, QpCreate, Registered,
};
use crate::device::options::Resolved;
use crate::device::wr::{sge_lens_fit, LocalBuf};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::gid::GidTable;
use rverbs_engine::mad::gsi::{AgentId, GsiDest, GsiRecv, Registration};
use rverbs_engine::mad::{GrhArea, Mad, MadResult, MadStats, Trap};
use rverbs_engine::modify::AhAttr;
use rverbs_engine::{
    Access, AhId, AsyncEvent, Counters, MwId, MwType, PdId, QpType, RecvWr, SrqId, VecMemory, Wc,
};
use std::any::Any;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// An open soft device: its shared state and the driver thread, which dropping it
/// (with the last handle) stops.
pub(crate) struct SoftDevice {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl SoftDevice {
    /// Opens the device and starts its driver thread.
    pub(crate) fn open(info: DeviceInfo, opts: &Resolved) -> Result<SoftDevice> {
        let shared = super::open::open(info, opts)?;
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("rverbs-{}", shared.info.name))
            .spawn(move || super::driver::driver(s2))
            .map_err(|e| Error::io("starting the driver thread", e))?;
        Ok(SoftDevice {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The device's state.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for SoftDevice {
    fn drop(&mut self) {
        // Deferred answers leave before the sockets close (not from inside
        // `Mr::with`, where the engine lock may not be taken).
        if crate::device::guard::check_not_in_with("close").is_ok() {
            self.shared.flush_deferred(&mut self.shared.lock());
        }
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.wake();
        // Inside `Mr::with` the driver may be waiting for that region: let it finish
        // on its own (it holds the shared state) instead of waiting for it here.
        if crate::device::guard::check_not_in_with("close").is_err() {
            return;
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Device for SoftDevice {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        let e = self.shared.lock_verb("query_device")?;
        let mut d = device_attr(e.config());
        if self.shared.raw.is_some() {
            d.device_cap_flags |= rverbs_raw::IBV_DEVICE_RAW_IP_CSUM;
        }
        Ok(d)
    }

    fn query_port(&self, _port: u8) -> Result<PortAttr> {
        let e = self.shared.lock_verb("query_port")?;
        Ok(port_attr(&self.shared.info, e.config(), e.counters()))
    }

    fn gid_table(&self) -> MutexGuard<'_, GidTable> {
        self.shared
            .gid_table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn counters(&self) -> Counters {
        let mut e = self.shared.lock();
        self.shared.flush_deferred(&mut e);
        e.counters().clone()
    }

    fn alloc_pd(&self) -> Result<PdId> {
        Ok(self.shared.lock_verb("alloc_pd")?.alloc_pd())
    }

    fn dealloc_pd(&self, pd: PdId) {
        self.shared.destroy(move |_, e| {
            let _ = e.dealloc_pd(pd);
        });
    }

    fn reg_mr(&self, pd: PdId, buf: Vec<u8>, access: Access) -> Result<Registered> {
        // The buffer's own address is the region's virtual address, as with real
        // verbs; it is only a number to the device. (Moving the Vec keeps its heap
        // buffer, so the address stays the buffer's.)
        let addr = buf.as_ptr() as u64;
        let region = Arc::new(VecMemory::from_vec(buf));
        let keys = self
            .shared
            .lock_verb("reg_mr")?
            .reg_mr(pd, region.clone(), addr, access)?;
        Ok(Registered {
            region: crate::device::wr::Region::Soft(region),
            addr,
            keys,
        })
    }

    fn dereg_mr(&self, lkey: u32) {
        self.shared.destroy(move |_, e| {
            let _ = e.dereg_mr(lkey);
        });
    }

    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId> {
        let mut engine = self.shared.lock_verb("create_ah")?;
        // Checked under the engine lock, which the address re-scan holds while it
        // frees and reuses GID slots (`rescan`): checked before it, the slot could be
        // freed and given to a new address in between, and the AH would silently send
        // from that address. Lock order: engine, then the GID table.
        self.shared.check_sgid(attr.av.sgid_index, "create_ah")?;
        Ok(engine.create_ah(pd, attr.av)?)
    }

    fn destroy_ah(&self, ah: AhId) {
        self.shared.destroy(move |_, e| {
            let _ = e.destroy_ah(ah);
        });
    }

    fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<(MwId, u32)> {
        Ok(self.shared.lock_verb("alloc_mw")?.alloc_mw(pd, kind)?)
    }

    fn dealloc_mw(&self, mw: MwId) {
        self.shared.destroy(move |_, e| {
            let _ = e.dealloc_mw(mw);
        });
    }

    fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId> {
        Ok(self
            .shared
            .lock_verb("create_srq")?
            .create_srq(pd, max_wr, max_sge, 0)?)
    }

    fn destroy_srq(&self, srq: SrqId) {
        self.shared.destroy(move |_, e| {
            let _ = e.destroy_srq(srq);
        });
    }

    fn post_srq_recv(&self, srq: SrqId, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        sge_lens_fit("post_srq_recv", bufs.iter().map(LocalBuf::byte_len))?;
        let wr = RecvWr {
            wr_id,
            sg_list: bufs.iter().map(LocalBuf::sge).collect(),
        };
        Ok(self
            .shared
            .lock_verb("post_srq_recv")?
            .post_srq_recv(srq, wr)?)
    }

    fn modify_srq(&self, srq: SrqId, limit: u32) -> Result<()> {
        Ok(self.shared.lock_verb("modify_srq")?.arm_srq(srq, limit)?)
    }

    fn create_comp_channel(&self) -> Result<Arc<dyn DeviceChannel>> {
        Ok(Arc::new(SoftChannel::new(self.shared.clone())?))
    }

    fn create_cq(
        &self,
        cqe: u32,
        _channel: Option<&dyn DeviceChannel>,
    ) -> Result<Box<dyn DeviceCq>> {
        // The channel is chosen by `bind`, after creation.
        let id = self.shared.lock_verb("create_cq")?.create_cq(cqe)?;
        Ok(Box::new(SoftCq::new(self.shared.clone(), id)))
    }

    fn create_qp(&self, pd: PdId, init: &QpCreate<'_>) -> Result<Box<dyn DeviceQp>> {
        if init.qp_type == QpType::RawPacket {
            return super::raw_qp::create(&self.shared, pd, init);
        }
        super::qp::create(&self.shared, pd, init)
    }

    fn get_cq_event(&self, timeout: Duration) -> Option<CqOwner> {
        self.shared
            .hub
            .default_channel
            .next_receiving(&self.shared, Some(timeout))
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.shared.hub.asyncs.pop_wait(timeout)
    }

    fn try_get_async_event(&self) -> Option<AsyncEvent> {
        self.shared.hub.asyncs.try_pop()
    }

    fn async_fd(&self) -> BorrowedFd<'_> {
        self.shared.hub.asyncs.fd()
    }

    fn mad(&self) -> &dyn DeviceMad {
        self
    }
}

impl DeviceMad for SoftDevice {
    fn register_agent(&self, reg: Option<Registration>) -> Result<AgentId> {
        let s = &self.shared;
        let id = s.lock_verb("register_mad_agent")?.gsi_register(reg)?;
        // What it receives carries a GRH with the datagram's TTL / TOS.
        s.udp.recv_meta_user(true);
        Ok(id)
    }

    fn unregister_agent(&self, id: AgentId) {
        self.shared.destroy(move |s, e| {
            let _ = e.gsi_unregister(id);
            s.udp.recv_meta_user(false);
        });
    }

    fn send(&self, id: AgentId, dest: GsiDest, mad: &Mad) -> Result<()> {
        let s = &self.shared;
        let now = s.now();
        let mut e = s.lock_verb("mad_send")?;
        e.gsi_send(id, dest, mad)?;
        s.flush(&mut e, now);
        Ok(())
    }

    fn send_as_is(&self, id: AgentId, dest: GsiDest, mad: &Mad) -> Result<()> {
        let s = &self.shared;
        let now = s.now();
        let mut e = s.lock_verb("mad_send")?;
        e.gsi_send_as_is(id, dest, mad)?;
        s.flush(&mut e, now);
        Ok(())
    }

    fn try_recv(&self, id: AgentId) -> Option<GsiRecv> {
        self.shared.lock().gsi_recv(id)
    }

    fn requeue(&self, id: AgentId, mads: Vec<GsiRecv>) {
        // Pushed back to the front last-first, so they keep their arrival order.
        let mut e = self.shared.lock();
        for r in mads.into_iter().rev() {
            e.gsi_requeue(id, r);
        }
    }

    fn process_mad(
        &self,
        mad_flags: u32,
        port: u8,
        in_wc: Option<&Wc>,
        in_grh: Option<&GrhArea>,
        in_mad: &Mad,
    ) -> (MadResult, Mad) {
        let s = &self.shared;
        let now = s.now();
        let mut e = s.lock();
        let r = e.process_mad(now, mad_flags, port, in_wc, in_grh, in_mad);
        s.flush(&mut e, now);
        r
    }

    fn local_smp(&self, smp: &Mad) -> Result<Mad> {
        let s = &self.shared;
        let now = s.now();
        let mut e = s.lock_verb("local_smp")?;
        let r = e.local_smp(now, smp);
        s.flush(&mut e, now);
        Ok(r?)
    }

    fn poll_trap(&self) -> Option<Trap> {
        self.shared.lock().poll_trap()
    }

    fn stats(&self) -> MadStats {
        self.shared.lock().mad_port().stats.clone()
    }

    fn pma_counters(&self) -> rverbs_engine::mad::pma::PortTotals {
        let e = self.shared.lock();
        e.mad_port().pma_totals(e.counters())
    }

    fn set_b_key(&self, key: u64, protect: bool) {
        self.shared.lock().mad_port_mut().set_b_key(key, protect);
    }

    fn set_m_key(&self, key: u64, protect_bits: u8) {
        self.shared
            .lock()
            .mad_port_mut()
            .set_m_key(key, protect_bits);
    }
}
