//! The device interface: what the public verbs types ask of a device, in the
//! vocabulary of libibverbs' verbs (`alloc_pd`, `reg_mr`, `create_cq`, `poll_cq`,
//! `req_notify_cq`, `create_qp`, `modify_qp`, `post_send`, `post_recv`, ...).
//!
//! **Two levels.** [`Device`] is one open device (`struct ibv_context` and its
//! `ibv_context_ops`); the objects on the data path are the device's own objects behind
//! [`DeviceCq`] and [`DeviceQp`] (with [`DeviceChannel`] and [`DeviceFlow`]), which the
//! public [`crate::Cq`] and [`crate::Qp`] hold. A CQ poll or a post is then one dynamic
//! call into state the device owns (the soft device's empty-poll shortcut, a
//! hardware provider's `struct ibv_cq *`), as verbs.h's inline verbs dispatch through
//! the context's ops, and dropping the object destroys it on the device. Objects with
//! no data path of their own (PD, MR, AH, SRQ) are handle numbers the device hands out
//! ([`PdId`], the keys, [`AhId`], [`SrqId`]): the public API already reports such
//! numbers (`Srq::handle`, async events), so a device needs the number-to-object map
//! either way.
//!
//! **What the verbs keep.** Checks that need only the verbs' arguments (a CQ or
//! channel of another context, an SRQ of another PD, the port number, flow attributes)
//! and the object graph that keeps parents alive (a QP holds its PD and CQs). The
//! checks of a request's buffers are the device's (the soft RoCE QP refuses a buffer
//! of 4 GiB and a READ whose two lengths differ; its RAW_PACKET QP gathers a frame).
//! Everything that touches a device's state is behind these traits, so the soft
//! device (the `soft` module), a libibverbs device loaded at run time (the `hw` module), and
//! anything else implement the same calls and no verbs type branches on which one it
//! has. A memory region's bytes are the public [`crate::Mr`]'s ([`MrMem`]); a device
//! registers them and reads them through the [`LocalBuf`]s of a request.
//!
//! **Device-specific features** (the soft device's carriers, fault injection, raw mode
//! and same-host counts) are not in the interface: the public accessors reach them
//! through [`Device::as_any`], and answer `None` on another device.
//!
//! **The system's devices** (the `hw` module) implement these traits over libibverbs'
//! `struct ibv_context` (`rverbs_sys::ibv`): `DeviceCq::poll` calls the provider's
//! `poll_cq` directly (no engine lock, no progress on the caller's thread, no driver
//! thread), a `DeviceChannel` is the kernel's completion channel (given to
//! `create_cq`, since a kernel CQ cannot change channel later), the GID table is the
//! kernel's, the handle numbers are minted with the engine handles' `from_raw` and
//! mapped to the library's PD / AH / SRQ, and there are no carriers. What changes is
//! memory: a NIC writes a registered region whenever a peer says so, without taking
//! the region's lock, so the soft device's rule "the device waits for `Mr::with`"
//! cannot hold there. The device therefore chooses a region's memory
//! ([`Device::reg_mr`] takes the buffer and returns a [`Registered`]): the soft device
//! keeps the `Vec` behind its lock, a system device copies it into memory reached only
//! by volatile copies (`Region::Hw`).
//!
//! [`MrMem`]: super::wr::MrMem

use super::attrs::{DeviceAttr, PortAttr};
use super::wr::{LocalBuf, SendRequest};
use super::DeviceInfo;
use crate::error::{Error, Result};
use crate::gid::GidTable;
use rverbs_engine::modify::{AhAttr, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::{
    Access, AhId, AsyncEvent, Counters, CqId, MrKeys, MwId, MwType, PdId, QpState, QpType, SrqId,
    Wc,
};
use rverbs_wire::grh::Gid;
use std::any::Any;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, MutexGuard, Weak};
use std::time::Duration;

/// The public handle a completion event returns (the verbs' CQ, which the device does
/// not name: it hands back what [`DeviceCq::bind`] gave it).
pub(crate) type CqOwner = Arc<dyn Any + Send + Sync>;

