//! # rverbs-flow
//!
//! Verbs flow steering (`ibv_create_flow`) without a NIC: the attribute types of
//! rdma-core's `struct ibv_flow_attr` and `ibv_flow_spec_*` ([`attr`]), the checks and
//! errnos of the kernel and of mlx5 ([`attr::validate`]), the kernel's uverbs TLV layout
//! ([`uverbs`]), a parser that pulls the matchable header fields out of an Ethernet frame
//! ([`fields`]) and a tuple-space classifier that steers frames to QPs in priority order
//! ([`classify`]). No I/O: the soft device feeds it frames.
//!
//! ```
//! use rverbs_flow::attr::{validate, FlowAttr, FlowContext, FlowSpec};
//! use rverbs_flow::classify::{Classifier, Direction, Verdict};
//! use std::net::Ipv4Addr;
//!
//! // UDP to 10.0.0.2:4791 goes to QP 7 with tag 42.
//! let attr = FlowAttr::normal(0, vec![
//!     FlowSpec::ipv4_dst(Ipv4Addr::new(10, 0, 0, 2)),
//!     FlowSpec::udp_dst(Some(4791)),
//!     FlowSpec::Tag(42),
//! ]);
//! validate(&attr, &FlowContext::raw_packet())?;
//! let mut table = Classifier::new();
//! table.insert(7, &attr)?;
//!
//! let mut frame = vec![0u8; 42];
//! frame[12..14].copy_from_slice(&[0x08, 0x00]); // IPv4
//! frame[14] = 0x45;
//! frame[16..18].copy_from_slice(&28u16.to_be_bytes());
//! frame[23] = 17; // UDP
//! frame[30..34].copy_from_slice(&[10, 0, 0, 2]);
//! frame[36..38].copy_from_slice(&4791u16.to_be_bytes());
//! let mut verdict = Verdict::default();
//! table.classify(&frame, Direction::Ingress, &mut verdict).unwrap();
//! assert_eq!(verdict.deliveries[0].qpn, 7);
//! assert_eq!(verdict.deliveries[0].tag, Some(42));
//! # Ok::<(), rverbs_flow::FlowError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attr;
pub mod classify;
pub mod error;
pub mod fields;
pub mod text;
pub mod uverbs;

pub use attr::{FlowAttr, FlowAttrType, FlowContext, FlowFlags, FlowQpType, FlowSpec};
pub use classify::{Classifier, Direction, FlowId, Verdict};
pub use error::FlowError;
