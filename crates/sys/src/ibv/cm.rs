//! The system's `librdmacm.so.1`, loaded at run time beside `libibverbs.so.1`, behind
//! owned wrappers: event channels and communication IDs of the kernel's rdma_cm, for
//! the RDMA CM of `rverbs` on a system device.
//!
//! The IDs never carry a QP (`rdma_cm_id.qp` stays NULL): a QP belongs to the context
//! its program opened, while librdmacm opens contexts of its own (`id->verbs`), and
//! `rdma_create_qp` takes only a PD of those. librdmacm's contract for IDs without a
//! QP is what this uses (librdmacm/cma.c): `rdma_connect` / `rdma_accept` take the QP
//! number from the connection parameters, a REP arrives as `CONNECT_RESPONSE` (not
//! `ESTABLISHED`), after which the program moves its QP with the attributes of
//! `rdma_init_qp_attr` and calls `rdma_establish` to send the RTU. Attributes from the
//! kernel name the device's port, GID index and PSNs, which hold for any context of
//! the same device.
//!
//! Like the verbs library, rverbs' own `librdmacm.so.1` (first on `LD_LIBRARY_PATH`
//! under `rverbs exec`) is told apart by the missing `ibv_create_qp@IBVERBS_1.0`
//! (rdma-core's librdmacm reaches it through its libibverbs) and refused.

use super::{check, fn_ptr, sym, zeroed, LoadError};
use rverbs_ibverbs::types as t;
use std::ffi::{c_int, c_void, CStr, CString};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

/// The soname of rdma-core's CM library.
pub const CM_SONAME: &str = "librdmacm.so.1";

/// Why the system's RDMA CM is unavailable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmLoadError {
    /// The verbs library itself is missing (its reason).
    Verbs(LoadError),
    /// `dlopen` of `librdmacm.so.1` failed: its message.
    NotFound(String),
    /// The `librdmacm.so.1` found first is rverbs' own.
    OwnLibrary,
    /// A function every librdmacm since rdma-core 28 exports is missing.
    MissingSymbol(&'static str),
}

impl fmt::Display for CmLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmLoadError::Verbs(e) => e.fmt(f),
            CmLoadError::NotFound(why) => write!(
                f,
                "the system's {CM_SONAME} could not be loaded ({why}): install rdma-core's \
                 librdmacm for the RDMA CM on system devices"
            ),
            CmLoadError::OwnLibrary => write!(
                f,
                "the {CM_SONAME} found first is rverbs' own (LD_LIBRARY_PATH, as under \
                 `rverbs exec`), not the system's"
            ),
            CmLoadError::MissingSymbol(s) => write!(
                f,
                "the system's {CM_SONAME} has no {s} (rdma-core 28 or later is needed)"
            ),
        }
    }
}

impl std::error::Error for CmLoadError {}

type CreateChannel = unsafe extern "C" fn() -> *mut t::rdma_event_channel;
type DestroyChannel = unsafe extern "C" fn(*mut t::rdma_event_channel);
type CreateId = unsafe extern "C" fn(
    *mut t::rdma_event_channel,
    *mut *mut t::rdma_cm_id,
    *mut c_void,
    t::rdma_port_space,
) -> c_int;
type IdOnly = unsafe extern "C" fn(*mut t::rdma_cm_id) -> c_int;
type BindAddr = unsafe extern "C" fn(*mut t::rdma_cm_id, *mut libc::sockaddr) -> c_int;
type ResolveAddr = unsafe extern "C" fn(
    *mut t::rdma_cm_id,
    *mut libc::sockaddr,
    *mut libc::sockaddr,
    c_int,
) -> c_int;
type ResolveRoute = unsafe extern "C" fn(*mut t::rdma_cm_id, c_int) -> c_int;
type Listen = unsafe extern "C" fn(*mut t::rdma_cm_id, c_int) -> c_int;
type Connect = unsafe extern "C" fn(*mut t::rdma_cm_id, *mut t::rdma_conn_param) -> c_int;
type Reject = unsafe extern "C" fn(*mut t::rdma_cm_id, *const c_void, u8) -> c_int;
type InitQpAttr =
    unsafe extern "C" fn(*mut t::rdma_cm_id, *mut t::ibv_qp_attr, *mut c_int) -> c_int;
