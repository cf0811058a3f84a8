//! Devices: what the verbs run on, and how one is found and opened.
//!
//! - [`ops`]: the device interface, the one door between the public verbs types
//!   (the `verbs` module) and a device. The soft device (the `soft` module) and the
//!   system's libibverbs devices loaded at run time (the `hw` module) implement the
//!   same traits, so no verbs type branches on the device it has.
//! - `wr`, `attrs`: the verbs' own vocabulary that the interface speaks (work requests
//!   and the buffers they name, device and port attributes), kept here, below the
//!   handles, so a device depends on nothing above this module.
//! - this file: the soft devices there are, one per network interface with an address
//!   (like a host with rxe on every interface), or those `RVERBS_DEVICES` names (the
//!   `catalog` module, above, lists the system's after them);
//!   `options`: how a context opens one.
//!
//! ```text
//!  verbs/  Context Pd Mr Cq Qp Srq Ah CompChannel Flow MadAgent
//!    │ device::ops: Device (alloc_pd, reg_mr, create_cq, create_qp, ...)
//!    │   DeviceCq (poll, wait, req_notify), DeviceQp (modify, post_send, post_recv, ...)
//!    ├──► soft::SoftDevice   the engine, the driver thread, the carriers
//!    └──► hw::HwDevice       the system's libibverbs (rverbs_sys::ibv), loaded at run time
//!         (the C library sits above the verbs instead)
//! ```

pub(crate) mod attrs;
pub(crate) mod guard;
pub(crate) mod ops;
pub(crate) mod options;
pub(crate) mod wr;

pub use options::OpenOptions;

use crate::error::{Error, Result};
use rverbs_engine::Mtu;
use rverbs_wire::grh::Gid;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Which implementation a device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    /// The soft RoCE v2 device over a network interface (`rv_*`).
    #[default]
    Soft,
    /// A device of the system's libibverbs (rdma-core's providers: `mlx5_0`, `rxe0`,
    /// `efa_0`, ...), loaded at run time (the `hw` module).
    System,
}

/// An RDMA device: a soft RoCE v2 device (a network interface and its addresses), or
/// one of the system's libibverbs ([`DeviceInfo::kind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name: `rv_<interface>` (e.g. `rv_lo`, `rv_eth0`) for a soft device, the
    /// kernel's name (`mlx5_0`, `rxe0`) for a system one.
    pub name: String,
    /// Soft or system device.
    pub kind: DeviceKind,
    /// The network interface (a system device's port 1 netdev, empty if it has none).
    pub ifname: String,
    /// Interface index (0 when unknown).
    pub ifindex: u32,
    /// The interface's addresses, each a RoCE v2 GID: IPv4 first, then IPv6, each
    /// family in the interface's order (the kernel's GID table order).
    pub addrs: Vec<IpAddr>,
    /// The interface MTU.
    pub netdev_mtu: usize,
    /// The interface MAC address, if it has one.
    pub mac: Option<[u8; 6]>,
}

impl DeviceInfo {
    /// True for the loopback device: only loopback addresses, or interface `lo` with a
    /// loopback address among others an administrator added to it.
    pub fn is_loopback(&self) -> bool {
        if self.kind != DeviceKind::Soft {
            return false;
        }
        self.addrs.iter().all(|a| a.is_loopback())
            || (self.ifname == "lo" && self.addrs.iter().any(|a| a.is_loopback()))
    }

    /// The active path MTU, as rxe derives it from the netdev MTU.
    pub fn active_mtu(&self) -> Mtu {
        Mtu::from_netdev_mtu(self.netdev_mtu).unwrap_or(Mtu::M256)
    }

