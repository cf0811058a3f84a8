//! The devices of the system's libibverbs (rdma-core's providers: mlx5, efa, the
//! kernel's rxe and siw...) behind the same device interface as the soft device
//! (`crate::device::ops`), so a program written against rverbs runs on a NIC unchanged,
//! chosen by device name ([`crate::device()`]).
//!
//! The library is loaded at run time by its soname (`rverbs_sys::ibv`), never linked:
//! a build needs no rdma-core, and on a machine without it the system's devices are
//! simply absent (asking for one names the missing library). Every C call and layout
//! is in `rverbs-sys`; this module maps the verbs' types onto it.
//!
//! What differs from the soft device: the limits are the device's (`query_device`),
//! its errors are the provider's errnos; a region's bytes are memory the NIC writes
//! without a lock, copied volatile-ly (`device::wr::Region`); there are no carriers,
//! faults or raw mode; management datagrams (the GSI agents, `process_mad`) are not
//! offered (EOPNOTSUPP: they go through libibumad on such devices); flow steering is
//! the provider's `ibv_create_flow`, and the RDMA CM the kernel's, through the system's
//! librdmacm (`crate::cm`). Port and device async events are delivered as the verbs'
//! `AsyncEvent`s. Memory windows are the provider's (`alloc_mw`,
//! `bind_mw`, BIND_MW / LOCAL_INV requests); a window keeps the region it was last
//! bound to registered (`rverbs_sys::ibv::Mw`).

mod conv;
mod queues;

