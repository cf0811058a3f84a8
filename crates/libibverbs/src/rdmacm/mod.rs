//! librdmacm's functions (`<rdma/rdma_cma.h>`) over `rverbs::cm`, in this library.
//!
//! A program that uses librdmacm also uses libibverbs, and the two share objects:
//! `rdma_cm_id.verbs` is the `ibv_context` the program allocates its PD and CQs on,
//! `rdma_create_qp` takes that PD, and the inlines of `<rdma/rdma_verbs.h>` post on
//! `id->qp` and poll `id->send_cq`. So the CM must run on the same soft device and
//! runtime as the verbs, in the same copy of rverbs: the functions live here, and
//! `librdmacm.so.1` is another name of this file (build.rs links it), which the
//! dynamic loader maps once whichever name it opens first (it recognises the file),
//! with both version sets (`RDMACM_1.x` beside `IBVERBS_1.x`).
//!
//! * [`id`]: event channels, IDs, their QPs, connect / accept / reject / disconnect,
//!   events, and the synchronous IDs of `rdma_create_ep` / `rdma_get_request`.
//! * [`ep`]: the synchronous endpoints of `rdma_create_ep` and `rdma_get_request`.
//! * [`addrinfo`]: `rdma_getaddrinfo`, `rdma_freeaddrinfo`.
//! * [`other`]: ECE and multicast, which programs bind at load time.
//!
//! Contexts: the CM opens a device through [`open_for_cm`] (an `ibv_open_device` of
//! this library, kept for the process as librdmacm keeps the devices it opens), so the
//! ID's rverbs context is the one behind `id->verbs`.

mod addrinfo;
mod ep;
mod id;
mod other;

use crate::context::Ctx;
use crate::*;
use rverbs_ibverbs::types::*;
use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Mutex;

/// The C context the CM opened for each device: (device name, `*mut ibv_context`).
static CONTEXTS: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `rverbs::cm`'s way to open a device: this library's `ibv_open_device`.
fn open_for_cm(info: &rverbs::DeviceInfo) -> Result<rverbs::Context, c_int> {
    let c = c_context(&info.name)?;
    // SAFETY: a context this library opened and never closes.
    Ok(unsafe { Ctx::from_c(c) }?.rs.clone())
}

/// The C context of the device `name`, opened on first use.
fn c_context(name: &str) -> Result<*mut ibv_context, c_int> {
    let mut all = lock(&CONTEXTS);
    if let Some((_, p)) = all.iter().find(|(n, _)| n == name) {
        return Ok(*p as *mut ibv_context);
    }
    let mut n: c_int = 0;
    // SAFETY: our own entry point, with a valid out-pointer.
    let list = unsafe { crate::device::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(libc::ENODEV);
    }
    let mut found = std::ptr::null_mut();
    for i in 0..n.max(0) as usize {
        // SAFETY: `list` holds `n` devices of this library.
        let d = unsafe { *list.add(i) };
        // SAFETY: as above.
        if unsafe { crate::device::dev(d) }.is_ok_and(|o| o.info.name == name) {
            found = d;
            break;
        }
    }
    let ctx = if found.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: a device of this library's list.
        unsafe { crate::open::ibv_open_device(found) }
    };
    let err = std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENODEV);
    // SAFETY: the list ibv_get_device_list returned.
    unsafe { crate::device::ibv_free_device_list(list) };
    if ctx.is_null() {
        return Err(if found.is_null() { libc::ENODEV } else { err });
    }
    all.push((name.to_string(), ctx as usize));
    Ok(ctx)
}

/// Once per process: the CM opens devices through this library, and a wildcard bind
/// takes the device the program opened first (perftest opens its `-d` device, then
/// listens on `0.0.0.0`), else the default one.
fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        rverbs::cm::set_context_opener(open_for_cm);
        rverbs::cm::set_wildcard_device(|| crate::context::open_devices().into_iter().next());
    });
}

/// A C socket address (`AF_INET` / `AF_INET6`); EINVAL for another family or NULL, as
/// librdmacm answers before asking the kernel (`ucma_addrlen` is 0 for them).
///
/// # Safety
/// `p` is NULL or points to a `sockaddr` of its family's size.
unsafe fn sockaddr_in(p: *const libc::sockaddr) -> Result<SocketAddr, c_int> {
    // SAFETY: the caller's promise.
    let fam = unsafe { arg(p) }?.sa_family as c_int;
    match fam {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let a = unsafe { &*(p as *const libc::sockaddr_in) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let a = unsafe { &*(p as *const libc::sockaddr_in6) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => Err(libc::EINVAL),
    }
}

/// Writes `a` as a C socket address into `st`.
fn put_sockaddr(st: &mut libc::sockaddr_storage, a: SocketAddr) {
    // SAFETY: sockaddr_storage is plain data, large and aligned enough for both.
    *st = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: as above.
            let s = unsafe { &mut *(st as *mut _ as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let s = unsafe { &mut *(st as *mut _ as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
        }
    }
}

/// The GID of an IP address on RoCE v2 (IPv4-mapped for IPv4).
fn ip_gid(ip: IpAddr) -> ibv_gid {
    let raw = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    ibv_gid { raw }
}

/// The C name of an event type.
fn event_name(e: rdma_cm_event_type) -> &'static std::ffi::CStr {
    match e {
        RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    }
}

unsafe extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const std::ffi::c_char {
    event_name(event).as_ptr()
}
export!(rdma_event_str, "RDMACM_1.0");

/// `rpoll`: rsockets' poll. This library makes no rsockets (a program gets none from
/// it), so every descriptor is an ordinary one and this is poll(2).
unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's array of `nfds` pollfds, as poll(2) takes it.
    unsafe { libc::poll(fds, nfds, timeout) }
}
export!(rpoll, "RDMACM_1.0");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_c() {
        for a in ["10.1.2.3:4791", "[fd00::1]:18515", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            // SAFETY: zeroed sockaddr_storage is valid.
            let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            put_sockaddr(&mut st, a);
            // SAFETY: put_sockaddr wrote a whole address of its family.
            let back = unsafe { sockaddr_in(&st as *const _ as *const libc::sockaddr) };
            assert_eq!(back, Ok(a));
        }
        // SAFETY: zeroed sockaddr_storage is valid (family AF_UNSPEC).
        let st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe { sockaddr_in(&st as *const _ as *const libc::sockaddr) };
        assert_eq!(r, Err(libc::EINVAL));
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { sockaddr_in(std::ptr::null()) }, Err(libc::EINVAL));
    }

    #[test]
    fn every_event_has_its_c_name() {
        for e in 0..=15 {
            let n = event_name(e).to_str().unwrap();
            assert!(n.starts_with("RDMA_CM_EVENT_"), "{e}: {n}");
        }
        assert_eq!(event_name(99).to_str().unwrap(), "UNKNOWN EVENT");
        assert_eq!(
            event_name(RDMA_CM_EVENT_ESTABLISHED).to_str().unwrap(),
            "RDMA_CM_EVENT_ESTABLISHED"
        );
    }
}
