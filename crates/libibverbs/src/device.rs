//! Devices (`ibv_get_device_list` and friends), the per-port queries and the small
//! helpers of `verbs.h` (names of enums, rates, fork support, sysfs).
//!
//! Each soft device rverbs finds (`rverbs::devices()`: one per interface with an
//! address) is an `ibv_device` that lives for the whole process, as in libibverbs.
//! Its `ibdev_path` is a virtual sysfs directory (`/sys/class/infiniband/<name>`) that
//! `ibv_read_sysfs_file` answers for the files tools read.

use crate::context::Ctx;
use crate::*;
use rverbs::DeviceInfo;
use rverbs_ibverbs::consts::*;
use rverbs_ibverbs::types::*;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

/// An `ibv_device` with the rverbs device behind it.
#[repr(C)]
pub(crate) struct DevObj {
    pub c: ibv_device,
    pub info: DeviceInfo,
}

/// Every device handed out, never freed (programs keep `ibv_device *` after
/// `ibv_free_device_list`, as libibverbs allows while a context is open).
static DEVICES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Copies `s` into a C string buffer, cut to fit with its NUL.
pub(crate) fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

/// The virtual sysfs directory of a device.
pub(crate) const IBDEV_DIR: &str = "/sys/class/infiniband/";

fn dev_obj(info: DeviceInfo) -> *mut DevObj {
    let mut list = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    for &p in list.iter() {
        // SAFETY: entries are leaked DevObj boxes, never freed.
        let d = unsafe { &*(p as *const DevObj) };
        if d.info.name == info.name {
            return p as *mut DevObj;
        }
    }
    let index = list.len();
    // SAFETY: ibv_device is plain data (integers, arrays, nullable fn pointers).
    let mut c: ibv_device = unsafe { std::mem::zeroed() };
    c.node_type = IBV_NODE_CA;
    c.transport_type = IBV_TRANSPORT_IB;
    put_str(&mut c.name, &info.name);
    put_str(&mut c.dev_name, &format!("uverbs{index}"));
    put_str(
        &mut c.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs{index}"),
    );
    put_str(&mut c.ibdev_path, &format!("{IBDEV_DIR}{}", info.name));
    let p = Box::into_raw(Box::new(DevObj { c, info }));
    list.push(p as usize);
    p
}

/// # Safety
/// `dev` is NULL or a device this library returned.
pub(crate) unsafe fn dev<'a>(dev: *mut ibv_device) -> Result<&'a DevObj, c_int> {
    // SAFETY: the caller's promise; DevObj starts with its ibv_device.
    unsafe { arg(dev as *const DevObj) }
}

pub(crate) unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    ret_ptr(|| {
        let infos = rverbs::devices().map_err(|e| errno_of(&e))?;
        let n = infos.len();
        // SAFETY: calloc of n+1 pointers; freed by ibv_free_device_list.
        let arr = unsafe { libc::calloc(n + 1, std::mem::size_of::<*mut ibv_device>()) }
            as *mut *mut ibv_device;
        if arr.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, info) in infos.into_iter().enumerate() {
            // SAFETY: i < n, inside the allocation.
            unsafe { *arr.add(i) = dev_obj(info) as *mut ibv_device };
        }
        // SAFETY: `num` is NULL or the caller's int.
        if let Some(num) = unsafe { num.as_mut() } {
            *num = n as c_int;
        }
        Ok(arr)
    })
}
export!(ibv_get_device_list, "IBVERBS_1.1");

