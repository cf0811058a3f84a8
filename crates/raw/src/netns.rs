//! A veth pair between two network namespaces, created and removed by its owner: what
//! the tests, the example and the benchmark run on. Needs root (`ip netns`, `ip link`).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS…`; the error names the command and carries its stderr.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The Ethernet address of `ifname` in namespace `ns`, as `ip -o link show` prints it.
pub fn link_mac(ns: &str, ifname: &str) -> Result<[u8; 6], String> {
    let out = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show", ifname])
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let bad = || format!("no Ethernet address for {ifname} in {ns}: {text}");
    let at = text.find("link/ether ").ok_or_else(bad)? + "link/ether ".len();
    let mut mac = [0u8; 6];
    let mut parts = text.get(at..at + 17).ok_or_else(bad)?.split(':');
    for b in &mut mac {
        let p = parts.next().ok_or_else(bad)?;
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    Ok(mac)
}

/// Two namespaces `a` and `b`, joined by veth `if_a` (in `a`) — `if_b` (in `b`), both up,
/// IPv6 off (no neighbour discovery or MLD chatter: only the test's frames cross).
pub struct VethPair {
    /// Namespace of end A.
    pub ns_a: String,
    /// Namespace of end B.
    pub ns_b: String,
    /// Interface name of end A.
    pub if_a: String,
    /// Interface name of end B.
    pub if_b: String,
}

impl VethPair {
    /// Creates the pair, or `None` (with a loud message on stderr) when not root. Panics
    /// if `ip` fails while root.
    pub fn new() -> Option<Self> {
        if !crate::has_cap_net_raw() || euid_is_not_root() {
            eprintln!("SKIP: network-namespace test needs root (CAP_NET_ADMIN + CAP_NET_RAW)");
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{}", std::process::id() % 100_000, n);
        let p = Self {
            ns_a: format!("rvfa{tag}"),
            ns_b: format!("rvfb{tag}"),
            if_a: format!("rvfa{tag}"),
            if_b: format!("rvfb{tag}"),
        };
        p.setup().unwrap_or_else(|e| panic!("veth setup: {e}"));
        Some(p)
    }

    fn setup(&self) -> Result<(), String> {
        for ns in [&self.ns_a, &self.ns_b] {
            ip(&["netns", "add", ns])?;
            for key in ["all", "default"] {
                let s = format!("net.ipv6.conf.{key}.disable_ipv6=1");
                let _ = Command::new("ip")
                    .args(["netns", "exec", ns, "sysctl", "-qw", &s])
                    .status();
            }
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&[
            "link", "add", &self.if_a, "type", "veth", "peer", "name", &self.if_b,
        ])?;
        ip(&["link", "set", &self.if_a, "netns", &self.ns_a])?;
        ip(&["link", "set", &self.if_b, "netns", &self.ns_b])?;
        for (ns, ifn) in [(&self.ns_a, &self.if_a), (&self.ns_b, &self.if_b)] {
            let s = format!("net.ipv6.conf.{ifn}.disable_ipv6=1");
            let _ = Command::new("ip")
                .args(["netns", "exec", ns, "sysctl", "-qw", &s])
                .status();
            ip(&["-n", ns, "link", "set", ifn, "up"])?;
        }
        // The carrier comes up asynchronously (linkwatch); frames sent before are lost.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        for (ns, ifn) in [(&self.ns_a, &self.if_a), (&self.ns_b, &self.if_b)] {
            loop {
                let out = Command::new("ip")
                    .args(["-n", ns, "link", "show", ifn])
                    .output()
                    .map_err(|e| e.to_string())?;
                let text = String::from_utf8_lossy(&out.stdout);
                if text.contains("LOWER_UP") && text.contains("state UP") {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(format!("{ifn} in {ns} never came up: {text}"));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        Ok(())
    }

    /// Runs `f` on a thread inside namespace `ns` and returns its result (sockets it
    /// opens stay in that namespace).
    pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = ns.to_string();
        std::thread::spawn(move || {
            crate::enter_netns(&ns).expect("setns");
            f()
        })
        .join()
        .expect("namespace thread")
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and with it the peer.
        let _ = ip(&["netns", "del", &self.ns_a]);
        let _ = ip(&["netns", "del", &self.ns_b]);
    }
}

/// Whether the effective user is not root.
fn euid_is_not_root() -> bool {
    // /proc/self/status "Uid:" real effective saved fs.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|e| e != "0"))
        })
        .unwrap_or(true)
}
