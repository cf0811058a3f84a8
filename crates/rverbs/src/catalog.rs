//! The devices there are: the soft devices (the `device` module finds them) and then
//! the system's (the `hw` module loads them), and what a listed device reports before
//! it is opened. The one place that knows both kinds, above both, so that neither the
//! device interface nor either device depends on the other.

use crate::device::attrs::{DeviceAttr, PortAttr};
use crate::device::{options, soft_devices, DeviceInfo, DeviceKind};
use crate::error::{Error, Result};

/// Every soft device: one per interface with an address, or those `RVERBS_DEVICES`
/// defines (`name=interface` or `name=address` entries, comma separated; an optional
/// `:mtu` suffix overrides the netdev MTU, e.g. `rv0=lo,rv1=10.77.0.1:1500`). An empty
/// `RVERBS_DEVICES` counts as unset; a spec with a bad entry, a repeated name, an MTU
/// outside 336..=65536 (a 256-byte RoCE MTU after the headers rxe counts, up to lo's
/// MTU) or no entry at all fails with [`Error::Config`].
///
/// Then the system's devices ([`DeviceKind::System`], the `hw` module), unless
/// `RVERBS_SYSTEM_DEVICES=0`; none when its libibverbs cannot be loaded. A soft
/// device named like a system one fails with [`Error::Config`].
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let mut all = soft_devices()?;
    if !options::system_devices_enabled()? {
        return Ok(all);
    }
    for d in crate::hw::system_devices().unwrap_or_default() {
        if all.iter().any(|s| s.name == d.name) {
            return Err(Error::env(
                "RVERBS_DEVICES",
                format!(
                    "{:?} is the name of a device of the system's libibverbs",
                    d.name
                ),
            ));
        }
        all.push(d);
    }
    Ok(all)
}

/// The device called `name`, or the loopback device when `name` is `None`.
pub fn device(name: Option<&str>) -> Result<DeviceInfo> {
    let all = devices()?;
    match name {
        Some(n) => all.into_iter().find(|d| d.name == n).ok_or_else(|| {
            Error::NoDevice(match crate::hw::system_devices() {
                Err(why) => format!("{n} (and no system devices: {why})"),
                Ok(_) => n.into(),
            })
        }),
        None => all
            .iter()
            .find(|d| d.is_loopback())
            .or(all.first())
            .cloned()
            .ok_or_else(|| Error::NoDevice("(any)".into())),
    }
}

impl DeviceInfo {
    /// The GID table the kernel would build for rxe on this interface (and the one an
    /// opened context starts with, except on loopback: there each context's table has
    /// its own `127.0.0.x` and at most one IPv6 address of lo — `::1` only with
    /// `RVERBS_LOOPBACK_IPV6=1`). See `gid.rs` for the rules.
    ///
    /// A system device's table is its kernel's (read through an opened context; the
    /// rule above when it cannot be opened).
    pub fn gid_table(&self) -> crate::GidTable {
        if self.kind == DeviceKind::System {
            if let Some(t) = crate::hw::gid_table_of(self) {
                return t;
            }
        }
        self.soft_gid_table()
    }

    /// The device's attributes, port 1 and GID table as an opened context would report
    /// them, without opening it (no socket is bound, so this works while another
    /// process holds the device or rxe holds port 4791). The port counters are a
    /// context's own and read 0 here; the loopback device's GIDs are its interface's
    /// addresses (an opened context gets its own 127.0.0.x).
    ///
    /// A system device's are the device's own, read through a context opened for the
    /// purpose (the soft rule above only when it cannot be opened).
    pub fn attributes(&self) -> (DeviceAttr, PortAttr, Vec<rverbs_wire::grh::Gid>) {
        if self.kind == DeviceKind::System {
            if let Ok(ctx) = self.open() {
                if let (Ok(d), Ok(p)) = (ctx.query_device(), ctx.query_port(1)) {
                    return (d, p, ctx.gids());
                }
            }
        }
        self.soft_attributes()
    }
}
