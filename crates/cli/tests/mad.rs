//! MAD tools between processes on the loopback soft device (each process binds its own
//! 127.0.0.x:4791): `perfquery --gid` shows a peer's counters equal to the traffic it
//! exchanged and `-R` resets them; a BM Set with a wrong B_Key from process A makes B
//! send Trap 259 to C, the trap destination, naming A's GID and QP; the right key works.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rverbs")
}

/// Lines of a child's pipe, as they come.
fn lines<R: std::io::Read + Send + 'static>(r: R) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for(rx: &mpsc::Receiver<String>, prefix: &str) -> String {
    loop {
        let l = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no line starting with {prefix:?}"));
        if let Some(i) = l.find(prefix) {
            return l[i..].to_string();
        }
    }
}

fn counters(line: &str) -> HashMap<String, u64> {
    line.trim_start_matches("rverbs counters:")
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn perf_fields(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim_start_matches('.').parse().ok()?)))
        .collect()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn perfquery_over_the_wire_counts_the_traffic_and_resets() {
    let port = &common::free_port_s();
    let mut server = Command::new(bin())
        .args(["pingpong", "rc", "-p", port, "-n", "40", "-s", "3000"])
        .args(["--stats", "--linger", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server_err = lines(server.stderr.take().unwrap());
    let server = Killed(server);
    let mut client = None;
    for _ in 0..50 {
        let out = Command::new(bin())
            .args([
                "pingpong", "rc", "-p", port, "-n", "40", "-s", "3000", "--stats",
            ])
            .arg("localhost")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if !out.status.success() && err.contains("Couldn't connect") {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert!(out.status.success(), "client failed: {err}");
        client = Some((String::from_utf8_lossy(&out.stdout).to_string(), err));
        break;
    }
    let (c_out, c_err) = client.expect("server never listened");
    let gid = c_out
        .lines()
        .find(|l| l.contains("remote address"))
        .and_then(|l| l.rsplit("GID ").next())
        .unwrap()
        .trim()
        .to_string();
    let c = counters(
        c_err
            .lines()
            .find(|l| l.starts_with("rverbs counters"))
            .unwrap(),
    );
    let s = counters(&wait_for(&server_err, "rverbs counters"));
    // What one side sent, the other received (loopback loses nothing). Each side
    // prints its counts when its own run ends, so what either sent after the other
    // printed (a tail-loss probe or ACK request on a loaded machine, a resend, and
    // the answers to them) may be missing from the other's: at most that many.
    let late: u64 = [&c, &s]
        .iter()
        .map(|x| x["tail_loss_probes"] + x["ack_nudges"] + x["retransmitted_packets"])
        .sum();
    for (tx, rx, dir) in [(&c, &s, "client -> server"), (&s, &c, "server -> client")] {
        let (sent, got) = (tx["tx_packets"], rx["rx_packets"]);
        assert!(
            got <= sent && sent - got <= late,
            "{dir}: {sent} packets sent, {got} received, {late} sent late"
        );
        if got == sent {
            assert_eq!(rx["rx_bytes"], tx["tx_bytes"], "{dir}");
        }
    }
    assert!(s["rx_bytes"] > 40 * 3000);

    // perfquery asks ClassPortInfo, then the counters: when the server answers the
    // second, it has received two 280-byte MADs and sent one.
    let (ok, text) = run(&["perfquery", "-x", "--gid", &gid]);
    assert!(ok, "{text}");
    assert!(text.contains("# Port extended counters: GID"), "{text}");
    let f = perf_fields(&text);
    assert_eq!(f["PortRcvPkts"], s["rx_packets"] + 2, "{text}");
    assert_eq!(f["PortXmitPkts"], s["tx_packets"] + 1, "{text}");
    assert_eq!(f["PortRcvData"], (s["rx_bytes"] + 2 * 280) / 4, "{text}");
    assert_eq!(f["PortXmitData"], (s["tx_bytes"] + 280) / 4, "{text}");
    assert_eq!(f["PortRcvErrors"], 0);
    // The 32-bit PortCounters agree (two more MADs each way since).
    let (ok, text) = run(&["perfquery", "--gid", &gid]);
    assert!(ok, "{text}");
    let f = perf_fields(&text);
    assert_eq!(f["PortRcvPkts"], s["rx_packets"] + 4, "{text}");
    assert_eq!(f["PortXmitPkts"], s["tx_packets"] + 3, "{text}");

    // -R resets; afterwards only the next query's MADs count.
    let (ok, text) = run(&["perfquery", "-x", "-R", "--gid", &gid]);
    assert!(ok && text.contains("reset"), "{text}");
    let (ok, text) = run(&["perfquery", "-x", "--gid", &gid]);
    assert!(ok, "{text}");
    let f = perf_fields(&text);
    assert_eq!((f["PortRcvPkts"], f["PortXmitPkts"]), (2, 2), "{text}");
    drop(server);

    // Nobody at that address any more: a clear error, not a hang.
    let (ok, text) = run(&["perfquery", "--gid", &gid]);
    assert!(!ok && text.contains("no answer"), "{text}");
}

#[test]
fn wrong_b_key_makes_trap_259_at_the_trap_destination() {
    let mut b = Command::new(bin())
        .args(["mad", "serve", "--bkey", "0x5ec2e7"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let b_out = lines(b.stdout.take().unwrap());
    let b_in = b.stdin.take().unwrap();
    let _b = Killed(b);
    let b_gid = wait_for(&b_out, "serving gid ")["serving gid ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let mut c = Command::new(bin())
        .args(["mad", "listen-traps", "--count", "1", "--timeout", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let c_out = lines(c.stdout.take().unwrap());
    let c = Killed(c);
    let c_gid = wait_for(&c_out, "listening on gid ")["listening on gid ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();

    // `rverbs mad bm-set` at B with a B_Key and one option.
    let bm_set = |bkey: &str, opt: &str, val: &str| {
        run(&["mad", "bm-set", "--gid", &b_gid, "--bkey", bkey, opt, val])
    };
    // The trap destination is set with the right key.
    let (ok, text) = bm_set("0x5ec2e7", "--trap-dest", &c_gid);
    assert!(ok && text.contains("BM Set accepted"), "{text}");
    // A wrong key: dropped (no answer), and a trap at C naming A.
    let (ok, text) = bm_set("0xbad", "--new-bkey", "1");
    assert!(!ok && text.contains("no answer"), "{text}");
    let a_gid = text
        .lines()
        .find_map(|l| l.strip_prefix("local gid "))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let trap = wait_for(&c_out, "from gid ");
    assert!(trap.contains(&format!("from gid {b_gid} qp 0x1")), "{trap}");
    assert!(trap.contains("trap 259 class 0x05"), "{trap}");
    assert!(
        trap.contains(&format!(
            "bad B_Key 0x0000000000000bad from lid 0 gid {a_gid} qp 0x000001 attempted method 0x02 attr 0x0010"
        )),
        "{trap}"
    );
    assert!(trap.contains(&format!("issuer gid {b_gid}")), "{trap}");
    // The right key: the Set succeeds.
    let (ok, text) = bm_set("0x5ec2e7", "--new-bkey", "0x77");
    assert!(ok && text.contains("BM Set accepted"), "{text}");
    // ... and the new key is the one that works now.
    let (ok, text) = bm_set("0x77", "--trap-dest", &c_gid);
    assert!(ok, "{text}");
    drop(c);
    // B counted each (re)sent bad MAD: 1 + 3 retries.
    let mut b_in = b_in;
    b_in.flush().unwrap();
    drop(b_in);
    let stats = wait_for(&b_out, "gsi received=");
    assert!(stats.contains("bkey_drops=4"), "{stats}");
}
