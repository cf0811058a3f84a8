//! `rverbs perf ... --perftest` against itself on the loopback soft device (both roles
//! of every tool speak perftest's exchange: each side follows its perftest tool's
//! sequence, so a disagreement in handshake counts or byte layouts hangs or fails
//! here), and against a scripted TCP peer that sends bad bytes (a clear error, never a
//! hang or a panic). Interoperability with the real perftest binaries is
//! `interop/perftest.sh` (kernel rxe in the rxe-peer guest).

mod common;

use common::{json_field as field, output_text as text};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::Duration;

/// Runs `rverbs perf ARGS --perftest --json` as server and client; both must succeed.
fn pair(args: &[&str], port: u16) -> (Vec<String>, Vec<String>) {
    let args: Vec<&str> = args.iter().copied().chain(["--perftest"]).collect();
    common::perf_pair_lines(&args, port, "127.0.0.1")
}

/// `rverbs perf write bw EXTRA` without `--perftest` is refused, naming it.
fn needs_perftest_mode(extra: &[&str], port: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["perf", "write", "bw"])
        .args(extra)
        .args(["-p", port])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{extra:?}");
    assert!(text(&o).contains("--perftest"), "{extra:?}: {}", text(&o));
}

fn num(line: &str, key: &str) -> f64 {
    field(line, key).parse().unwrap()
}

#[test]
fn bandwidth_tools_in_both_roles() {
    for op in ["write", "read", "send", "atomic"].iter() {
        let (s, c) = pair(&[op, "bw", "-n", "200", "-s", "3000"], common::free_port());
        assert_eq!((s.len(), c.len()), (1, 1), "{op}: {s:?} {c:?}");
        let size = if *op == "atomic" { "8" } else { "3000" };
        assert_eq!(field(&c[0], "msgs"), "200", "{op}");
        assert_eq!(field(&c[0], "size"), size, "{op}");
        assert!(num(&c[0], "gbps") > 0.0, "{op}: {}", c[0]);
        // The server's figures: its own receives for send, else what the client
        // reported over xchg_bw_reports.
        assert_eq!(field(&s[0], "msgs"), "200", "{op}: {}", s[0]);
        assert_eq!(field(&s[0], "size"), size, "{op}");
        assert!(num(&s[0], "gbps") > 0.0, "{op}: {}", s[0]);
    }
}

#[test]
fn post_lists_and_durations_in_both_roles() {
    // -l: chains of 4 requests per post (perftest's run_iter_bw), 200 of them in all.
    for op in ["write", "read", "send", "atomic"].iter() {
        let (s, c) = pair(
            &[op, "bw", "-n", "200", "-l", "4", "-s", "1000"],
            common::free_port(),
        );
        assert_eq!((s.len(), c.len()), (1, 1), "{op}: {s:?} {c:?}");
        assert_eq!(field(&c[0], "msgs"), "200", "{op}");
        assert_eq!(field(&s[0], "msgs"), "200", "{op}: {}", s[0]);
    }
    // -D: the client sends for the duration, signals its last chain and waits for it;
    // the server, which only waits for the closing handshake, gets its figures.
    for op in ["write", "read", "atomic"].iter() {
        let (s, c) = pair(
            &[op, "bw", "-D", "0.5", "-l", "2", "-s", "512"],
            common::free_port(),
        );
        assert_eq!((s.len(), c.len()), (1, 1), "{op}: {s:?} {c:?}");
        let msgs = num(&c[0], "msgs");
        assert!(msgs >= 2.0 && msgs % 2.0 == 0.0, "{op}: {}", c[0]);
        assert!(num(&c[0], "secs") >= 0.5, "{op}: {}", c[0]);
        assert_eq!(field(&s[0], "msgs"), field(&c[0], "msgs"), "{op}: {}", s[0]);
    }
}

