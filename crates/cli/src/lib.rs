//! Library side of the `rverbs` command-line tool, so its pieces are testable and
//! fuzzable without spawning the binary.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod demo;
pub mod devinfo;
pub mod exec;
pub mod flow;
pub mod gids;
pub mod interop;
pub mod json;
pub mod mad;
pub mod pcap;
pub mod perf;
pub mod pingpong;
pub mod rping;
pub mod ucmatose;
pub mod udaddy;

/// The Rust examples of `docs/`, compiled and run as doctests (the README's are the
/// `rverbs` crate's).
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../../../docs/device.md")]
    struct Device;
    #[doc = include_str!("../../../docs/environment.md")]
    struct Environment;
    #[doc = include_str!("../../../docs/flow.md")]
    struct Flow;
    #[doc = include_str!("../../../docs/gids.md")]
    struct Gids;
    #[doc = include_str!("../../../docs/mad.md")]
    struct Mad;
    #[doc = include_str!("../../../docs/rdma-cm.md")]
    struct RdmaCm;
    #[doc = include_str!("../../../docs/wire.md")]
    struct Wire;
}
