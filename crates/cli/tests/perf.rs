//! `rverbs perf` between two processes on the loopback soft device: every operation
//! and kind, the sweep, bidirectional and post-list bandwidth, the TCP baseline, and a
//! refused mismatch. The figures themselves are not judged here (no timed tests): the
//! JSON must add up and the message counts must be exact.

mod common;

use common::json_field as field;
use std::process::{Command, Stdio};

fn ok_pair(args: &[&str], port: u16) -> (Vec<String>, Vec<String>) {
    common::perf_pair_lines(args, port, "localhost")
}

#[test]
fn bandwidth_of_every_operation() {
    for op in ["send", "write", "read", "atomic", "tcp"].iter() {
        let (s, c) = ok_pair(
            &[op, "bw", "-n", "300", "-s", "3000", "-t", "16"],
            common::free_port(),
        );
        assert_eq!((s.len(), c.len()), (1, 1), "{op}: {s:?} {c:?}");
        assert_eq!(field(&c[0], "msgs"), "300", "{op}");
        assert_eq!(field(&s[0], "msgs"), "300", "{op}");
        let size = if *op == "atomic" { 8 } else { 3000 };
        assert_eq!(field(&c[0], "bytes"), (300 * size).to_string(), "{op}");
        assert!(field(&c[0], "gbps").parse::<f64>().unwrap() > 0.0);
        assert!(field(&c[0], "cpu_s_per_gb").parse::<f64>().unwrap() > 0.0);
    }
}

#[test]
fn bidirectional_post_list_and_sweep() {
    let (_, c) = ok_pair(
        &["send", "bw", "-b", "-n", "200", "-l", "4", "-t", "32"],
        common::free_port(),
    );
    assert_eq!(field(&c[0], "msgs"), "400");
    let (_, c) = ok_pair(
        &[
            "write", "bw", "-l", "8", "-t", "64", "-n", "1000", "-s", "64",
        ],
        common::free_port(),
    );
    assert_eq!(field(&c[0], "msgs"), "1000");
    let (_, c) = ok_pair(&["tcp", "bw", "-b", "-n", "100"], common::free_port());
    assert_eq!(field(&c[0], "msgs"), "200");
    let (_, c) = ok_pair(&["write", "bw", "-a", "-n", "20"], common::free_port());
    assert_eq!(c.len(), 23);
    assert_eq!(field(&c[22], "size"), (8 << 20).to_string());
    // Duration mode: some messages, whatever the speed.
    let (_, c) = ok_pair(
        &["send", "bw", "-D", "0.2", "-s", "1000"],
        common::free_port(),
    );
    assert!(field(&c[0], "msgs").parse::<u64>().unwrap() > 0);
}

#[test]
fn latency_of_every_operation() {
    for op in ["send", "write", "read", "atomic", "tcp"].iter() {
        let (s, c) = ok_pair(&[op, "lat", "-n", "50", "-s", "100"], common::free_port());
        assert_eq!(field(&c[0], "msgs"), "50", "{op}");
        let lat = &c[0][c[0].find("\"lat_us\"").expect("lat_us")..];
        let (min, p50, max) = (
            field(lat, "min").parse::<f64>().unwrap(),
            field(lat, "p50").parse::<f64>().unwrap(),
            field(lat, "max").parse::<f64>().unwrap(),
        );
        assert!(0.0 < min && min <= p50 && p50 <= max, "{op}: {lat}");
        assert!(!s[0].contains("lat_us"), "the server has no samples");
    }
    let (_, c) = ok_pair(
        &["send", "lat", "-D", "0.2", "-s", "8"],
        common::free_port(),
    );
    assert!(field(&c[0], "msgs").parse::<u64>().unwrap() > 0);
    // Completion moderation (-Q): one SEND / WRITE in 7 signaled, and the last; with
    // -t 16 the SQ holds 17, so unsignaled work must be acknowledged as it goes.
    for op in ["send", "write"].iter() {
        let (s, c) = ok_pair(
            &[op, "lat", "-n", "301", "-Q", "7", "-t", "16", "-s", "8"],
            common::free_port(),
        );
        assert_eq!(field(&c[0], "msgs"), "301", "{op}");
        assert_eq!(s.len(), 1, "{op}");
    }
    let (_, c) = ok_pair(
        &["send", "lat", "-D", "0.2", "-Q", "3", "-s", "8"],
        common::free_port(),
    );
    assert!(field(&c[0], "msgs").parse::<u64>().unwrap() > 0);
}

