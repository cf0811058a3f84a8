//! C programs (`tests/c/*.c`) compiled against the installed `<infiniband/verbs.h>`
//! and linked with this library, so verbs.h's inlines and the symbol versions the
//! linker records are the ones a real program gets. Each prints `OK` and exits 0, or
//! names the check that failed. Without gcc or libibverbs-dev's headers a test says
//! SKIPPED, and fails when `RVERBS_NO_SKIP` is set (as `kern_layout.rs`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Builds `tests/c/<name>.c`; None (after the SKIPPED note) when gcc or the headers
/// are missing.
fn build(name: &str) -> Option<PathBuf> {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let lib = common::lib_dir();
    let exe = lib.join(name);
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src_dir.join(format!("{name}.c")))
        .arg(format!("-L{}", lib.display()))
        .arg("-l:libibverbs.so.1")
        .arg("-lpthread")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output();
    match out {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) if Path::new("/usr/include/infiniband/verbs.h").exists() => panic!(
            "{name}.c does not build:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        _ => {
            assert!(
                std::env::var_os("RVERBS_NO_SKIP").is_none(),
                "gcc or libibverbs-dev's headers are missing and RVERBS_NO_SKIP is set"
            );
            eprintln!("SKIPPED: needs gcc and libibverbs-dev");
            None
        }
    }
}

/// Builds and runs `tests/c/<name>.c`; it must print OK and exit 0.
fn run(name: &str) {
    let Some(exe) = build(name) else { return };
    finish(name, Command::new(&exe));
}

/// Runs `cmd` (a test program on this library); it must print OK and exit 0 within 60 s.
fn finish(name: &str, mut cmd: Command) {
    let mut child = cmd
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A verb that blocks where it should not would hang the program: 60 s at most.
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{name} hung; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && so.trim_end().ends_with("OK"),
        "{name}: {}\nstdout:\n{so}\nstderr:\n{se}",
        out.status
    );
}

#[test]
fn nonblocking_event_descriptors_give_eagain() {
    run("nonblock");
}

#[test]
fn bad_qp_attributes_caps_and_requests_get_libibverbs_errno() {
    run("qp_errors");
}

/// Fails (create_flow: EPERM) when run without CAP_NET_RAW.
#[test]
#[ignore = "needs root (CAP_NET_RAW for ibv_create_flow); CI runs it with --ignored"]
fn flow_steering_from_c_steers_ud_datagrams() {
    run("flow");
}

/// A RAW_PACKET QP on a context not in raw mode: EOPNOTSUPP with CAP_NET_RAW, EPERM
/// without (uverbs checks the capability before the driver).
#[test]
fn raw_packet_qp_without_raw_mode_gets_libibverbs_errno() {
    let Some(exe) = build("raw") else { return };
    let want = if rverbs_raw::has_cap_net_raw() {
        libc::EOPNOTSUPP
    } else {
        libc::EPERM
    };
    let mut cmd = Command::new(&exe);
    cmd.args(["unsupported", &want.to_string()])
        .env_remove("RVERBS_RAW_IF");
    finish("raw unsupported", cmd);
}

/// Fails (no veth pair) when run without root.
#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn raw_packet_qps_from_c_send_frames_and_receive_through_flows() {
    use std::io::BufRead;
    let Some(exe) = build("raw") else { return };
    let pair =
        rverbs_raw::netns::VethPair::new().expect("needs root: network namespaces and CAP_NET_RAW");
    let in_ns = |ns: &str, ifname: &str, role: &str| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(&exe)
            .arg(role)
            .env("RVERBS_RAW_IF", ifname);
        c
    };
    let mut rx = in_ns(&pair.ns_b, &pair.if_b, "recv")
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // READY once both QPs wait behind their rules, then OK.
    let (tx, lines) = std::sync::mpsc::channel();
    let out = rx.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let ready = lines.recv_timeout(Duration::from_secs(30));
    if ready.as_deref() != Ok("READY") {
        let _ = rx.kill();
        let o = rx.wait_with_output().unwrap();
        panic!(
            "the receiver did not get ready ({ready:?}): {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    finish("raw send", in_ns(&pair.ns_a, &pair.if_a, "send"));
    let start = Instant::now();
    while rx.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = rx.kill();
    let o = rx.wait_with_output().unwrap();
    let last = lines.recv_timeout(Duration::from_secs(1));
    assert!(
        o.status.success() && last.as_deref() == Ok("OK"),
        "raw recv: {} ({last:?}); stderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}