pub(crate) unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` came from ibv_get_device_list's calloc (or is NULL).
    ret_void(|| unsafe { libc::free(list as *mut c_void) })
}
export!(ibv_free_device_list, "IBVERBS_1.1");

unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    // SAFETY: `device` is NULL or ours.
    ret_ptr(|| Ok(unsafe { dev(device) }?.c.name.as_ptr() as *mut c_char))
}
export!(ibv_get_device_name, "IBVERBS_1.1");

/// The node GUID: the default GID's interface ID, as rxe (big-endian in memory).
pub(crate) fn node_guid(info: &DeviceInfo) -> u64 {
    info.default_gid().interface_id().to_be()
}

unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    // SAFETY: `device` is NULL or ours.
    ret_val(0, || match unsafe { dev(device) } {
        Ok(d) => node_guid(&d.info),
        Err(e) => {
            set_errno(e);
            0
        }
    })
}
export!(ibv_get_device_guid, "IBVERBS_1.1");

unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    ret_neg(|| {
        // SAFETY: `device` is NULL or ours.
        let d = unsafe { dev(device) }?;
        Ok(d.info.ifindex as c_int)
    })
}
export!(ibv_get_device_index, "IBVERBS_1.9");

// ---- queries -----------------------------------------------------------------------

pub(crate) fn fill_device_attr(ctx: &Ctx, a: &mut ibv_device_attr) -> Result<(), c_int> {
    let d = ctx.rs.query_device().map_err(|e| errno_of(&e))?;
    // SAFETY: plain data.
    *a = unsafe { std::mem::zeroed() };
    put_str(&mut a.fw_ver, &d.fw_ver);
    a.node_guid = d.node_guid.to_be();
    a.sys_image_guid = d.sys_image_guid.to_be();
    a.max_mr_size = d.max_mr_size;
    a.page_size_cap = d.page_size_cap;
    a.vendor_id = d.vendor_id;
    a.vendor_part_id = d.vendor_part_id;
    a.hw_ver = d.hw_ver;
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    a.max_qp = i(d.max_qp);
    a.max_qp_wr = i(d.max_qp_wr);
    a.device_cap_flags = d.device_cap_flags as u32;
    a.max_sge = i(d.max_send_sge.min(d.max_recv_sge));
    a.max_sge_rd = i(d.max_send_sge);
    a.max_cq = i(d.max_cq);
    a.max_cqe = i(d.max_cqe);
    a.max_mr = i(d.max_mr);
    a.max_mw = i(d.max_mw);
    a.max_pd = i(d.max_pd);
    a.max_qp_rd_atom = i(d.max_qp_rd_atom);
    a.max_res_rd_atom = i(d.max_res_rd_atom);
    a.max_qp_init_rd_atom = i(d.max_qp_init_rd_atom);
    a.atomic_cap = if d.atomic_hca { IBV_ATOMIC_HCA } else { 0 };
    a.max_mcast_grp = i(d.max_mcast_grp);
    a.max_mcast_qp_attach = i(d.max_mcast_qp_attach);
    a.max_total_mcast_qp_attach = i(d.max_total_mcast_qp_attach);
    a.max_ah = i(d.max_ah);
    a.max_srq = i(d.max_srq);
    a.max_srq_wr = i(d.max_srq_wr);
    a.max_srq_sge = i(d.max_srq_sge);
    a.max_pkeys = d.max_pkeys;
    a.local_ca_ack_delay = d.local_ca_ack_delay;
    a.phys_port_cnt = d.phys_port_cnt;
    Ok(())
}

unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller passes its context and an attribute buffer.
        let (ctx, a) = unsafe { (Ctx::from_c(context)?, out(device_attr)?) };
        fill_device_attr(ctx, a)
    })
}
export!(ibv_query_device, "IBVERBS_1.1");

/// `verbs_context.query_device_ex`: fills as much of `attr` as `attr_size` covers.
pub(crate) unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    ret_errno(|| {
        // SAFETY: `input` is NULL or the caller's.
        if let Some(i) = unsafe { input.as_ref() } {
            if i.comp_mask != 0 {
                return Err(libc::EINVAL);
            }
        }
        // SAFETY: the caller's context.
        let ctx = unsafe { Ctx::from_c(context) }?;
        if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: plain data.
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        fill_device_attr(ctx, &mut ex.orig_attr)?;
        ex.device_cap_flags_ex = u64::from(ex.orig_attr.device_cap_flags);
        ex.phys_port_cnt_ex = 1;
        let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: `attr` has `attr_size` writable bytes (the inline passes sizeof).
        unsafe { std::ptr::copy_nonoverlapping(&ex as *const _ as *const u8, attr as *mut u8, n) };
        Ok(())
    })
}

fn port_attr(ctx: &Ctx, port: u8) -> Result<ibv_port_attr, c_int> {
    let p = ctx.rs.query_port(port).map_err(|e| errno_of(&e))?;
    Ok(ibv_port_attr {
        state: match p.state {
            rverbs::PortState::Active => IBV_PORT_ACTIVE,
            rverbs::PortState::Down => IBV_PORT_DOWN,
        },
        max_mtu: p.max_mtu as u32,
        active_mtu: p.active_mtu as u32,
        gid_tbl_len: p.gid_tbl_len as c_int,
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: if p.link_layer_ethernet {
            IBV_LINK_LAYER_ETHERNET as u8
        } else {
            IBV_LINK_LAYER_INFINIBAND as u8
        },
        flags: 0,
        port_cap_flags2: 0,
    })
}

/// `verbs_context.query_port`, what verbs.h's `ibv_query_port` inline calls.
pub(crate) unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's context.
        let ctx = unsafe { Ctx::from_c(context) }?;
        if port_attr_out.is_null() {
            return Err(libc::EINVAL);
        }
        let a = port_attr(ctx, port_num)?;
        let n = len.min(std::mem::size_of::<ibv_port_attr>());
        // SAFETY: the caller's buffer has `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(&a as *const _ as *const u8, port_attr_out as *mut u8, n)
        };
        Ok(())
    })
}