use crate::device::attrs::{DeviceAttr, PortAttr};
use crate::device::ops::{
    CqOwner, Device, DeviceChannel, DeviceCq, DeviceMad, DeviceQp, QpCreate, Registered,
};
use crate::device::wr::{sge_lens_fit, LocalBuf, Region};
use crate::device::{DeviceInfo, DeviceKind};
use crate::error::{Error, Result};
use crate::gid::{GidTable, GidType};
use crate::sys::ibv;
use conv::{inval, verr};
use queues::{HwChannel, HwCq, HwMad, HwQp};
use rverbs_engine::modify::AhAttr;
use rverbs_engine::{Access, AhId, AsyncEvent, Counters, CqId, MrKeys, MwId, MwType, PdId, SrqId};
use rverbs_wire::grh::Gid;
use std::any::Any;
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The system's devices, or why there are none (the library is missing, or is
/// rverbs' own); `Ok(empty)` when `RVERBS_SYSTEM_DEVICES=0`.
pub(crate) fn system_devices() -> std::result::Result<Vec<DeviceInfo>, String> {
    if !crate::device::options::system_devices_enabled().map_err(|e| e.to_string())? {
        return Ok(Vec::new());
    }
    let path = crate::device::options::libibverbs_path();
    ibv::load_library(path.as_deref()).map_err(|e| e.to_string())?;
    let list = ibv::devices()
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("ibv_get_device_list: {e}"))?;
    Ok(list.into_iter().map(|e| info_of(&e)).collect())
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A system device's entry: its port 1 netdev (RoCE, iWARP) and that interface's
/// addresses, MTU and MAC, from sysfs.
fn info_of(e: &ibv::DeviceEntry) -> DeviceInfo {
    let ifname = read(&format!("{}/ports/1/gid_attrs/ndevs/0", e.ibdev_path))
        .or_else(|| {
            std::fs::read_dir(format!("{}/device/net", e.ibdev_path))
                .ok()?
                .flatten()
                .next()
                .map(|d| d.file_name().to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let net = |f: &str| read(&format!("/sys/class/net/{ifname}/{f}"));
    let (ifindex, addrs, netdev_mtu, mac) = if ifname.is_empty() {
        (0, Vec::new(), 0, None)
    } else {
        (
            net("ifindex").and_then(|s| s.parse().ok()).unwrap_or(0),
            crate::device::interface_addrs(&ifname).unwrap_or_default(),
            net("mtu").and_then(|s| s.parse().ok()).unwrap_or(0),
            net("address").and_then(|m| crate::device::parse_mac(&m)),
        )
    };
    DeviceInfo {
        name: e.name.clone(),
        kind: DeviceKind::System,
        ifname,
        ifindex,
        addrs,
        netdev_mtu,
        mac,
    }
}

/// The objects with no data path of their own, by the handle numbers the verbs hold.
#[derive(Default)]
pub(crate) struct Tables {
    next: AtomicU32,
    pds: Mutex<HashMap<u32, Arc<ibv::Pd>>>,
    ahs: Mutex<HashMap<u32, Arc<ibv::AhHandle>>>,
    srqs: Mutex<HashMap<u32, Arc<ibv::Srq>>>,
    mws: Mutex<HashMap<u32, Arc<ibv::Mw>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tables {
    fn mint(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn pd(&self, pd: PdId, verb: &'static str) -> Result<Arc<ibv::Pd>> {
        lock(&self.pds)
            .get(&pd.raw())
            .cloned()
            .ok_or_else(|| inval(verb, "no such protection domain"))
    }

    pub(crate) fn ah(&self, ah: AhId) -> Result<Arc<ibv::AhHandle>> {
        lock(&self.ahs)
            .get(&ah.raw())
            .cloned()
            .ok_or_else(|| inval("post_send", "no such address handle"))
    }

    pub(crate) fn mw(&self, mw: MwId, verb: &'static str) -> Result<Arc<ibv::Mw>> {
        lock(&self.mws)
            .get(&mw.0)
            .cloned()
            .ok_or_else(|| inval(verb, "no such memory window"))
    }

    pub(crate) fn srq(&self, srq: SrqId, verb: &'static str) -> Result<Arc<ibv::Srq>> {
        lock(&self.srqs)
            .get(&srq.raw())
            .cloned()
            .ok_or_else(|| inval(verb, "no such SRQ"))
    }
}

/// An open device of the system's libibverbs.
pub(crate) struct HwDevice {
    info: DeviceInfo,
    ctx: Arc<ibv::Context>,
    tables: Arc<Tables>,
    /// The channel of CQs created without one (the verbs' `Context::get_cq_event`).
    own: Arc<HwChannel>,
    gids: Mutex<GidTable>,
    gids_read: Mutex<Instant>,
    mad: HwMad,
    dialect: conv::WcDialect,
}

/// How long a read GID table is used before it is read again.
const GID_REFRESH: Duration = Duration::from_secs(1);

impl HwDevice {
    /// `ibv_open_device` of the device `info` names.
    pub(crate) fn open(info: DeviceInfo) -> Result<HwDevice> {
        let ctx = ibv::Context::open(&info.name)
            .map_err(|e| Error::NoDevice(format!("{} ({e})", info.name)))?
            .map_err(|e| Error::io("ibv_open_device", e))?;
        let own = Arc::new(HwChannel::new(&ctx)?);
        let gids = read_gids(&ctx, info.ifindex);
        let dialect = ctx.query_device().map_or(conv::WcDialect::Verbs, |a| {
            conv::WcDialect::of(a.vendor_id, a.vendor_part_id)
        });
        Ok(HwDevice {
            info,
            ctx,
            tables: Arc::default(),
            own,
            gids: Mutex::new(gids),
            gids_read: Mutex::new(Instant::now()),
            mad: HwMad,
            dialect,
        })
    }
}

impl HwDevice {
    /// A GID_CHANGE makes the next look at the GID table read it again.
    fn saw(&self, e: &AsyncEvent) {
        if let AsyncEvent::Port(rverbs_engine::PortEvent::GidChange, _) = e {
            if let Some(past) = Instant::now().checked_sub(GID_REFRESH) {
                *lock(&self.gids_read) = past;
            }
        }
    }
}

/// The GID table of the system device `info`, read through a context opened for it.
pub(crate) fn gid_table_of(info: &DeviceInfo) -> Option<GidTable> {
    let ctx = ibv::Context::open(&info.name).ok()?.ok()?;
    Some(read_gids(&ctx, info.ifindex))
}

/// Port 1's GID table as the kernel has it (`ibv_query_gid_ex` of every index: the
/// empty ones fail and stay empty).
fn read_gids(ctx: &ibv::Context, ifindex: u32) -> GidTable {
    let len = ctx
        .query_port(1)
        .map(|p| usize::try_from(p.gid_tbl_len).unwrap_or(0))
        .unwrap_or(0)
        .min(crate::GID_TABLE_LEN);
    let entries = (0..len).filter_map(|i| {
        let e = ctx.query_gid_ex(1, i as u32).ok()?;
        let g = ibv::gid_bytes(&e.gid);
        if g == [0; 16] {
            return None;
        }
        let ty = match e.gid_type {
            0 => GidType::Ib,
            1 => GidType::RoceV1,
            _ => GidType::RoceV2,
        };
        Some((i, Gid(g), ty, e.ndev_ifindex))
    });
    GidTable::from_entries(1, ifindex, entries)
}

impl Device for HwDevice {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        let a = self
            .ctx
            .query_device_ex()
            .map_err(|e| verr("query_device", e))?;
        Ok(conv::device_attr_ex(&a))
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        let a = self
            .ctx
            .query_port(port)
            .map_err(|e| verr("query_port", e))?;
        Ok(conv::port_attr(&a, self.info.netdev_mtu))
    }

    fn gid_table(&self) -> MutexGuard<'_, GidTable> {
        let mut at = lock(&self.gids_read);
        if at.elapsed() >= GID_REFRESH {
            let t = read_gids(&self.ctx, self.info.ifindex);
            *lock(&self.gids) = t;
            *at = Instant::now();
        }
        drop(at);
        lock(&self.gids)
    }

    fn counters(&self) -> Counters {
        // The kernel's per-port counters (sysfs `hw_counters`, as rxe and mlx5 name
        // them); the soft device's drop reasons have no equivalent here.
        let dir = format!("{}/ports/1/hw_counters", self.ctx.entry().ibdev_path);
        let n = |f: &str| read(&format!("{dir}/{f}")).and_then(|s| s.parse().ok());
        // rxe's names (drivers/infiniband/sw/rxe/rxe_hw_counters.c); a provider
        // without them reads 0.
        Counters {
            tx_packets: n("sent_pkts").unwrap_or(0),
            rx_packets: n("rcvd_pkts").unwrap_or(0),
            rx_duplicate_requests: n("duplicate_request").unwrap_or(0),
            rx_out_of_sequence: n("out_of_seq_request").unwrap_or(0),
            rx_rnr_nak: n("rcvd_rnr_err").unwrap_or(0),
            tx_rnr_nak: n("send_rnr_err").unwrap_or(0),
            rx_nak_seq: n("rcvd_seq_err").unwrap_or(0),
            ..Counters::default()
        }
    }

    fn alloc_pd(&self) -> Result<PdId> {
        let pd = ibv::Pd::alloc(&self.ctx).map_err(|e| verr("alloc_pd", e))?;
        let id = self.tables.mint();
        lock(&self.tables.pds).insert(id, pd);
        Ok(PdId::from_raw(id))
    }

    fn dealloc_pd(&self, pd: PdId) {
        // The library's PD is freed with its last user (each holds an Arc).
        lock(&self.tables.pds).remove(&pd.raw());
    }

    fn reg_mr(&self, pd: PdId, buf: Vec<u8>, access: Access) -> Result<Registered> {
        let p = self.tables.pd(pd, "reg_mr")?;
        let mem = ibv::DmaMem::new(buf.len()).map_err(|e| verr("reg_mr", e))?;
        mem.write(0, &buf)
            .ok_or_else(|| inval("reg_mr", "length"))?;
        let mem = Arc::new(mem);
        let mr = ibv::Mr::reg(&p, mem.clone(), access.0).map_err(|e| verr("reg_mr", e))?;
        let keys = MrKeys {
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        Ok(Registered {
            region: Region::Hw(Arc::new(mr)),
            addr: mem.addr(),
            keys,
        })
    }

    fn dereg_mr(&self, _lkey: u32) {
        // The region deregisters itself when its last holder (`Region::Hw`) drops.
    }

    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId> {
        let p = self.tables.pd(pd, "create_ah")?;
        let ah = ibv::AhHandle::new(&p, &conv::ah_attr(attr)).map_err(|e| verr("create_ah", e))?;
        let id = self.tables.mint();
        lock(&self.tables.ahs).insert(id, Arc::new(ah));
        Ok(AhId::from_raw(id))
    }

    fn destroy_ah(&self, ah: AhId) {
        lock(&self.tables.ahs).remove(&ah.raw());
    }

    fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<(MwId, u32)> {
        let p = self.tables.pd(pd, "alloc_mw")?;
        let mw = ibv::Mw::alloc(&p, kind == MwType::Type2).map_err(|e| verr("alloc_mw", e))?;
        let id = self.tables.mint();
        let rkey = mw.rkey();
        lock(&self.tables.mws).insert(id, mw);
        Ok((MwId(id), rkey))
    }

    fn dealloc_mw(&self, mw: MwId) {
        // Deallocated with its last user (a bind request in flight holds an Arc).
        lock(&self.tables.mws).remove(&mw.0);
    }

    fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId> {
        let p = self.tables.pd(pd, "create_srq")?;
        let id = self.tables.mint();
        let srq =
            ibv::Srq::new(&p, max_wr, max_sge, id.into()).map_err(|e| verr("create_srq", e))?;
        lock(&self.tables.srqs).insert(id, srq);
        Ok(SrqId::from_raw(id))
    }

    fn destroy_srq(&self, srq: SrqId) {
        lock(&self.tables.srqs).remove(&srq.raw());
    }

    fn post_srq_recv(&self, srq: SrqId, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        let s = self.tables.srq(srq, "post_srq_recv")?;
        let sges = queues::sges("post_srq_recv", bufs)?;
        s.post_recv(wr_id, &sges)
            .map_err(|e| verr("post_srq_recv", e))
    }

    fn modify_srq(&self, srq: SrqId, limit: u32) -> Result<()> {
        self.tables
            .srq(srq, "modify_srq")?
            .set_limit(limit)
            .map_err(|e| verr("modify_srq", e))
    }

    fn create_comp_channel(&self) -> Result<Arc<dyn DeviceChannel>> {
        Ok(Arc::new(HwChannel::new(&self.ctx)?))
    }

    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&dyn DeviceChannel>,
    ) -> Result<Box<dyn DeviceCq>> {
        let ch = match channel {
            None => self.own.clone(),
            Some(c) => c
                .as_any()
                .downcast_ref::<HwChannel>()
                .map(HwChannel::share)
                .ok_or_else(|| inval("create_cq", "the channel belongs to another device"))?,
        };
        let id = self.tables.mint();
        Ok(Box::new(HwCq::new(&self.ctx, cqe, ch, id, self.dialect)?))
    }

    fn create_qp(&self, pd: PdId, init: &QpCreate<'_>) -> Result<Box<dyn DeviceQp>> {
        let p = self.tables.pd(pd, "create_qp")?;
        let cq = |c: &dyn DeviceCq| {
            c.as_any()
                .downcast_ref::<HwCq>()
                .map(HwCq::raw)
                .ok_or_else(|| inval("create_qp", "a CQ of another device"))
        };
        let srq = match init.srq {
            Some(s) => Some(self.tables.srq(s, "create_qp")?),
            None => None,
        };
        let (send_cq, recv_cq) = (cq(init.send_cq)?, cq(init.recv_cq)?);
        let (qp, cap) = ibv::Qp::new(
            &p,
            &ibv::QpInit {
                qp_type: conv::qp_type(init.qp_type),
                send_cq: &send_cq,
                recv_cq: &recv_cq,
                srq: srq.as_ref(),
                cap: conv::cap(&init.cap),
                sq_sig_all: init.sq_sig_all,
            },
        )
        .map_err(|e| verr("create_qp", e))?;
        Ok(Box::new(HwQp::new(
            qp,
            self.tables.clone(),
            init.qp_type,
            conv::cap_of(&cap),
        )))
    }

    fn get_cq_event(&self, timeout: Duration) -> Option<CqOwner> {
        self.own.get_cq_event(Some(timeout))
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        let until = timeout.map(|t| Instant::now() + t);
        loop {
            let ms = until.map_or(-1, |u| {
                crate::sys::poll_ms(u.saturating_duration_since(Instant::now()).as_nanos() as u64)
            });
            let ev = self.ctx.get_async_event(ms);
            if let Some(e) = ev.and_then(async_event) {
                self.saw(&e);
                return Some(e);
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return None;
            }
        }
    }

    fn try_get_async_event(&self) -> Option<AsyncEvent> {
        // Events the verbs do not name (a WQ's, an SRQ error) are skipped.
        while let Some(e) = self.ctx.get_async_event(0) {
            if let Some(e) = async_event(e) {
                self.saw(&e);
                return Some(e);
            }
        }
        None
    }

    fn async_fd(&self) -> BorrowedFd<'_> {
        self.ctx.async_fd()
    }

    fn mad(&self) -> &dyn DeviceMad {
        &self.mad
    }
}

/// The verbs' event for a library event (`None`: one they do not name).
fn async_event(e: ibv::AsyncEvent) -> Option<AsyncEvent> {
    use crate::sys::ibv::consts::*;
    use ibv::AsyncElement as El;
    Some(match (e.event_type, e.element) {
        (IBV_EVENT_CQ_ERR, El::Cq(id)) => AsyncEvent::CqErr(CqId::from_raw(id as u32)),
        (IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR, El::Qp(n)) => {
            AsyncEvent::QpFatal(n)
        }
        (IBV_EVENT_COMM_EST, El::Qp(n)) => AsyncEvent::CommEst(n),
        (IBV_EVENT_SQ_DRAINED, El::Qp(n)) => AsyncEvent::SqDrained(n),
        (IBV_EVENT_QP_LAST_WQE_REACHED, El::Qp(n)) => AsyncEvent::QpLastWqeReached(n),
        (IBV_EVENT_SRQ_LIMIT_REACHED, El::Srq(id)) => {
            AsyncEvent::SrqLimitReached(SrqId::from_raw(id as u32))
        }
        (ty, El::Port(port)) => {
            use rverbs_engine::PortEvent as P;
            let kind = match ty {
                IBV_EVENT_PORT_ACTIVE => P::Active,
                IBV_EVENT_PORT_ERR => P::Err,
                IBV_EVENT_LID_CHANGE => P::LidChange,
                IBV_EVENT_PKEY_CHANGE => P::PkeyChange,
                IBV_EVENT_SM_CHANGE => P::SmChange,
                IBV_EVENT_CLIENT_REREGISTER => P::ClientReregister,
                IBV_EVENT_GID_CHANGE => P::GidChange,
                _ => return None,
            };
            AsyncEvent::Port(kind, port)
        }
        (IBV_EVENT_DEVICE_FATAL, _) => AsyncEvent::DeviceFatal,
        _ => return None,
    })
}

/// The AH attributes of a C `ibv_ah_attr` (a UD peer the system's RDMA CM resolved).
pub(crate) fn ah_attr_from_c(a: &ibv::types::ibv_ah_attr) -> AhAttr {
    conv::ah_attr_of(a)
}

/// Checks shared by the posts: the SGE lengths fit 32 bits.
pub(crate) fn check_lens(verb: &'static str, bufs: &[LocalBuf<'_>]) -> Result<()> {
    sge_lens_fit(verb, bufs.iter().map(LocalBuf::byte_len))
}
