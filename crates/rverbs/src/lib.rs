//! # rverbs
//!
//! RDMA verbs for Rust on a userspace RoCE v2 device: open a device, register memory,
//! connect queue pairs and move data with SEND, RDMA WRITE/READ and atomics — between
//! threads or processes on one machine or across a network, with genuine RoCE v2
//! packets on the wire (UDP 4791, valid ICRC), no NIC, no kernel module, no root.
//!
//! ```no_run
//! use rverbs::{AccessFlags, ConnectOpts, PeerInfo, QpInitAttr, QpType, SendRequest};
//!
//! let ctx = rverbs::device(None)?.open()?;          // the loopback soft device
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64)?;
//! let mr = pd.reg_mr(4096, AccessFlags::ALL)?;
//! let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
//! // Exchange qp.qp_num(), a PSN and ctx.gid(1) with the peer out of band, then:
//! let peer = PeerInfo { qpn: 0x11, psn: 0, gid: ctx.gid(1).unwrap() };
//! qp.connect(&peer, &ConnectOpts::default())?;
//! mr.write(0, b"hello");
//! qp.post_send(&SendRequest::send(1, &[mr.slice(0..5)]))?;
//! # Ok::<(), rverbs::Error>(())
//! ```
//!
//! # Memory safety
//!
//! RDMA lets a device read and write application memory while the application runs;
//! Rust bindings over hardware verbs have struggled to make that safe (a region typed
//! as any `T` lets a peer write pointers into it; a region over a `Vec` the caller can
//! still resize or free leaves the device with a dangling address; registering
//! arbitrary memory needs `unsafe`). rverbs is built so that **no safe code can cause
//! undefined behaviour**: the crate forbids `unsafe`; the few system calls it needs
//! live in `rverbs-sys`, safe wrappers each with its promise written beside it. The
//! rules:
//!
//! 1. **A memory region owns its bytes.** [`Pd::reg_mr`] allocates them,
//!    [`Pd::reg_mr_from`] takes a `Vec<u8>` by value (the caller cannot resize, free
//!    or alias it afterwards). Regions are bytes only: there is no `Mr<T>`, so a peer
//!    can never forge a pointer or a `bool` in a typed value.
//! 2. **The device and the application never share a reference.** The soft device
//!    reaches a region's bytes through the region's lock, and so does the application
//!    ([`Mr::read`], [`Mr::write`], [`Mr::with`]). A `&mut [u8]` into a region exists
//!    only inside a [`Mr::with`] closure, and the device waits for that closure: no
//!    aliasing `&mut`, no data race, no torn 8-byte atomic. A system device (a NIC,
//!    kernel rxe: [`DeviceKind::System`]) writes a region whenever a peer says so and
//!    takes no lock, so there no reference into its memory ever exists: [`Mr::read`],
//!    [`Mr::write`] and [`Mr::to_vec`] are volatile copies (aligned 8-byte words, as
//!    `vm-memory`'s `VolatileSlice`), and [`Mr::with`] runs on a copy whose changed
//!    bytes are written back afterwards (the device does not wait, so bytes it writes
//!    meanwhile may be overwritten by those: use [`Mr::read`] / [`Mr::write`] on such
//!    regions). The same calls are sound on both devices. The application sees the
//!    device's writes as whole packets, not as a consistent message: wait for the
//!    completion before reading what a peer sent, as with any verbs device. Payloads
//!    of 1 KiB or more leave straight from the region (no copy into a packet buffer):
//!    the device holds the region's lock while the kernel copies them out in its
//!    `sendmmsg`, so a [`Mr::with`] or [`Mr::write`] waits for that batch to be sent.
//! 3. **Work requests borrow their regions.** A [`LocalBuf`] is a range of a live
//!    `Mr` (`&Mr` inside), so a request cannot name a region that was dropped or a
//!    range outside it (`Mr::slice` checks the range); the compiler rejects dropping
//!    the `Mr` while a [`SendRequest`] that names it exists. Peers name memory by
//!    [`RemoteBuf`] (address, key, length), which the device checks on every access.
//! 4. **In-flight work keeps its memory alive or fails cleanly.** Once posted, a
//!    request holds the region's key, not a borrow, so the `Mr` may be dropped while
//!    the request is still in flight. Dropping it deregisters the key at once (later
//!    packets naming it get a remote access error, as on any device), but the bytes
//!    are reference-counted: a request the device has started keeps them alive and
//!    completes normally; one not yet started (a queued send, or a receive not yet
//!    matched) completes with [`WcStatus::LocProtErr`]. Either way nothing touches
//!    freed memory.
//! 5. **Objects keep what they use alive.** A [`Qp`] holds its PD, CQs, SRQ and
//!    context; a [`Cq`] holds its context; an [`Mr`] holds its PD. Dropping handles in
//!    any order is safe, and the device closes when the last one goes. (Where the
//!    C API fails `ibv_destroy_cq` / `ibv_dealloc_pd` with EBUSY, the Rust handle simply
//!    outlives its users.)
//! 6. **Handles are `Send + Sync`** ([`Context`], [`Pd`], [`Mr`], [`Cq`], [`Qp`],
//!    [`Srq`], [`Ah`], [`CompChannel`]): every verb may be called from any thread, as
//!    libibverbs allows; the device serialises them.
//! 7. **No deadlock through `Mr::with`.** The device takes its engine lock and then a
//!    region's lock; a verb called inside `Mr::with` would take them in the other
//!    order, so it fails with [`Error::WouldDeadlock`] (EDEADLK) instead of hanging,
//!    and an object dropped there is destroyed by the driver thread instead.
//!
//! The cost of rule 2 is a copy: data moves between the wire and a region with one
//! `memcpy` under the region's lock, which a userspace device has to do anyway; on a
//! system device the NIC moves data by DMA and only the application's accesses copy.
//!
//! # Devices
//!
//! [`devices`] lists the soft devices (`rv_lo`, `rv_eth0`, ...) and the devices of the
//! system's `libibverbs.so.1` (`mlx5_0`, `rxe0`, `efa_0`; [`DeviceKind::System`]),
//! which is loaded at run time: a build needs no rdma-core, and without it the list
//! has only soft devices (`device(Some("mlx5_0"))` then fails naming the library). A
//! program picks one by name, `rverbs::device(Some("rxe0"))?.open()?`, and the rest of
//! its code is the same. On a system device `query_device` / `query_port` report the
//! device's limits and verbs fail with its errnos; memory windows ([`Mw`]) are the
//! provider's; the soft device's extras (carriers, fault injection, raw mode, flow
//! steering, management datagrams) are EOPNOTSUPP or `None` there.
//! `crates/rverbs/tests/ui/` holds programs the compiler must reject (run by
//! `tests/compile_fail.rs`).
//!
//! # Raw packets and flow steering
//!
//! A context opened with [`OpenOptions::raw_interface`] also owns a raw device on that
//! Ethernet interface: [`QpType::RawPacket`] QPs send and receive whole frames, with
//! completions on ordinary [`Cq`]s ([`WcFlags::IP_CSUM_OK`], [`WcFlags::WITH_FLOW_TAG`]
//! and [`Wc::flow_tag`]), and [`Qp::create_flow`] steers frames to them with the kernel's
//! `ibv_create_flow` semantics and errnos ([`flow`]). On UD QPs of any context,
//! [`Qp::create_flow`] steers received RoCE v2 UD datagrams by their outer headers.
//! Both need CAP_NET_RAW (EPERM otherwise), as in the kernel.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod carrier;
mod catalog;
pub mod cm;
mod device;
mod error;
/// Hooks for the C library (feature `ffi`; not a stable API).
#[cfg(feature = "ffi")]
#[doc(hidden)]
pub mod ffi;
mod gid;
mod hw;
pub mod mad;
mod raw;
mod soft;
pub(crate) use rverbs_sys as sys;
pub mod sysfs;
mod tap;
mod ud_steer;
mod verbs;

