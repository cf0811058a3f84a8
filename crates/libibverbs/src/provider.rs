//! rdma-core's provider interface (`IBVERBS_PRIVATE_34`): the `ibv_cmd_*` kernel
//! command wrappers and the context helpers a kernel provider (libmlx5, libefa...)
//! calls. Distribution tools link those provider libraries (perftest links libmlx5 and
//! libefa for their direct verbs), and their relocations need these names at load
//! time, so they are exported under the node the providers import them from.
//!
//! No provider ever drives a device of this library: the devices here are soft, with
//! no uverbs file descriptor (`cmd_fd` is `/dev/null`) for a command to go to. So a kernel
//! command fails with EOPNOTSUPP, what libibverbs answers for a command the kernel
//! does not support; a provider's registration (its load-time constructor) is
//! accepted and has no device to match.

use crate::device::put_str;
use crate::*;
use rverbs_ibverbs::types::*;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// Declares kernel commands: each returns EOPNOTSUPP (see the module docs). C's
/// calling convention lets a callee ignore the arguments it is passed.
macro_rules! kernel_commands {
    ($($name:ident,)*) => {$(
        unsafe extern "C" fn $name() -> c_int {
            libc::EOPNOTSUPP
        }
        export!($name, "IBVERBS_PRIVATE_34");
    )*};
}

kernel_commands! {
    ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw, ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters,
    ibv_cmd_create_cq, ibv_cmd_create_cq_ex, ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp, ibv_cmd_create_qp, ibv_cmd_create_qp_ex2,
    ibv_cmd_create_qp_ex, ibv_cmd_create_rwq_ind_table, ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw, ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr, ibv_cmd_destroy_ah, ibv_cmd_destroy_counters, ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq, ibv_cmd_post_recv, ibv_cmd_post_send, ibv_cmd_post_srq_recv,
    ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr,
    ibv_cmd_query_port, ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr, ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr, ibv_cmd_resize_cq, execute_ioctl,
}

/// A provider's registration: no soft device is the provider's to drive.
unsafe extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}
export!(verbs_register_driver_34, "IBVERBS_PRIVATE_34");

/// Only called from a provider's context allocation, which never happens here.
unsafe extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
export!(_verbs_init_and_alloc_context, "IBVERBS_PRIVATE_34");

unsafe extern "C" fn verbs_open_device(
    _device: *mut ibv_device,
    _private: *mut c_void,
) -> *mut ibv_context {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
export!(verbs_open_device, "IBVERBS_PRIVATE_34");

/// Provider ops are only installed on a provider's own contexts.
unsafe extern "C" fn verbs_set_ops(_vctx: *mut verbs_context, _ops: *const c_void) {}
export!(verbs_set_ops, "IBVERBS_PRIVATE_34");

unsafe extern "C" fn verbs_uninit_context(_vctx: *mut verbs_context) {}
export!(verbs_uninit_context, "IBVERBS_PRIVATE_34");

/// Fills the common part of a provider's CQ, as the helper of the same name does.
unsafe extern "C" fn verbs_init_cq(
    cq: *mut ibv_cq,
    context: *mut ibv_context,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
) {
    ret_void(|| {
        // SAFETY: the provider's CQ (NULL is ignored).
        let Some(c) = (unsafe { cq.as_mut() }) else {
            return;
        };
        c.context = context;
        c.channel = channel;
        c.cq_context = cq_context;
        c.comp_events_completed = 0;
        c.async_events_completed = 0;
        init_sync(&mut c.mutex, &mut c.cond);
    })
}
export!(verbs_init_cq, "IBVERBS_PRIVATE_34");

/// The number of attributes of an ioctl command: only `num_attrs` here, as no command
/// buffers are ever linked (no ioctl is ever made).
unsafe extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, _link: *mut c_void) -> c_uint {
    num_attrs
}
export!(__ioctl_final_num_attrs, "IBVERBS_PRIVATE_34");

/// Provider debug logging: dropped (the soft device has its own diagnostics).
unsafe extern "C" fn __verbs_log(_ctx: *mut verbs_context, _fmt: *const c_char) {}
export!(__verbs_log, "IBVERBS_PRIVATE_34");

/// A provider reading its device's sysfs: never one of ours, so there is no such file.
unsafe extern "C" fn ibv_read_ibdev_sysfs_file(buf: *mut c_char, size: usize) -> c_int {
    if !buf.is_null() && size > 0 {
        // SAFETY: the caller's buffer of `size` bytes.
        put_str(unsafe { std::slice::from_raw_parts_mut(buf, size) }, "");
    }
    set_errno(libc::ENOENT);
    -1
}
export!(ibv_read_ibdev_sysfs_file, "IBVERBS_PRIVATE_34");

// `bool verbs_allow_disassociate_destroy`: a variable, false (no device is ever
// disassociated from a soft context).
std::arch::global_asm!(
    ".pushsection .data",
    ".globl __rvx_verbs_allow_disassociate_destroy",
    ".type __rvx_verbs_allow_disassociate_destroy,@object",
    ".size __rvx_verbs_allow_disassociate_destroy,1",
    "__rvx_verbs_allow_disassociate_destroy:",
    ".byte 0",
    ".symver __rvx_verbs_allow_disassociate_destroy,verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34,remove",
    ".popsection",
);

/// `ibv_resolve_eth_l2_from_gid`: the soft device sends over UDP and never needs a
/// MAC, so the answer is the one for a peer on this host (zero MAC) when the GID's
/// address is local, the kernel's ARP entry for an IPv4 peer, else EHOSTUNREACH. No
/// VLAN (`0xffff`).
unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    context: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context, attributes and outputs.
        let (_ctx, a) = unsafe { (crate::context::Ctx::from_c(context)?, arg(attr)?) };
        if eth_mac.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: 16 plain bytes.
        let g = rverbs::Gid(unsafe { a.grh.dgid.raw });
        let ip = rverbs_engine::net::gid_to_ip(g);
        let mac = if ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok() {
            [0u8; 6]
        } else {
            arp(ip).ok_or(libc::EHOSTUNREACH)?
        };
        // SAFETY: the caller's 6-byte MAC buffer.
        unsafe { std::ptr::copy_nonoverlapping(mac.as_ptr(), eth_mac, 6) };
        // SAFETY: NULL or the caller's u16.
        if let Some(v) = unsafe { vid.as_mut() } {
            *v = 0xffff;
        }
        Ok(0)
    })
}
export!(ibv_resolve_eth_l2_from_gid, "IBVERBS_1.1");

fn arp(ip: std::net::IpAddr) -> Option<[u8; 6]> {
    let text = std::fs::read_to_string("/proc/net/arp").ok()?;
    let want = ip.to_string();
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first() != Some(&want.as_str()) {
            return None;
        }
        let mut mac = [0u8; 6];
        for (d, h) in mac.iter_mut().zip(f.get(3)?.split(':')) {
            *d = u8::from_str_radix(h, 16).ok()?;
        }
        Some(mac)
    })
}
