//! The verbs: the public handles (context, protection domains, memory regions,
//! completion queues and channels, queue pairs, SRQs, address handles, flows) over a
//! device, reached only through the device interface (`crate::device::ops`). One file
//! per object; this module gathers them.
//!
//! A handle keeps what it uses alive (a QP its PD, CQs and SRQ; everything its
//! context) and owns the device's object for it: a [`Cq`] or [`Qp`] holds the
//! device's `DeviceCq` / `DeviceQp` (polling and posting are one call into it), the
//! others a handle number the device gave, returned to the device when the handle
//! drops. The checks here are those that need only the verb's arguments (ports,
//! objects of another context or PD, flow attributes); everything that touches a
//! device's state is the device's. Soft-only accessors ([`Context::same_host_stats`],
//! [`Context::fault_stats`], the raw-mode counts) reach the soft device by downcast
//! and report nothing on another device.
//!
//! See the crate documentation's *Memory safety* section for the rules these types
//! enforce.

mod ah;
mod ah_wc;
#[cfg(test)]
mod boundary_tests;
mod channel;
mod context;
mod cq;
mod exchange;
mod flow;
mod gids;
mod mcast;
mod mr;
mod mw;
mod pd;
mod qp;
mod qp_attr;
mod srq;
mod wr;

pub use crate::device::attrs::{
    eth_width_speed, DeviceAttr, DeviceAttrEx, PortAttr, PortState, DEVICE_BAD_PKEY_CNTR,
    DEVICE_BAD_QKEY_CNTR, DEVICE_CAP_NAMES, DEVICE_RC_RNR_NAK_GEN, DEVICE_SYS_IMAGE_GUID,
};
pub use crate::device::wr::{LocalBuf, RemoteBuf, SendRequest};
pub use ah::Ah;
pub use ah_wc::{ah_attrs_from_grh, grh_ip_version};
pub use channel::{AsyncEvent, CompChannel};
pub use context::{Context, RoceV1Stats};
pub use cq::Cq;
pub(crate) use cq::CqInner;
pub use flow::Flow;
pub use mcast::MULTICAST_QPN;
pub use mr::{AccessFlags, Mr};
pub use mw::{Mw, MwType};
pub use pd::Pd;
pub(crate) use pd::PdInner;
pub use qp::{ConnectOpts, PeerInfo, Qp, QpInitAttr};
pub use qp_attr::QpModify;
pub use rverbs_engine::modify::AhAttr;
pub(crate) use srq::SrqInner;
pub use srq::{Srq, SrqInitAttr};

#[cfg(test)]
mod tests {
    use crate::{ConnectOpts, Gid, PeerInfo, QpInitAttr, QpType};

    /// A free loopback address: nothing is bound to its port 4791.
    fn unbound_address() -> std::net::Ipv4Addr {
        (2..=254)
            .rev()
            .map(|x| std::net::Ipv4Addr::new(127, 0, 0, x))
            .find(|ip| std::net::UdpSocket::bind((*ip, 4791)).is_ok())
            .expect("a free 127.0.0.x:4791")
    }

    /// An RC QP connected over loopback to an address no socket holds (the kernel shows
    /// no receive buffer) keeps the engine's window. Once a socket with a small buffer
    /// is there and a second QP connects to it, both share that buffer (the first one
    /// too: its packets go to the same socket), and when the second leaves, the first
    /// gets the whole buffer's window.
    #[test]
    fn a_peer_without_a_socket_leaves_the_engines_window() {
        let dev = crate::device(None).unwrap();
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let qp = |_: ()| pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        let (first, second) = (qp(()), qp(()));
        let window = |q: &crate::Qp| {
            let e = ctx.soft().unwrap().lock();
            (
                e.qp_window(q.qp_num()).unwrap().0,
                e.config().max_unacked_psns,
            )
        };
        let at = unbound_address();
        let to = |qpn| PeerInfo {
            qpn,
            psn: 0,
            gid: Gid::from(at),
        };
        first.connect(&to(0x55), &ConnectOpts::default()).unwrap();
        let (w, own) = window(&first);
        assert_eq!(w, own, "no peer socket: the engine's window");
        // Now a peer socket there, with 128 KiB of buffer (24 PSNs for one QP).
        let Ok(peer) = std::net::UdpSocket::bind((at, 4791)) else {
            eprintln!("{at}:4791 was taken meanwhile: the rest is skipped");
            return;
        };
        socket2::SockRef::from(&peer)
            .set_recv_buffer_size(64 << 10)
            .unwrap();
        if own <= 24 {
            return; // (our own buffer is smaller still: nothing to see)
        }
        second.connect(&to(0x56), &ConnectOpts::default()).unwrap();
        assert_eq!(
            (window(&first).0, window(&second).0),
            (12, 12),
            "two sharers"
        );
        drop(second);
        assert_eq!(window(&first).0, 24, "alone again");
    }
}