type GetEvent =
    unsafe extern "C" fn(*mut t::rdma_event_channel, *mut *mut t::rdma_cm_event) -> c_int;
type AckEvent = unsafe extern "C" fn(*mut t::rdma_cm_event) -> c_int;
type Migrate = unsafe extern "C" fn(*mut t::rdma_cm_id, *mut t::rdma_event_channel) -> c_int;

struct CmApi {
    create_channel: CreateChannel,
    destroy_channel: DestroyChannel,
    create_id: CreateId,
    destroy_id: IdOnly,
    bind_addr: BindAddr,
    resolve_addr: ResolveAddr,
    resolve_route: ResolveRoute,
    listen: Listen,
    connect: Connect,
    accept: Connect,
    reject: Reject,
    disconnect: IdOnly,
    establish: IdOnly,
    init_qp_attr: InitQpAttr,
    get_event: GetEvent,
    ack_event: AckEvent,
    migrate: Migrate,
}

static CM: OnceLock<Result<CmApi, CmLoadError>> = OnceLock::new();

fn cm_api() -> Result<&'static CmApi, CmLoadError> {
    cm_api_with(None)
}

fn cm_api_with(path: Option<&str>) -> Result<&'static CmApi, CmLoadError> {
    CM.get_or_init(|| load_cm(path.unwrap_or(CM_SONAME)))
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads the system's `librdmacm.so.1` now (after its `libibverbs.so.1`; `path`
/// replaces the soname when given), so a caller can report why the CM of system
/// devices is missing. Later calls return the first result.
pub fn load_rdmacm(path: Option<&str>) -> Result<(), CmLoadError> {
    cm_api_with(path).map(|_| ())
}

fn load_cm(path: &str) -> Result<CmApi, CmLoadError> {
    // The verbs library first: librdmacm's own dependency on it then binds to the
    // copy already loaded (the loader matches by soname).
    super::api().map_err(CmLoadError::Verbs)?;
    let c = CString::new(path).map_err(|_| CmLoadError::NotFound("a NUL in the path".into()))?;
    // SAFETY: dlopen of a library by name; its constructors are rdma-core's (or, for
    // rverbs' own file, ours, which has none).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(CmLoadError::NotFound(super::dlerror()));
    }
    let own = {
        let (n, v) = (c"ibv_create_qp", c"IBVERBS_1.0");
        // SAFETY: a live handle and two C strings.
        unsafe { libc::dlvsym(h, n.as_ptr(), v.as_ptr()) }.is_null()
    };
    if own {
        // SAFETY: the handle from dlopen above; nothing of it was used.
        unsafe { libc::dlclose(h) };
        return Err(CmLoadError::OwnLibrary);
    }
    macro_rules! need {
        ($name:literal) => {{
            let p = sym(h, $name).ok_or(CmLoadError::MissingSymbol($name))?;
            // SAFETY: librdmacm exports `$name` with the C signature of rdma_cma.h,
            // which the field's function pointer type spells (the structs are
            // rverbs-ibverbs', checked against the installed header).
            unsafe { fn_ptr(p) }
        }};
    }
    Ok(CmApi {
        create_channel: need!("rdma_create_event_channel"),
        destroy_channel: need!("rdma_destroy_event_channel"),
        create_id: need!("rdma_create_id"),
        destroy_id: need!("rdma_destroy_id"),
        bind_addr: need!("rdma_bind_addr"),
        resolve_addr: need!("rdma_resolve_addr"),
        resolve_route: need!("rdma_resolve_route"),
        listen: need!("rdma_listen"),
        connect: need!("rdma_connect"),
        accept: need!("rdma_accept"),
        reject: need!("rdma_reject"),
        disconnect: need!("rdma_disconnect"),
        establish: need!("rdma_establish"),
        init_qp_attr: need!("rdma_init_qp_attr"),
        get_event: need!("rdma_get_cm_event"),
        ack_event: need!("rdma_ack_cm_event"),
        migrate: need!("rdma_migrate_id"),
    })
}

