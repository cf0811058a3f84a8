//! `rverbs gids [--sysfs [ROOT]] [--json]`: every device's GID table in the layout of
//! Mellanox/NVIDIA's `show_gids` script (`DEV PORT INDEX GID IPv4 VER DEV`, then
//! `n_gids_found=N`). Without `--sysfs` the tables are those of the soft devices (what
//! the kernel would build for rxe on the same interfaces, or in raw mode — `RVERBS_RAW_IF`
//! set, with CAP_NET_RAW — a RoCE v1 and a RoCE v2 entry per GID, as for mlx5); with it,
//! a kernel's sysfs
//! (`/sys/class/infiniband` or ROOT) is read with rdma-core's rules.
//!
//! The loopback device is the exception to "what a context has": every context on it
//! binds its own `127.0.0.x` when it opens (and `::1` only with
//! `RVERBS_LOOPBACK_IPV6=1`), so its address rows end with a note saying how the open
//! picks the address; `rverbs devinfo -d rv_lo` shows an opened context's real table.

use rverbs::sysfs::SysfsReader;
use rverbs::{Gid, GidType};
use std::io::Write;

/// One valid GID table entry, with the names needed to print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// RDMA device name.
    pub dev: String,
    /// Port number.
    pub port: u32,
    /// GID index.
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
    /// Network device name, if any.
    pub ndev: Option<String>,
    /// Network device index (0 = none).
    pub ndev_ifindex: u32,
    /// For an entry an opened context does not have as listed: what it has instead.
    pub at_open: Option<&'static str>,
}

/// What an opened loopback context has in place of `gid` (see the module doc;
/// `carrier/udp/socket.rs` binds the addresses).
fn loopback_at_open(gid: &Gid) -> Option<&'static str> {
    if gid.to_ipv4_mapped().is_some() {
        Some("at open: 127.0.0.x, x in 2..=254, one per context")
    } else if *gid == Gid::from(std::net::Ipv6Addr::LOCALHOST) {
        Some("at open: only with RVERBS_LOOPBACK_IPV6=1, one context of the host")
    } else if gid.0[..2] != [0xfe, 0x80] {
        Some("at open: one of lo's IPv6 addresses, the first free one")
    } else {
        None
    }
}

/// The soft devices' tables.
pub fn soft_rows() -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    // In raw mode (RVERBS_RAW_IF, with CAP_NET_RAW) a context's table has RoCE v1
    // entries beside the v2 ones.
    let raw = rverbs::DeviceInfo::raw_mode_from_env();
    for d in rverbs::devices().map_err(|e| e.to_string())? {
        let table = if raw {
            d.raw_mode_gid_table()
        } else {
            d.gid_table()
        };
        for e in table.entries() {
            rows.push(Row {
                dev: d.name.clone(),
                port: e.port_num,
                index: e.gid_index,
                gid: e.gid,
                gid_type: e.gid_type,
                ndev: Some(d.ifname.clone()),
                ndev_ifindex: e.ndev_ifindex,
                at_open: if d.is_loopback() && e.gid_index > 0 {
                    loopback_at_open(&e.gid)
                } else {
                    None
                },
            });
        }
    }
    Ok(rows)
}

/// The tables of a kernel's sysfs `class/infiniband` directory.
pub fn sysfs_rows(r: &SysfsReader) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let devs = r
        .devices()
        .map_err(|e| format!("reading the sysfs root: {e}"))?;
    for dev in devs {
        let ports = r
            .ports(&dev)
            .map_err(|e| format!("{dev}: listing ports: {e}"))?;
        for p in ports {
            for (e, ndev) in r
                .port_table(&dev, p)
                .map_err(|e| format!("{dev} port {p}: {e}"))?
            {
                rows.push(Row {
                    dev: dev.clone(),
                    port: p,
                    index: e.gid_index,
                    gid: e.gid,
                    gid_type: e.gid_type,
                    ndev,
                    ndev_ifindex: e.ndev_ifindex,
                    at_open: None,
                });
            }
        }
    }
    Ok(rows)
}

