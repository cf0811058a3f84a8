//! Bad sizes, counts and MTUs on the command line: a clear error and clap's exit
//! status 2, never an abort or a silently changed value.

use std::process::Command;

fn rverbs(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[track_caller]
fn refused(args: &[&str], says: &str) {
    let (code, err) = rverbs(args);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
    assert!(!err.contains("memory allocation"), "{args:?}: {err}");
}

#[test]
fn sizes_above_the_bound_are_refused_before_any_allocation() {
    refused(&["demo", "--size", "99999999999"], "not in 1..=67108864");
    refused(
        &["perf", "write", "bw", "-s", "99999999999"],
        "not in 1..=1073741824",
    );
    refused(
        &["pingpong", "rc", "-s", "99999999999"],
        "not in 1..=1073741824",
    );
    refused(&["demo", "--size", "12x"], "is not a size in bytes");
}

#[test]
fn zero_sizes_and_counts_are_refused_not_changed() {
    refused(&["demo", "-s", "0"], "0 is not in 1..=");
    refused(&["demo", "-n", "0"], "0 is not in 1..");
    refused(&["perf", "write", "bw", "-s", "0"], "0 is not in 1..=");
    refused(&["perf", "send", "lat", "-n", "0"], "0 is not in 1..");
    refused(&["pingpong", "rc", "-n", "0"], "0 is not in 1..");
}

#[test]
fn an_invalid_mtu_names_the_valid_ones() {
    refused(
        &["pingpong", "rc", "-m", "1500"],
        "invalid MTU 1500 (valid: 256, 512, 1024, 2048, 4096)",
    );
    refused(
        &["perf", "write", "bw", "-m", "1500"],
        "256, 512, 1024, 2048, 4096",
    );
}

#[test]
fn buffers_of_many_qps_are_bounded_too() {
    let (code, err) = rverbs(&[
        "perf",
        "write",
        "bw",
        "--perftest",
        "-q",
        "4096",
        "-s",
        "1048576",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("exceed 1073741824 bytes of buffers"), "{err}");
}

#[test]
fn the_smallest_sizes_are_honoured() {
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["demo", "-s", "1", "-n", "1"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("SEND/RECV   1 x 1 bytes: data verified"),
        "{out}"
    );
}

#[test]
fn devinfo_lists_names_and_refuses_port_0() {
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["devinfo", "-l"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let first = out.lines().next().unwrap();
    assert!(
        first.ends_with(" found:") && first.contains(" HCA"),
        "{out}"
    );
    assert!(out.lines().any(|l| l == "\trv_lo"), "{out}");
    refused(&["devinfo", "-i", "0"], "0 is not in 1..=255");
    let o = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(["devinfo", "-d", "rv_lo", "-i", "1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("\t\tport:\t1\n"));
}
