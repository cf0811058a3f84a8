//! `127.0.0.1` on the loopback device: every context there has its own `127.0.0.x`
//! (x ≥ 2), so nobody's GID is `127.0.0.1`, yet programs connect to it (rping
//! `-a 127.0.0.1`, as with the kernel's rxe on lo). A loopback listener therefore
//! announces itself host-wide: it binds an abstract Unix socket named after its port
//! space, port and address, which the kernel lists in `/proc/net/unix` and releases
//! when the process exits; a connection to `127.0.0.1` finds the listener's address
//! there. Abstract names belong to the network namespace, as the addresses do.
//! With several listeners on one port (one per context), `127.0.0.1` reaches one of
//! them.

use std::net::{IpAddr, Ipv4Addr};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};

use super::PortSpace;

/// The address programs use for "this host".
pub(super) const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn prefix(ps: PortSpace, port: u16) -> String {
    format!("rverbs-cm/{:04x}/{port}/", ps.number())
}

/// Announces a listener on `port` of `ps` at `ip` (its context's address); held for as
/// long as it listens. `None` when the name cannot be bound (then `127.0.0.1` does not
/// reach this listener; its own address still does).
pub(super) fn announce(ps: PortSpace, port: u16, ip: IpAddr) -> Option<UnixDatagram> {
    let name = format!("{}{ip}", prefix(ps, port));
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).ok()?;
    UnixDatagram::bind_addr(&addr).ok()
}

/// [`find`], waiting up to `wait` for a listener to be announced. A connection to
/// `127.0.0.1` that finds nobody waits a little before it is rejected (reason 8, as the
/// kernel answers a REQ nobody listens for): a kernel's REQ and REJ take a round trip,
/// in which a server that is about to listen again (perftest listens a second time
/// right after its parameter exchange) does so; an answer here with no round trip
/// would reject clients that a kernel would connect.
pub(super) fn find_within(ps: PortSpace, port: u16, wait: std::time::Duration) -> Option<IpAddr> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if let Some(ip) = find(ps, port) {
            return Some(ip);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The address of a loopback listener on `port` of `ps`, from `/proc/net/unix`.
pub(super) fn find(ps: PortSpace, port: u16) -> Option<IpAddr> {
    let text = std::fs::read_to_string("/proc/net/unix").ok()?;
    find_in(&text, ps, port)
}

fn find_in(text: &str, ps: PortSpace, port: u16) -> Option<IpAddr> {
    let want = format!("@{}", prefix(ps, port));
    text.lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter_map(|p| p.strip_prefix(&want))
        .find_map(|ip| ip.parse::<IpAddr>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_found_by_port_space_and_port() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 123 @rverbs-cm/0106/7174/127.0.0.77\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 124 @rverbs-cm/0111/7174/127.0.0.78\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 125 /run/systemd/notify\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 126 @rverbs-cm/0106/71740/127.0.0.79\n";
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(find_in(text, PortSpace::Tcp, 7174), Some(ip("127.0.0.77")));
        assert_eq!(find_in(text, PortSpace::Udp, 7174), Some(ip("127.0.0.78")));
        assert_eq!(find_in(text, PortSpace::Tcp, 71), None);
        assert_eq!(find_in(text, PortSpace::Tcp, 7175), None);
    }

    #[test]
    fn an_announced_listener_is_in_proc_net_unix_until_dropped() {
        // A port of this test's own: the pid keeps concurrent runs apart.
        let port = 40000 + (std::process::id() % 20000) as u16;
        let ip: IpAddr = "127.0.0.201".parse().unwrap();
        let held = announce(PortSpace::Udp, port, ip).expect("an abstract name binds");
        assert_eq!(find(PortSpace::Udp, port), Some(ip));
        assert_eq!(find(PortSpace::Tcp, port), None);
        drop(held);
        assert_eq!(find(PortSpace::Udp, port), None);
    }
}