/// An event channel (`rdma_create_event_channel`): the kernel's ucma file, whose fd
/// is readable while an event waits. Destroyed when its last ID and holder drop.
pub struct CmChannel {
    api: &'static CmApi,
    ptr: NonNull<t::rdma_event_channel>,
}

// SAFETY: librdmacm's calls on a channel are thread-safe (each is one write(2) on its
// fd); the pointer is owned here and freed once in Drop.
unsafe impl Send for CmChannel {}
// SAFETY: as above.
unsafe impl Sync for CmChannel {}

impl Drop for CmChannel {
    fn drop(&mut self) {
        // SAFETY: the channel made in `new`; every ID on it holds an Arc of this value,
        // so none is left.
        unsafe { (self.api.destroy_channel)(self.ptr.as_ptr()) };
    }
}

/// What a connection event carries (`rdma_conn_param` of an event).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnInfo {
    /// RDMA reads / atomics the sender accepts at once.
    pub responder_resources: u8,
    /// RDMA reads / atomics the sender issues at once.
    pub initiator_depth: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The QP number.
    pub qp_num: u32,
}

/// A UD peer (`rdma_ud_param` of an event).
#[derive(Clone, Copy)]
pub struct UdInfo {
    /// The address handle attributes towards the peer.
    pub ah_attr: t::ibv_ah_attr,
    /// The QP number.
    pub qp_num: u32,
    /// The peer's Q_Key.
    pub qkey: u32,
}

/// An event, copied out of librdmacm's and acknowledged.
pub struct CmEventData {
    /// `RDMA_CM_EVENT_*`.
    pub event: u32,
    /// 0, a negative errno or a reject reason.
    pub status: i32,
    /// The ID it is for, by address ([`CmIdHandle::key`]); a connect request's new ID.
    pub id: usize,
    /// A connect request's listener, by address.
    pub listen_id: usize,
    /// A connect request's new ID, now owned.
    pub new_id: Option<CmIdHandle>,
    /// The peer's private data.
    pub private_data: Vec<u8>,
    /// The connection parameters (not UD).
    pub conn: Option<ConnInfo>,
    /// The UD peer (UD IDs).
    pub ud: Option<UdInfo>,
}

impl CmChannel {
    /// A new channel.
    pub fn new() -> Result<io::Result<Arc<CmChannel>>, CmLoadError> {
        let api = cm_api()?;
        // SAFETY: no arguments; null (errno set) or a channel owned by the result.
        let p = unsafe { (api.create_channel)() };
        Ok(NonNull::new(p)
            .map(|ptr| Arc::new(CmChannel { api, ptr }))
            .ok_or_else(io::Error::last_os_error))
    }

