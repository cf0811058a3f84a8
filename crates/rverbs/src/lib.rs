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
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod attr;
mod capture;
mod context;
mod device;
mod error;
mod faults;
pub mod mad;
mod progress;
mod sys;
mod verbs;

pub use attr::{
    eth_width_speed, AtomicCap, DeviceAttr, PortAttr, PortState, DEVICE_BAD_PKEY_CNTR,
    DEVICE_BAD_QKEY_CNTR, DEVICE_CAP_NAMES, DEVICE_RC_RNR_NAK_GEN, DEVICE_SYS_IMAGE_GUID,
    LINK_LAYER_ETHERNET,
};
pub use context::{Context, OpenOptions, ROCE_PORT};
pub use device::{device, devices, DeviceInfo};
pub use error::{Error, Result};
pub use faults::{FaultStats, Faults};
pub use rverbs_engine::modify::{QpAttr, QpAttrMask, QpCap};
pub use rverbs_engine::{Counters, Mtu, QpState, QpType, Wc, WcFlags, WcOpcode, WcStatus};
pub use rverbs_wire::grh::Gid;
pub use verbs::{
    AccessFlags, Ah, AhAttrs, ConnectOpts, Cq, LocalBuf, Mr, Pd, PeerInfo, Qp, QpInitAttr,
    RemoteBuf, SendRequest,
};

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
