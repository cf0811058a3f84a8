//! Debian's unmodified RDMA CM programs on this library's `librdmacm.so.1` (the same
//! file as `libibverbs.so.1`), both sides on one host over the loopback soft device:
//! rdmacm-utils' rping (with data verification), udaddy (UD, SIDR), ucmatose (several
//! connections), rdma_server / rdma_client (`rdma_create_ep`, `rdma_get_request` and
//! the inlines of `<rdma/rdma_verbs.h>`), and perftest's `-R`. `127.0.0.1` reaches a
//! listener, as on the kernel's rxe over lo; a port nobody listens on is rejected
//! with the kernel's reason (8, invalid service ID).
//!
//! They need the Debian packages (rdmacm-utils, perftest), so they are ignored in a
//! plain `cargo test`; run with `--ignored`, each fails when what it needs is missing.
//! Ports are chosen at run time, but udaddy listens on its fixed 7174, which is per
//! context on the loopback device (each has its own 127.0.0.x); each client is given
//! the address of its own server (found from the server's sockets).

mod common;

use common::{finish, text};
use std::collections::HashSet;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn cmd(tool: &str, args: &[&str]) -> Command {
    common::tool_cmd(tool, "rdmacm-utils and perftest", args)
}

/// The socket inodes process `pid` holds.
fn socket_inodes(pid: u32) -> HashSet<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    rd.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().to_string();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect()
}

/// The address of the CM listener process `pid` announced on `port` of port space
/// `ps` (`0106` TCP, `0111` UDP): the abstract socket the loopback device's listeners
/// bind, `@rverbs-cm/<ps>/<port>/<address>`, among the process's sockets.
fn listener_of(pid: u32, ps: &str, port: u16) -> Option<String> {
    let mine = socket_inodes(pid);
    let want = format!("@rverbs-cm/{ps}/{port}/");
    std::fs::read_to_string("/proc/net/unix")
        .ok()?
        .lines()
        .find_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            if c.len() < 8 || !mine.contains(c[6]) {
                return None;
            }
            c[7].strip_prefix(&want).map(str::to_string)
        })
}