    /// The channel's fd (readable while an event waits).
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd belongs to the channel, open until Drop, which this borrow
        // cannot outlive.
        unsafe { BorrowedFd::borrow_raw((*self.ptr.as_ptr()).fd) }
    }

    /// The next event, waiting up to `timeout_ms` (-1: forever) for the fd to be
    /// readable: copied out, the new ID of a connect request taken over, then acked.
    /// `Ok(None)` when none came in time.
    pub fn get_event(self: &Arc<Self>, timeout_ms: i32) -> io::Result<Option<CmEventData>> {
        let mut ready = Vec::new();
        crate::poll::poll_readable(&[self.fd_raw()], timeout_ms, &mut ready)?;
        if !ready.first().copied().unwrap_or(false) {
            return Ok(None);
        }
        let mut ev: *mut t::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: a live channel and an out pointer; the fd is readable, so the call
        // does not block.
        check(unsafe { (self.api.get_event)(self.ptr.as_ptr(), &mut ev) })?;
        let Some(evp) = NonNull::new(ev) else {
            return Err(io::Error::from_raw_os_error(libc::ENODATA));
        };
        // SAFETY: the event librdmacm returned, valid until acked below.
        let e = unsafe { &*evp.as_ptr() };
        // SAFETY: `id` is set for every event and lives at least until the ack.
        let qp_type = unsafe { (*e.id).qp_type };
        let ud_event = qp_type == rverbs_ibverbs::consts::IBV_QPT_UD;
        let (private_data, conn, ud) = if ud_event {
            // SAFETY: librdmacm fills `param.ud` for UD IDs (ucma_copy_ud_event).
            let u = unsafe { e.param.ud };
            (
                copy_private(u.private_data, u.private_data_len),
                None,
                Some(UdInfo {
                    ah_attr: u.ah_attr,
                    qp_num: u.qp_num,
                    qkey: u.qkey,
                }),
            )
        } else {
            // SAFETY: and `param.conn` for the others (ucma_copy_conn_event).
            let c = unsafe { e.param.conn };
            (
                copy_private(c.private_data, c.private_data_len),
                Some(ConnInfo {
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth,
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                    srq: c.srq != 0,
                    qp_num: c.qp_num,
                }),
                None,
            )
        };
        let new_id = (e.event == t::RDMA_CM_EVENT_CONNECT_REQUEST)
            .then(|| NonNull::new(e.id))
            .flatten()
            .map(|ptr| CmIdHandle {
                api: self.api,
                ptr,
                chan: Mutex::new(self.clone()),
            });
        let out = CmEventData {
            event: e.event,
            status: e.status,
            id: e.id as usize,
            listen_id: e.listen_id as usize,
            new_id,
            private_data,
            conn,
            ud,
        };
        // SAFETY: the event from rdma_get_cm_event, acked once; nothing of it is used
        // after (the new ID stays valid: it is destroyed by its handle).
        unsafe { (self.api.ack_event)(evp.as_ptr()) };
        Ok(Some(out))
    }

    fn fd_raw(&self) -> c_int {
        // SAFETY: the channel is live; `fd` is a plain int.
        unsafe { (*self.ptr.as_ptr()).fd }
    }
}

fn copy_private(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: librdmacm points `private_data` at `private_data_len` bytes of the event,
    // alive until it is acked (after this copy).
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len.into()) }.to_vec()
}

/// A communication ID (`rdma_create_id`), destroyed in Drop.
pub struct CmIdHandle {
    api: &'static CmApi,
    ptr: NonNull<t::rdma_cm_id>,
    /// The channel it reports on (kept alive: the ID writes to its fd).
    chan: Mutex<Arc<CmChannel>>,
}

// SAFETY: librdmacm's calls on an ID are thread-safe (commands are writes to the
// channel's fd; its state is under the ID's own mutex); the pointer is owned here and
// destroyed once in Drop.
unsafe impl Send for CmIdHandle {}
// SAFETY: as above.
unsafe impl Sync for CmIdHandle {}

impl Drop for CmIdHandle {
    fn drop(&mut self) {
        // SAFETY: the ID, destroyed once; every event of it was acked when read
        // (`get_event`), so the call does not wait.
        unsafe { (self.api.destroy_id)(self.ptr.as_ptr()) };
    }
}

/// Parameters of `rdma_connect` / `rdma_accept`: what an event reports of the peer's
/// ([`ConnInfo`]), with the private data to send.
#[derive(Debug, Clone, Default)]
pub struct ConnParams<'a> {
    /// Private data (copied by the library).
    pub private_data: &'a [u8],
    /// Resources, retries, SRQ and QP number.
    pub info: ConnInfo,
}

