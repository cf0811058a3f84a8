//! # rverbs-engine
//!
//! The InfiniBand transport (IBTA Vol. 1 ch. 9–10) of the rverbs soft RoCE v2 device, as
//! a deterministic state machine with no sockets, threads or clocks (after quinn-proto):
//! callers hand it received datagrams, posted work requests and the current time; it
//! hands back datagrams to send, completions, events and the next deadline.
//!
//! * [`Engine`] holds the objects (PDs, MRs, CQs, SRQs, AHs, QPs) and runs the
//!   requester, responder and completer of every QP;
//! * [`modify`] validates `ibv_modify_qp` exactly as Linux does;
//! * [`sim`] joins engines over simulated lossy links on virtual time.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod comp;
mod config;
pub mod counters;
mod engine;
pub mod mad;
pub mod mcast;
pub mod memory;
pub mod modify;
pub mod net;
mod objects;
mod qp;
mod req;
mod resp;
pub mod rng;
pub mod selective;
pub mod sim;
mod slab;
mod sr;
mod timers;
pub mod train;
mod tx;
pub mod types;

pub use config::{AckPolicy, Config, MrKeys, QpInit, LEND_MIN};
pub use counters::Counters;
pub use engine::{Engine, SPARE_BUFFERS};
pub use memory::{AtomicOp, Lent, Memory, PayloadSource, Placing, VecMemory};
pub use net::{Body, Datagram, Transmit};
pub use objects::{KEY_TAG_BITS, MAX_MR, MAX_MW};
pub use qp::{MAX_PKT_PER_ACK, MAX_UNACKED_PSNS, MIN_QP_WINDOW, MIN_UNACKED_PSNS};
pub use resp::{grh_area, GRH_AREA};
pub use timers::{ack_nudge_ns, ack_timeout_ns, ACK_NUDGE_MAX_NS, ACK_NUDGE_MIN_NS, RNR_TIMER_NS};
pub use types::*;