/// Starts a server and waits until it listens on `port` of `ps`; returns it and its
/// address.
fn serve(mut server: Command, ps: &str, port: u16, what: &str) -> (Child, String) {
    let mut s = server.spawn().unwrap();
    let start = Instant::now();
    loop {
        if let Some(ip) = listener_of(s.id(), ps, port) {
            return (s, ip);
        }
        if let Some(st) = s.try_wait().unwrap() {
            let out = s.wait_with_output().unwrap();
            panic!(
                "{what}: the server exited ({st}) before listening:\n{}",
                text(&out)
            );
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = s.kill();
            let out = s.wait_with_output().unwrap();
            panic!("{what}: the server never listened:\n{}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the client against a started server; both must exit 0. Returns their output.
fn run_pair(server: Child, mut client: Command, what: &str) -> (String, String) {
    let c = client.spawn().unwrap();
    let co = finish(c, Duration::from_secs(120), &format!("{what} client"));
    let so = finish(server, Duration::from_secs(120), &format!("{what} server"));
    let (st, ct) = (text(&so), text(&co));
    assert!(
        so.status.success() && co.status.success(),
        "{what}: server {:?}, client {:?}\n-- server:\n{st}\n-- client:\n{ct}",
        so.status,
        co.status
    );
    (st, ct)
}

/// A port of this run for the CM (its port numbers are its own, not TCP's; a free
/// TCP port is as good a choice as any).
fn cm_port() -> u16 {
    common::free_port()
}

fn rping_pair(server_addr: &str, client_addr: Option<&str>) {
    let port = cm_port();
    let p = port.to_string();
    let (server, ip) = serve(
        cmd(
            "rping",
            &["-s", "-v", "-V", "-C", "5", "-a", server_addr, "-p", &p],
        ),
        "0106",
        port,
        "rping",
    );
    let to = client_addr.unwrap_or(&ip).to_string();
    let (st, ct) = run_pair(
        server,
        cmd("rping", &["-c", "-v", "-V", "-C", "5", "-a", &to, "-p", &p]),
        "rping",
    );
    for i in 0..5 {
        let want = format!("rdma-ping-{i}: ");
        assert!(
            ct.lines()
                .any(|l| l.starts_with("ping data: ") && l.contains(&want)),
            "client ping {i} missing:\n{ct}"
        );
        assert!(
            st.lines()
                .any(|l| l.starts_with("server ping data: ") && l.contains(&want)),
            "server ping {i} missing:\n{st}"
        );
    }
    assert!(!ct.contains("data mismatch"), "{ct}");
}

#[test]
#[ignore = "needs rdmacm-utils (rping); CI runs it with --ignored"]
fn rping_verifies_data_over_127_0_0_1() {
    // The server binds 127.0.0.1 (its context's own 127.0.0.x on the loopback
    // device), the client connects to 127.0.0.1.
    rping_pair("127.0.0.1", Some("127.0.0.1"));
}

#[test]
#[ignore = "needs rdmacm-utils (rping); CI runs it with --ignored"]
fn rping_reaches_a_wildcard_listener_at_its_address_and_at_127_0_0_1() {
    rping_pair("0.0.0.0", None);
    rping_pair("0.0.0.0", Some("127.0.0.1"));
}

#[test]
#[ignore = "needs rdmacm-utils (rping); CI runs it with --ignored"]
fn rping_to_a_port_nobody_listens_on_is_rejected_with_reason_8() {
    let p = cm_port().to_string();
    let out = cmd("rping", &["-c", "-C", "1", "-a", "127.0.0.1", "-p", &p])
        .spawn()
        .unwrap();
    let out = finish(out, Duration::from_secs(30), "rping client");
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("RDMA_CM_EVENT_REJECTED, error 8"), "{t}");
}

#[test]
#[ignore = "needs rdmacm-utils (udaddy); CI runs it with --ignored"]
fn udaddy_resolves_with_sidr_and_exchanges_datagrams() {
    let (server, ip) = serve(
        cmd("udaddy", &["-c", "2", "-C", "10"]),
        "0111",
        7174,
        "udaddy",
    );
    let (st, ct) = run_pair(
        server,
        cmd("udaddy", &["-s", &ip, "-c", "2", "-C", "10"]),
        "udaddy",
    );
    for t in [&st, &ct] {
        assert!(t.contains("data transfers complete"), "{t}");
        assert!(t.contains("return status 0"), "{t}");
    }
}

fn ucmatose(extra: &[&str]) {
    let port = cm_port();
    let p = port.to_string();
    let mut sargs = vec!["-c", "4", "-C", "20", "-p", &p];
    sargs.extend_from_slice(extra);
    let (server, ip) = serve(cmd("ucmatose", &sargs), "0106", port, "ucmatose");
    let mut cargs = vec!["-s", ip.as_str(), "-c", "4", "-C", "20", "-p", &p];
    cargs.extend_from_slice(extra);
    let (st, ct) = run_pair(server, cmd("ucmatose", &cargs), "ucmatose");
    for t in [&st, &ct] {
        assert!(t.contains("data transfers complete"), "{t}");
        assert!(t.contains("return status 0"), "{t}");
    }
    assert!(st.contains("disconnected"), "{st}");
}

#[test]
#[ignore = "needs rdmacm-utils (ucmatose); CI runs it with --ignored"]
fn ucmatose_connects_several_and_disconnects() {
    ucmatose(&[]);
}

#[test]
#[ignore = "needs rdmacm-utils (ucmatose); CI runs it with --ignored"]
fn ucmatose_migrates_its_ids_to_another_channel() {
    ucmatose(&["-m"]);
}

#[test]
#[ignore = "needs rdmacm-utils (rdma_server, rdma_client); CI runs it with --ignored"]
fn rdma_server_and_client_use_create_ep_and_the_verbs_inlines() {
    let port = cm_port();
    let p = port.to_string();
    let (server, ip) = serve(cmd("rdma_server", &["-p", &p]), "0106", port, "rdma_server");
    let (st, ct) = run_pair(
        server,
        cmd("rdma_client", &["-s", &ip, "-p", &p]),
        "rdma_server",
    );
    assert!(st.contains("rdma_server: end 0"), "{st}");
    assert!(ct.contains("rdma_client: end 0"), "{ct}");
}

/// perftest's `-R` (connection and parameter exchange through the RDMA CM) between
/// two processes on the loopback device; the client connects to 127.0.0.1 once the
/// server listens.
///
/// perftest connects twice: once to exchange parameters, then for the test's QPs, for
/// which its server listens again only after the exchange, while its client connects
/// right after it: a client quicker than its server is rejected (reason 8, nobody
/// listens yet), as it would be on any device. perftest 4.5-0.17 (Debian 12) then
/// retries with the IDs it destroyed and crashes (fixed upstream by making new ones),
/// so that one outcome is run again, up to three times.
///
/// Both sides get `-F`: perftest divides its report by the CPU clock it measures, and
/// when that measurement fails (no `cpu MHz` in /proc/cpuinfo, or samples that do not
/// correlate on a loaded or emulated machine) it exits at its report without `-F`,
/// before the closing handshake its peer then waits for with no time limit.
fn perftest_r(tool: &str, extra: &[&str]) {
    perftest_r_served(tool, extra, cmd);
}

/// [`perftest_r`] with the server's command made by `server` (tool, arguments).
fn perftest_r_served(tool: &str, extra: &[&str], server: fn(&str, &[&str]) -> Command) {
    for attempt in 1..=3 {
        let port = cm_port();
        let p = port.to_string();
        let mut args = vec!["-d", "rv_lo", "-R", "-F", "-n", "200", "-p", &p];
        args.extend_from_slice(extra);
        let (mut server, _) = serve(server(tool, &args), "0106", port, tool);
        let mut cargs = args.to_vec();
        cargs.push("127.0.0.1");
        let c = cmd(tool, &cargs).spawn().unwrap();
        let co = finish(c, Duration::from_secs(120), &format!("{tool} client"));
        let ct = text(&co);
        if !co.status.success() && ct.contains("RDMA_CM_EVENT_REJECTED; error: 8") && attempt < 3 {
            eprintln!("{tool}: the client came before its server listened again; once more");
            let _ = server.kill();
            let _ = server.wait();
            continue;
        }
        let so = finish(server, Duration::from_secs(120), &format!("{tool} server"));
        let st = text(&so);
        assert!(
            so.status.success() && co.status.success(),
            "{tool}: server {:?}, client {:?}\n-- server:\n{st}\n-- client:\n{ct}",
            so.status,
            co.status
        );
        assert!(ct.contains("Data ex. method : rdma_cm"), "{ct}");
        // The result line: the size, then 200 iterations.
        assert!(
            ct.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 2 && w[0].parse::<u64>().is_ok() && w[1] == "200"
            }),
            "{ct}"
        );
        return;
    }
}

/// `tool` as [`cmd`] makes it, in a mount namespace of its own where /proc/cpuinfo is
/// empty, so perftest's CPU clock measurement fails (as it does at times on a loaded
/// or emulated machine). `unshare` without `--fork` and `exec` keep the PID.
fn without_cpu_clock(tool: &str, args: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind /dev/null /proc/cpuinfo && exec \"$0\" \"$@\"")
        .arg(common::need(tool, "perftest"))
        .args(args)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// A perftest server whose clock measurement fails still ends the run: with `-F` it
/// reports and answers the client's closing handshake (without it, it exits at its
/// report and the client waits for that handshake until its SEND's retries run out).
#[test]
#[ignore = "needs root (a mount namespace) and perftest; CI runs it with --ignored"]
fn perftest_r_ends_when_the_server_cannot_measure_its_clock() {
    perftest_r_served("ib_send_bw", &[], without_cpu_clock);
}

#[test]
#[ignore = "needs perftest; CI runs it with --ignored"]
fn perftest_bandwidth_tests_connect_with_rdma_cm() {
    for t in ["ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_atomic_bw"] {
        perftest_r(t, &[]);
    }
}

/// perftest's `-R -c UD` on this library both sides: the test's QPs found by SIDR
/// (port space UDP, `conn_param.qp_num` in the accept), the latency server learning
/// the client's QP from its first SEND.
#[test]
#[ignore = "needs perftest; CI runs it with --ignored"]
fn perftest_ud_tests_connect_with_rdma_cm() {
    for t in ["ib_send_bw", "ib_send_lat"] {
        perftest_r(t, &["-c", "UD"]);
    }
}

#[test]
#[ignore = "needs perftest; CI runs it with --ignored"]
fn perftest_latency_tests_connect_with_rdma_cm() {
    for t in [
        "ib_send_lat",
        "ib_write_lat",
        "ib_read_lat",
        "ib_atomic_lat",
    ] {
        perftest_r(t, &[]);
    }
}

/// `rverbs perf -R` (the Rust API's CM, no C library) against an unmodified perftest
/// `tool -R` on this library, each as server and as client; the client connects to
/// 127.0.0.1 once the server listens.
fn rverbs_perf_r(tool: &str, op: &str, kind: &str, extra: &[&str]) {
    let rv = common::rverbs_bin();
    for perftest_serves in [true, false] {
        let port = cm_port();
        let p = port.to_string();
        let mut common_args = vec!["-n", "200", "-s", "1000", "-p", &p];
        common_args.extend_from_slice(extra);
        let mut rust = Command::new(&rv);
        rust.args(["perf", op, kind, "-R", "--json"])
            .args(&common_args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // -F: see perftest_r.
        let mut pt_args = vec!["-d", "rv_lo", "-R", "-F"];
        pt_args.extend_from_slice(&common_args);
        let what = format!(
            "{tool} {}",
            if perftest_serves { "server" } else { "client" }
        );
        let (st, ct) = if perftest_serves {
            let (server, _) = serve(cmd(tool, &pt_args), "0106", port, &what);
            rust.arg("127.0.0.1");
            run_pair(server, rust, &what)
        } else {
            let (server, _) = serve(rust, "0106", port, &what);
            pt_args.push("127.0.0.1");
            run_pair(server, cmd(tool, &pt_args), &what)
        };
        let (pt, rv_out) = if perftest_serves {
            (&st, &ct)
        } else {
            (&ct, &st)
        };
        assert!(pt.contains("Data ex. method : rdma_cm"), "{what}:\n{pt}");
        // The client's result: perftest's line (the size, then 200 iterations), or
        // rverbs' row.
        if perftest_serves {
            assert!(ct.contains("\"msgs\":200"), "{what}:\n{ct}");
        } else {
            assert!(
                ct.lines().any(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.len() > 2 && w[0] == "1000" && w[1] == "200"
                }),
                "{what}:\n{ct}"
            );
        }
        assert!(rv_out.contains("rverbs counters"), "{what}:\n{rv_out}");
    }
}

#[test]
#[ignore = "needs perftest and the rverbs binary (cargo build -p rverbs-cli); CI runs it with --ignored"]
fn rverbs_perf_r_and_perftest_r_bandwidth_in_both_roles() {
    rverbs_perf_r("ib_send_bw", "send", "bw", &[]);
    rverbs_perf_r("ib_write_bw", "write", "bw", &[]);
    rverbs_perf_r("ib_read_bw", "read", "bw", &[]);
}

/// `-R -c UD` between `rverbs perf` and perftest on this library, both roles.
#[test]
#[ignore = "needs perftest and the rverbs binary (cargo build -p rverbs-cli); CI runs it with --ignored"]
fn rverbs_perf_r_and_perftest_r_over_ud_in_both_roles() {
    rverbs_perf_r("ib_send_bw", "send", "bw", &["-c", "UD"]);
    rverbs_perf_r("ib_send_lat", "send", "lat", &["-c", "UD"]);
}

#[test]
#[ignore = "needs perftest and the rverbs binary (cargo build -p rverbs-cli); CI runs it with --ignored"]
fn rverbs_perf_r_and_perftest_r_latency_in_both_roles() {
    rverbs_perf_r("ib_read_lat", "read", "lat", &[]);
    rverbs_perf_r("ib_write_lat", "write", "lat", &[]);
    rverbs_perf_r("ib_send_lat", "send", "lat", &[]);
}
