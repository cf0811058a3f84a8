//! `rverbs gids [--sysfs [ROOT]] [--json]`: every device's GID table in the layout of
//! Mellanox/NVIDIA's `show_gids` script (`DEV PORT INDEX GID IPv4 VER DEV`, then
//! `n_gids_found=N`). Without `--sysfs` the tables are those of the soft devices (what
//! the kernel would build for rxe on the same interfaces, or in raw mode — `RVERBS_RAW_IF`
//! set, with CAP_NET_RAW — a RoCE v1 and a RoCE v2 entry per GID, as for mlx5); with it,
//! a kernel's sysfs
//! (`/sys/class/infiniband` or ROOT) is read with rdma-core's rules.

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
/// ndev, ndev_ifindex}` (`type` is "IB", "RoCE v1" or "RoCE v2").
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
            "  {{\"dev\": {}, \"port\": {}, \"index\": {}, \"gid\": {}, \"ipv4\": {ipv4}, \"type\": {}, \"ndev\": {ndev}, \"ndev_ifindex\": {}}}{}",
            json_str(&r.dev),
            r.port,
            r.index,
            json_str(&r.gid.sysfs().to_string()),
            json_str(&r.gid_type.to_string()),
            r.ndev_ifindex,
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
    }
}
