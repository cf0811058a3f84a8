//! The system's `libibverbs.so.1`, loaded at run time (`dlopen` by soname), behind
//! owned, safe wrappers: the devices of rdma-core's providers (ConnectX, EFA, the
//! kernel's rxe and siw...) for the `rverbs` hardware device.
//!
//! Why `dlopen` and not a link: a build needs no rdma-core (no headers, no cmake, no
//! `-libverbs`), and a program runs on a machine without it, where asking for a
//! hardware device fails with [`LoadError`] naming the library. The C layouts are the
//! ones of `rverbs-ibverbs`, checked there against rdma-core's installed headers.
//!
//! Exported functions are called through `dlsym`'d pointers (the default version of
//! each name, as a program linked today binds it). The verbs that `verbs.h` defines
//! `static inline` (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_query_port`) dispatch here as they do
//! there: through `ibv_context.ops` and the `verbs_context` in front of the context.
//!
//! Rules that keep the wrappers sound: every object holds (`Arc`) what the library
//! requires to outlive it (a QP its PD and CQs, an MR its memory, everything its
//! context), and destroys itself in `Drop`; memory the device may access is a
//! [`DmaMem`], reached from Rust only by volatile copies, never as a slice, since the
//! device writes it without any lock; a work request names memory only as a checked
//! range of an [`Mr`] (an inline send makes the provider read `addr` itself).
//!
//! Under `rverbs exec`, `LD_LIBRARY_PATH` puts rverbs' own `libibverbs.so.1` first. It
//! lacks the 1.0-ABI compatibility versions that rdma-core's library keeps
//! (`ibv_create_qp@IBVERBS_1.0`, ...: see `crates/libibverbs/abi/exports.txt`), which
//! tells the two apart: [`LoadError::OwnLibrary`].

mod cm;
mod flow;
mod mw;
mod objects;

pub use cm::*;
pub use flow::*;
pub use mw::*;
pub use objects::*;

use rverbs_ibverbs::types as t;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

pub use rverbs_ibverbs::consts;
pub use rverbs_ibverbs::types;

/// The soname a program links against, and what is opened.
pub const SONAME: &str = "libibverbs.so.1";

/// Why the system's devices are unavailable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// `dlopen` failed (rdma-core is not installed): its message.
    NotFound(String),
    /// The library found first is rverbs' own (`LD_LIBRARY_PATH` under `rverbs exec`).
    OwnLibrary,
    /// The library lacks a function every rdma-core release since 1.1 exports.
    MissingSymbol(&'static str),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound(why) => write!(
                f,
                "the system's {SONAME} could not be loaded ({why}): install rdma-core's libibverbs"
            ),
            LoadError::OwnLibrary => write!(
                f,
                "the {SONAME} found first is rverbs' own (LD_LIBRARY_PATH, as under `rverbs exec`), \
                 not the system's: run without it to reach hardware devices"
            ),
            LoadError::MissingSymbol(s) => {
                write!(f, "the system's {SONAME} has no {s}: not rdma-core's library")
            }
        }
    }
}

impl std::error::Error for LoadError {}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut t::ibv_device;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut t::ibv_device);
type OpenDevice = unsafe extern "C" fn(*mut t::ibv_device) -> *mut t::ibv_context;
type CloseDevice = unsafe extern "C" fn(*mut t::ibv_context) -> c_int;
type GetDeviceGuid = unsafe extern "C" fn(*mut t::ibv_device) -> u64;
type QueryDevice = unsafe extern "C" fn(*mut t::ibv_context, *mut t::ibv_device_attr) -> c_int;
type QueryPortCompat =
    unsafe extern "C" fn(*mut t::ibv_context, u8, *mut t::ibv_port_attr) -> c_int;
type QueryGidEx =
    unsafe extern "C" fn(*mut t::ibv_context, u32, u32, *mut t::ibv_gid_entry, u32, usize) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut t::ibv_context, u8, c_int, *mut t::ibv_gid) -> c_int;