#[test]
fn mismatched_tests_fail_on_both_sides() {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let port = common::free_port_s();
    let server = Command::new(bin)
        .args(["perf", "write", "bw", "-p", &port])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = Command::new(bin)
        .args(["perf", "read", "bw", "-p", &port, "localhost"])
        .output()
        .unwrap();
    let s = server.wait_with_output().unwrap();
    assert!(!c.status.success() && !s.status.success());
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(err.contains("op=read there, op=write here"), "{err}");
    // Bad options are refused before any connection.
    let o = Command::new(bin)
        .args([
            "perf",
            "send",
            "lat",
            "-b",
            "-p",
            &common::free_port_s(),
            "localhost",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("bandwidth tests"));
}

/// Packets sent again are reported (`resent_packets`, both sides' sum, and a note on
/// stderr): some when the writer's datagrams are lost
/// (`RVERBS_FAULTS` on the client, which sends).
#[test]
fn resent_packets_are_reported() {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let args = ["perf", "write", "bw", "-n", "200", "-s", "3000", "-t", "16"];
    let run = |port: &str, faults: &str| {
        let server = Command::new(bin)
            .args(args)
            .args(["-p", port, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let c = Command::new(bin)
            .args(args)
            .args(["-p", port, "--json", "localhost"])
            .env("RVERBS_FAULTS", faults)
            .output()
            .unwrap();
        let s = server.wait_with_output().unwrap();
        assert!(c.status.success() && s.status.success(), "{c:?} {s:?}");
        let line = |o: &std::process::Output| {
            let out = String::from_utf8_lossy(&o.stdout).to_string();
            let n: u64 = field(out.trim(), "resent_packets").parse().unwrap();
            (n, String::from_utf8_lossy(&o.stderr).to_string())
        };
        (line(&c), line(&s))
    };
    // (A clean run resends nothing unless an ACK is later than the retransmission
    // timeout: a machine that stalls a process that long.)
    let ((clean, _), (clean_s, _)) = run(&common::free_port_s(), "");
    assert_eq!(clean, clean_s);
    let ((lossy, err), (lossy_s, _)) = run(&common::free_port_s(), "loss=0.05,seed=3");
    assert!(lossy > clean, "{lossy} {clean}: {err}");
    assert_eq!(lossy, lossy_s, "both sides report the sum");
    assert!(err.contains("packets sent again"), "{err}");
}

/// Opcodes of the RoCE packets in a capture, as `rverbs pcap decode` names them, with
/// how often each occurs.
fn opcodes_in(pcap: &std::path::Path) -> std::collections::BTreeMap<String, usize> {
    let out = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["pcap", "decode"])
        .arg(pcap)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::output_text(&out));
    let mut n = std::collections::BTreeMap::new();
    for w in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Some(op) = w.strip_prefix("RC_") {
            *n.entry(op.trim_end_matches(',').to_string()).or_insert(0) += 1;
        }
    }
    n
}

#[test]
fn atomic_type_picks_the_operation_on_the_wire() {
    let dir = std::env::temp_dir().join(format!("rverbs-perf-atomic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = env!("CARGO_BIN_EXE_rverbs");
    for (kind, ty, op) in [
        ("bw", "CMP_AND_SWAP", "COMPARE_SWAP"),
        ("lat", "CMP_AND_SWAP", "COMPARE_SWAP"),
        ("bw", "FETCH_AND_ADD", "FETCH_ADD"),
    ]
    .into_iter()
    {
        let port = common::free_port_s();
        let pcap = dir.join(format!("{kind}-{ty}.pcap"));
        let args = ["perf", "atomic", kind, "-A", ty, "-n", "150", "-p", &port];
        let server = Command::new(bin)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let client = Command::new(bin)
            .args(args)
            .args(["--json", "localhost"])
            .env("RVERBS_PCAP", &pcap)
            .output()
            .unwrap();
        let server = server.wait_with_output().unwrap();
        let both = || {
            format!(
                "client:\n{}\nserver:\n{}",
                common::output_text(&client),
                common::output_text(&server)
            )
        };
        assert!(client.status.success(), "{}", both());
        assert!(server.status.success(), "{}", both());
        let line = String::from_utf8_lossy(&client.stdout)
            .lines()
            .last()
            .unwrap()
            .to_string();
        assert_eq!(field(&line, "msgs"), "150", "{kind} {ty}");
        let ops = opcodes_in(&pcap);
        assert_eq!(ops.get(op), Some(&150), "{kind} {ty}: {ops:?}");
        let other = if op == "FETCH_ADD" {
            "COMPARE_SWAP"
        } else {
            "FETCH_ADD"
        };
        assert_eq!(ops.get(other), None, "{kind} {ty}: {ops:?}");
    }
    // Anything else is refused with perftest's names in the message.
    let out = Command::new(bin)
        .args([
            "perf",
            "atomic",
            "bw",
            "-A",
            "SWAP",
            "-p",
            &common::free_port_s(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("CMP_AND_SWAP"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A peer that connects to the control port and says nothing gets a clear error after
/// the handshake timeout (shortened here to 1 s), not a hang.
#[test]
fn silent_peer_times_out() {
    let port = common::free_port();
    let port_s = port.to_string();
    let args = ["perf", "write", "bw", "-n", "5", "-p", &port_s, "127.0.0.1"];
    let text = common::against_silent_server(port, &args);
    assert!(text.contains("the peer sent nothing"), "{text}");
}

/// The wait for the peer's end of a run has no handshake timeout: a `-D 2` run with
/// a 1 s handshake timeout completes on both sides.
#[test]
fn a_run_outlasts_the_handshake_timeout() {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let port = common::free_port_s();
    let args = ["perf", "tcp", "bw", "-D", "2", "-s", "1000", "-p", &port];
    let env = ("RVERBS_HANDSHAKE_TIMEOUT_MS", "1000");
    let server = std::process::Command::new(bin)
        .args(args)
        .env(env.0, env.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = std::process::Command::new(bin)
        .args(args)
        .arg("127.0.0.1")
        .env(env.0, env.1)
        .output()
        .unwrap();
    let s = server.wait_with_output().unwrap();
    let t = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).to_string();
    assert!(c.status.success(), "client: {}\nserver: {}", t(&c), t(&s));
    assert!(s.status.success(), "server: {}", t(&s));
}
