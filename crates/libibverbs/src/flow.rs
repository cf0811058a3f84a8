//! Flow steering: `ibv_create_flow` / `ibv_destroy_flow`, the `static inline` verbs of
//! verbs.h that call `verbs_context.ibv_create_flow` / `ibv_destroy_flow`.
//!
//! The program's `struct ibv_flow_attr` and specs (libibverbs' layout) become the
//! kernel's `ib_uverbs_flow_attr` and specs as rdma-core's `ibv_cmd_create_flow` writes
//! them (`libibverbs/cmd.c`, `ib_spec_to_kern_spec`: the header's `size` recomputed,
//! IPV4_EXT sent as IPV4 with the 12-byte filter, the IPV6 / IPV4_EXT / VXLAN filter
//! sizes taken from the spec's `size` with their extra mask bytes required zero), and
//! then go through the kernel's checks (`rverbs_flow::uverbs::decode_flow_attr`) and
//! the Rust API's `Qp::create_flow`: one set of checks for C and Rust callers.

use crate::qp::QpObj;
use crate::*;
use rverbs::flow::uverbs::{decode_flow_attr, spec_len, FLOW_ATTR_LEN, SPEC_HDR_LEN};
use rverbs_ibverbs::types::*;
use std::ffi::c_int;
use std::mem::{offset_of, size_of};

#[repr(C)]
pub(crate) struct FlowObj {
    pub c: ibv_flow,
    pub rs: rverbs::Flow,
}

/// `enum ibv_flow_spec_type` values and the INNER bit.
mod ty {
    pub const ETH: u32 = 0x20;
    pub const IPV4: u32 = 0x30;
    pub const IPV6: u32 = 0x31;
    pub const IPV4_EXT: u32 = 0x32;
    pub const MPLS: u32 = 0x60;
    pub const TCP: u32 = 0x40;
    pub const UDP: u32 = 0x41;
    pub const VXLAN_TUNNEL: u32 = 0x50;
    pub const GRE: u32 = 0x51;
    pub const ESP: u32 = 0x52;
    pub const INNER: u32 = 0x100;
    pub const ACTION_TAG: u32 = 0x1000;
    pub const ACTION_DROP: u32 = 0x1001;
    pub const ACTION_HANDLE: u32 = 0x1002;
    pub const ACTION_COUNT: u32 = 0x1003;
}

/// Most specs one attribute may carry (`num_of_specs` is a byte; the kernel allows
/// fewer, which `decode_flow_attr` checks).
const MAX_SPECS: usize = 255;

/// `sizeof(struct ibv_flow_spec_hdr)`: a `u32` type and a `u16` size, padded.
const USER_HDR: usize = size_of::<ibv_flow_spec_hdr>();

/// Appends one kernel spec: its header, then `val` and `mask` (each `filter` bytes,
/// zero-padded to `kern_filter`).
fn push_spec(out: &mut Vec<u8>, kind: u32, kern_len: usize, val: &[u8], mask: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&(kern_len as u16).to_ne_bytes());
    out.extend_from_slice(&[0, 0]);
    let filter = (kern_len - SPEC_HDR_LEN) / 2;
    for part in [val, mask] {
        let at = out.len();
        out.extend_from_slice(&part[..part.len().min(filter)]);
        out.resize(at + filter, 0);
    }
    out.resize(start + kern_len, 0);
}