type QueryPkey = unsafe extern "C" fn(*mut t::ibv_context, u8, c_int, *mut u16) -> c_int;
type GetAsyncEvent = unsafe extern "C" fn(*mut t::ibv_context, *mut t::ibv_async_event) -> c_int;
type AckAsyncEvent = unsafe extern "C" fn(*mut t::ibv_async_event);

/// The library's exported functions, resolved once.
pub(crate) struct Api {
    _handle: usize,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    open_device: OpenDevice,
    close_device: CloseDevice,
    get_device_guid: GetDeviceGuid,
    query_device: QueryDevice,
    query_port: QueryPortCompat,
    query_gid_ex: Option<QueryGidEx>,
    query_gid: QueryGid,
    query_pkey: QueryPkey,
    get_async_event: GetAsyncEvent,
    ack_async_event: AckAsyncEvent,
    pub(crate) obj: objects::ObjApi,
}

/// `dlsym` of `name` in `handle`, or `None`.
pub(crate) fn sym(handle: *mut c_void, name: &'static str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: `handle` is a live dlopen handle (never closed) and `c` a C string.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    (!p.is_null()).then_some(p)
}

macro_rules! need {
    ($h:expr, $name:literal) => {{
        let p = $crate::ibv::sym($h, $name).ok_or(LoadError::MissingSymbol($name))?;
        // SAFETY: rdma-core exports `$name` with the C signature of verbs.h, which the
        // function pointer type of the field it is stored in spells (rverbs-ibverbs'
        // layouts, checked against the installed header).
        unsafe { $crate::ibv::fn_ptr(p) }
    }};
}

/// `p` as the function pointer type `F`.
///
/// # Safety
/// `p` is a function whose C signature `F` spells.
pub(crate) unsafe fn fn_ptr<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (checked); the caller's promise makes the value valid as F.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}
pub(crate) use need;

static API: OnceLock<Result<Api, LoadError>> = OnceLock::new();

/// Loads the library (once per process; later calls return the first result).
/// `path` replaces the soname when given (a test's missing library).
pub(crate) fn api_with(path: Option<&str>) -> Result<&'static Api, LoadError> {
    API.get_or_init(|| load(path.unwrap_or(SONAME)))
        .as_ref()
        .map_err(Clone::clone)
}

pub(crate) fn api() -> Result<&'static Api, LoadError> {
    api_with(None)
}

pub(crate) fn dlerror() -> String {
    // SAFETY: dlerror returns null or a C string valid until the next dl* call of this
    // thread, copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-null, NUL-terminated (above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn load(path: &str) -> Result<Api, LoadError> {
    let c = CString::new(path).map_err(|_| LoadError::NotFound("a NUL in the path".into()))?;
    // SAFETY: dlopen of a library by name; its constructors are rdma-core's (or, when
    // rverbs' own library is found first, ours, which has none).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(LoadError::NotFound(dlerror()));
    }
    let own = {
        let (n, v) = (c"ibv_create_qp", c"IBVERBS_1.0");
        // SAFETY: a live handle and two C strings.
        unsafe { libc::dlvsym(h, n.as_ptr(), v.as_ptr()) }.is_null()
    };
    if own {
        // SAFETY: the handle from dlopen above; nothing of it was used.
        unsafe { libc::dlclose(h) };
        return Err(LoadError::OwnLibrary);
    }
    let query_gid_ex = sym(h, "_ibv_query_gid_ex").map(|p| {
        // SAFETY: `_ibv_query_gid_ex` (IBVERBS_1.11) has this signature in verbs.h.
        unsafe { fn_ptr::<QueryGidEx>(p) }
    });
    Ok(Api {
        get_device_list: need!(h, "ibv_get_device_list"),
        free_device_list: need!(h, "ibv_free_device_list"),
        open_device: need!(h, "ibv_open_device"),
        close_device: need!(h, "ibv_close_device"),
        get_device_guid: need!(h, "ibv_get_device_guid"),
        query_device: need!(h, "ibv_query_device"),
        query_port: need!(h, "ibv_query_port"),
        query_gid_ex,
        query_gid: need!(h, "ibv_query_gid"),
        query_pkey: need!(h, "ibv_query_pkey"),
        get_async_event: need!(h, "ibv_get_async_event"),
        ack_async_event: need!(h, "ibv_ack_async_event"),
        obj: objects::ObjApi::load(h)?,
        _handle: h as usize,
    })
}

