//! # rverbs-cm
//!
//! The InfiniBand connection manager (IBTA Vol. 1 ch. 12) that RoCE peers speak on
//! QP1 — REQ / REP / RTU, MRA, REJ, DREQ / DREP and SIDR — as a deterministic, sans-IO
//! state machine after quinn-proto: the caller hands it received MADs, consumer calls
//! and the current time; it hands back MADs to send, events and the next deadline. It
//! behaves as Linux `drivers/infiniband/core/cm.c` with rdma_cm (`cma.c`, `ucma.c`)
//! on top, so a kernel rxe peer (rping, udaddy, perftest `-R`) sees what it expects.
//!
//! * [`Cm`] holds every communication ID of one port;
//! * [`state`] is the transition table;
//! * [`cma`] is rdma_cm's service IDs and private-data header;
//! * [`sim`] joins endpoints over a lossy in-memory link on virtual time.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod api;
pub mod cma;
pub mod consts;
mod endpoint;
pub mod sim;
pub mod state;

pub use api::*;
pub use consts::Nanos;
pub use endpoint::Cm;
pub use state::State;
