//! No test of the workspace passes silently when it could not run: a test that needs
//! root, tshark, valgrind or reference files is `#[ignore]`d with its reason (so the
//! summary shows it), and a check left out at run time inside another test says
//! `SKIP` and fails under `RVERBS_NO_SKIP` (or `RVERBS_REQUIRE_*`), which CI sets.
//! This scans the test sources for skips that would do neither, and for fixed ports
//! (two runs of the tests on one host must not take each other's).

use std::path::{Path, PathBuf};

/// Skips that depend on the moment, not on the machine (another process holding
/// `[::1]:4791`, a host without IPv6), and the capability check's own helper, which
/// reports its missing tool beside a test that still runs.
const ALLOWED: &[&str] = &[
    "crates/rverbs/tests/lo_ipv6.rs",
    "crates/rverbs/tests/lo_ipv6_ping_pong_order.rs",
    "crates/raw/tests/common/caps.rs",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_run_time_skip_can_be_made_a_failure() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut files = Vec::new();
    for c in std::fs::read_dir(root.join("crates")).unwrap() {
        let tests = c.unwrap().path().join("tests");
        if tests.is_dir() {
            sources(&tests, &mut files);
        }
    }
    assert!(files.len() > 20, "{files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(root).unwrap().display().to_string();
        if ALLOWED.contains(&name.as_str()) || name.ends_with("cli/tests/skips.rs") {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let skips =
                line.contains("SKIP") && (line.contains("eprintln!") || line.contains("println!"));
            // The enforcing check is next to the message: within the ten lines above it.
            let from = i.saturating_sub(10);
            let near: Vec<&str> = text.lines().skip(from).take(i - from + 1).collect();
            let enforced = near
                .iter()
                .any(|l| l.contains("RVERBS_NO_SKIP") || l.contains("RVERBS_REQUIRE_"));
            if skips && !enforced {
                bad.push(format!("{name}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "skips that pass silently (ignore the test with its reason, or fail under \
         RVERBS_NO_SKIP):\n{}",
        bad.join("\n")
    );
}

/// The digits at the start of `s`, when there are any.
fn leading_number(s: &str) -> Option<u32> {
    let d: String = s.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok()
}

#[test]
fn no_test_uses_a_fixed_port() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut files = Vec::new();
    for c in std::fs::read_dir(root.join("crates")).unwrap() {
        let tests = c.unwrap().path().join("tests");
        if tests.is_dir() {
            sources(&tests, &mut files);
        }
    }
    // Where a port is given: `-p` arguments, the bench scripts' PORT, `let port = N`,
    // and binds. 4791 is RoCE v2's own port, 0 the kernel's choice.
    let markers = [
        "\"-p\", \"",
        "\"PORT\", &\"",
        "\"PORT\", \"",
        "let port = ",
        "let port = \"",
        "bind((\"127.0.0.1\", ",
        "bind((ip, ",
        "bind((side, ",
    ];
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(root).unwrap().display().to_string();
        for (i, line) in text.lines().enumerate() {
            for m in markers {
                for (at, _) in line.match_indices(m) {
                    let rest = &line[at + m.len()..];
                    if let Some(n) = leading_number(rest).filter(|&n| n != 0 && n != 4791) {
                        bad.push(format!("{name}:{}: port {n}: {}", i + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "fixed ports in tests (use common::free_port or bind port 0):\n{}",
        bad.join("\n")
    );
    assert_eq!(leading_number("18515\""), Some(18515));
}
