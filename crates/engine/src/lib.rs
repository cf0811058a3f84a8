//! # rverbs-engine
//!
//! The InfiniBand transport (IBTA Vol. 1 ch. 9–10) of the rverbs soft RoCE v2 device, as
//! a deterministic state machine with no sockets, threads or clocks (after quinn-proto):
//! callers hand it received datagrams, posted work requests and the current time; it
//! hands back datagrams to send, completions, events and the next deadline.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod modify;
pub mod types;

pub use types::*;