/// -b: both sides send (perftest's duplex mode), each reports the sum of the two
/// directions; also with -D, and per size in a sweep (with its extra handshake).
#[test]
fn bidirectional_bandwidth_in_both_roles() {
    for op in ["write", "read", "atomic", "send"].iter() {
        let (s, c) = pair(
            &[op, "bw", "-b", "-n", "200", "-s", "1000"],
            common::free_port(),
        );
        assert_eq!((s.len(), c.len()), (1, 1), "{op}: {s:?} {c:?}");
        // 200 each way.
        assert_eq!(field(&c[0], "msgs"), "400", "{op}: {}", c[0]);
        assert_eq!(field(&s[0], "msgs"), "400", "{op}: {}", s[0]);
    }
    let (s, c) = pair(
        &["write", "bw", "-b", "-D", "0.5", "-s", "512"],
        common::free_port(),
    );
    assert_eq!((s.len(), c.len()), (1, 1), "-D: {s:?} {c:?}");
    assert_eq!(
        field(&s[0], "msgs"),
        field(&c[0], "msgs"),
        "-D: {s:?} {c:?}"
    );
    assert!(num(&c[0], "msgs") >= 2.0, "-D: {}", c[0]);
    for op in ["write", "read", "send"].iter() {
        let (s, c) = pair(&[op, "bw", "-b", "-a", "-n", "5"], common::free_port());
        assert_eq!((s.len(), c.len()), (23, 23), "{op} -a: {s:?} {c:?}");
        assert!(c.iter().all(|l| field(l, "msgs") == "10"), "{op}: {c:?}");
    }
}

#[test]
fn latency_tools_in_both_roles() {
    for op in ["write", "send", "read", "atomic"].iter() {
        let (s, c) = pair(&[op, "lat", "-n", "50", "-s", "100"], common::free_port());
        assert_eq!((s.len(), c.len()), (1, 1), "{op}: {s:?} {c:?}");
        // n posts give n - 1 gaps, as perftest's print_report_lat.
        assert!(c[0].contains("\"lat_us\""), "{op}: {}", c[0]);
        assert!(num(&c[0], "p50") > 0.0, "{op}: {}", c[0]);
        if *op == "write" || *op == "send" {
            // Both sides of a ping-pong measure.
            assert!(num(&s[0], "p50") > 0.0, "{op}: {}", s[0]);
        } else {
            assert!(!s[0].contains("lat_us"), "{op}: {}", s[0]);
        }
    }
    // SEND latency with completion moderation: each signaled SEND's completion is
    // awaited right after its post (ib_send_lat), the unsignaled ones between complete
    // with them, and the last (signaled) one ends both sides' loops.
    let (s, c) = pair(
        &["send", "lat", "-n", "301", "-Q", "7", "-s", "8"],
        common::free_port(),
    );
    assert_eq!((s.len(), c.len()), (1, 1), "-Q 7: {s:?} {c:?}");
    assert!(
        num(&c[0], "p50") > 0.0 && num(&s[0], "p50") > 0.0,
        "{c:?} {s:?}"
    );
}

#[test]
fn sweep_runs_every_size() {
    // -a: 2 B .. 8 MiB, as perftest (few iterations: the loopback device is in-process
    // software).
    for (op, kind) in [("send", "bw"), ("write", "lat"), ("write", "bw")].iter() {
        let (s, c) = pair(&[op, kind, "-a", "-n", "5"], common::free_port());
        assert_eq!(c.len(), 23, "{op} {kind}: {c:?}");
        assert_eq!(field(&c[22], "size"), "8388608");
        if *kind == "bw" && *op == "write" {
            // ib_write_bw's server gets one report, of the last size.
            assert_eq!(s.len(), 1, "{s:?}");
            assert_eq!(field(&s[0], "size"), "8388608");
        } else {
            // The send_bw server measures each size; the write_lat server too.
            assert_eq!(s.len(), 23, "{op} {kind}: {s:?}");
        }
    }
}

