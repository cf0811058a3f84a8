//! `rverbs gids` and the soft device's GID table against the kernel: the same interface
//! addresses, added in the same order, must give the table kernel rxe built
//! (`testdata/gids/rxe-multi-addr.txt`, recorded on the rxe peer) — index order and
//! types, at device creation and as addresses come and go while the device is open.
//!
//! Needs root (a network namespace with a veth pair made by the test); skipped
//! with a message otherwise. The live part runs in a child process of this test binary
//! inside the namespace (`ip netns exec`), selected by `RVERBS_GIDS_CHILD`.

mod common;

use common::*;
use rverbs::AddressVector;
use std::process::Command;
use std::time::{Duration, Instant};

const REF: &str = include_str!("../../../testdata/gids/rxe-multi-addr.txt");
const MAC: &str = "52:54:00:77:00:02";

/// The reference table printed under `=== <title>` as (index, sysfs GID) rows.
fn reference(title: &str) -> Vec<(u32, String)> {
    let mut rows = Vec::new();
    let mut on = false;
    for line in REF.lines() {
        if let Some(t) = line.strip_prefix("=== ") {
            on = t.starts_with(title);
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if on && f.len() >= 4 && f[0].parse::<u32>().is_ok() && f[2] == "RoCE" {
            assert_eq!(f[3], "v2");
            rows.push((f[0].parse().unwrap(), f[1].to_string()));
        }
    }
    assert!(!rows.is_empty(), "no reference table {title:?}");
    rows
}

/// A namespace with the rxe peer's VM1 interface: eth0 with its MAC and boot addresses.
fn vm1_netns(tag: &str) -> Netns {
    let ns = Netns::new(&format!("rvgid{tag}"));
    // A veth pair (the peer end only gives eth0 a carrier), eth0 with VM1's MAC.
    ns.ip(&[
        "link", "add", "eth0", "address", MAC, "type", "veth", "peer", "name", "peer0",
    ]);
    ns.ip(&["link", "set", "peer0", "up"]);
    ns.ip(&["link", "set", "eth0", "up"]);
    // The rxe peer's boot addresses, as VM1 had them before the others.
    ns.ip(&["addr", "add", "10.77.0.2/24", "dev", "eth0"]);
    ns.ip(&["-6", "addr", "add", "fd00:77::2/64", "dev", "eth0", "nodad"]);
    ns
}

/// The other addresses VM1 got, in the same order, each added by `ip` (given the
/// arguments of one `ip` command).
fn add_more(ip: impl Fn(&[&str])) {
    ip(&["addr", "add", "10.88.0.5/24", "dev", "eth0"]);
    ip(&["addr", "add", "192.168.7.9/24", "dev", "eth0"]);
    ip(&["-6", "addr", "add", "fd00:88::9/64", "dev", "eth0", "nodad"]);
    ip(&[
        "-6",
        "addr",
        "add",
        "fd00:99::1:2/64",
        "dev",
        "eth0",
        "nodad",
    ]);
}

/// (index, GID) rows of `rv_eth0` in `rverbs gids --json` output.
fn json_rows(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .filter(|l| l.contains("\"dev\": \"rv_eth0\""))
        .map(|l| {
            let field = |k: &str| {
                let s = &l[l.find(&format!("\"{k}\": ")).unwrap() + k.len() + 4..];
                s[..s.find([',', '}']).unwrap()]
                    .trim_matches('"')
                    .to_string()
            };
            assert_eq!(field("type"), "RoCE v2");
            (field("index").parse().unwrap(), field("gid"))
        })
        .collect()
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn gids_tool_matches_the_kernel_table_in_a_netns() {
    assert!(
        is_root(),
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    let ns = vm1_netns("t");
    add_more(|a| ns.ip(a));
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.0,
            env!("CARGO_BIN_EXE_rverbs"),
            "gids",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = json_rows(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(got, reference("fresh"));
    // The table layout too.
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_rverbs"), "gids"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "rv_eth0\t1\t2\t0000:0000:0000:0000:0000:ffff:0a58:0005\t10.88.0.5  \tv2\teth0"
        ),
        "{text}"
    );
    assert!(text.lines().last().unwrap().starts_with("n_gids_found="));
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn open_device_follows_address_changes_like_the_kernel() {
    assert!(
        is_root(),
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    let ns = vm1_netns("l");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(exe)
        .args(["--exact", "live_child", "--include-ignored", "--nocapture"])
        .env("RVERBS_GIDS_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "child failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits (the device re-scans its addresses about once a second) until `want` holds.
fn wait_for(ctx: &rverbs::Context, what: &str, want: impl Fn(&[rverbs::GidEntry]) -> bool) {
    let start = Instant::now();
    loop {
        let t = ctx.query_gid_table(rverbs::GID_TABLE_LEN).unwrap();
        if want(&t) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: table never became right: {t:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rows(t: &[rverbs::GidEntry]) -> Vec<(u32, String)> {
    t.iter()
        .map(|e| (e.gid_index, e.gid.sysfs().to_string()))
        .collect()
}

fn ip_here(args: &[&str]) {
    let mut a = vec!["ip"];
    a.extend_from_slice(args);
    sh(&a);
}

/// Runs inside the namespace made by `open_device_follows_address_changes_like_the_kernel`.
#[test]
#[ignore = "child of open_device_follows_address_changes_like_the_kernel"]
fn live_child() {
    assert_eq!(std::env::var("RVERBS_GIDS_CHILD").as_deref(), Ok("1"));
    let dev = rverbs::device(Some("rv_eth0")).unwrap();
    // Open with the boot addresses, then add the others: they take free slots in the
    // order they come, as on the kernel ("live").
    let ctx = dev.open().unwrap();
    assert_eq!(rows(&ctx.query_gid_table(8).unwrap()).len(), 3);
    add_more(ip_here);
    let live = reference("live");
    wait_for(&ctx, "live", |t| rows(t) == live);
    let e = ctx.query_gid_ex(1, 3, 0).unwrap();
    assert_eq!(
        (e.gid_type, e.port_num, e.ndev_ifindex),
        (rverbs::GidType::RoceV2, 1, dev.ifindex)
    );
    drop(ctx);
    // Opened with every address present: the registration order ("fresh").
    let dev = rverbs::device(Some("rv_eth0")).unwrap();
    let ctx = dev.open().unwrap();
    assert_eq!(rows(&ctx.query_gid_table(7).unwrap()), reference("fresh"));
    assert_eq!(
        ctx.query_gid_table(6).unwrap_err().errno(),
        libc_einval(),
        "capacity too small"
    );
    // Delete one, add another: the freed slot is reused ("after adding 172.16.0.1").
    ip_here(&["addr", "del", "10.88.0.5/24", "dev", "eth0"]);
    let after_del = reference("after deleting");
    wait_for(&ctx, "after deleting", |t| rows(t) == after_del);
    assert_eq!(
        ctx.query_gid_ex(1, 2, 0).unwrap_err().errno(),
        61,
        "ENODATA"
    );
    ip_here(&["addr", "add", "172.16.0.1/16", "dev", "eth0"]);
    let after_add = reference("after adding");
    wait_for(&ctx, "after adding", |t| rows(t) == after_add);
    // An entry in use by an AH stays until the AH goes: its slot is not reused.
    let pd = ctx.alloc_pd().unwrap();
    let attrs = rverbs::AhAttr {
        av: AddressVector {
            dgid: "::ffff:192.168.7.1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .into(),
            sgid_index: 3,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        },
        port_num: 1,
    };
    let ah = pd.create_ah(&attrs).unwrap();
    ip_here(&["addr", "del", "192.168.7.9/24", "dev", "eth0"]);
    wait_for(&ctx, "192.168.7.9 gone", |t| {
        t.iter().all(|e| e.gid_index != 3)
    });
    assert_eq!(ctx.query_gid_ex(1, 3, 0).unwrap_err().errno(), 61);
    assert_eq!(
        pd.create_ah(&attrs).err().map(|e| e.errno()),
        Some(libc_einval())
    );
    ip_here(&["addr", "add", "10.99.0.1/24", "dev", "eth0"]);
    wait_for(&ctx, "10.99.0.1 added", |t| {
        t.iter().any(|e| e.gid_index == 7)
    });
    assert_eq!(
        ctx.query_gid_ex(1, 3, 0).unwrap_err().errno(),
        61,
        "slot 3 held"
    );
    drop(ah);
    ip_here(&["addr", "add", "10.99.0.2/24", "dev", "eth0"]);
    wait_for(&ctx, "slot 3 reused", |t| {
        t.iter()
            .any(|e| e.gid_index == 3 && e.gid.to_ipv4_mapped() == Some([10, 99, 0, 2].into()))
    });
}

fn libc_einval() -> i32 {
    22
}

/// In raw mode (`RVERBS_RAW_IF`, as root: CAP_NET_RAW) every GID is listed twice, a
/// RoCE v1 entry then a RoCE v2 one, default GIDs first, as mlx5's table is laid out.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn gids_tool_shows_v1_and_v2_entries_in_raw_mode() {
    assert!(
        is_root(),
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    let ns = vm1_netns("r");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_rverbs"), "gids"])
        .env("RVERBS_RAW_IF", "eth0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<(String, String, String)> = text
        .lines()
        .filter(|l| l.starts_with("rv_eth0\t"))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[2].to_string(),
                f[3].to_string(),
                f[f.len() - 2].to_string(),
            )
        })
        .collect();
    let dflt = "fe80:0000:0000:0000:5054:00ff:fe77:0002";
    let v4 = "0000:0000:0000:0000:0000:ffff:0a4d:0002";
    let v6 = "fd00:0077:0000:0000:0000:0000:0000:0002";
    let want: Vec<(String, String, String)> = [
        ("0", dflt, "v1"),
        ("1", dflt, "v2"),
        ("2", v4, "v1"),
        ("3", v4, "v2"),
        ("4", v6, "v1"),
        ("5", v6, "v2"),
    ]
    .iter()
    .map(|(i, g, t)| (i.to_string(), g.to_string(), t.to_string()))
    .collect();
    assert_eq!(rows, want, "{text}");
    // Without raw mode the same device has v2 entries only.
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_rverbs"), "gids"])
        .env_remove("RVERBS_RAW_IF")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v1_rows = text
        .lines()
        .filter(|l| l.starts_with("rv_eth0\t") && l.contains("\tv1\t"))
        .count();
    assert_eq!(v1_rows, 0, "{text}");
}
