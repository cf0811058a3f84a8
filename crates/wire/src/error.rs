//! The one error type of the wire crate.

use core::fmt;

/// Why a buffer could not be read (or written) as the layout it was offered as.
///
/// Every variant names the layout and the rule it broke, so a decoder can print a
/// useful reason for a malformed packet without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the named header or field does.
    Truncated(&'static str),
    /// A field holds a value the layout forbids (the text says which rule).
    Malformed(&'static str),
    /// A well-formed value this crate does not handle (for example an RD or XRC opcode).
    Unsupported(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated(what) => write!(f, "truncated {what}"),
            Error::Malformed(why) => write!(f, "malformed: {why}"),
            Error::Unsupported(what) => write!(f, "unsupported {what}"),
        }
    }
}

impl core::error::Error for Error {}

/// Result with the wire crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