/// Prints `rows` as `show_gids` does.
pub fn print_table<W: Write>(rows: &[Row], out: &mut W) -> std::io::Result<()> {
    writeln!(out, "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV")?;
    writeln!(
        out,
        "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---"
    )?;
    for r in rows {
        let ndev = r.ndev.as_deref().unwrap_or("");
        // A note goes after the last column, so show_gids parsers still see theirs.
        let ndev = match r.at_open {
            Some(n) => format!("{ndev}\t({n})"),
            None => ndev.to_string(),
        };
        // show_gids prints what follows the first 'v' of the sysfs type text: "v1"
        // for "IB/RoCE v1", which is the text of IB entries too.
        let ver = match r.gid_type {
            GidType::Ib => "v1",
            t => t.short_name(),
        };
        match r.gid.to_ipv4_mapped() {
            // mlnx-tools sbin/show_gids: "$ipv4  \t", two spaces, no padding.
            Some(v4) => writeln!(
                out,
                "{}\t{}\t{}\t{}\t{v4}  \t{ver}\t{ndev}",
                r.dev,
                r.port,
                r.index,
                r.gid.sysfs()
            )?,
            None => writeln!(
                out,
                "{}\t{}\t{}\t{}\t\t\t{ver}\t{ndev}",
                r.dev,
                r.port,
                r.index,
                r.gid.sysfs()
            )?,
        }
    }
    writeln!(out, "n_gids_found={}", rows.len())
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Prints `rows` as a JSON array of objects `{dev, port, index, gid, ipv4, type,
/// ndev, ndev_ifindex}` (`type` is "IB", "RoCE v1" or "RoCE v2"), and `at_open` on the
/// rows that have a note.
pub fn print_json<W: Write>(rows: &[Row], out: &mut W) -> std::io::Result<()> {
    writeln!(out, "[")?;
    for (i, r) in rows.iter().enumerate() {
        let ipv4 = r
            .gid
            .to_ipv4_mapped()
            .map_or("null".to_string(), |a| json_str(&a.to_string()));
        let ndev = r.ndev.as_deref().map_or("null".to_string(), json_str);
        writeln!(
            out,
            "  {{\"dev\": {}, \"port\": {}, \"index\": {}, \"gid\": {}, \"ipv4\": {ipv4}, \"type\": {}, \"ndev\": {ndev}, \"ndev_ifindex\": {}{}}}{}",
            json_str(&r.dev),
            r.port,
            r.index,
            json_str(&r.gid.sysfs().to_string()),
            json_str(&r.gid_type.to_string()),
            r.ndev_ifindex,
            r.at_open
                .map_or(String::new(), |n| format!(", \"at_open\": {}", json_str(n))),
            if i + 1 < rows.len() { "," } else { "" }
        )?;
    }
    writeln!(out, "]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_rows() -> Vec<Row> {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sysfs/rxe-vm1");
        let r = SysfsReader::new(root).with_ifindex(|n| (n == "eth0").then_some(2));
        sysfs_rows(&r).unwrap()
    }

    #[test]
    fn show_gids_layout_of_the_rxe_peer() {
        let mut out = Vec::new();
        print_table(&fixture_rows(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV"
        );
        assert_eq!(
            lines[2],
            "rxe0\t1\t0\tfe80:0000:0000:0000:5054:00ff:fe77:0002\t\t\tv2\teth0"
        );
        assert_eq!(
            lines[3],
            "rxe0\t1\t1\t0000:0000:0000:0000:0000:ffff:0a4d:0002\t10.77.0.2  \tv2\teth0"
        );
        assert_eq!(
            lines[4],
            "rxe0\t1\t2\tfd00:0077:0000:0000:0000:0000:0000:0002\t\t\tv2\teth0"
        );
        assert_eq!(lines[5], "n_gids_found=3");
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn show_gids_columns_for_long_addresses_and_ib_entries() {
        // mlnx-tools sbin/show_gids: the address then two spaces whatever its length;
        // VER is the text after the first 'v' of the type file ("IB/RoCE v1" on IB).
        let row = |gid: Gid, gid_type| Row {
            dev: "mlx5_0".into(),
            port: 1,
            index: 3,
            gid,
            gid_type,
            ndev: Some("rdma0".into()),
            ndev_ifindex: 4,
            at_open: None,
        };
        let v4 = Gid::from(std::net::Ipv4Addr::new(192, 168, 211, 242));
        let ib: Gid = "fe80::ec0d:9a03:ca:2f4c"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into();
        let mut out = Vec::new();
        print_table(&[row(v4, GidType::RoceV2), row(ib, GidType::Ib)], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2],
            "mlx5_0\t1\t3\t0000:0000:0000:0000:0000:ffff:c0a8:d3f2\t192.168.211.242  \tv2\trdma0"
        );
        assert_eq!(
            lines[3],
            "mlx5_0\t1\t3\tfe80:0000:0000:0000:ec0d:9a03:00ca:2f4c\t\t\tv1\trdma0"
        );
    }

    #[test]
    fn json_rows() {
        let mut out = Vec::new();
        print_json(&fixture_rows(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"index\": 1, \"gid\": \"0000:0000:0000:0000:0000:ffff:0a4d:0002\", \"ipv4\": \"10.77.0.2\", \"type\": \"RoCE v2\", \"ndev\": \"eth0\", \"ndev_ifindex\": 2},"), "{text}");
        assert!(text.trim_end().ends_with("\"ndev_ifindex\": 2}\n]"));
        assert_eq!(json_str("a\"b\\\n"), "\"a\\\"b\\\\\\u000a\"");
        let mut empty = Vec::new();
        print_json(&[], &mut empty).unwrap();
        assert_eq!(empty, b"[\n]\n");
    }

    #[test]
    fn soft_devices_have_a_loopback_table() {
        let rows = soft_rows().unwrap();
        let lo: Vec<&Row> = rows.iter().filter(|r| r.dev == "rv_lo").collect();
        assert_eq!(lo[0].index, 0);
        assert!(lo
            .iter()
            .any(|r| r.gid.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST)));
        assert!(lo.iter().all(|r| r.gid_type == GidType::RoceV2));
        // The default GID is what a context has; the addresses say how the open
        // picks them, and the table shows that after the last column.
        assert_eq!(lo[0].at_open, None);
        let v4 = lo
            .iter()
            .find(|r| r.gid.to_ipv4_mapped().is_some())
            .unwrap();
        assert_eq!(
            v4.at_open,
            Some("at open: 127.0.0.x, x in 2..=254, one per context")
        );
        assert!(lo[1..].iter().all(|r| r.at_open.is_some()));
        let mut out = Vec::new();
        print_table(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines().any(|l| l.starts_with("rv_lo\t")
                && l.ends_with("\tv2\tlo\t(at open: 127.0.0.x, x in 2..=254, one per context)")),
            "{text}"
        );
        let mut out = Vec::new();
        print_json(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"at_open\": \"at open: 127.0.0.x"), "{text}");
    }
}
