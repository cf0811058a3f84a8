//! The public ABI of `libibverbs.so.1`, for a drop-in library over the soft device.
//!
//! C and C++ programs built against rdma-core (perftest, ibverbs-utils, UCX, MPI...)
//! reach the verbs in two ways: through exported, versioned functions, and through the
//! `static inline` functions of `<infiniband/verbs.h>`, which are compiled into the
//! program and jump through function pointers in the objects the library hands out:
//! `ibv_context.ops` (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`, `ibv_post_srq_recv`, `ibv_bind_mw`...), the `verbs_context`
//! in front of an `ibv_context` whose `abi_compat` is `UINTPTR_MAX`
//! (`ibv_query_port`, `ibv_query_device_ex`, `ibv_create_cq_ex`, `ibv_create_qp_ex`,
//! `ibv_create_flow`, `ibv_open_xrcd`...), and the pointers of `ibv_cq_ex` and
//! `ibv_qp_ex`. Both ways are fixed by distribution binaries, so this crate pins them:
//!
//! - [`types`]: every public structure the library and a program share, byte for byte
//!   (`tests/layout.rs` compiles a C program against the installed header and compares
//!   each size, alignment and field offset and size);
//! - [`consts`]: the enum values and flags, checked against the header the same way;
//! - [`symbols`] and `abi/`: the exported symbols with their version nodes
//!   (`libibverbs.symbols`, from Debian 12's library), the version script that must
//!   keep them (`libibverbs.map`), and what Debian's tools import (`imports.txt`),
//!   checked against each other and against the installed binaries (`tests/symbols.rs`).
//!
//! What comes next builds on this: the verbs themselves over the soft device (the
//! rverbs device shared with the Rust API) as a `cdylib` with the soname
//! `libibverbs.so.1` and this version script, filling `ibv_context_ops`, the
//! `verbs_context` ops with its `sz`, and the `ibv_cq_ex` / `ibv_qp_ex` pointers.

pub mod consts;
pub mod symbols;
pub mod types;
