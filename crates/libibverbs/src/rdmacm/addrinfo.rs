//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: names to addresses as getaddrinfo(3)
//! gives them, in librdmacm's `struct rdma_addrinfo` (on RoCE there is no route to
//! look up: the addresses are the route).
//!
//! Everything is allocated with malloc, so a program may free parts itself as it could
//! with librdmacm's.

use super::*;
use std::ffi::{c_char, c_void, CStr};

/// One malloc'd copy of a socket address.
fn c_sockaddr(a: SocketAddr) -> Result<(*mut libc::sockaddr, libc::socklen_t), c_int> {
    let len = match a {
        SocketAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>(),
    };
    // SAFETY: calloc of a sockaddr_storage, freed by rdma_freeaddrinfo.
    let p = unsafe { libc::calloc(1, std::mem::size_of::<libc::sockaddr_storage>()) }
        as *mut libc::sockaddr_storage;
    if p.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: just allocated, zeroed and large enough.
    put_sockaddr(unsafe { &mut *p }, a);
    Ok((p as *mut libc::sockaddr, len as libc::socklen_t))
}

/// getaddrinfo(3) for `node`/`service`: the first address of `family` (0: any).
fn lookup(
    node: Option<&CStr>,
    service: Option<&CStr>,
    family: c_int,
    numeric: bool,
    passive: bool,
) -> Result<SocketAddr, c_int> {
    // SAFETY: addrinfo is plain data.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = family;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_flags =
        if numeric { libc::AI_NUMERICHOST } else { 0 } | if passive { libc::AI_PASSIVE } else { 0 };
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings (or NULL), valid hints and out-pointer.
    let r = unsafe {
        libc::getaddrinfo(
            node.map_or(std::ptr::null(), CStr::as_ptr),
            service.map_or(std::ptr::null(), CStr::as_ptr),
            &hints,
            &mut res,
        )
    };
    if r != 0 {
        // librdmacm returns getaddrinfo's code and sets errno from it.
        return Err(match r {
            libc::EAI_NONAME | libc::EAI_NODATA => libc::EADDRNOTAVAIL,
            libc::EAI_SERVICE => libc::EINVAL,
            libc::EAI_FAMILY => libc::EAFNOSUPPORT,
            libc::EAI_MEMORY => libc::ENOMEM,
            _ => libc::EINVAL,
        });
    }
    let mut p = res;
    let mut found = Err(libc::EADDRNOTAVAIL);
    while !p.is_null() {
        // SAFETY: an entry of getaddrinfo's list.
        let e = unsafe { &*p };
        // SAFETY: the entry's address, of its family.
        if let Ok(a) = unsafe { sockaddr_in(e.ai_addr) } {
            found = Ok(a);
            break;
        }
        p = e.ai_next;
    }
    // SAFETY: the list getaddrinfo returned.
    unsafe { libc::freeaddrinfo(res) };
    found
}

/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn cstr<'a>(s: *const c_char) -> Option<&'a CStr> {
    // SAFETY: the caller's promise.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) })
}

unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's out-pointer and strings.
        let out = unsafe { out(res) }?;
        // SAFETY: as above.
        let (node, service) = unsafe { (cstr(node), cstr(service)) };
        if node.is_none() && service.is_none() {
            return Err(libc::EINVAL);
        }
        // SAFETY: NULL or the caller's hints.
        let h = unsafe { hints.as_ref() };
        let flags = h.map_or(0, |h| h.ai_flags);
        let family = h.map_or(0, |h| h.ai_family);
        let passive = flags & RAI_PASSIVE != 0;
        let numeric = flags & RAI_NUMERICHOST != 0;
        // SAFETY: rdma_addrinfo is plain data.
        let mut ai: rdma_addrinfo = unsafe { std::mem::zeroed() };
        ai.ai_flags = flags;
        ai.ai_qp_type = h.map_or(0, |h| h.ai_qp_type);
        ai.ai_port_space = h.map_or(0, |h| h.ai_port_space);
        // librdmacm's defaults: the port space from the QP type, TCP / RC otherwise.
        if ai.ai_port_space == 0 {
            ai.ai_port_space = if ai.ai_qp_type == 4 {
                RDMA_PS_UDP
            } else {
                RDMA_PS_TCP
            } as c_int;
        }
        if ai.ai_qp_type == 0 {
            ai.ai_qp_type = if ai.ai_port_space == RDMA_PS_UDP as c_int {
                4
            } else {
                2
            };
        }
        let a = lookup(node, service, family, numeric, passive)?;
        ai.ai_family = if a.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let (p, len) = c_sockaddr(a)?;
        if passive {
            ai.ai_src_addr = p;
            ai.ai_src_len = len;
        } else {
            ai.ai_dst_addr = p;
            ai.ai_dst_len = len;
            // A source the hints give is kept (librdmacm copies it).
            // SAFETY: the hints' source address, of its family (or NULL).
            if let Some(src) = h.and_then(|h| unsafe { sockaddr_in(h.ai_src_addr) }.ok()) {
                let (p, len) = c_sockaddr(src)?;
                ai.ai_src_addr = p;
                ai.ai_src_len = len;
            }
        }
        // SAFETY: calloc of one rdma_addrinfo, freed by rdma_freeaddrinfo.
        let r =
            unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
        if r.is_null() {
            // SAFETY: the addresses allocated above.
            unsafe {
                libc::free(ai.ai_src_addr as *mut c_void);
                libc::free(ai.ai_dst_addr as *mut c_void);
            }
            return Err(libc::ENOMEM);
        }
        // SAFETY: just allocated.
        unsafe { r.write(ai) };
        *out = r;
        Ok(0)
    })
}
export!(rdma_getaddrinfo, "RDMACM_1.0");

unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    ret_void(|| {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: an entry of a list rdma_getaddrinfo made: every pointer in it
            // is malloc'd (or NULL).
            unsafe {
                let next = (*p).ai_next;
                libc::free((*p).ai_src_addr as *mut c_void);
                libc::free((*p).ai_dst_addr as *mut c_void);
                libc::free((*p).ai_src_canonname as *mut c_void);
                libc::free((*p).ai_dst_canonname as *mut c_void);
                libc::free((*p).ai_route);
                libc::free((*p).ai_connect);
                libc::free(p as *mut c_void);
                p = next;
            }
        }
    })
}
export!(rdma_freeaddrinfo, "RDMACM_1.0");
