//! # rverbs-wire
//!
//! Every byte layout the rverbs stack speaks, and nothing else: no I/O, no clock and no
//! allocation (`#![no_std]`).
//!
//! Each header follows one pattern (after smoltcp's `wire` module):
//!
//! * a checked view `Xxx<T: AsRef<[u8]>>` over a borrowed or owned buffer:
//!   `new_unchecked`, `new_checked` (= `new_unchecked` + `check_len`), accessors that
//!   never panic once `new_checked` has succeeded, and setters when `T: AsMut<[u8]>`;
//! * an owned `XxxRepr` with `parse(&view)`, `emit(...)` and `buffer_len()`.
//!
//! The layers: [`ethernet`], [`ipv4`], [`ipv6`] and [`udp`] carry RoCE v2; [`packet`] is
//! the InfiniBand transport packet inside (BTH from [`bth`], extension headers from
//! [`ext`], chosen by the [`opcode`] table); [`icrc`] is its CRC; [`frame`] parses a
//! whole captured frame and [`rocev1`] a RoCE v1 (EtherType 0x8915) one; [`rocev2`] builds
//! and strictly checks whole RoCE v2 frames for a raw-mode device, which resolves
//! neighbours with [`arp`] and [`ndisc`]; [`psn`] does
//! sequence-number arithmetic; [`grh`] is the IB
//! Global Route Header and GIDs.
//!
//! ```
//! use rverbs_wire::{bth::BthRepr, opcode::Opcode, packet::{Packet, PacketRepr}, psn::Psn};
//!
//! let bth = BthRepr {
//!     opcode: Opcode::RC_SEND_ONLY, solicited: false, mig_req: false, pad: 0,
//!     pkey: 0xffff, fecn: false, becn: false, dest_qp: 0x11, ack_req: true, psn: Psn::ZERO,
//! };
//! let repr = PacketRepr::new(bth, b"hello");
//! let mut buf = vec![0u8; repr.buffer_len()];
//! repr.emit(&mut buf)?;
//! let pkt = Packet::new_checked(&buf[..])?;
//! assert_eq!(pkt.payload(), b"hello");
//! assert_eq!(pkt.to_string(), "RC_SEND_ONLY qpn=0x11 psn=0 ackreq pad=3 payload=5");
//! # Ok::<(), rverbs_wire::Error>(())
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod arp;
pub mod bth;
pub mod checksum;
pub mod error;
pub mod ethernet;
pub mod ext;
pub mod field;
pub mod frame;
pub mod grh;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod ndisc;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod rocev1;
pub mod rocev2;
pub mod udp;

pub use error::{Error, Result};