/// The exported `ibv_query_port` (programs built before the inline): the 1.1 layout
/// up to `flags`, which the old struct ends before.
unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded as given.
    unsafe {
        query_port(
            context,
            port_num,
            port_attr_out,
            std::mem::offset_of!(ibv_port_attr, flags),
        )
    }
}
export!(ibv_query_port, "IBVERBS_1.1");

unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context and GID buffer.
        let (ctx, g) = unsafe { (Ctx::from_c(context)?, out(gid)?) };
        let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
        // An empty slot reads as zero (rdma-core keeps that behaviour of ibv_query_gid).
        let v = ctx
            .rs
            .query_gid(port_num, index)
            .map_err(|e| errno_of(&e))?;
        g.raw = v.0;
        Ok(0)
    })
}
export!(ibv_query_gid, "IBVERBS_1.1");

fn gid_entry(e: &rverbs::GidEntry) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid { raw: e.gid.0 },
        gid_index: e.gid_index,
        port_num: e.port_num,
        gid_type: e.gid_type as u32,
        ndev_ifindex: e.ndev_ifindex,
    }
}

unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's context and entry.
        let (ctx, ent) = unsafe { (Ctx::from_c(context)?, out(entry)?) };
        if entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(libc::EINVAL);
        }
        let e = ctx
            .rs
            .query_gid_ex(port_num, gid_index, flags)
            .map_err(|e| errno_of(&e))?;
        *ent = gid_entry(&e);
        Ok(())
    })
}
export!(_ibv_query_gid_ex, "IBVERBS_1.11");

unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = ret_neg(|| {
        // SAFETY: the caller's context.
        let ctx = unsafe { Ctx::from_c(context) }?;
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(libc::EINVAL);
        }
        if entries.is_null() && max_entries > 0 {
            return Err(libc::EINVAL);
        }
        let all = ctx
            .rs
            .query_gid_table(max_entries)
            .map_err(|e| errno_of(&e))?;
        for (i, e) in all.iter().enumerate() {
            // SAFETY: i < max_entries (query_gid_table refuses more), entries of
            // `entry_size` bytes each.
            unsafe {
                let p = (entries as *mut u8).add(i * entry_size) as *mut ibv_gid_entry;
                p.write_unaligned(gid_entry(e));
            }
        }
        Ok(all.len() as c_int)
    });
    if r < 0 {
        // SAFETY: reading our own thread's errno.
        -(unsafe { *libc::__errno_location() } as isize)
    } else {
        r as isize
    }
}
export!(_ibv_query_gid_table, "IBVERBS_1.11");

/// `enum ibv_gid_type_sysfs` of rdma-core's driver.h: 0 IB/RoCE v1, 1 RoCE v2.
unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    gid_type: *mut u32,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context and out-parameter.
        let (ctx, t) = unsafe { (Ctx::from_c(context)?, out(gid_type)?) };
        let e = ctx
            .rs
            .query_gid_ex(port_num.into(), index, 0)
            .map_err(|e| errno_of(&e))?;
        *t = u32::from(e.gid_type == rverbs::GidType::RoceV2);
        Ok(0)
    })
}
export!(ibv_query_gid_type, "IBVERBS_PRIVATE_34");
export!(ibv_query_gid_type as "ibv_query_gid_type", "IBVERBS_PRIVATE_57", "57");
export!(ibv_query_gid_type as "ibv_query_gid_type", "IBVERBS_PRIVATE_59", "59");
export!(ibv_query_gid_type as "ibv_query_gid_type", "IBVERBS_PRIVATE_64", "64");
export!(ibv_query_gid_type as "ibv_query_gid_type", "IBVERBS_PRIVATE_65", "65");

/// The default P_Key at index 0, the rest of the table empty (as rxe).
const DEFAULT_PKEY: u16 = 0xffff;

unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context and out-parameter.
        let (ctx, k) = unsafe { (Ctx::from_c(context)?, out(pkey)?) };
        let p = ctx.rs.query_port(port_num).map_err(|e| errno_of(&e))?;
        if index < 0 || index >= c_int::from(p.pkey_tbl_len) {
            return Err(libc::EINVAL);
        }
        *k = if index == 0 { DEFAULT_PKEY.to_be() } else { 0 };
        Ok(0)
    })
}
export!(ibv_query_pkey, "IBVERBS_1.1");

unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context.
        let ctx = unsafe { Ctx::from_c(context) }?;
        ctx.rs.query_port(port_num).map_err(|e| errno_of(&e))?;
        if u16::from_be(pkey) == DEFAULT_PKEY {
            Ok(0)
        } else {
            Err(libc::ENOENT)
        }
    })
}
export!(ibv_get_pkey_index, "IBVERBS_1.5");

// ---- sysfs -------------------------------------------------------------------------

/// What the virtual sysfs directory of `dev` holds at `file`.
fn virtual_sysfs(info: &DeviceInfo, file: &str) -> Option<String> {
    let file = file.trim_matches('/');
    let (dattr, pattr, _) = info.attributes();
    let gid_type = |idx: &str| -> Option<String> {
        let i: usize = idx.parse().ok()?;
        let t = info.gid_table().gid_type(i)?;
        Some(match t {
            rverbs::GidType::RoceV2 => "RoCE v2".into(),
            _ => "IB/RoCE v1".into(),
        })
    };
    Some(match file {
        "node_type" => "1: CA".into(),
        "node_guid" | "sys_image_guid" => {
            let g = dattr.node_guid;
            format!(
                "{:04x}:{:04x}:{:04x}:{:04x}",
                g >> 48,
                (g >> 32) & 0xffff,
                (g >> 16) & 0xffff,
                g & 0xffff
            )
        }
        "fw_ver" => dattr.fw_ver,
        "hw_rev" => "0".into(),
        "hca_type" => "rverbs".into(),
        "board_id" => "rverbs soft RoCE".into(),
        "ports/1/link_layer" => "Ethernet".into(),
        "ports/1/state" => match pattr.state {
            rverbs::PortState::Active => "4: ACTIVE".into(),
            rverbs::PortState::Down => "1: DOWN".into(),
        },
        "ports/1/phys_state" => match pattr.phys_state {
            5 => "5: LinkUp".into(),
            _ => "3: Disabled".into(),
        },
        "ports/1/lid" | "ports/1/sm_lid" => "0x0".into(),
        "ports/1/pkeys/0" => "0xffff".into(),
        "device/net" => info.ifname.clone(),
        _ => {
            if let Some(idx) = file.strip_prefix("ports/1/gid_attrs/types/") {
                return gid_type(idx);
            }
            if let Some(idx) = file.strip_prefix("ports/1/gid_attrs/ndevs/") {
                gid_type(idx)?;
                return Some(info.ifname.clone());
            }
            return None;
        }
    })
}

unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    ret_neg(|| {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: NUL-terminated strings from the caller.
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let (d, f) = (d.to_string_lossy(), f.to_string_lossy());
        let text = if let Some(name) = d.trim_end_matches('/').strip_prefix(IBDEV_DIR) {
            let list = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
            let found = list.iter().find_map(|&p| {
                // SAFETY: leaked DevObj boxes.
                let o = unsafe { &*(p as *const DevObj) };
                (o.info.name == name).then(|| o.info.clone())
            });
            drop(list);
            match found {
                Some(info) => virtual_sysfs(&info, &f).ok_or(libc::ENOENT)?,
                // Not one of ours: the real file (a kernel device's sysfs).
                None => read_real(&d, &f)?,
            }
        } else {
            read_real(&d, &f)?
        };
        let bytes = text.trim_end_matches('\n').as_bytes();
        if bytes.len() >= size {
            // As libibverbs: refuse rather than return a cut, unterminated string.
            return Err(libc::EOVERFLOW);
        }
        // SAFETY: `buf` has `size` bytes; we write len+1 < size+1.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, bytes.len());
            *buf.add(bytes.len()) = 0;
        }
        Ok(bytes.len() as c_int)
    })
}
export!(ibv_read_sysfs_file, "IBVERBS_1.0");

fn read_real(dir: &str, file: &str) -> Result<String, c_int> {
    std::fs::read_to_string(format!("{dir}/{file}"))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

unsafe extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}
export!(ibv_get_sysfs_path, "IBVERBS_1.0");
