//! # rverbs-wire
//!
//! Every byte layout the rverbs stack speaks, and nothing else: no I/O, no clock and no
//! allocation on the parse path (`#![no_std]`).
//!
//! Each header follows one pattern (after smoltcp's `wire` module):
//!
//! * a checked view `Xxx<T: AsRef<[u8]>>` over a borrowed or owned buffer:
//!   `new_unchecked`, `new_checked` (= `new_unchecked` + `check_len`), accessors that
//!   never panic once `new_checked` has succeeded, and setters when `T: AsMut<[u8]>`;
//! * an owned `XxxRepr` with `parse(&view)`, `emit(&mut view)` and `buffer_len()`.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod error;
pub mod field;
pub mod mad;

pub use error::{Error, Result};
