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
    let mut child = Command::new(&exe)
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