/// Loads the system's library now (`path` instead of the soname, for tests), so a
/// caller can report why devices are missing. Later calls return the first result.
pub fn load_library(path: Option<&str>) -> Result<(), LoadError> {
    api_with(path).map(|_| ())
}

/// One entry of `ibv_get_device_list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEntry {
    /// `ibv_get_device_name` (`rxe0`, `mlx5_0`).
    pub name: String,
    /// `IBV_NODE_*`.
    pub node_type: i32,
    /// `IBV_TRANSPORT_*`.
    pub transport_type: i32,
    /// `ibv_get_device_guid`, in host order (the C function returns network order).
    pub guid: u64,
    /// The device's sysfs directory (`/sys/class/infiniband/NAME`).
    pub ibdev_path: String,
}

fn c_text(b: &[c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A device list, freed on drop.
struct List<'a> {
    api: &'a Api,
    ptr: *mut *mut t::ibv_device,
    n: usize,
}

impl<'a> List<'a> {
    fn get(api: &'a Api) -> io::Result<List<'a>> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out pointer; the result is null or an array of `n`
        // device pointers, freed by Drop.
        let ptr = unsafe { (api.get_device_list)(&mut n) };
        if ptr.is_null() {
            let e = io::Error::last_os_error();
            // ENOSYS: the kernel has no uverbs ABI (no RDMA device driver loaded), so
            // there are no devices (rdma-core's ibverbs_get_device_list).
            if e.raw_os_error() == Some(libc::ENOSYS) {
                return Ok(List { api, ptr, n: 0 });
            }
            return Err(e);
        }
        Ok(List {
            api,
            ptr,
            n: n.max(0) as usize,
        })
    }

    fn devices(&self) -> impl Iterator<Item = *mut t::ibv_device> + '_ {
        // SAFETY: index < n of the array the library returned, alive until Drop.
        (0..self.n).map(move |i| unsafe { *self.ptr.add(i) })
    }
}

impl Drop for List<'_> {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        // SAFETY: the list from ibv_get_device_list, freed once; opened contexts hold
        // their own reference to their device.
        unsafe { (self.api.free_device_list)(self.ptr) };
    }
}

fn entry(api: &Api, d: *mut t::ibv_device) -> DeviceEntry {
    // SAFETY: `d` is a live entry of a device list (see `List::devices`).
    let dev = unsafe { &*d };
    // SAFETY: as above.
    let guid = unsafe { (api.get_device_guid)(d) };
    DeviceEntry {
        name: c_text(&dev.name),
        node_type: dev.node_type,
        transport_type: dev.transport_type,
        guid: u64::from_be(guid),
        ibdev_path: c_text(&dev.ibdev_path),
    }
}

/// The system's devices (`ibv_get_device_list`).
pub fn devices() -> Result<io::Result<Vec<DeviceEntry>>, LoadError> {
    let api = api()?;
    Ok(List::get(api).map(|l| l.devices().map(|d| entry(api, d)).collect()))
}

/// An open device (`struct ibv_context`), closed when the last object made from it
/// drops.
pub struct Context {
    pub(crate) api: &'static Api,
    pub(crate) ptr: *mut t::ibv_context,
    entry: DeviceEntry,
}

// SAFETY: libibverbs' verbs are thread-safe on one context (rdma-core's providers lock
// what they share); the pointer is owned by this value and freed once in Drop.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context opened in `open`, closed once, after every object made
        // from it (each holds an Arc of this value).
        unsafe { (self.api.close_device)(self.ptr) };
    }
}

