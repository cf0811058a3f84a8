//! `rverbs pingpong` between two processes on the loopback soft device: RC, UC and UD,
//! message sizes below, at and above the path MTU, with data validation (`-c`) and
//! with completion events (`-e`).

mod common;

use common::server_and_client;
use std::process::Command;

fn pair(args: &[&str], port: u16) -> (String, String) {
    pair_env(args, port, &[])
}

fn pair_env(args: &[&str], port: u16, env: &[(&str, &str)]) -> (String, String) {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let port_s = port.to_string();
    let run = |extra: &[&str]| {
        let mut c = Command::new(bin);
        c.envs(env.iter().copied())
            .arg("pingpong")
            .args(args)
            .args(["-p", &port_s])
            .args(extra);
        c
    };
    // The client retries until the server listens.
    server_and_client(run(&[]), || run(&["localhost"]), 50)
}

#[test]
fn rc_uc_ud_between_processes() {
    let cases: &[(&[&str], &str)] = &[
        (&["rc", "-n", "200", "-s", "100", "-c"], "200 iters in"),
        (
            &["rc", "-n", "100", "-s", "10000", "-c", "-e"],
            "100 iters in",
        ),
        (&["uc", "-n", "200", "-s", "1024", "-c"], "200 iters in"),
        (
            &["uc", "-n", "100", "-s", "5000", "-c", "-e"],
            "100 iters in",
        ),
        (&["ud", "-n", "200", "-s", "1000"], "200 iters in"),
        (&["ud", "-n", "100", "-s", "2048", "-e"], "100 iters in"),
        // The default UD size is 1024 (rdma-core v26+): 100 × 1024 × 2 bytes.
        (&["ud", "-n", "100"], "204800 bytes in"),
    ];
    for (args, want) in cases {
        let (s, c) = pair(args, common::free_port());
        for text in [&s, &c] {
            assert!(text.contains(want), "{args:?}:\n{text}");
            assert!(text.contains("bytes in"), "{args:?}:\n{text}");
            assert!(
                text.contains("remote address: LID 0x0000"),
                "{args:?}:\n{text}"
            );
        }
    }
}

/// Packets lost, duplicated and reordered both ways on both sides: RC still completes
/// every exchange with the data intact on both sides. (Whether the ACK of the very last
/// message is among the losses depends on the seed; the kernel interop suite,
/// interop/recovery.sh, is where that case showed up.)
#[test]
fn rc_recovers_from_loss_on_both_sides() {
    for seed in 1..=2 {
        let faults = format!("loss=0.05,dup=0.02,reorder=0.02,seed={seed}");
        let (s, c) = pair_env(
            &["rc", "-n", "40", "-s", "10000", "-c", "--stats"],
            common::free_port(),
            &[("RVERBS_FAULTS", &faults)],
        );
        for text in [&s, &c] {
            assert!(text.contains("40 iters in"), "{faults}:\n{text}");
            assert!(text.contains("rx_icrc_errors=0"), "{faults}:\n{text}");
            assert!(!text.contains("lost: 0,"), "no loss injected:\n{text}");
        }
    }
}

