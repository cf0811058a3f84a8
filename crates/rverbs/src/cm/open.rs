//! Where IDs created without a context get one: the device whose addresses hold the
//! address they bind or resolve from, opened once per device for the process (through
//! the C library's `ibv_open_device` when it set the hook, so `rdma_cm_id.verbs` is the
//! context its program's verbs use), and [`close`] for a program's exit.

use super::*;

/// An rverbs device whose address table holds `ip`, or the loopback device for a
/// loopback address. A system device holding it comes first when the system's RDMA CM
/// is there: the kernel's rdma_cm would pick that device, and its RoCE port on the
/// address is the kernel's, not a soft device's.
pub(super) fn device_for(ip: IpAddr) -> Result<crate::DeviceInfo> {
    let devs = crate::devices()?;
    let system_cm = super::system::load().is_ok();
    if let Some(d) = devs
        .iter()
        .find(|d| system_cm && d.kind == crate::DeviceKind::System && d.addrs.contains(&ip))
    {
        return Ok(d.clone());
    }
    if let Some(d) = devs.iter().find(|d| d.addrs.contains(&ip)) {
        return Ok(d.clone());
    }
    if ip.is_loopback() {
        if let Some(d) = devs.iter().find(|d| d.is_loopback()) {
            return Ok(d.clone());
        }
    }
    Err(errno("rdma_bind_addr", libc::EADDRNOTAVAIL))
}

/// Contexts this module opened itself (IDs not created on a context), one per device.
static OPENED: Mutex<Vec<Context>> = Mutex::new(Vec::new());

pub(super) fn auto_context(dev: &crate::DeviceInfo) -> Result<Context> {
    let mut all = lock(&OPENED);
    if let Some(c) = all.iter().find(|c| c.device().name == dev.name) {
        return Ok(c.clone());
    }
    let c = match OPENER.get() {
        Some(open) => open(dev).map_err(|e| errno("opening the device", e))?,
        None => dev.open()?,
    };
    all.push(c.clone());
    Ok(c)
}

/// How an ID created without a context opens its device: set by the C library, so
/// that the context an ID picks is the `ibv_context` its program's verbs use
/// (`rdma_cm_id.verbs`); an errno on failure.
pub type ContextOpener = fn(&crate::DeviceInfo) -> std::result::Result<Context, i32>;

static OPENER: std::sync::OnceLock<ContextOpener> = std::sync::OnceLock::new();

/// Sets how IDs created without a context open their device (once per process; a
/// second call is ignored).
pub fn set_context_opener(f: ContextOpener) {
    let _ = OPENER.set(f);
}

/// The device a wildcard bind (`0.0.0.0`, `::`) of an ID without a context takes, by
/// name: set by the C library (a device the program opened itself, as perftest opens
/// `-d` before it listens); `None`, or no hook, is the default device. The kernel's
/// wildcard listener takes every device; an ID here is on one.
pub type WildcardDevice = fn() -> Option<String>;

pub(super) static WILDCARD: std::sync::OnceLock<WildcardDevice> = std::sync::OnceLock::new();

/// Sets [`WildcardDevice`] (once per process; a second call is ignored).
pub fn set_wildcard_device(f: WildcardDevice) {
    let _ = WILDCARD.set(f);
}

/// Waits up to `timeout` until no ID of `ctx` is left and its CM has stopped
/// (destroyed IDs have told their peers), then drops `ctx` (and the module's own
/// handle, for a context it opened for IDs created without one); when that was the
/// last handle the context closes, sending what it deferred and finishing its
/// capture. Returns whether the CM had stopped. For a program's exit, which closes
/// nothing.
pub fn close(ctx: Context, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while port::running(&ctx) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // A context this module opened for IDs is no longer kept for later ones.
    lock(&OPENED).retain(|c| !Arc::ptr_eq(&c.inner, &ctx.inner));
    drop(ctx);
    true
}

/// The local address the kernel would send from to reach `dst` (a connected UDP
/// socket's address: no packet is sent).
pub(super) fn route_source(dst: IpAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = match dst {
        IpAddr::V4(_) => "0.0.0.0:0".parse().expect("literal"),
        IpAddr::V6(_) => "[::]:0".parse().expect("literal"),
    };
    let s = std::net::UdpSocket::bind(any)?;
    s.connect(SocketAddr::new(dst, 9))?;
    Ok(s.local_addr()?.ip())
}

pub(super) fn ephemeral_port() -> u16 {
    // The kernel's ip_local_port_range default (32768-60999).
    32768 + (port::random_psn() % 28232) as u16
}