/// A fake perftest server: accepts one connection, sends `reply` for every read of the
/// client's first step, then closes. Returns the rverbs client's output. It listens on
/// a port the kernel picks (a port found free and released first can be taken by
/// another test in between).
fn against_fake(reply: Vec<u8>, args: &[&str]) -> Output {
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let mut buf = [0u8; 16];
        let _ = s.read_exact(&mut buf);
        let _ = s.write_all(&reply);
        // Answer whatever follows with zeros of the same size until the client stops.
        let mut b = [0u8; 256];
        while let Ok(n) = s.read(&mut b) {
            if n == 0 || s.write_all(&vec![0u8; n]).is_err() {
                break;
            }
        }
    });
    let out = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .arg("perf")
        .args(args)
        .args(["-p", &port.to_string(), "--perftest", "127.0.0.1"])
        .output()
        .unwrap();
    let _ = t.join();
    out
}

#[test]
fn bad_peers_get_a_clear_error() {
    let mut old = b"5.60".to_vec();
    old.resize(16, 0);
    let o = against_fake(old, &["write", "bw", "-n", "5"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("5.70"), "{}", text(&o));

    let o = against_fake(vec![0xff; 16], &["send", "lat", "-n", "5"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("no perftest version"), "{}", text(&o));

    // A good version, then zeros for the page size: refused before sizing a buffer.
    let mut v = b"6.06".to_vec();
    v.resize(16, 0);
    let o = against_fake(v, &["read", "bw", "-n", "5"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("not plausible"), "{}", text(&o));
}

#[test]
fn unspoken_options_are_refused() {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    for args in [
        &["send", "bw", "-D", "1"][..],
        &["write", "lat", "-D", "1"],
        &["write", "bw", "-D", "1", "-a"],
        &["write", "lat", "-l", "4"],
        &["write", "bw", "-l", "4", "-n", "10"],
        &["write", "bw", "-l", "4", "-Q", "3", "-n", "8"],
        &["tcp", "bw"],
        &["send", "lat", "-n", "4"],
        &["read", "bw", "-c", "UC"],
        &["write", "lat", "-q", "2"],
        &["write", "bw", "-c", "UD"],
        &["send", "bw", "-c", "UD", "-b"],
        &["atomic", "lat", "-c", "UC"],
    ] {
        let o = Command::new(bin)
            .arg("perf")
            .args(args)
            .args(["--perftest", "127.0.0.1", "-p", &common::free_port_s()])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(text(&o).contains("perftest"), "{args:?}: {}", text(&o));
    }
}

#[test]
fn uc_send_and_write_tools_in_both_roles() {
    for (op, kind, n) in [
        ("send", "bw", "300"),
        ("write", "bw", "300"),
        ("send", "lat", "100"),
        ("write", "lat", "100"),
    ]
    .into_iter()
    {
        let (s, c) = pair(
            &[op, kind, "-c", "UC", "-n", n, "-s", "2000"],
            common::free_port(),
        );
        assert_eq!(field(&c[0], "msgs"), n, "{op} {kind}: {c:?}");
        assert!(num(&c[0], "gbps") > 0.0, "{op} {kind}: {}", c[0]);
        if kind == "bw" {
            assert_eq!(field(&s[0], "msgs"), n, "{op} {kind}: {s:?}");
        }
    }
    // rverbs' own exchange does not speak UC.
    needs_perftest_mode(&["-c", "UC"], &common::free_port_s());
}

/// `rverbs perf OP bw ARGS -s SIZE --perftest` server and client, for each of the four
/// bandwidth tools (atomics at their 8 bytes), on ports `port`, `port + 1`, ...: each
/// tool's name with the server's and the client's rows.
fn each_bw_tool(
    args: &[&str],
    size: &str,
    port: u16,
) -> Vec<(&'static str, Vec<String>, Vec<String>)> {
    ["write", "read", "send", "atomic"]
        .iter()
        .enumerate()
        .map(|(i, &op)| {
            let size = if op == "atomic" { "8" } else { size };
            let all: Vec<&str> = [op, "bw", "-s", size]
                .into_iter()
                .chain(args.iter().copied())
                .collect();
            let (s, c) = pair(&all, port + i as u16);
            (op, s, c)
        })
        .collect()
}

#[test]
fn several_qps_in_both_roles() {
    for (op, s, c) in each_bw_tool(
        &["-q", "3", "-n", "120", "-t", "8", "-l", "2"],
        "2500",
        common::free_port(),
    ) {
        // Every QP's messages count: 3 x 120.
        assert_eq!(field(&c[0], "msgs"), "360", "{op}: {c:?}");
        assert_eq!(field(&s[0], "msgs"), "360", "{op}: {s:?}");
        assert!(num(&c[0], "gbps") > 0.0, "{op}: {}", c[0]);
    }
    // More QPs than one CQ can serve: a clear refusal on the side that finds it.
    let (_, c) = common::perf_processes(
        &["send", "bw", "-q", "9000", "-n", "100", "--perftest"],
        common::free_port(),
        "127.0.0.1",
    );
    assert!(!c.status.success());
    assert!(text(&c).contains("need a CQ of"), "{}", text(&c));
    // A duration with two QPs: each posts until the time is up.
    let (s, c) = pair(
        &["write", "bw", "-q", "2", "-D", "0.3", "-s", "1000"],
        common::free_port(),
    );
    assert!(num(&c[0], "msgs") > 0.0, "{c:?}");
    assert_eq!(field(&s[0], "msgs"), field(&c[0], "msgs"), "{s:?}");
    // A sweep with two QPs: each size's handshakes and receives per QP.
    let (s, c) = pair(
        &["send", "bw", "-q", "2", "-a", "-n", "6"],
        common::free_port(),
    );
    assert_eq!((s.len(), c.len()), (23, 23));
    assert!(c.iter().all(|l| field(l, "msgs") == "12"), "{c:?}");
    // rverbs' own exchange has one QP.
    needs_perftest_mode(&["-q", "2"], &common::free_port_s());
}

#[test]
fn several_qps_both_ways() {
    // `-q` with `-b` (perftest's `run_iter_bi` over every QP): each side sends `-n`
    // on each QP and, for SENDs, receives as many on each.
    for (op, s, c) in each_bw_tool(
        &["-b", "-q", "3", "-n", "100", "-t", "16"],
        "1500",
        common::free_port(),
    ) {
        assert_eq!((s.len(), c.len()), (1, 1), "{op}: {s:?} {c:?}");
        // 3 QPs x 100, each way.
        assert_eq!(field(&c[0], "msgs"), "600", "{op}: {}", c[0]);
        assert_eq!(field(&s[0], "msgs"), "600", "{op}: {}", s[0]);
    }
    // And per size in a sweep.
    let (s, c) = pair(
        &["send", "bw", "-b", "-q", "2", "-a", "-n", "5"],
        common::free_port(),
    );
    assert_eq!((s.len(), c.len()), (23, 23), "{s:?} {c:?}");
    assert!(c.iter().all(|l| field(l, "msgs") == "20"), "{c:?}");
}

#[test]
fn ud_send_tools_in_both_roles() {
    // The loopback device's MTU is 4096: the default size (65536) becomes it, as
    // perftest lowers its own; a larger -s is refused on both sides, as perftest does.
    let (s, c) = pair(
        &["send", "bw", "-c", "UD", "-n", "300"],
        common::free_port(),
    );
    assert_eq!(field(&c[0], "size"), "4096", "{c:?}");
    assert_eq!(field(&c[0], "msgs"), "300", "{c:?}");
    assert_eq!(field(&s[0], "msgs"), "300", "{s:?}");
    // A sweep stops at the MTU: 2 .. 4096 bytes, 12 sizes.
    let (_, c) = pair(
        &["send", "bw", "-c", "UD", "-a", "-n", "20"],
        common::free_port(),
    );
    assert_eq!(c.len(), 12, "{c:?}");
    assert_eq!(field(&c[11], "size"), "4096");
    let (_, c) = pair(
        &["send", "lat", "-c", "UD", "-n", "100", "-s", "64"],
        common::free_port(),
    );
    assert_eq!(field(&c[0], "msgs"), "100", "{c:?}");
    let (s9, c9) = common::perf_processes(
        &["send", "bw", "-c", "UD", "-s", "9000", "--perftest"],
        common::free_port(),
        "127.0.0.1",
    );
    assert!(!s9.status.success() && !c9.status.success());
    assert!(text(&c9).contains("path MTU (4096 bytes)"), "{}", text(&c9));
    // Several QPs, an address handle each.
    let (s, _) = pair(
        &["send", "bw", "-c", "UD", "-q", "2", "-n", "50", "-s", "100"],
        common::free_port(),
    );
    assert_eq!(field(&s[0], "msgs"), "100", "{s:?}");
}

/// `-Q` above `-t` is lowered to it, as perftest's force_dependecies does: the sender
/// stops at `-t` outstanding, so a larger moderation would wait for a completion it
/// never asked for (the run stalled and failed).
#[test]
fn completion_moderation_above_the_depth_is_capped() {
    let (s, c) = pair(
        &[
            "write", "bw", "-n", "1000", "-s", "64", "-Q", "200", "-t", "128",
        ],
        common::free_port(),
    );
    assert_eq!((s.len(), c.len()), (1, 1), "{s:?} {c:?}");
    assert_eq!(field(&c[0], "msgs"), "1000");
}

/// The handshake steps have a read timeout (shortened here to 1 s), but the wait for
/// the peer's end of a run does not: an `ib_write_bw -D` client that runs longer than
/// the timeout leaves our server waiting, not failing (it used to time out mid-test).
/// A peer that connects and says nothing still gets a clear error, not a hang.
#[test]
fn the_wait_for_the_end_of_a_run_outlasts_the_handshake_timeout() {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let args = [
        "perf",
        "write",
        "bw",
        "-D",
        "2.5",
        "-s",
        "512",
        "--perftest",
    ];
    let env = ("RVERBS_PERFTEST_PEER_TIMEOUT_MS", "1000");
    let port = common::free_port_s();
    let server = Command::new(bin)
        .args(args)
        .args(["-p", &port, "--json"])
        .env(env.0, env.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = Command::new(bin)
        .args(args)
        .args(["-p", &port, "--json", "127.0.0.1"])
        .env(env.0, env.1)
        .output()
        .unwrap();
    let s = server.wait_with_output().unwrap();
    assert!(
        c.status.success(),
        "client: {}\nserver: {}",
        text(&c),
        text(&s)
    );
    assert!(
        s.status.success(),
        "server: {}\nclient: {}",
        text(&s),
        text(&c)
    );

    let port = common::free_port();
    let port_s = port.to_string();
    let stderr = common::against_silent_server_env(
        port,
        &[
            "perf",
            "write",
            "bw",
            "-n",
            "5",
            "--perftest",
            "-p",
            &port_s,
            "127.0.0.1",
        ],
        env,
    );
    assert!(stderr.contains("perftest exchange"), "{stderr}");
}

/// `-R` (perftest's RDMA CM mode, which implies `--perftest`): the exchange over a
/// CM-connected control QP, the test's QPs connected by the CM, in both roles of a
/// bandwidth tool with several QPs, a sweep, both directions, and the latency tools
/// (each tool's own closing: `ib_write_lat` has no last exchange).
#[test]
fn rdma_cm_mode_in_both_roles() {
    let r = |args: &[&str]| {
        let all: Vec<&str> = ["-R"].into_iter().chain(args.iter().copied()).collect();
        common::perf_pair_lines(&all, common::free_port(), "127.0.0.1")
    };
    let (s, c) = r(&["write", "bw", "-q", "2", "-n", "150", "-s", "3000"]);
    assert_eq!(field(&c[0], "msgs"), "300", "{c:?}");
    assert_eq!(field(&s[0], "msgs"), "300", "{s:?}");
    let (s, c) = r(&["send", "bw", "-n", "200", "-s", "3000"]);
    assert_eq!(field(&c[0], "msgs"), "200", "{c:?}");
    assert_eq!(field(&s[0], "msgs"), "200", "{s:?}");
    let (s, c) = r(&["read", "bw", "-b", "-n", "100", "-s", "1000"]);
    assert_eq!(field(&c[0], "msgs"), "200", "{c:?}");
    assert_eq!(field(&s[0], "msgs"), "200", "{s:?}");
    let (s, c) = r(&["send", "bw", "-a", "-n", "5"]);
    assert_eq!((s.len(), c.len()), (23, 23), "{s:?} {c:?}");
    for op in ["write", "send", "read", "atomic"] {
        let (_, c) = r(&[op, "lat", "-n", "100", "-s", "8"]);
        assert_eq!(c.len(), 1, "{op}: {c:?}");
        assert!(num(&c[0], "p50") > 0.0, "{op}: {}", c[0]);
    }
}

/// `-R` to a port nobody listens on: the CM's reject (reason 8, as the kernel gives),
/// named, once the client has retried for its (here shortened) time.
#[test]
fn rdma_cm_to_a_port_nobody_listens_on_is_rejected() {
    let start = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["perf", "send", "bw", "-R", "-n", "5", "127.0.0.1"])
        .args(["-p", &common::free_port_s()])
        .env("RVERBS_PERFTEST_PEER_TIMEOUT_MS", "1000")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("REJ reason 8"), "{}", text(&o));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    // perftest refuses UC with -R, and so do we.
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["perf", "send", "bw", "-R", "-c", "UC", "127.0.0.1"])
        .args(["-p", &common::free_port_s()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("refuses UC with -R"), "{}", text(&o));
}

/// `-R -c UD`: the test's QPs found by SIDR (port space UDP), sending to the QPN and
/// Q_Key of the SIDR reply; in a latency test the server learns the client's QP
/// from its first SEND (the QPN as immediate data). Both roles, several QPs, a sweep.
#[test]
fn rdma_cm_mode_over_ud_in_both_roles() {
    let r = |args: &[&str]| {
        let all: Vec<&str> = ["-R", "-c", "UD"]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        common::perf_pair_lines(&all, common::free_port(), "127.0.0.1")
    };
    let (s, c) = r(&["send", "bw", "-n", "200", "-s", "1000"]);
    assert_eq!(field(&c[0], "msgs"), "200", "{c:?}");
    assert_eq!(field(&s[0], "msgs"), "200", "{s:?}");
    let (s, c) = r(&["send", "bw", "-q", "2", "-n", "50", "-s", "100"]);
    assert_eq!(field(&s[0], "msgs"), "100", "{s:?} {c:?}");
    let (_, c) = r(&["send", "bw", "-a", "-n", "20"]);
    assert_eq!(c.len(), 12, "{c:?}");
    let (s, c) = r(&["send", "lat", "-n", "100", "-s", "64"]);
    assert_eq!(field(&c[0], "msgs"), "100", "{c:?}");
    assert!(num(&c[0], "p50") > 0.0, "{}", c[0]);
    assert_eq!(s.len(), 1, "{s:?}");
}

/// `-R -c UD` to a port nobody listens on: the control connection is RC in either
/// case (perftest's), so the CM's reject names reason 8; UD stays SEND only.
#[test]
fn rdma_cm_over_ud_to_a_port_nobody_listens_on_is_rejected() {
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args([
            "perf",
            "send",
            "bw",
            "-R",
            "-c",
            "UD",
            "-n",
            "5",
            "127.0.0.1",
        ])
        .args(["-p", &common::free_port_s()])
        .env("RVERBS_PERFTEST_PEER_TIMEOUT_MS", "1000")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("REJ reason 8"), "{}", text(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["perf", "write", "bw", "-R", "-c", "UD", "127.0.0.1"])
        .args(["-p", &common::free_port_s()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("-c UD is for the SEND tools"),
        "{}",
        text(&o)
    );
}