/// The kernel's command bytes of a C flow attribute (what follows `comp_mask` and
/// `qp_handle` in `ib_uverbs_create_flow`).
///
/// # Safety
/// `attr` is followed by `num_of_specs` specs, each valid for its `size` bytes (at
/// least the size of its type's struct), as `ibv_create_flow`'s contract says.
unsafe fn kern_bytes(attr: &ibv_flow_attr) -> Result<Vec<u8>, c_int> {
    let num = usize::from(attr.num_of_specs);
    let mut out = Vec::with_capacity(FLOW_ATTR_LEN + num * 88);
    out.extend_from_slice(&attr.type_.to_ne_bytes());
    out.extend_from_slice(&[0, 0]); // size, set below
    out.extend_from_slice(&attr.priority.to_ne_bytes());
    out.extend_from_slice(&[attr.num_of_specs, 0, 0, attr.port]);
    out.extend_from_slice(&attr.flags.to_ne_bytes());
    // SAFETY: the specs follow the attribute (the caller's promise).
    let mut p = unsafe { (attr as *const ibv_flow_attr).add(1) }.cast::<u8>();
    for _ in 0..num.min(MAX_SPECS) {
        // SAFETY: each spec starts with its header (the caller's promise).
        let hdr = unsafe { std::ptr::read_unaligned(p.cast::<ibv_flow_spec_hdr>()) };
        let size = usize::from(hdr.size);
        if size < USER_HDR {
            // Also what keeps the walk moving: a zero size would read one spec forever.
            return Err(libc::EINVAL);
        }
        // SAFETY: the spec is valid for `size` bytes (the caller's promise).
        let spec = unsafe { std::slice::from_raw_parts(p, size) };
        let need = |n: usize| if size < n { Err(libc::EINVAL) } else { Ok(()) };
        // A fixed-size filter at `at` in the user's spec, mask right after it.
        let fixed = |out: &mut Vec<u8>, kind, kern_len, at: usize, filter: usize| {
            need(at + 2 * filter)?;
            push_spec(
                out,
                kind,
                kern_len,
                &spec[at..at + filter],
                &spec[at + filter..at + 2 * filter],
            );
            Ok::<(), c_int>(())
        };
        // A filter whose size comes from the spec's size (`get_filters_size`): at least
        // `min` bytes, any bytes beyond the kernel's `kern` in the mask zero.
        let sized = |out: &mut Vec<u8>, kind, kern_len, min: usize| {
            let ib = (size - USER_HDR) / 2;
            if ib < min {
                return Err(libc::EINVAL);
            }
            let (val, mask) = (
                &spec[USER_HDR..USER_HDR + ib],
                &spec[USER_HDR + ib..USER_HDR + 2 * ib],
            );
            let kern = (kern_len - SPEC_HDR_LEN) / 2;
            if ib > min && mask[min..].iter().any(|&b| b != 0) {
                return Err(libc::EOPNOTSUPP);
            }
            let n = ib.min(kern).min(min);
            push_spec(out, kind, kern_len, &val[..n], &mask[..n]);
            Ok(())
        };
        let inner = hdr.type_ & ty::INNER;
        match hdr.type_ & !ty::INNER {
            ty::ETH => fixed(
                &mut out,
                hdr.type_,
                spec_len::ETH,
                offset_of!(ibv_flow_spec_eth, val),
                size_of::<ibv_flow_eth_filter>(),
            )?,
            ty::IPV4 => fixed(
                &mut out,
                hdr.type_,
                spec_len::IPV4,
                offset_of!(ibv_flow_spec_ipv4, val),
                size_of::<ibv_flow_ipv4_filter>(),
            )?,
            // rdma-core sends IPV4_EXT as IPV4 with the kernel's 12-byte filter (up to
            // and including `flags`).
            ty::IPV4_EXT => sized(&mut out, ty::IPV4 | inner, spec_len::IPV4_EXT, 12)?,
            // Up to and including `hop_limit`.
            ty::IPV6 => sized(&mut out, hdr.type_, spec_len::IPV6, 39)?,
            ty::TCP | ty::UDP => fixed(
                &mut out,
                hdr.type_,
                spec_len::TCP_UDP,
                offset_of!(ibv_flow_spec_tcp_udp, val),
                size_of::<ibv_flow_tcp_udp_filter>(),
            )?,
            ty::VXLAN_TUNNEL if inner == 0 => sized(&mut out, hdr.type_, spec_len::TUNNEL, 4)?,
            // ESP {spi, seq}, GRE {c_ks_res0_ver, protocol, key}, MPLS {label}: filters
            // of 4-byte alignment right after the header.
            ty::ESP => fixed(&mut out, hdr.type_, spec_len::ESP, USER_HDR, 8)?,
            ty::GRE if inner == 0 => fixed(&mut out, hdr.type_, spec_len::GRE, USER_HDR, 8)?,
            ty::MPLS => fixed(&mut out, hdr.type_, spec_len::MPLS, USER_HDR, 4)?,
            _ if hdr.type_ == ty::ACTION_TAG => {
                let at = offset_of!(ibv_flow_spec_action_tag, tag_id);
                need(at + 4)?;
                out.extend_from_slice(&hdr.type_.to_ne_bytes());
                out.extend_from_slice(&(spec_len::TAG as u16).to_ne_bytes());
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&spec[at..at + 4]);
                out.extend_from_slice(&[0; 4]);
            }
            _ if hdr.type_ == ty::ACTION_DROP => {
                push_spec(&mut out, hdr.type_, spec_len::DROP, &[], &[]);
            }
            // Flow actions and counters objects are not made by this library, so no
            // handle can name one: the kernel's answer to an unknown handle.
            _ if hdr.type_ == ty::ACTION_HANDLE || hdr.type_ == ty::ACTION_COUNT => {
                return Err(libc::EINVAL);
            }
            _ => return Err(libc::EINVAL),
        }
        // SAFETY: the next spec follows this one (the caller's promise).
        p = unsafe { p.add(size) };
    }
    let size = u16::try_from(out.len() - FLOW_ATTR_LEN).map_err(|_| libc::EINVAL)?;
    out[4..6].copy_from_slice(&size.to_ne_bytes());
    Ok(out)
}

/// `verbs_context.ibv_create_flow`.
pub(crate) unsafe extern "C" fn create_flow(
    qp: *mut ibv_qp,
    flow_attr: *mut ibv_flow_attr,
) -> *mut ibv_flow {
    ret_ptr(|| {
        // SAFETY: the caller's QP and attribute.
        let (q, a) = unsafe { (QpObj::from_c(qp)?, arg(flow_attr)?) };
        // SAFETY: the specs follow the attribute (ibv_create_flow's contract).
        let bytes = unsafe { kern_bytes(a) }?;
        let attr = decode_flow_attr(&bytes, &|_| None).map_err(|e| e.errno())?;
        let rs = q.rs.create_flow(&attr).map_err(|e| errno_of(&e))?;
        let b = Box::new(FlowObj {
            c: ibv_flow {
                comp_mask: 0,
                context: q.c.qp_base.context,
                handle: rs.id().raw() as u32,
            },
            rs,
        });
        Ok(Box::into_raw(b) as *mut ibv_flow)
    })
}

/// `verbs_context.ibv_destroy_flow`: the rule is gone when it returns.
pub(crate) unsafe extern "C" fn destroy_flow(flow: *mut ibv_flow) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's flow.
        unsafe { arg(flow as *const FlowObj) }?;
        // SAFETY: made by Box::into_raw in create_flow; the caller gives it up.
        drop(unsafe { Box::from_raw(flow as *mut FlowObj) });
        Ok(())
    })
}