/// One open device (`struct ibv_context`). Dropping it closes the device.
pub(crate) trait Device: Send + Sync + 'static {
    /// The concrete device, for its own accessors (soft-only counts, faults).
    fn as_any(&self) -> &dyn Any;
    /// What was opened.
    fn info(&self) -> &DeviceInfo;

    /// `ibv_query_device`.
    fn query_device(&self) -> Result<DeviceAttr>;
    /// `ibv_query_port` (the port number is checked by the caller).
    fn query_port(&self, port: u8) -> Result<PortAttr>;
    /// The port's GID table (`ibv_query_gid_ex` and friends read it).
    fn gid_table(&self) -> MutexGuard<'_, GidTable>;
    /// Port counters.
    fn counters(&self) -> Counters;

    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<PdId>;
    /// `ibv_dealloc_pd` (from a drop: never fails, never blocks on `Mr::with`).
    fn dealloc_pd(&self, pd: PdId);
    /// `ibv_reg_mr` of `buf`, whose memory the device chooses: the soft device keeps
    /// the `Vec` (its address is the region's), a system device copies it into memory
    /// it may write at any time.
    fn reg_mr(&self, pd: PdId, buf: Vec<u8>, access: Access) -> Result<Registered>;
    /// `ibv_dereg_mr` (from a drop).
    fn dereg_mr(&self, lkey: u32);

    /// `ibv_alloc_mw`: the window's handle and first R_Key.
    fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<(MwId, u32)>;
    /// `ibv_dealloc_mw` (from a drop).
    fn dealloc_mw(&self, mw: MwId);

    /// `ibv_create_ah` (the port number is checked by the caller).
    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId>;
    /// `ibv_destroy_ah` (from a drop).
    fn destroy_ah(&self, ah: AhId);

    /// `ibv_create_srq`.
    fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId>;
    /// `ibv_destroy_srq` (from a drop).
    fn destroy_srq(&self, srq: SrqId);
    /// `ibv_post_srq_recv`.
    fn post_srq_recv(&self, srq: SrqId, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()>;
    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`.
    fn modify_srq(&self, srq: SrqId, limit: u32) -> Result<()>;

    /// `ibv_create_comp_channel`.
    fn create_comp_channel(&self) -> Result<Arc<dyn DeviceChannel>>;
    /// `ibv_create_cq`, its events on `channel` (a channel of this device) or the
    /// context's own; what they return is set by [`DeviceCq::bind`].
    fn create_cq(&self, cqe: u32, channel: Option<&dyn DeviceChannel>)
        -> Result<Box<dyn DeviceCq>>;
    /// `ibv_create_qp` in `pd` (the CQs, SRQ and PD are the caller's, checked to be of
    /// this device).
    fn create_qp(&self, pd: PdId, init: &QpCreate<'_>) -> Result<Box<dyn DeviceQp>>;

    /// The next completion event of a CQ bound to no channel of its own.
    fn get_cq_event(&self, timeout: Duration) -> Option<CqOwner>;
    /// `ibv_get_async_event`.
    fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent>;
    /// The next asynchronous event if one waits.
    fn try_get_async_event(&self) -> Option<AsyncEvent>;
    /// The context's `async_fd`.
    fn async_fd(&self) -> BorrowedFd<'_>;

    /// Management datagrams (GSI agents, `process_mad`, SMA/PMA/BMA state).
    fn mad(&self) -> &dyn DeviceMad;
}

/// A registered region ([`Device::reg_mr`]): its bytes, virtual address and keys.
pub(crate) struct Registered {
    pub(crate) region: super::wr::Region,
    pub(crate) addr: u64,
    pub(crate) keys: MrKeys,
}

/// A new QP as [`Device::create_qp`] takes it (`struct ibv_qp_init_attr` with the
/// device's own objects).
pub(crate) struct QpCreate<'a> {
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: &'a dyn DeviceCq,
    pub(crate) recv_cq: &'a dyn DeviceCq,
    pub(crate) srq: Option<SrqId>,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
}

/// A completion queue on the device (`struct ibv_cq`). Dropping it destroys it.
pub(crate) trait DeviceCq: Send + Sync {
    /// The concrete CQ (a device's `create_qp` finds its own CQs through it).
    fn as_any(&self) -> &dyn Any;
    /// The CQ's handle number.
    fn handle(&self) -> CqId;
    /// Where its completion events go (`channel`, or the context's own) and what they
    /// return (`owner`, the public handle).
    fn bind(&self, owner: Weak<dyn Any + Send + Sync>, channel: Option<&dyn DeviceChannel>);
    /// `ibv_poll_cq`.
    fn poll(&self, out: &mut [Wc]) -> Result<usize>;
    /// Polls for up to `spin`, then sleeps until a completion may have come or
    /// `timeout` passes (`Cq::wait`).
    fn wait(&self, out: &mut [Wc], spin: Duration, timeout: Duration) -> Result<usize>;
    /// `ibv_req_notify_cq`.
    fn req_notify(&self, solicited_only: bool) -> Result<()>;
}

/// A completion channel (`struct ibv_comp_channel`).
pub(crate) trait DeviceChannel: Send + Sync {
    /// The concrete channel (a device checks that a CQ's channel is its own).
    fn as_any(&self) -> &dyn Any;
    /// `ibv_get_cq_event`: waits up to `timeout` (forever with `None`).
    fn get_cq_event(&self, timeout: Option<Duration>) -> Option<CqOwner>;
    /// The next event if one waits.
    fn try_get_cq_event(&self) -> Option<CqOwner>;
    /// Readable exactly while an event waits.
    fn fd(&self) -> BorrowedFd<'_>;
    /// No event waits (an async waiter clears its readiness then).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    fn is_empty(&self) -> bool;
}

/// A queue pair on the device (`struct ibv_qp`). Dropping it destroys it (and its
/// flows).
pub(crate) trait DeviceQp: Send + Sync {
    /// The QP number.
    fn qp_num(&self) -> u32;
    /// The QP's state (an accessor with no `Result`: panics inside `Mr::with`, where
    /// the device could deadlock).
    fn state(&self) -> QpState;
    /// `ibv_query_qp`.
    fn query(&self) -> Result<QpAttr>;
    /// `ibv_modify_qp`.
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;
    /// `ibv_post_send` of one request.
    fn post_send(&self, wr: &SendRequest<'_>) -> Result<()>;
    /// `ibv_post_send` of a chain: on a refused request, its index and the error.
    fn post_send_list(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), (usize, Error)>;
    /// `ibv_post_recv` of one request.
    fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()>;
    /// `ibv_bind_mw` of a type-1 window (`wr` is its BIND_MW request, checked by the
    /// caller): the window's new R_Key.
    fn bind_mw(&self, wr: &SendRequest<'_>) -> Result<u32>;
    /// `ibv_attach_mcast`.
    fn attach_mcast(&self, gid: &Gid) -> Result<()>;
    /// `ibv_detach_mcast`.
    fn detach_mcast(&self, gid: &Gid) -> Result<()>;
    /// `ibv_create_flow` (the attributes are validated by the caller).
    fn create_flow(&self, attr: &rverbs_flow::attr::FlowAttr) -> Result<Box<dyn DeviceFlow>>;
    /// `ibv_modify_qp` with the attributes the kernel's RDMA CM computed
    /// (`rdma_init_qp_attr`), as they came: a QP of a system device, moved by the
    /// system's CM. Other devices refuse (EOPNOTSUPP).
    fn modify_from_cm(
        &self,
        _attr: &crate::sys::ibv::types::ibv_qp_attr,
        _mask: u32,
    ) -> Result<()> {
        Err(rverbs_engine::VerbError::new(
            "modify_qp",
            rverbs_engine::Errno::NotSupported,
            "attributes of the system's RDMA CM on a QP of another device",
        )
        .into())
    }
    /// `ibv_post_send` of one request whose buffers are named by key and address (the
    /// C library's), on a QP the engine does not run (RAW_PACKET); the engine's own QPs
    /// take such requests directly (the C hooks of the `ffi` module).
    #[cfg(feature = "ffi")]
    fn post_send_keyed(&self, _wr: &rverbs_engine::SendWr) -> Result<()> {
        Err(keyed_unsupported("post_send"))
    }
    /// `ibv_post_recv` of one request named by keys, as [`DeviceQp::post_send_keyed`].
    #[cfg(feature = "ffi")]
    fn post_recv_keyed(&self, _wr: &rverbs_engine::RecvWr) -> Result<()> {
        Err(keyed_unsupported("post_recv"))
    }
}

#[cfg(feature = "ffi")]
fn keyed_unsupported(verb: &'static str) -> Error {
    rverbs_engine::VerbError::new(
        verb,
        rverbs_engine::Errno::NotSupported,
        "requests named by key go to the engine for this QP",
    )
    .into()
}

/// A steering rule (`struct ibv_flow`). Dropping it destroys it.
pub(crate) trait DeviceFlow: Send + Sync {
    /// The rule's handle.
    fn id(&self) -> rverbs_flow::classify::FlowId;
    /// `ibv_destroy_flow` with its result.
    fn destroy(self: Box<Self>) -> Result<()>;
}

/// Management datagrams on a device: libibumad's agent calls and the device's
/// `process_mad` (the public `mad` module).
pub(crate) trait DeviceMad: Send + Sync {
    /// `umad_register`.
    fn register_agent(
        &self,
        reg: Option<rverbs_engine::mad::gsi::Registration>,
    ) -> Result<rverbs_engine::mad::gsi::AgentId>;
    /// `umad_unregister` (from a drop).
    fn unregister_agent(&self, id: rverbs_engine::mad::gsi::AgentId);
    /// `umad_send`.
    fn send(
        &self,
        id: rverbs_engine::mad::gsi::AgentId,
        dest: rverbs_engine::mad::gsi::GsiDest,
        mad: &rverbs_engine::mad::Mad,
    ) -> Result<()>;
    /// `umad_send` with the TransactionID as the caller formed it (the CM's answers
    /// echo the request's), not marked with the agent's id.
    fn send_as_is(
        &self,
        id: rverbs_engine::mad::gsi::AgentId,
        dest: rverbs_engine::mad::gsi::GsiDest,
        mad: &rverbs_engine::mad::Mad,
    ) -> Result<()>;
    /// The next MAD for agent `id`, if one waits.
    fn try_recv(
        &self,
        id: rverbs_engine::mad::gsi::AgentId,
    ) -> Option<rverbs_engine::mad::gsi::GsiRecv>;
    /// Puts received MADs back at the front of agent `id`'s queue, in their order.
    fn requeue(
        &self,
        id: rverbs_engine::mad::gsi::AgentId,
        mads: Vec<rverbs_engine::mad::gsi::GsiRecv>,
    );
    /// The device's `process_mad`.
    fn process_mad(
        &self,
        mad_flags: u32,
        port: u8,
        in_wc: Option<&Wc>,
        in_grh: Option<&rverbs_engine::mad::GrhArea>,
        in_mad: &rverbs_engine::mad::Mad,
    ) -> (rverbs_engine::mad::MadResult, rverbs_engine::mad::Mad);
    /// An SMP to the device's own SMA.
    fn local_smp(&self, smp: &rverbs_engine::mad::Mad) -> Result<rverbs_engine::mad::Mad>;
    /// The next trap the SMA raised.
    fn poll_trap(&self) -> Option<rverbs_engine::mad::Trap>;
    /// MAD counts.
    fn stats(&self) -> rverbs_engine::mad::MadStats;
    /// The PMA's port counters.
    fn pma_counters(&self) -> rverbs_engine::mad::pma::PortTotals;
    /// The BMA's B_Key.
    fn set_b_key(&self, key: u64, protect: bool);
    /// The SMA's M_Key.
    fn set_m_key(&self, key: u64, protect_bits: u8);
}
