//! `rverbs rping` and `rverbs udaddy` as two processes over the loopback device,
//! with and without a lossy link (RVERBS_FAULTS), and their refusals.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn rverbs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rverbs"))
}

/// Starts a server; returns it, the address it says it listens on, and its stderr
/// (filled while it runs).
fn server(args: &[&str], faults: Option<&str>) -> (Child, String, Arc<Mutex<String>>) {
    let mut c = rverbs();
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(f) = faults {
        c.env("RVERBS_FAULTS", f);
    }
    let mut child = c.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .split("device address ")
        .nth(1)
        .and_then(|s| s.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    // Keep reading its stderr so it never blocks on a full pipe.
    let text = Arc::new(Mutex::new(String::new()));
    let t = text.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        while err.read_line(&mut l).unwrap_or(0) > 0 {
            t.lock().unwrap().push_str(&l);
            l.clear();
        }
    });
    (child, addr, text)
}

fn wait(mut c: Child, limit: Duration) -> std::process::Output {
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn free_port() -> u16 {
    // A CM port belongs to one context (each server process has its own 127.0.0.x),
    // so any number works; one from the clock, so runs differ.
    20000
        + (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
            % 20000) as u16
}

fn rping_pair(faults: Option<&str>, count: &str, size: &str) {
    let port = free_port().to_string();
    let (srv, addr, srv_err) = server(&["rping", "-s", "-v", "-p", &port, "-S", size], faults);
    let mut c = rverbs();
    c.args([
        "rping", "-c", "-a", &addr, "-p", &port, "-C", count, "-S", size, "-v", "-V", "--stats",
    ]);
    if let Some(f) = faults {
        c.env("RVERBS_FAULTS", f);
    }
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let n: usize = count.parse().unwrap();
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("ping data: rdma-ping-"))
            .count(),
        n
    );
    assert!(stderr.contains("rverbs cm: CmStats"), "{stderr}");
    let s = wait(srv, Duration::from_secs(30));
    let sout = String::from_utf8_lossy(&s.stdout);
    let serr = srv_err.lock().unwrap().clone();
    if faults.is_some() && s.status.code() == Some(1) {
        // The one failure a lossy link may cause after the last ping: the client's
        // ACK of the server's last SEND and its DREQ both lost. The client's QP is in
        // ERR by then and drops the resends, whose retries (8 x 0.54 s, the local ACK
        // timeout rdma_cm sets on RoCE) end before the DREQ's resend (4.6 s): the
        // SEND completes with RETRY_EXC_ERR, as with the kernel's CM and rxe.
        assert!(
            serr.contains("cq completion failed status 12"),
            "{sout}\n{serr}"
        );
    } else {
        assert_eq!(s.status.code(), Some(0), "{sout}\n{serr}");
    }
    assert_eq!(
        sout.lines()
            .filter(|l| l.starts_with("server ping data: "))
            .count(),
        n
    );
}

#[test]
fn rping_client_and_server_processes() {
    rping_pair(None, "10", "2000");
}

#[test]
fn rping_over_a_lossy_link() {
    // 10 % of the datagrams of both processes lost: CM MADs are resent by the CM,
    // RDMA packets by the transport; every ping still checks.
    rping_pair(Some("loss=0.1,seed=5"), "5", "100");
}

#[test]
fn udaddy_client_and_server_processes() {
    let port = free_port().to_string();
    let (srv, addr, _) = server(&["udaddy", "--port", &port, "-C", "5"], None);
    let out = rverbs()
        .args(["udaddy", "-s", &addr, "--port", &port, "-C", "5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.ends_with("data transfers complete\ntest complete\nreturn status 0\n"),
        "{stdout}"
    );
    let s = wait(srv, Duration::from_secs(30));
    assert!(String::from_utf8_lossy(&s.stdout).contains("return status 0"));
}

#[test]
fn rping_refusals() {
    let run = |args: &[&str]| {
        let o = rverbs().args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["rping", "-s", "-S", "25"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("Invalid size 25 (valid range is 26 to 65536)"),
        "{err}"
    );
    let (code, _) = run(&["rping", "-s", "-c"]);
    assert_eq!(code, Some(2));
    let (code, err) = run(&["rping", "-c"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("-a"), "{err}");
    // Nobody listens: the peer's CM answers REJ "invalid service ID" (8).
    let (srv, addr, _) = server(&["rping", "-s", "-p", &free_port().to_string()], None);
    let nobody = free_port().to_string();
    let (code, err) = run(&["rping", "-c", "-a", &addr, "-p", &nobody, "-C", "1"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("RDMA_CM_EVENT_REJECTED, error 8"), "{err}");
    let mut srv = srv;
    let _ = srv.kill();
    let _ = srv.wait();
}