    /// The default GID (index 0): fe80::EUI-64 of the MAC, as the kernel's roce_gid_mgmt
    /// builds it. Interfaces without a MAC (loopback) get a stable substitute built from
    /// the interface index, so the entry exists like it does on rxe over lo.
    pub fn default_gid(&self) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        let mac = self.mac.filter(|m| m.iter().any(|&b| b != 0)).unwrap_or([
            0x02,
            0,
            0,
            0,
            (self.ifindex >> 8) as u8,
            self.ifindex as u8,
        ]);
        g[8] = mac[0] ^ 0x02;
        g[9] = mac[1];
        g[10] = mac[2];
        g[11] = 0xff;
        g[12] = 0xfe;
        g[13] = mac[3];
        g[14] = mac[4];
        g[15] = mac[5];
        Gid(g)
    }

    /// The GID table the kernel would build for rxe on this interface: the soft rule of
    /// [`DeviceInfo::gid_table`].
    pub(crate) fn soft_gid_table(&self) -> crate::GidTable {
        crate::GidTable::new(1, self.ifindex, self.default_gid(), &self.addrs)
    }

    /// [`DeviceInfo::gid_table`] as a context opened on this device in raw mode
    /// ([`crate::OpenOptions::raw_interface`], `RVERBS_RAW_IF`) with CAP_NET_RAW has
    /// it: each GID as a RoCE v1 entry, then a RoCE v2 one ([`GidTable::with_types`]).
    ///
    /// [`GidTable::with_types`]: crate::GidTable::with_types
    pub fn raw_mode_gid_table(&self) -> crate::GidTable {
        crate::GidTable::with_types(1, self.ifindex, self.default_gid(), &self.addrs, true)
    }

    /// True when a context opened with [`crate::Context::open`] would be in raw mode
    /// with RoCE v1 entries: `RVERBS_RAW_IF` is set and the process has CAP_NET_RAW.
    pub fn raw_mode_from_env() -> bool {
        std::env::var("RVERBS_RAW_IF").is_ok_and(|s| !s.is_empty()) && rverbs_raw::has_cap_net_raw()
    }
}

fn sysfs(ifname: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/{file}"))
        .ok()
        .map(|s| s.trim().to_string())
}

pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// IPv4 addresses first, then IPv6, each family in the order the interface lists them
/// (the order the kernel's roce_gid_mgmt adds them to the GID table), duplicates dropped.
fn kernel_order(addrs: Vec<IpAddr>) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::with_capacity(addrs.len());
    for a in addrs
        .iter()
        .filter(|a| a.is_ipv4())
        .chain(addrs.iter().filter(|a| a.is_ipv6()))
    {
        if !out.contains(a) {
            out.push(*a);
        }
    }
    out
}

/// The current addresses of interface `ifname` (IPv6 link-local ones left out), in
/// [`kernel_order`].
pub(crate) fn interface_addrs(ifname: &str) -> Result<Vec<IpAddr>> {
    let ifaces =
        if_addrs::get_if_addrs().map_err(|e| Error::io("listing network interfaces", e))?;
    Ok(kernel_order(
        ifaces
            .iter()
            .filter(|i| i.name == ifname && !is_v6_link_local(&i.ip()))
            .map(|i| i.ip())
            .collect(),
    ))
}

