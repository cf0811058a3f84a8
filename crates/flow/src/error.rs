//! The error every flow verb returns: a Linux errno (what `ibv_create_flow` would leave in
//! `errno`) plus a sentence naming the check that failed.

use std::borrow::Cow;
use std::fmt;

/// Linux errno values used by the flow verbs (`include/uapi/asm-generic/errno-base.h`,
/// `errno.h`). Only Linux numbering is meant: these are what the kernel returns.
pub mod errno {
    /// Operation not permitted (no CAP_NET_RAW).
    pub const EPERM: i32 = 1;
    /// Out of memory; mlx5 also uses it for a priority beyond its last flow table.
    pub const ENOMEM: i32 = 12;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Operation not supported (mask bits the device cannot match on).
    pub const EOPNOTSUPP: i32 = 95;
}

/// A rejected flow attribute or a failed flow verb.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowError {
    errno: i32,
    reason: Cow<'static, str>,
}

impl FlowError {
    /// An error with `errno` and a reason.
    pub fn new(errno: i32, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            errno,
            reason: reason.into(),
        }
    }

    /// `EINVAL` with a reason.
    pub fn inval(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(errno::EINVAL, reason)
    }

    /// `EOPNOTSUPP` with a reason.
    pub fn notsupp(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(errno::EOPNOTSUPP, reason)
    }

    /// The errno (positive), as `ibv_create_flow` reports it in `errno`.
    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// The check that failed.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The symbolic errno name (`"EINVAL"`, ...).
    pub fn errno_name(&self) -> &'static str {
        match self.errno {
            errno::EPERM => "EPERM",
            errno::ENOMEM => "ENOMEM",
            errno::EINVAL => "EINVAL",
            errno::EOPNOTSUPP => "EOPNOTSUPP",
            _ => "errno",
        }
    }
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.errno_name(), self.errno, self.reason)
    }
}

impl std::error::Error for FlowError {}
