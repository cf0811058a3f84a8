//! A reader for the kernel's GID tables in sysfs
//! (`/sys/class/infiniband/<dev>/ports/<p>/gids/<i>`, `gid_attrs/types/<i>`,
//! `gid_attrs/ndevs/<i>`), with rdma-core's rules for what the files mean
//! (libibverbs `cmd_device.c` `query_sysfs_gid_entry` and `ibv_query_gid_type`):
//!
//! * a zero GID is an empty slot (ENODATA);
//! * a GID that cannot be read or parsed → EINVAL;
//! * `gid_attrs/types/<i>` reads `"IB/RoCE v1"` or `"RoCE v2"`; any other text → EINVAL;
//! * reading the type fails with EINVAL on IB devices (no type) and for entries the
//!   kernel holds no attributes for: the entry is then "IB/RoCE v1";
//! * when `gid_attrs` does not exist at all (kernels before 4.5), every entry is
//!   "IB/RoCE v1"; when it exists but the type cannot be read for another reason → EINVAL;
//! * "IB/RoCE v1" means RoCE v1 on an Ethernet port (the port's `link_layer`) and IB on
//!   any other: an InfiniBand port, and also an unknown or unreadable link layer
//!   (`query_sysfs_gid_entry`: "Unspecified link layer is IB by default");
//! * an unreadable `gid_attrs/ndevs/<i>` means no network device (ifindex 0); a name
//!   that does not resolve to an interface here is an error: rdma-core returns the errno
//!   of its `if_nametoindex`, which is ENODEV for an unknown name (glibc asks
//!   `SIOCGIFINDEX`, which fails with ENODEV).
//!
//! **Fixtures.** Reading a sysfs attribute can fail with an errno no regular file can
//! reproduce (EINVAL for an empty entry's type). A fixture tree stands for such a file
//! with a sibling `<name>.errno` holding the errno's number: [`SysfsReader`] only looks for
//! it when `<name>` itself does not exist, which never happens in a real sysfs.

use crate::gid::{GidEntry, GidType};
use crate::Error;
use rverbs_engine::{Errno, VerbError};
use rverbs_wire::grh::Gid;
use std::io;
use std::path::{Path, PathBuf};

/// The link layer of a port (`ports/<p>/link_layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// `InfiniBand`.
    InfiniBand,
    /// `Ethernet` (RoCE).
    Ethernet,
    /// Anything else, or unreadable.
    Unspecified,
}

/// Reads GID tables below a sysfs `class/infiniband` directory.
#[derive(Debug, Clone)]
pub struct SysfsReader {
    root: PathBuf,
    ifindex: fn(&str) -> Option<u32>,
}

fn inval(reason: &'static str) -> Error {
    Error::Verb(VerbError::new("query_gid_ex", Errno::Inval, reason))
}