fn is_v6_link_local(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

fn from_interface(name: String, ifname: &str, index: u32, addrs: Vec<IpAddr>) -> DeviceInfo {
    let addrs = kernel_order(addrs);
    DeviceInfo {
        name,
        kind: DeviceKind::Soft,
        ifname: ifname.to_string(),
        ifindex: index,
        addrs,
        netdev_mtu: sysfs(ifname, "mtu")
            .and_then(|m| m.parse().ok())
            .unwrap_or(1500),
        mac: sysfs(ifname, "address").and_then(|m| parse_mac(&m)),
    }
}

/// Every soft device: one per interface with an address, or those `RVERBS_DEVICES`
/// defines (the rules are [`crate::devices`]'s); the system's library is not loaded.
/// What rverbs' own `libibverbs.so.1` lists.
pub fn soft_devices() -> Result<Vec<DeviceInfo>> {
    let ifaces =
        if_addrs::get_if_addrs().map_err(|e| Error::io("listing network interfaces", e))?;
    let mut by_name: BTreeMap<String, (u32, Vec<IpAddr>)> = BTreeMap::new();
    for i in &ifaces {
        // IPv6 link-local addresses are not usable as RoCE v2 sources without a scope.
        if is_v6_link_local(&i.ip()) {
            continue;
        }
        let e = by_name
            .entry(i.name.clone())
            .or_insert((i.index.unwrap_or(0), Vec::new()));
        e.1.push(i.ip());
    }
    if let Some(spec) = options::var("RVERBS_DEVICES") {
        let addrs: Vec<(String, u32, IpAddr)> = ifaces
            .iter()
            .map(|i| (i.name.clone(), i.index.unwrap_or(0), i.ip()))
            .collect();
        return from_spec(&spec, &addrs, &by_name);
    }
    Ok(by_name
        .into_iter()
        .map(|(n, (idx, addrs))| from_interface(format!("rv_{n}"), &n, idx, addrs))
        .collect())
}

/// Devices from an `RVERBS_DEVICES` spec, given the host's (interface, index, address)
/// list and its addresses grouped by interface.
fn from_spec(
    spec: &str,
    addrs: &[(String, u32, IpAddr)],
    by_name: &BTreeMap<String, (u32, Vec<IpAddr>)>,
) -> Result<Vec<DeviceInfo>> {
    let bad = |why: String| Error::env("RVERBS_DEVICES", why);
    let mut out = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, target) = entry
            .split_once('=')
            .map(|(n, t)| (n.trim(), t.trim()))
            .ok_or_else(|| bad(format!("entry {entry:?}: want name=interface")))?;
        if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '/') {
            return Err(bad(format!(
                "entry {entry:?}: the name must be non-empty, without spaces or '/'"
            )));
        }
        if out.iter().any(|d: &DeviceInfo| d.name == name) {
            return Err(bad(format!("entry {entry:?}: device {name:?} named twice")));
        }
        if target.is_empty() {
            return Err(bad(format!(
                "entry {entry:?}: want name=interface or name=address"
            )));
        }
        // `target[:mtu]`; an IPv6 address contains colons, so the MTU is split off only
        // when what precedes the last colon is an interface name or an address.
        let (target, mtu) = match target.rsplit_once(':') {
            Some((t, m)) if !t.contains(':') || t.parse::<IpAddr>().is_ok() => {
                let mtu = m
                    .parse::<usize>()
                    .map_err(|_| bad(format!("entry {entry:?}: bad MTU {m:?}")))?;
                if Mtu::from_netdev_mtu(mtu).is_none() || mtu > MAX_NETDEV_MTU {
                    return Err(bad(format!(
                        "entry {entry:?}: MTU {mtu} is outside {}..={MAX_NETDEV_MTU}",
                        MIN_NETDEV_MTU
                    )));
                }
                (t, Some(mtu))
            }
            _ => (target, None),
        };
        let mut dev = if let Ok(ip) = target.parse::<IpAddr>() {
            let (ifname, idx) = addrs
                .iter()
                .find(|(_, _, a)| *a == ip)
                .map(|(n, i, _)| (n.clone(), *i))
                .unwrap_or_else(|| ("lo".into(), 0));
            from_interface(name.into(), &ifname, idx, vec![ip])
        } else {
            let (idx, addrs) = by_name
                .get(target)
                .cloned()
                .ok_or_else(|| bad(format!("no interface {target:?}")))?;
            from_interface(name.into(), target, idx, addrs)
        };
        if let Some(m) = mtu {
            dev.netdev_mtu = m;
        }
        out.push(dev);
    }
    if out.is_empty() {
        return Err(bad(format!(
            "{spec:?} names no device (unset it for every interface)"
        )));
    }
    Ok(out)
}

