//! The benchmark scripts under `bench/` still build and run: `bench/kernel_floor.sh`
//! with one short round (its C program compiled with warnings on, every mode, and two
//! `rverbs perf send lat` runs of this build). The figures are not judged (no timed
//! tests); every row must be there with a number, and TCP's ratio to itself is 1.

use std::process::Command;

#[test]
fn kernel_floor_script_runs_every_mode() {
    if Command::new("gcc").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no gcc to build bench/kernel_floor.c");
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .arg("bench/kernel_floor.sh")
        .current_dir(root)
        .env("RVERBS", env!("CARGO_BIN_EXE_rverbs"))
        .env("REPS", "1")
        .env("ITERS", "2000")
        .env("DUR", "1")
        .env("PORT", "19380")
        .env("CC", "gcc")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    let value = |prefix: &str| -> (f64, f64) {
        let row = rows
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix:?} in\n{stdout}"));
        let mut nums = row.split_whitespace().rev().take(2);
        let ratio: f64 = nums.next().unwrap().parse().unwrap();
        let p50: f64 = nums.next().unwrap().parse().unwrap();
        (p50, ratio)
    };
    for prefix in [
        "TCP,",
        "UDP, connected",
        "UDP, the device's calls",
        "  the same, the ACK riding",
        "rverbs RC SEND, every SEND signaled",
        "rverbs RC SEND, -Q 100",
    ] {
        let (p50, ratio) = value(prefix);
        assert!(p50 > 0.0 && ratio > 0.0, "{prefix}: {p50} {ratio}");
    }
    assert_eq!(value("TCP,").1, 1.0);
}