#[test]
fn bad_arguments_fail_cleanly() {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let out = Command::new(bin)
        .args([
            "pingpong",
            "rc",
            "-m",
            "3000",
            "localhost",
            "-p",
            &common::free_port_s(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = Command::new(bin).args(["pingpong", "xx"]).output().unwrap();
    assert!(!out.status.success());
    let out = Command::new(bin)
        .args([
            "pingpong",
            "ud",
            "-s",
            "100000",
            "-p",
            &common::free_port_s(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than port MTU"));
}

/// `-c` checks that each message is whole and the peer's: a peer sending 50-byte
/// messages to a `-s 100 -c` server is refused at the first one (it used to pass,
/// since the rest of the area still held the pattern written locally).
#[test]
fn check_refuses_a_short_message() {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let port = common::free_port_s();
    let server = Command::new(bin)
        .args(["pingpong", "ud", "-s", "100", "-n", "5", "-c", "-p", &port])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut client = Command::new(bin)
        .args(["pingpong", "ud", "-s", "50", "-n", "5", "-c", "-p", &port])
        .arg("localhost")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let s = server.wait_with_output().unwrap();
    // The client waits for an answer that will not come.
    let _ = client.kill();
    let _ = client.wait();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&s.stdout),
        String::from_utf8_lossy(&s.stderr)
    );
    assert!(!s.status.success(), "{text}");
    assert!(
        text.contains("Error validating received buffer of iteration 0: 90 bytes, expected 140"),
        "{text}"
    );
}

/// A peer that connects and says nothing gets a clear error after the handshake
/// timeout (shortened here to 1 s), on either side, not a hang.
#[test]
fn silent_peer_times_out() {
    use std::time::{Duration, Instant};
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let env = ("RVERBS_HANDSHAKE_TIMEOUT_MS", "1000");
    // Our client against a server that accepts and stays silent.
    let port = common::free_port();
    let port_s = port.to_string();
    let args = ["pingpong", "rc", "-p", &port_s, "127.0.0.1"];
    let text = common::against_silent_server(port, &args);
    assert!(
        text.contains("remote address: the peer sent nothing"),
        "{text}"
    );

    // Our server against a client that connects and stays silent.
    let mut server = Command::new(bin)
        .args(["pingpong", "rc", "-p", &port_s])
        .env(env.0, env.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let c = loop {
        if let Ok(c) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            break c;
        }
        assert!(Instant::now() < deadline, "server never listened");
        std::thread::sleep(Duration::from_millis(50));
    };
    let start = Instant::now();
    let mut done = None;
    while start.elapsed() < Duration::from_secs(5) {
        if let Some(st) = server.try_wait().unwrap() {
            done = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if done.is_none() {
        let _ = server.kill();
    }
    let o = server.wait_with_output().unwrap();
    drop(c);
    let text = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        done.is_some_and(|s| !s.success()),
        "server still waiting: {text}"
    );
    assert!(
        text.contains("remote address: the peer sent nothing"),
        "{text}"
    );
}

/// Waits at most `limit` for `child`; kills it when it is still running. Its status
/// (None: it had to be killed) and its stdout and stderr.
fn wait_bounded(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let start = std::time::Instant::now();
    let mut status = None;
    while start.elapsed() < limit {
        if let Some(st) = child.try_wait().unwrap() {
            status = Some(st);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let o = child.wait_with_output().unwrap();
    (status, common::output_text(&o))
}

/// A server whose client failed (here: `-c` on the client only, so the client refuses
/// the server's unchecked buffer and exits) ends with a clear error within a few
/// seconds instead of waiting (and spinning) for a message that cannot come.
#[test]
fn rc_server_ends_when_its_client_fails() {
    use std::process::Stdio;
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let port = common::free_port_s();
    let server = Command::new(bin)
        .args(["pingpong", "rc", "-p", &port])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = None;
    for _ in 0..50 {
        let o = Command::new(bin)
            .args(["pingpong", "rc", "localhost", "-c", "-p", &port])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stderr).contains("Couldn't connect") {
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        client = Some(o);
        break;
    }
    let client = client.expect("server never listened");
    let c = common::output_text(&client);
    assert!(!client.status.success(), "{c}");
    assert!(
        c.contains("Error validating received buffer of iteration 0")
            && c.contains("-c needs the peer to run with -c too"),
        "{c}"
    );
    let start = std::time::Instant::now();
    let (status, s) = wait_bounded(server, std::time::Duration::from_secs(10));
    assert!(status.is_some(), "server still running after 10 s:\n{s}");
    assert!(!status.unwrap().success(), "{s}");
    assert!(s.contains("the peer closed the connection after"), "{s}");
    assert!(start.elapsed() < std::time::Duration::from_secs(5), "{s}");
}

/// The same when the client is killed in the middle of a long run, and the other way
/// round: either side ends with the error, the other side's process gone.
#[test]
fn a_killed_peer_ends_the_run_on_the_other_side() {
    use std::process::Stdio;
    let bin = env!("CARGO_BIN_EXE_rverbs");
    for kill_server in [false, true] {
        let port = common::free_port_s();
        let args = ["pingpong", "rc", "-n", "100000000", "-p", &port];
        let server = Command::new(bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let spawn_client = || {
            Command::new(bin)
                .args(args)
                .arg("localhost")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut client = spawn_client();
        // Until the run is under way (the client retries nothing: start it again if
        // the server was not listening yet).
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(300));
            match client.try_wait().unwrap() {
                None => break,
                Some(_) => client = spawn_client(),
            }
        }
        let (mut victim, other) = if kill_server {
            (server, client)
        } else {
            (client, server)
        };
        victim.kill().unwrap();
        let _ = victim.wait();
        let start = std::time::Instant::now();
        let (status, text) = wait_bounded(other, std::time::Duration::from_secs(10));
        assert!(
            status.is_some(),
            "kill_server={kill_server}: still running:\n{text}"
        );
        assert!(!status.unwrap().success(), "{text}");
        assert!(
            text.contains("the peer closed the connection after") || text.contains("Failed status"),
            "kill_server={kill_server}:\n{text}"
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "{text}"
        );
    }
}

/// Against rdma-core's exchange, byte for byte: its server reads `done` with one read
/// that must return exactly 5 bytes, and its client reads at most its 52 bytes. The
/// rverbs side's extra tag (sent only to an rverbs peer) must never reach them.
#[test]
fn the_exchange_with_rdma_core_tools_is_unchanged() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::process::Stdio;
    use std::time::Duration;
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let fake_dest = b"0000:000123:000456:00000000000000000000ffff7f000001\0";
    assert_eq!(fake_dest.len(), 52);

    // An rdma-core server (pp_server_exch_dest) and our client.
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let mut client = Command::new(bin)
        .args(["pingpong", "rc", "-n", "1", "127.0.0.1", "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut msg = [0u8; 52];
    s.read_exact(&mut msg).unwrap();
    s.write_all(fake_dest).unwrap();
    // The client answers at once (no wait for a tag that does not come).
    std::thread::sleep(Duration::from_millis(400));
    let n = s.read(&mut msg).unwrap();
    assert_eq!(
        &msg[..n],
        b"done\0",
        "rdma-core's server needs exactly 5 bytes"
    );
    let _ = client.kill();
    let _ = client.wait();

    // Our server and an rdma-core client (pp_client_exch_dest).
    let port = common::free_port_s();
    let mut server = Command::new(bin)
        .args(["pingpong", "rc", "-n", "1", "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = None;
    for _ in 0..100 {
        if let Ok(c) = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())) {
            s = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut s = s.expect("server never listened");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(fake_dest).unwrap();
    let mut msg = [0u8; 52];
    s.read_exact(&mut msg).unwrap();
    assert_eq!(msg[51], 0, "{msg:?}");
    assert!(msg[..51]
        .iter()
        .all(|b| b.is_ascii_hexdigit() || *b == b':'));
    s.write_all(b"done\0").unwrap();
    drop(s);
    let _ = server.kill();
    let _ = server.wait();
}
