//! Library side of the `rverbs` command-line tool, so its pieces are testable and
//! fuzzable without spawning the binary.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod demo;
pub mod devinfo;
pub mod flow;
pub mod gids;
pub mod interop;
pub mod json;
pub mod mad;
pub mod pcap;
pub mod perf;
pub mod pingpong;