/// The smallest netdev MTU a device can have: a 256-byte RoCE MTU plus the 80 bytes of
/// headers `Mtu::from_netdev_mtu` counts (as rxe's `rxe_set_mtu`).
const MIN_NETDEV_MTU: usize = 336;
/// The largest: the loopback interface's 65536 (`LOOPBACK_MTU` in the kernel's
/// `drivers/net/loopback.c`).
const MAX_NETDEV_MTU: usize = 65536;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_gid_is_eui64() {
        let d = DeviceInfo {
            name: "rv_eth0".into(),
            kind: DeviceKind::Soft,
            ifname: "eth0".into(),
            ifindex: 2,
            addrs: vec![],
            netdev_mtu: 1500,
            mac: Some([0x52, 0x54, 0x00, 0x77, 0x00, 0x02]),
        };
        // rxe-peer reference/gid-table.txt: fe80::5054:ff:fe77:2 for this MAC.
        assert_eq!(d.default_gid().to_string(), "fe80::5054:ff:fe77:2");
        assert_eq!(d.active_mtu(), Mtu::M1024);
        assert_eq!(parse_mac("52:54:00:77:00:02"), d.mac);
        assert_eq!(parse_mac("52:54"), None);
    }

    #[test]
    fn device_specs() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00:77::1".parse().unwrap();
        let addrs = vec![("lo".to_string(), 1, lo), ("br0".to_string(), 5, v6)];
        let mut by_name = BTreeMap::new();
        by_name.insert("lo".to_string(), (1, vec![lo]));
        by_name.insert("br0".to_string(), (5, vec![v6]));
        let d = from_spec("rv0=lo, rv1=fd00:77::1:9000,rv2=br0:2048", &addrs, &by_name).unwrap();
        assert_eq!(
            d.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["rv0", "rv1", "rv2"]
        );
        assert_eq!(
            (d[1].ifname.as_str(), d[1].ifindex, d[1].netdev_mtu),
            ("br0", 5, 9000)
        );
        assert_eq!(d[1].addrs, [v6]);
        assert_eq!(d[2].netdev_mtu, 2048);
        assert_eq!(
            from_spec("rv=fd00:77::1", &addrs, &by_name).unwrap()[0].addrs,
            [v6]
        );
        for bad in ["rv0", "rv0=eth9", "rv0=lo:big", "rv0=127.0.0.1:x"] {
            let e = from_spec(bad, &addrs, &by_name).unwrap_err();
            assert!(e.to_string().contains("RVERBS_DEVICES"), "{bad}: {e}");
        }
        assert_eq!(
            from_spec("rv0=lo:336", &addrs, &by_name).unwrap()[0].netdev_mtu,
            336
        );
        assert_eq!(
            from_spec("rv0=lo:65536", &addrs, &by_name).unwrap()[0].netdev_mtu,
            65536
        );
        for (bad, why) in [
            ("rv0=lo:99999999", "MTU 99999999 is outside 336..=65536"),
            ("rv0=lo:335", "MTU 335 is outside"),
            ("rv0=lo:0", "MTU 0 is outside"),
            ("rv0=lo:", "bad MTU \"\""),
            ("=lo", "the name must be non-empty"),
            ("r v=lo", "the name must be non-empty"),
            ("rv0=", "want name=interface or name=address"),
            ("rv0=lo,rv0=br0", "device \"rv0\" named twice"),
            (",", "names no device"),
            (" ", "names no device"),
        ] {
            let e = from_spec(bad, &addrs, &by_name).unwrap_err();
            assert!(
                matches!(
                    &e,
                    Error::Config {
                        var: "RVERBS_DEVICES",
                        ..
                    }
                ),
                "{bad}: {e:?}"
            );
            let msg = e.to_string();
            assert!(msg.starts_with("RVERBS_DEVICES: "), "{bad}: {msg}");
            assert_eq!(msg.matches("RVERBS_DEVICES").count(), 1, "{bad}: {msg}");
            assert!(msg.contains(why), "{bad}: {msg}");
        }
    }

    #[test]
    fn addresses_in_kernel_order() {
        // IPv4 first, then IPv6, each in the interface's order (getifaddrs lists IPv6
        // addresses newest first, as the kernel's roce_gid_mgmt enumerates them).
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let got = kernel_order(vec![
            ip("fd00:99::1:2"),
            ip("10.77.0.2"),
            ip("fd00:88::9"),
            ip("10.88.0.5"),
            ip("10.77.0.2"),
        ]);
        assert_eq!(
            got,
            [
                ip("10.77.0.2"),
                ip("10.88.0.5"),
                ip("fd00:99::1:2"),
                ip("fd00:88::9")
            ]
        );
        assert!(is_v6_link_local(&ip("fe80::1")) && !is_v6_link_local(&ip("fd00::1")));
    }

    #[test]
    fn loopback_is_listed() {
        let all = soft_devices().unwrap();
        let lo = all.iter().find(|d| d.ifname == "lo").expect("rv_lo");
        assert_eq!(lo.name, "rv_lo");
        assert!(lo.is_loopback());
        assert!(lo.addrs.contains(&"127.0.0.1".parse().unwrap()));
    }
}
