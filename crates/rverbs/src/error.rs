//! Errors: every failure names the verb and carries the errno a libibverbs user expects.

use rverbs_engine::VerbError;
use std::fmt;

/// An error from a verb or from the device.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A verb refused its arguments or the object's state.
    Verb(VerbError),
    /// The device could not be opened or its socket failed.
    Io {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// No device matched.
    NoDevice(String),
    /// An environment variable (or the option it stands for) has a value the library
    /// cannot use (EINVAL).
    Config {
        /// The variable.
        var: &'static str,
        /// What is wrong with its value, and what it accepts.
        why: String,
    },
    /// A verb was called from inside [`crate::Mr::with`], where waiting for the device
    /// could deadlock (EDEADLK).
    WouldDeadlock {
        /// The verb.
        verb: &'static str,
    },
    /// `create_flow` / `destroy_flow` refused the flow (errno and reason as the kernel
    /// and mlx5 give them; see [`rverbs_flow::attr::validate`]).
    Flow(rverbs_flow::error::FlowError),
}

impl Error {
    /// The errno a libibverbs caller would have seen.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Verb(v) => v.errno.code(),
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::NoDevice(_) => libc::ENODEV,
            Error::Config { .. } => libc::EINVAL,
            Error::WouldDeadlock { .. } => libc::EDEADLK,
            Error::Flow(e) => e.errno(),
        }
    }

    pub(crate) fn io(what: &'static str, source: std::io::Error) -> Self {
        Error::Io { what, source }
    }

    pub(crate) fn env(var: &'static str, why: impl Into<String>) -> Self {
        Error::Config {
            var,
            why: why.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Verb(v) => v.fmt(f),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::NoDevice(name) => write!(f, "no RDMA device named {name}"),
            Error::Config { var, why } => write!(f, "{var}: {why}"),
            Error::WouldDeadlock { verb } => write!(
                f,
                "{verb}: called inside Mr::with, where waiting for the device could deadlock (EDEADLK)"
            ),
            Error::Flow(e) => write!(f, "create_flow: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Verb(v) => Some(v),
            Error::Io { source, .. } => Some(source),
            Error::Flow(e) => Some(e),
            Error::NoDevice(_) | Error::Config { .. } | Error::WouldDeadlock { .. } => None,
        }
    }
}

impl From<VerbError> for Error {
    fn from(v: VerbError) -> Self {
        Error::Verb(v)
    }
}

impl From<rverbs_flow::error::FlowError> for Error {
    fn from(e: rverbs_flow::error::FlowError) -> Self {
        Error::Flow(e)
    }
}

/// Result of a verb.
pub type Result<T> = std::result::Result<T, Error>;