pub(crate) fn check(rc: c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        // Verbs return -1 with errno, or the errno itself (positive or negative).
        -1 => Err(io::Error::last_os_error()),
        e => Err(io::Error::from_raw_os_error(e.abs())),
    }
}
pub(crate) use check as check_rc;

/// Zeroed C data (the structs here are plain integers, pointers and unions of them).
pub(crate) fn zeroed<T: Copy>() -> T {
    // SAFETY: every T used here is a repr(C) struct of integers, raw pointers and
    // unions of them, for which all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// A zeroed `ibv_ah_attr`.
pub fn zeroed_ah_attr() -> t::ibv_ah_attr {
    zeroed()
}

/// A zeroed `ibv_qp_attr`.
pub fn zeroed_qp_attr() -> t::ibv_qp_attr {
    zeroed()
}

/// A zeroed `ibv_wc`.
pub fn zeroed_wc() -> t::ibv_wc {
    zeroed()
}

/// The 16 bytes of a GID.
pub fn gid_bytes(g: &t::ibv_gid) -> [u8; 16] {
    // SAFETY: both members of the union are plain integers covering the same 16
    // bytes; any bit pattern is a valid `[u8; 16]`.
    unsafe { g.raw }
}

/// A completion's `imm_data` / `invalidated_rkey` (as stored: big-endian immediate).
pub fn wc_imm(w: &t::ibv_wc) -> u32 {
    // SAFETY: both members of the union are u32s.
    unsafe { w.imm.imm_data }
}

/// Sets a completion's `imm_data`.
pub fn set_wc_imm(w: &mut t::ibv_wc, v: u32) {
    w.imm.imm_data = v;
}

impl Context {
    /// `ibv_open_device` of the device called `name`.
    pub fn open(name: &str) -> Result<io::Result<Arc<Context>>, LoadError> {
        let api = api()?;
        Ok((|| {
            let list = List::get(api)?;
            let d = list
                .devices()
                .find(|&d| entry(api, d).name == name)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
            let e = entry(api, d);
            // SAFETY: a live entry of the list; the context holds its own reference
            // to the device, so the list may be freed afterwards.
            let ptr = unsafe { (api.open_device)(d) };
            if ptr.is_null() {
                return Err(io::Error::last_os_error());
            }
            Ok(Arc::new(Context { api, ptr, entry: e }))
        })())
    }

    /// What was opened.
    pub fn entry(&self) -> &DeviceEntry {
        &self.entry
    }

    fn ctx(&self) -> &t::ibv_context {
        // SAFETY: the context stays valid until Drop; its public fields are only read.
        unsafe { &*self.ptr }
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> io::Result<t::ibv_device_attr> {
        let mut a: t::ibv_device_attr = zeroed();
        // SAFETY: a live context and an out struct of the header's layout.
        check(unsafe { (self.api.query_device)(self.ptr, &mut a) })?;
        Ok(a)
    }

    /// `ibv_query_device_ex` as verbs.h's inline does it: the `verbs_context` op when
    /// the provider has it (and does not answer EOPNOTSUPP / ENOSYS), else
    /// `ibv_query_device` with the extended fields zero.
    pub fn query_device_ex(&self) -> io::Result<t::ibv_device_attr_ex> {
        let mut a: t::ibv_device_attr_ex = zeroed();
        if let Some(op) = self.vctx_query_device_ex() {
            let input = t::ibv_query_device_ex_input { comp_mask: 0 };
            // SAFETY: the provider's op, on its live context, with an input and an out
            // struct of the size passed.
            let rc = unsafe { op(self.ptr, &input, &mut a, std::mem::size_of_val(&a)) };
            match check(rc) {
                Ok(()) => return Ok(a),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) => {
                    a = zeroed();
                }
                Err(e) => return Err(e),
            }
        }
        a.orig_attr = self.query_device()?;
        Ok(a)
    }

    fn vctx(&self) -> Option<&t::verbs_context> {
        if self.ctx().abi_compat as usize != consts::VERBS_ABI_IS_EXTENDED {
            return None;
        }
        let off = std::mem::offset_of!(t::verbs_context, context);
        // SAFETY: abi_compat says a verbs_context surrounds the ibv_context (verbs.h's
        // verbs_get_ctx), so stepping back `off` bytes stays inside that allocation.
        Some(unsafe { &*(self.ptr as *const u8).sub(off).cast::<t::verbs_context>() })
    }

    #[allow(clippy::type_complexity)]
    fn vctx_query_device_ex(
        &self,
    ) -> Option<
        unsafe extern "C" fn(
            *mut t::ibv_context,
            *const t::ibv_query_device_ex_input,
            *mut t::ibv_device_attr_ex,
            usize,
        ) -> c_int,
    > {
        let v = self.vctx()?;
        let need = std::mem::size_of::<t::verbs_context>()
            - std::mem::offset_of!(t::verbs_context, query_device_ex);
        // verbs.h's verbs_get_ctx_op: the op exists only if `sz` covers it.
        if v.sz < need {
            return None;
        }
        v.query_device_ex
    }

    /// `ibv_query_port` as verbs.h's inline does it: the `verbs_context` op with the
    /// struct's size when the provider has it, else the exported function.
    pub fn query_port(&self, port: u8) -> io::Result<t::ibv_port_attr> {
        let mut a: t::ibv_port_attr = zeroed();
        if let Some(op) = self.vctx_query_port() {
            // SAFETY: the provider's op, on its live context, with an out struct of the
            // size passed.
            check(unsafe { op(self.ptr, port, &mut a, std::mem::size_of_val(&a)) })?;
        } else {
            // SAFETY: the exported compat function fills a prefix of the same struct.
            check(unsafe { (self.api.query_port)(self.ptr, port, &mut a) })?;
        }
        Ok(a)
    }

    #[allow(clippy::type_complexity)]
    fn vctx_query_port(
        &self,
    ) -> Option<unsafe extern "C" fn(*mut t::ibv_context, u8, *mut t::ibv_port_attr, usize) -> c_int>
    {
        let v = self.vctx()?;
        let need = std::mem::size_of::<t::verbs_context>()
            - std::mem::offset_of!(t::verbs_context, query_port);
        // verbs.h's verbs_get_ctx_op: the op exists only if `sz` covers it.
        if v.sz < need {
            return None;
        }
        v.query_port
    }

    /// `ibv_query_gid_ex` of (port, index) with flags 0: the GID, its type and netdev.
    pub fn query_gid_ex(&self, port: u8, index: u32) -> io::Result<t::ibv_gid_entry> {
        let mut e: t::ibv_gid_entry = zeroed();
        if let Some(f) = self.api.query_gid_ex {
            // SAFETY: a live context and an out struct of the size passed.
            check(unsafe {
                f(
                    self.ptr,
                    port.into(),
                    index,
                    &mut e,
                    0,
                    std::mem::size_of_val(&e),
                )
            })?;
            return Ok(e);
        }
        let mut g: t::ibv_gid = zeroed();
        let i = c_int::try_from(index).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a live context and an out GID.
        check(unsafe { (self.api.query_gid)(self.ptr, port, i, &mut g) })?;
        e.gid = g;
        e.gid_index = index;
        e.port_num = port.into();
        Ok(e)
    }

    /// `ibv_query_pkey`.
    pub fn query_pkey(&self, port: u8, index: u16) -> io::Result<u16> {
        let mut p = 0u16;
        // SAFETY: a live context and an out u16.
        check(unsafe { (self.api.query_pkey)(self.ptr, port, index.into(), &mut p) })?;
        Ok(u16::from_be(p))
    }

    /// The context's `async_fd`.
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the fd belongs to the context, open until Drop, which this borrow
        // cannot outlive.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.ctx().async_fd) }
    }

    /// `ibv_get_async_event` once the async fd is readable (waits up to
    /// `timeout_ms`, -1 forever), then `ibv_ack_async_event`: `None` when nothing came.
    pub fn get_async_event(&self, timeout_ms: i32) -> Option<AsyncEvent> {
        let fd = self.ctx().async_fd;
        let mut ready = Vec::new();
        crate::poll::poll_readable(&[fd], timeout_ms, &mut ready).ok()?;
        if !ready.first().copied().unwrap_or(false) {
            return None;
        }
        let mut ev: t::ibv_async_event = zeroed();
        // SAFETY: a live context and an out struct; the fd is readable, so the call
        // does not block.
        if unsafe { (self.api.get_async_event)(self.ptr, &mut ev) } != 0 {
            return None;
        }
        let what = async_element(ev.event_type, &ev.element);
        // SAFETY: the event just returned, acknowledged once (destroying its object
        // waits for this).
        unsafe { (self.api.ack_async_event)(&mut ev) };
        Some(AsyncEvent {
            event_type: ev.event_type,
            element: what,
        })
    }
}