fn storage(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut ss: libc::sockaddr_storage = zeroed();
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and as aligned as sockaddr_in.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

impl CmIdHandle {
    /// `rdma_create_id` on `chan` (`ps`: `RDMA_PS_*`; the QP type follows from it).
    pub fn create(chan: &Arc<CmChannel>, ps: u32) -> io::Result<CmIdHandle> {
        let mut id: *mut t::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: a live channel and an out pointer; the ID's context is unused.
        check(unsafe {
            (chan.api.create_id)(chan.ptr.as_ptr(), &mut id, std::ptr::null_mut(), ps)
        })?;
        let ptr = NonNull::new(id).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(CmIdHandle {
            api: chan.api,
            ptr,
            chan: Mutex::new(chan.clone()),
        })
    }

    /// The ID's address, the key its events name ([`CmEventData::id`]).
    pub fn key(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    fn id(&self) -> &t::rdma_cm_id {
        // SAFETY: the ID is live until Drop; its public fields are only read.
        unsafe { &*self.ptr.as_ptr() }
    }

    /// The name of the device the ID is bound to (`id->verbs->device->name`), once
    /// bound or resolved.
    pub fn device_name(&self) -> Option<String> {
        let v = self.id().verbs;
        if v.is_null() {
            return None;
        }
        // SAFETY: `verbs` is librdmacm's open context of the device, alive while the
        // ID is bound to it; its `device` is the library's device entry.
        let dev = unsafe { (*v).device };
        if dev.is_null() {
            return None;
        }
        // SAFETY: as above; `name` is a NUL-terminated array.
        let name = unsafe { CStr::from_ptr((*dev).name.as_ptr()) };
        Some(name.to_string_lossy().into_owned())
    }

    /// The port the ID is bound to.
    pub fn port_num(&self) -> u8 {
        self.id().port_num
    }

    /// The local address (`rdma_get_local_addr`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        crate::udp::from_storage(&self.id().route.addr.src_storage)
    }

    /// The peer's address (`rdma_get_peer_addr`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        crate::udp::from_storage(&self.id().route.addr.dst_storage)
    }

    fn raw(&self) -> *mut t::rdma_cm_id {
        self.ptr.as_ptr()
    }

    /// `rdma_bind_addr`.
    pub fn bind_addr(&self, a: &SocketAddr) -> io::Result<()> {
        let (mut ss, _) = storage(a);
        // SAFETY: a live ID and a socket address of its family.
        check(unsafe { (self.api.bind_addr)(self.raw(), (&raw mut ss).cast()) })
    }

    /// `rdma_resolve_addr`.
    pub fn resolve_addr(
        &self,
        src: Option<&SocketAddr>,
        dst: &SocketAddr,
        timeout_ms: i32,
    ) -> io::Result<()> {
        let mut s = src.map(storage);
        let (mut d, _) = storage(dst);
        let sp = s.as_mut().map_or(std::ptr::null_mut(), |(ss, _)| {
            (ss as *mut libc::sockaddr_storage).cast()
        });
        // SAFETY: a live ID, a source address or NULL, and a destination address.
        check(unsafe { (self.api.resolve_addr)(self.raw(), sp, (&raw mut d).cast(), timeout_ms) })
    }

    /// `rdma_resolve_route`.
    pub fn resolve_route(&self, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: a live ID.
        check(unsafe { (self.api.resolve_route)(self.raw(), timeout_ms) })
    }

    /// `rdma_listen`.
    pub fn listen(&self, backlog: i32) -> io::Result<()> {
        // SAFETY: a live ID.
        check(unsafe { (self.api.listen)(self.raw(), backlog) })
    }

    fn conn_param(p: &ConnParams<'_>) -> io::Result<t::rdma_conn_param> {
        let len = u8::try_from(p.private_data.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(t::rdma_conn_param {
            private_data: if len == 0 {
                std::ptr::null()
            } else {
                p.private_data.as_ptr().cast()
            },
            private_data_len: len,
            responder_resources: p.info.responder_resources,
            initiator_depth: p.info.initiator_depth,
            flow_control: 0,
            retry_count: p.info.retry_count.min(7),
            rnr_retry_count: p.info.rnr_retry_count.min(7),
            srq: u8::from(p.info.srq),
            qp_num: p.info.qp_num,
        })
    }

    /// `rdma_connect` with the QP number in the parameters (the ID has no QP).
    pub fn connect(&self, p: &ConnParams<'_>) -> io::Result<()> {
        let mut c = Self::conn_param(p)?;
        // SAFETY: a live ID and parameters whose private data outlives the call (the
        // library copies it into its command).
        check(unsafe { (self.api.connect)(self.raw(), &mut c) })
    }

    /// `rdma_accept` with the QP number in the parameters.
    pub fn accept(&self, p: &ConnParams<'_>) -> io::Result<()> {
        let mut c = Self::conn_param(p)?;
        // SAFETY: as `connect`.
        check(unsafe { (self.api.accept)(self.raw(), &mut c) })
    }

    /// `rdma_reject` with private data.
    pub fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private_data.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let p = if len == 0 {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: a live ID and `len` bytes at `p` (copied by the library).
        check(unsafe { (self.api.reject)(self.raw(), p, len) })
    }

    /// `rdma_disconnect` (the ID has no QP: its caller moves its own).
    pub fn disconnect(&self) -> io::Result<()> {
        // SAFETY: a live ID.
        check(unsafe { (self.api.disconnect)(self.raw()) })
    }

    /// `rdma_establish`: the RTU after a `CONNECT_RESPONSE`, once the QP is at RTS.
    pub fn establish(&self) -> io::Result<()> {
        // SAFETY: a live ID without a QP (librdmacm's precondition).
        check(unsafe { (self.api.establish)(self.raw()) })
    }

    /// `rdma_init_qp_attr` for `state` (`IBV_QPS_*`): the attributes and mask the
    /// kernel's CM computes for moving a QP of this connection there.
    pub fn init_qp_attr(&self, state: u32) -> io::Result<(t::ibv_qp_attr, u32)> {
        let mut a: t::ibv_qp_attr = zeroed();
        a.qp_state = state;
        let mut mask: c_int = 0;
        // SAFETY: a live ID and two out values.
        check(unsafe { (self.api.init_qp_attr)(self.raw(), &mut a, &mut mask) })?;
        Ok((a, mask as u32))
    }

    /// `rdma_migrate_id` to `to`.
    pub fn migrate(&self, to: &Arc<CmChannel>) -> io::Result<()> {
        let mut cur = self.chan.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&cur, to) {
            return Ok(());
        }
        // SAFETY: a live ID and a live channel; its events were all acked on reading.
        check(unsafe { (self.api.migrate)(self.raw(), to.ptr.as_ptr()) })?;
        *cur = to.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_survive_the_c_storage() {
        for a in [
            "10.77.0.2:7174",
            "0.0.0.0:0",
            "[fd00:77::2]:18515",
            "[::]:1",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            let (ss, len) = storage(&a);
            assert_eq!(crate::udp::from_storage(&ss), Some(a));
            let want = if a.is_ipv4() {
                std::mem::size_of::<libc::sockaddr_in>()
            } else {
                std::mem::size_of::<libc::sockaddr_in6>()
            };
            assert_eq!(len as usize, want);
        }
    }

    #[test]
    fn the_load_errors_name_the_library() {
        let e = CmLoadError::NotFound("no such file".into()).to_string();
        assert!(e.contains(CM_SONAME) && e.contains("no such file"), "{e}");
        assert!(CmLoadError::MissingSymbol("rdma_establish")
            .to_string()
            .contains("rdma_establish"));
        assert!(CmLoadError::OwnLibrary.to_string().contains("rverbs' own"));
    }
}
