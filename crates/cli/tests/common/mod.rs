//! Shared set-up for the CLI tests: a server and a client process run against each
//! other, and network namespaces (root only).
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A TCP port that was free a moment ago, chosen by the kernel (bind to port 0), never
/// the same twice in one test process: for servers the tests start, so two runs of the
/// tests on one host (or tests of one run) never take each other's ports.
pub fn free_port() -> u16 {
    use std::sync::Mutex;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        // The servers listen on [::] (dual-stack) or 0.0.0.0: the port must be free on
        // both.
        let l = std::net::TcpListener::bind(("::", 0))
            .or_else(|_| std::net::TcpListener::bind(("0.0.0.0", 0)))
            .expect("no free TCP port");
        let port = l.local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The first of `n` consecutive ports that were free a moment ago for TCP and UDP on
/// every address (the bench/ scripts take PORT, PORT+1, ...), starting at a port the
/// kernel chose.
pub fn free_port_range(n: u16) -> u16 {
    let free = |p: u16| {
        std::net::TcpListener::bind(("::", p))
            .or_else(|_| std::net::TcpListener::bind(("0.0.0.0", p)))
            .is_ok()
            && std::net::UdpSocket::bind(("::", p))
                .or_else(|_| std::net::UdpSocket::bind(("0.0.0.0", p)))
                .is_ok()
    };
    loop {
        let first = free_port();
        if first.checked_add(n).is_some() && (1..n).all(|k| free(first + k)) {
            return first;
        }
    }
}

/// [`free_port`] as text, for command lines.
pub fn free_port_s() -> String {
    free_port().to_string()
}

/// Whether the tests run as root (network namespaces need it).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs a command; its failure fails the test.
pub fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?} failed");
}

/// A network namespace this test created (named after `prefix` and the process id);
/// deleted on drop.
pub struct Netns(pub String);

impl Netns {
    /// Creates the namespace, first deleting a stale one of the same name.
    pub fn new(prefix: &str) -> Netns {
        let name = format!("{prefix}{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        sh(&["ip", "netns", "add", &name]);
        Netns(name)
    }

    /// `ip -n <ns> args…`.
    pub fn ip(&self, args: &[&str]) {
        let mut a = vec!["ip", "-n", &self.0];
        a.extend_from_slice(args);
        sh(&a);
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn exec(&self) -> Vec<&str> {
        vec!["ip", "netns", "exec", &self.0]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Starts `server`, then runs `client()` until it stops failing with "Couldn't connect"
/// (at most `tries` runs, 100 ms apart); both must succeed. Returns the server's and
/// the client's stdout followed by stderr.
pub fn server_and_client(
    mut server: Command,
    mut client: impl FnMut() -> Command,
    tries: usize,
) -> (String, String) {
    let srv = server
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client_out = None;
    for _ in 0..tries {
        let out = client().output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        if !out.status.success() && text.contains("Couldn't connect") {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        client_out = Some(out);
        break;
    }
    let client = client_out.expect("server never listened");
    let srv = srv.wait_with_output().unwrap();
    let both = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (s, c) = (both(&srv), both(&client));
    assert!(srv.status.success(), "server failed:\n{s}\nclient:\n{c}");
    assert!(client.status.success(), "client failed:\n{c}\nserver:\n{s}");
    (s, c)
}

/// A finished process's stdout then stderr, for failure messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `rverbs perf ARGS -p PORT --json` as a server and as the client of `host`
/// (which retries its connection while the server starts); (server, client) outputs.
pub fn perf_processes(args: &[&str], port: u16, host: &str) -> (Output, Output) {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let p = port.to_string();
    let server = Command::new(bin)
        .arg("perf")
        .args(args)
        .args(["-p", &p, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::new(bin)
        .arg("perf")
        .args(args)
        .args(["-p", &p, "--json", host])
        .output()
        .unwrap();
    (server.wait_with_output().unwrap(), client)
}

/// [`perf_processes`], both of which must succeed; their stdout lines.
pub fn perf_pair_lines(args: &[&str], port: u16, host: &str) -> (Vec<String>, Vec<String>) {
    let (s, c) = perf_processes(args, port, host);
    assert!(
        s.status.success(),
        "server {args:?}:\n{}\nclient:\n{}",
        output_text(&s),
        output_text(&c)
    );
    assert!(
        c.status.success(),
        "client {args:?}:\n{}\nserver:\n{}",
        output_text(&c),
        output_text(&s)
    );
    let lines = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    (lines(&s), lines(&c))
}

/// The raw text of `key`'s value in a flat JSON line (up to the next `,` or `}`).
pub fn json_field<'a>(line: &'a str, key: &str) -> &'a str {
    let k = format!("\"{key}\":");
    let at = line.find(&k).unwrap_or_else(|| panic!("{key} in {line}")) + k.len();
    let rest = &line[at..];
    &rest[..rest.find([',', '}']).unwrap_or(rest.len())]
}

/// Runs `rverbs ARGS` (a client of a TCP exchange on 127.0.0.1:`port`) against a server
/// that accepts and then says nothing for 5 s, with the handshake timeout shortened to
/// 1 s: the run must fail within 4 s. Returns its stderr.
pub fn against_silent_server(port: u16, args: &[&str]) -> String {
    against_silent_server_env(port, args, ("RVERBS_HANDSHAKE_TIMEOUT_MS", "1000"))
}

/// [`against_silent_server`] with `env` (a timeout of 1 s) set for the run instead.
pub fn against_silent_server_env(port: u16, args: &[&str], env: (&str, &str)) -> String {
    use std::time::{Duration, Instant};
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        std::thread::sleep(Duration::from_secs(5));
        drop(s);
    });
    let start = Instant::now();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(args)
        .env(env.0, env.1)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    let _ = t.join();
    String::from_utf8_lossy(&o.stderr).to_string()
}