pub use carrier::raw::RawNetStats;
/// Fuzzing entry of the same-host ring's reader (feature `fuzzing`, for `fuzz/`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use carrier::same_host::ring::fuzz_ring as fuzz_same_host_ring;
pub use carrier::same_host::SameHostStats;
pub use carrier::ROCE_PORT;
pub use catalog::{device, devices};
pub use device::options::OpenOptions;
pub use device::{soft_devices, DeviceInfo, DeviceKind};
pub use error::{Error, Result};
pub use gid::{GidEntry, GidTable, GidType, GID_TABLE_LEN};
pub use rverbs_engine::modify::{AhAttr, MigState, QpAttr, QpAttrMask, QpCap};
pub use rverbs_engine::{
    AckPolicy, AddressVector, Counters, Errno, Mtu, QpState, QpType, VerbError, Wc, WcFlags,
    WcOpcode, WcStatus,
};
/// Flow attributes, specs and their errors ([`Qp::create_flow`]), re-exported from
/// the `rverbs-flow` crate.
pub use rverbs_flow as flow;
pub use rverbs_raw::{RawStats, IBV_DEVICE_MANAGED_FLOW_STEERING, IBV_DEVICE_RAW_IP_CSUM};
pub use rverbs_wire::grh::Gid;
pub use tap::faults::{FaultStats, Faults};
pub use verbs::{
    ah_attrs_from_grh, eth_width_speed, grh_ip_version, AccessFlags, Ah, AsyncEvent, CompChannel,
    ConnectOpts, Context, Cq, DeviceAttr, DeviceAttrEx, Flow, LocalBuf, Mr, Mw, MwType, Pd,
    PeerInfo, PortAttr, PortState, Qp, QpInitAttr, QpModify, RemoteBuf, RoceV1Stats, SendRequest,
    Srq, SrqInitAttr, DEVICE_BAD_PKEY_CNTR, DEVICE_BAD_QKEY_CNTR, DEVICE_CAP_NAMES,
    DEVICE_RC_RNR_NAK_GEN, DEVICE_SYS_IMAGE_GUID, MULTICAST_QPN,
};

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