/// The interface index of a network device name (`if_nametoindex`), from
/// `/sys/class/net/<name>/ifindex`.
pub fn if_nametoindex(name: &str) -> Option<u32> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return None;
    }
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl SysfsReader {
    /// A reader of `root` (normally `/sys/class/infiniband`), resolving network device
    /// names with [`if_nametoindex`].
    pub fn new(root: impl Into<PathBuf>) -> SysfsReader {
        SysfsReader {
            root: root.into(),
            ifindex: if_nametoindex,
        }
    }

    /// The same reader with another name → ifindex resolver (fixtures name interfaces
    /// of another machine).
    pub fn with_ifindex(mut self, f: fn(&str) -> Option<u32>) -> SysfsReader {
        self.ifindex = f;
        self
    }

    fn read(&self, rel: &Path) -> io::Result<String> {
        let p = self.root.join(rel);
        match std::fs::read_to_string(&p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut errno_file = p.into_os_string();
                errno_file.push(".errno");
                match std::fs::read_to_string(errno_file) {
                    Ok(n) => Err(io::Error::from_raw_os_error(
                        n.trim().parse().unwrap_or(libc::EIO),
                    )),
                    Err(_) => Err(e),
                }
            }
            r => r.map(|s| s.trim_end_matches('\n').to_string()),
        }
    }

    fn sorted_numeric(&self, rel: &Path) -> io::Result<Vec<u32>> {
        let mut v: Vec<u32> = std::fs::read_dir(self.root.join(rel))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// The devices, sorted by name.
    pub fn devices(&self) -> io::Result<Vec<String>> {
        let mut v: Vec<String> = std::fs::read_dir(&self.root)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        v.sort();
        Ok(v)
    }

    /// The ports of device `dev`, in order.
    pub fn ports(&self, dev: &str) -> io::Result<Vec<u32>> {
        self.sorted_numeric(&Path::new(dev).join("ports"))
    }

    /// The GID table indices present for a port, in order.
    pub fn gid_indices(&self, dev: &str, port: u32) -> io::Result<Vec<u32>> {
        self.sorted_numeric(&Path::new(dev).join(format!("ports/{port}/gids")))
    }

    /// The port's link layer.
    pub fn link_layer(&self, dev: &str, port: u32) -> LinkLayer {
        match self
            .read(&Path::new(dev).join(format!("ports/{port}/link_layer")))
            .as_deref()
            .map(str::trim)
        {
            Ok("InfiniBand") => LinkLayer::InfiniBand,
            Ok("Ethernet") => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }

    /// The name of the network device of an entry, if it has one.
    pub fn ndev(&self, dev: &str, port: u32, index: u32) -> Option<String> {
        self.read(&Path::new(dev).join(format!("ports/{port}/gid_attrs/ndevs/{index}")))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// `ibv_query_gid_type`'s reading of an entry's type: `Ok(None)` = "IB/RoCE v1",
    /// `Ok(Some(RoceV2))` = "RoCE v2".
    fn raw_type(&self, dev: &str, port: u32, index: u32) -> crate::Result<Option<GidType>> {
        let port_dir = Path::new(dev).join(format!("ports/{port}"));
        match self.read(&port_dir.join(format!("gid_attrs/types/{index}"))) {
            Ok(t) => match t.trim() {
                "IB/RoCE v1" => Ok(None),
                "RoCE v2" => Ok(Some(GidType::RoceV2)),
                _ => Err(inval("unknown GID type in sysfs")),
            },
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
            Err(_) => match std::fs::metadata(self.root.join(port_dir.join("gid_attrs"))) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                _ => Err(inval("the GID type cannot be read")),
            },
        }
    }

    /// `ibv_query_gid_ex` through sysfs (see the module documentation for the rules).
    pub fn query_gid_ex(&self, dev: &str, port: u32, index: u32) -> crate::Result<GidEntry> {
        let gid = self
            .read(&Path::new(dev).join(format!("ports/{port}/gids/{index}")))
            .ok()
            .and_then(|s| s.parse::<Gid>().ok())
            .ok_or_else(|| inval("the GID cannot be read"))?;
        let gid_type = match self.raw_type(dev, port, index)? {
            Some(t) => t,
            None => match self.link_layer(dev, port) {
                // rdma-core cmd_device.c query_sysfs_gid_entry: an unspecified link
                // layer is IB by default.
                LinkLayer::InfiniBand | LinkLayer::Unspecified => GidType::Ib,
                LinkLayer::Ethernet => GidType::RoceV1,
            },
        };
        let ndev_ifindex = match self.ndev(dev, port, index) {
            None => 0,
            Some(name) => (self.ifindex)(&name).ok_or_else(|| {
                Error::Verb(VerbError::new(
                    "query_gid_ex",
                    Errno::NoDev,
                    "the GID's network device does not exist here",
                ))
            })?,
        };
        if gid == Gid::ZERO {
            return Err(Error::Verb(VerbError::new(
                "query_gid_ex",
                Errno::NoData,
                "empty GID table entry",
            )));
        }
        Ok(GidEntry {
            gid,
            gid_index: index,
            port_num: port,
            gid_type,
            ndev_ifindex,
        })
    }

    /// Every valid entry of a port with its network device's name, in index order.
    /// Empty slots are skipped; any other error is returned.
    pub fn port_table(
        &self,
        dev: &str,
        port: u32,
    ) -> crate::Result<Vec<(GidEntry, Option<String>)>> {
        let indices = self
            .gid_indices(dev, port)
            .map_err(|e| Error::io("listing a port's gids directory", e))?;
        let mut out = Vec::new();
        for i in indices {
            match self.query_gid_ex(dev, port, i) {
                Ok(e) => out.push((e, self.ndev(dev, port, i))),
                Err(e) if e.errno() == libc::ENODATA => {}
                // rdma-core's EINVAL for an empty entry's unreadable type comes after
                // the zero GID check here, so only real errors arrive.
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sysfs")
    }

    fn eth0(name: &str) -> Option<u32> {
        (name == "eth0").then_some(2)
    }

    fn reader(tree: &str) -> SysfsReader {
        SysfsReader::new(fixtures().join(tree)).with_ifindex(eth0)
    }

    #[test]
    fn reads_the_rxe_peer_table() {
        // Built from rxe-peer/reference/gid-table.txt (VM1, kernel 6.1 rxe).
        let r = reader("rxe-vm1");
        assert_eq!(r.devices().unwrap(), ["rxe0"]);
        assert_eq!(r.ports("rxe0").unwrap(), [1]);
        let t = r.port_table("rxe0", 1).unwrap();
        let got: Vec<(u32, String, GidType, u32, Option<&str>)> = t
            .iter()
            .map(|(e, n)| {
                (
                    e.gid_index,
                    e.gid.sysfs().to_string(),
                    e.gid_type,
                    e.ndev_ifindex,
                    n.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    0,
                    "fe80:0000:0000:0000:5054:00ff:fe77:0002".into(),
                    GidType::RoceV2,
                    2,
                    Some("eth0")
                ),
                (
                    1,
                    "0000:0000:0000:0000:0000:ffff:0a4d:0002".into(),
                    GidType::RoceV2,
                    2,
                    Some("eth0")
                ),
                (
                    2,
                    "fd00:0077:0000:0000:0000:0000:0000:0002".into(),
                    GidType::RoceV2,
                    2,
                    Some("eth0")
                ),
            ]
        );
        // An empty slot: zero GID, its type read fails with EINVAL → ENODATA.
        assert_eq!(
            r.query_gid_ex("rxe0", 3, 0).unwrap_err().errno(),
            libc::EINVAL,
            "no port 3"
        );
        assert_eq!(
            r.query_gid_ex("rxe0", 1, 3).unwrap_err().errno(),
            libc::ENODATA
        );
        assert_eq!(
            r.query_gid_ex("rxe0", 1, 99).unwrap_err().errno(),
            libc::EINVAL
        );
        // The same table read on a host where eth0 does not exist.
        let other = SysfsReader::new(fixtures().join("rxe-vm1")).with_ifindex(|_| None);
        assert_eq!(
            other.query_gid_ex("rxe0", 1, 0).unwrap_err().errno(),
            libc::ENODEV
        );
    }

    #[test]
    fn old_kernels_and_ib_ports_mean_ib_or_roce_v1() {
        // No gid_attrs at all (before Linux 4.5): IB/RoCE v1 → RoCE v1 on Ethernet.
        let r = reader("old-kernel");
        let e = r.query_gid_ex("mlx4_0", 1, 0).unwrap();
        assert_eq!((e.gid_type, e.ndev_ifindex), (GidType::RoceV1, 0));
        // An InfiniBand port: the type file cannot be read (EINVAL) → IB.
        let r = reader("ib-port");
        let e = r.query_gid_ex("mlx5_0", 1, 0).unwrap();
        assert_eq!(e.gid_type, GidType::Ib);
        // "IB/RoCE v1" text on Ethernet → RoCE v1; next to a RoCE v2 entry of the same GID.
        let r = reader("roce-v1v2");
        assert_eq!(
            r.query_gid_ex("mlx5_1", 1, 0).unwrap().gid_type,
            GidType::RoceV1
        );
        assert_eq!(
            r.query_gid_ex("mlx5_1", 1, 1).unwrap().gid_type,
            GidType::RoceV2
        );
        assert_eq!(
            r.query_gid_ex("mlx5_1", 1, 0).unwrap().gid,
            r.query_gid_ex("mlx5_1", 1, 1).unwrap().gid
        );
    }

    #[test]
    fn bad_trees_are_errors() {
        let r = reader("bad");
        // Unknown type text, a type unreadable while gid_attrs exists, an unparsable
        // GID.
        for i in 0..3 {
            let e = r.query_gid_ex("bad0", 1, i).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "index {i}: {e}");
        }
        // An IB/RoCE v1 entry on a port of unknown link layer is IB, not an error
        // (rdma-core cmd_device.c query_sysfs_gid_entry).
        assert_eq!(r.query_gid_ex("bad0", 1, 3).unwrap().gid_type, GidType::Ib);
        assert!(r.port_table("bad0", 1).is_err());
        assert!(SysfsReader::new("/nonexistent/rverbs").devices().is_err());
    }

    #[test]
    fn gid_text() {
        assert_eq!(
            "0000:0000:0000:0000:0000:ffff:0a4d:0002\n"
                .parse::<Gid>()
                .unwrap(),
            Gid::from(std::net::Ipv4Addr::new(10, 77, 0, 2))
        );
        assert!("cat: read error".parse::<Gid>().is_err());
        assert_eq!(if_nametoindex("../x"), None);
        assert_eq!(if_nametoindex("lo"), Some(1));
    }
}
