//! Integer socket options (`setsockopt(2)` with an `int` value), the one helper every
//! option setter of the crate goes through.

use std::io;
use std::os::fd::AsRawFd;

/// Sets an integer socket option.
pub(crate) fn set_int_opt(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller for the duration of the call;
    // the option value points at a live c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
