//! # rverbs-sys
//!
//! Every system call of the rverbs crates that the standard library and socket2 do
//! not wrap, and with them every `unsafe` block of the workspace, behind safe
//! functions and types. The model is quinn-udp: the socket tricks a transport needs
//! (control messages, batched `recvmmsg` / `sendmmsg`, GRO / GSO) live in one small
//! crate below the protocol, where they can be read and reviewed in one place, and
//! the crates above (`rverbs`, `rverbs-raw`, `rverbs-cli`) forbid `unsafe` outright,
//! in their tests, benches and examples too (the workspace's `unsafe_code = "forbid"`,
//! which every other member takes; `tests/unsafe_only_here.rs` checks that they do).
//!
//! Each `unsafe` block states the promise it relies on in a `// SAFETY:` comment.
//! Nothing here is `pub unsafe`: a caller cannot break memory safety through this
//! crate's API, only get an error. Memory another process shares
//! ([`mem::SharedMap`]) is reached through bounds-checked atomics and copies only, and
//! memory a NIC writes ([`ibv::DmaMem`]) through bounds-checked volatile copies only.
//!
//! Modules, by topic: [`udp`] (UDP socket options and the batched datagram paths),
//! [`msg`] (control messages), [`poll`], [`event`] (eventfds), [`mem`] (mappings,
//! sealed memfds, shared regions), [`ibv`] (the system's libibverbs, loaded at run
//! time), [`packet`] (AF_PACKET), [`unix`] (abstract
//! seqpacket sockets, `SCM_RIGHTS`, `SO_PEERCRED`), [`diag`] (socket diagnostics)
//! and [`misc`]. The most used items are also at the crate root.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod diag;
pub mod event;
pub mod ibv;
pub mod mem;
pub mod misc;
pub mod msg;
mod opt;
pub mod packet;
pub mod poll;
pub mod udp;
pub mod unix;

pub use diag::udp_rcvbuf_of;
#[cfg(feature = "tokio")]
pub use event::async_fd;
pub use event::{eventfd, eventfd_drain, eventfd_signal};
pub use misc::interface_mac;
pub use msg::{
    enable_recv_meta, parse_recv_meta, recv_error_queue, send_control, send_with_meta,
    set_recv_meta, IpMeta, RecvMeta, SendControl, RECV_CONTROL_LEN,
};
pub use poll::{poll_ms, poll_readable, poll_readable_ns, MAX_POLL_NS};
pub use udp::{
    drop_from_interface, force_recv_buffer, recv_batch, recv_batch_wait, send_batch,
    set_pmtudisc_do, set_tx_loop, set_udp_gro, set_udp_no_check6_rx, Outgoing, Received,
    RecvScratch, SendScratch, RECV_MAX,
};