/// What an asynchronous event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncElement {
    /// A QP, by number.
    Qp(u32),
    /// A CQ, by the context value it was created with ([`Cq::id`]).
    Cq(u64),
    /// An SRQ, by the context value it was created with ([`Srq::id`]).
    Srq(u64),
    /// A port.
    Port(u8),
    /// Another object (a WQ).
    Other,
}

/// An asynchronous event (`struct ibv_async_event`), already acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// `IBV_EVENT_*`.
    pub event_type: u32,
    /// Its object.
    pub element: AsyncElement,
}

fn async_element(ty: u32, el: &t::ibv_async_event_element) -> AsyncElement {
    use consts::*;
    // verbs.h's `enum ibv_event_type`: which union member each event sets.
    match ty {
        IBV_EVENT_CQ_ERR => {
            // SAFETY: a CQ event's element is the CQ, alive until the event is acked.
            let cq = unsafe { el.cq };
            // SAFETY: as above.
            AsyncElement::Cq(unsafe { (*cq).cq_context } as u64)
        }
        IBV_EVENT_QP_FATAL
        | IBV_EVENT_QP_REQ_ERR
        | IBV_EVENT_QP_ACCESS_ERR
        | IBV_EVENT_COMM_EST
        | IBV_EVENT_SQ_DRAINED
        | IBV_EVENT_PATH_MIG
        | IBV_EVENT_PATH_MIG_ERR
        | IBV_EVENT_QP_LAST_WQE_REACHED => {
            // SAFETY: a QP event's element is the QP, alive until the event is acked.
            AsyncElement::Qp(unsafe { (*el.qp).qp_num })
        }
        IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
            // SAFETY: an SRQ event's element is the SRQ, alive until the event is acked.
            AsyncElement::Srq(unsafe { (*el.srq).srq_context } as u64)
        }
        IBV_EVENT_PORT_ACTIVE
        | IBV_EVENT_PORT_ERR
        | IBV_EVENT_LID_CHANGE
        | IBV_EVENT_PKEY_CHANGE
        | IBV_EVENT_SM_CHANGE
        | IBV_EVENT_CLIENT_REREGISTER
        | IBV_EVENT_GID_CHANGE => {
            // SAFETY: a port event's element is the port number.
            AsyncElement::Port(unsafe { el.port_num } as u8)
        }
        _ => AsyncElement::Other,
    }
}

/// The context's inline-verb table (`ibv_context.ops`).
fn ops(ctx: &Context) -> &t::ibv_context_ops {
    // SAFETY: the context is live while `ctx` is; `ops` is set by the provider at open
    // and never changes.
    unsafe { &(*ctx.ptr).ops }
}

fn nonnull<T>(p: *mut T) -> io::Result<NonNull<T>> {
    NonNull::new(p).ok_or_else(io::Error::last_os_error)
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}
