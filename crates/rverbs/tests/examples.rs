//! Every example runs as two processes (server and client over TCP on loopback, RDMA
//! over the loopback soft device) and checks its own data; this test runs each pair
//! and requires both to succeed.

#[path = "common/child.rs"]
mod child;

use child::{wait_for, Reap};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const EXAMPLES: [&str; 4] = ["rc_send_recv", "rdma_write_read", "atomics", "ud"];

/// target/<profile>/examples, next to this test's deps directory.
fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

/// `cargo test` builds the examples, `cargo test --test examples` does not: build them.
fn build_examples() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    let st = Command::new(cargo)
        .args([
            "build",
            "-q",
            "-p",
            "rverbs",
            "--examples",
            "--profile",
            profile,
        ])
        .status()
        .expect("running cargo build --examples");
    assert!(st.success(), "building the examples failed");
}

pub fn run_pair(bin: &std::path::Path, extra: &[&str]) -> (String, String) {
    let mut server = Reap(
        Command::new(bin)
            .args(["server", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(server.0.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let port = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{bin:?}: unexpected first line {first:?}"))
        .trim()
        .to_string();
    let mut client = Reap(
        Command::new(bin)
            .args(["client", "127.0.0.1", &port])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let cst = wait_for(&mut client.0, Duration::from_secs(60));
    let sst = wait_for(&mut server.0, Duration::from_secs(10));
    let read = |r: Option<&mut dyn std::io::Read>| {
        let mut s = String::new();
        if let Some(r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    };
    let mut sout = read(Some(&mut out));
    sout += &read(
        server
            .0
            .stderr
            .as_mut()
            .map(|e| e as &mut dyn std::io::Read),
    );
    let mut cout = read(
        client
            .0
            .stdout
            .as_mut()
            .map(|e| e as &mut dyn std::io::Read),
    );
    cout += &read(
        client
            .0
            .stderr
            .as_mut()
            .map(|e| e as &mut dyn std::io::Read),
    );
    assert!(
        cst.is_some_and(|s| s.success()) && sst.is_some_and(|s| s.success()),
        "{bin:?}: client {cst:?}, server {sst:?}\n--- server:\n{sout}\n--- client:\n{cout}"
    );
    (sout, cout)
}

#[test]
fn every_example_runs_as_two_processes_and_verifies_its_data() {
    build_examples();
    for name in EXAMPLES {
        let bin = examples_dir().join(name);
        let (s, c) = run_pair(&bin, &[]);
        for out in [&s, &c] {
            assert!(
                out.contains(&format!("{name}: ")),
                "{name}: no closing line\n{out}"
            );
        }
    }
}
