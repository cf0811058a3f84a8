//! Runs one test of this binary again in a child process without CAP_NET_RAW (shared by
//! the raw veth tests and rverbs' raw_qp tests).

/// Runs test `name` of the current test binary under `setpriv` with CAP_NET_RAW dropped
/// from the inheritable and bounding sets, with `env_var=1` so the child knows its role;
/// the child must pass. Without `setpriv` the check is skipped with a message.
pub fn rerun_without_cap_net_raw(name: &str, env_var: &str) {
    let exe = std::env::current_exe().unwrap();
    let status = std::process::Command::new("setpriv")
        .args(["--inh-caps=-net_raw", "--bounding-set=-net_raw", "--"])
        .arg(exe)
        .args(["--exact", name, "--nocapture"])
        .env(env_var, "1")
        .status();
    match status {
        Ok(s) => assert!(s.success(), "child without CAP_NET_RAW failed"),
        Err(e) => eprintln!("SKIP: setpriv not available ({e})"),
    }
}
