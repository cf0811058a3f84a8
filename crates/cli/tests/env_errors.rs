//! Bad environment variables: exit status 1 and one line that names the variable once
//! and says what it accepts; an empty variable counts as unset.

use std::process::Command;

fn rverbs(env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rverbs"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[track_caller]
fn refused(var: &str, value: &str, args: &[&str], says: &str) {
    let (code, _, err) = rverbs(&[(var, value)], args);
    assert_eq!(code, Some(1), "{var}={value}: {err}");
    assert!(err.contains(&format!("{var}: ")), "{var}={value}: {err}");
    assert_eq!(err.matches(var).count(), 1, "{var}={value}: {err}");
    assert!(err.contains(says), "{var}={value}: {err}");
}

#[test]
fn an_empty_device_list_is_unset() {
    let (code, out, err) = rverbs(&[("RVERBS_DEVICES", "")], &["devinfo", "-l"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\trv_lo\n"), "{out}");
}

#[test]
fn bad_device_lists_are_refused() {
    refused(
        "RVERBS_DEVICES",
        "rv0=lo:99999999",
        &["devinfo", "-l"],
        "MTU 99999999 is outside 336..=65536",
    );
    refused("RVERBS_DEVICES", ",", &["gids"], "names no device");
}

#[test]
fn bad_open_options_are_reported_by_devinfo() {
    refused(
        "RVERBS_FAULTS",
        "loss=abc",
        &["devinfo", "-d", "rv_lo"],
        "RVERBS_FAULTS: loss=abc: not a number",
    );
    refused(
        "RVERBS_ACK_POLICY",
        "sometimes",
        &["devinfo", "-d", "rv_lo"],
        "expected \"coalesce\" or \"every-message\"",
    );
    refused(
        "RVERBS_LOOPBACK_IPV6",
        "yes",
        &["devinfo", "-d", "rv_lo"],
        "expected \"1\" or \"0\"",
    );
}

#[test]
fn the_tools_timeouts_are_checked_at_start_up() {
    for var in [
        "RVERBS_HANDSHAKE_TIMEOUT_MS",
        "RVERBS_PERFTEST_PEER_TIMEOUT_MS",
    ] {
        for bad in ["abc", "0", "-5", "1.5"] {
            let (code, _, err) = rverbs(&[(var, bad)], &["devinfo", "-l"]);
            assert_eq!(code, Some(2), "{var}={bad}: {err}");
            assert!(
                err.contains(&format!("{var}: {bad:?}: expected a whole number")),
                "{var}={bad}: {err}"
            );
            assert_eq!(err.matches(var).count(), 1, "{err}");
        }
        let (code, _, err) = rverbs(&[(var, "")], &["devinfo", "-l"]);
        assert_eq!(code, Some(0), "{var}= (empty): {err}");
    }
}

/// A machine without the system's libibverbs (here: a path that does not exist):
/// the soft devices are still listed, and asking for another device names the library.
#[test]
fn a_missing_system_libibverbs_is_named_when_a_device_is_asked_for() {
    let missing = ("RVERBS_LIBIBVERBS", "/nonexistent-rverbs/libibverbs.so.1");
    let (code, out, err) = rverbs(&[missing], &["devinfo", "-l"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("rv_lo"), "{out}");
    let (code, _, err) = rverbs(&[missing], &["devinfo", "-d", "mlx5_0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("mlx5_0") && err.contains("libibverbs.so.1"),
        "{err}"
    );
    refused("RVERBS_SYSTEM_DEVICES", "maybe", &["devinfo", "-l"], "0");
}
