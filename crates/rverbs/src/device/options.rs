//! How a context opens its device ([`OpenOptions`]), and every environment variable
//! of the library, read here and nowhere else.

use crate::error::{Error, Result};
use crate::tap::faults::Faults;
use rverbs_engine::AckPolicy;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Options for [`crate::Context::open_with`]; [`OpenOptions::from_env`] reads them
/// from the environment, as [`crate::Context::open`] does.
///
/// | field | environment variable |
/// |---|---|
/// | `faults` | `RVERBS_FAULTS` (`loss=0.01,dup=..,reorder=..,corrupt=..,delay_us=..,seed=..`) |
/// | `pcap` | `RVERBS_PCAP` (a path; the n-th context of a process writes `name.n.pcap`) |
/// | `raw_interface` | `RVERBS_RAW_IF` |
/// | `ack_policy` | `RVERBS_ACK_POLICY` (`coalesce` / `every-message`) |
/// | `write_pieces` | `RVERBS_WRITE_PIECES` (`1` / `0`) |
/// | `selective_repeat` | `RVERBS_SELECTIVE_REPEAT` (`1` / `0`) |
/// | `same_host` | `RVERBS_SAME_HOST` (`1` / `0`; read even by `open_with` while `None`) |
/// | `udp_trains` | `RVERBS_NO_GSO` (set to anything but `0`: off; read even by `open_with` while `None`) |
/// | `loopback_ipv6_localhost` | `RVERBS_LOOPBACK_IPV6` (`1`: bind `::1`, `0`: not; read even by `open_with` while `None`) |
///
/// (`RVERBS_DEVICES`, the device list, is read by [`crate::devices`], and so are
/// `RVERBS_SYSTEM_DEVICES` (`0`: list no device of the system's libibverbs) and
/// `RVERBS_LIBIBVERBS` (the library to load instead of `libibverbs.so.1`), and by an RDMA CM
/// ID on a system device `RVERBS_LIBRDMACM` (instead of `librdmacm.so.1`); `RVERBS_RAW_RX`,
/// `ring` or `plain`, by a raw-mode open.) A variable set to the empty string counts as
/// unset; any other value it does not accept fails with [`Error::Config`] naming it.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Faults to inject into the device's traffic (default: none).
    pub faults: Option<Faults>,
    /// Write every datagram sent and received to this pcap file (default: none).
    pub pcap: Option<std::path::PathBuf>,
    /// Raw mode: bind the context to this Ethernet interface (in the calling thread's
    /// network namespace) for RAW_PACKET QPs and flow steering ([`crate::Qp::create_flow`]),
    /// as on a NIC. With CAP_NET_RAW the context opens an `AF_PACKET` socket on the
    /// interface at once (an unknown interface fails the open), speaks RoCE v1 through
    /// it, and — when it is the device's own interface — RoCE v2 too, with its own
    /// Ethernet/IP/UDP headers, exact ICRC checks and ARP / Neighbor Discovery
    /// ([`crate::Context::raw_net_stats`]). Without the capability the context opens
    /// with RoCE v2 on its UDP sockets, and creating a RAW_PACKET QP or a flow fails
    /// with EPERM, as in the kernel. Default: none.
    pub raw_interface: Option<String>,
    /// When the context's RC requesters ask for ACKs (BTH AckReq): coalesced, the
    /// default, or on every message as kernel rxe does (see [`AckPolicy`]).
    pub ack_policy: AckPolicy,
    /// Whether a multi-packet RC WRITE without immediate leaves as WRITE ONLY pieces,
    /// each with its own RETH (`rverbs_engine::Config::write_pieces`). `None`, the
    /// default: the device decides (on for the loopback device when it sends
    /// `UDP_SEGMENT` trains, off elsewhere); `Some` forces it.
    pub write_pieces: Option<bool>,
    /// Whether the context's RC QPs offer selective repeat to their peers
    /// (`rverbs_engine::Config::selective_repeat`): used only between two rverbs
    /// contexts that both turn it on; a peer without it (kernel rxe, a NIC) sees
    /// go-back-N. Default: off.
    pub selective_repeat: bool,
    /// Whether datagrams to other rverbs contexts of this host (and network
    /// namespace) travel through shared memory instead of the kernel's UDP path
    /// ([`crate::Context::same_host_stats`]). `None`, the default:
    /// `RVERBS_SAME_HOST` (on when unset). Never in raw mode.
    pub same_host: Option<bool>,
    /// Whether the loopback device sends trains of datagrams as one `UDP_SEGMENT`
    /// buffer. `None`, the default: on unless `RVERBS_NO_GSO` is set.
    pub udp_trains: Option<bool>,
    /// Whether a loopback context may bind `::1` (one address for the whole host, so
    /// only one context gets it). `None`, the default: `RVERBS_LOOPBACK_IPV6=1`.
    pub loopback_ipv6_localhost: Option<bool>,
}

/// [`OpenOptions`] with every `None` that means "the environment" decided.
pub(crate) struct Resolved {
    pub(crate) faults: Option<Faults>,
    pub(crate) pcap: Option<std::path::PathBuf>,
    pub(crate) raw_interface: Option<String>,
    pub(crate) ack_policy: AckPolicy,
    pub(crate) write_pieces: Option<bool>,
    pub(crate) selective_repeat: bool,
    pub(crate) same_host: bool,
    pub(crate) udp_trains: bool,
    pub(crate) loopback_ipv6_localhost: bool,
}

impl OpenOptions {
    /// The options the environment sets (the table above); an error names the
    /// variable and what it accepts.
    pub fn from_env() -> Result<OpenOptions> {
        Ok(OpenOptions {
            faults: faults(var("RVERBS_FAULTS").as_deref())?,
            pcap: pcap_path(var("RVERBS_PCAP")),
            raw_interface: var("RVERBS_RAW_IF"),
            ack_policy: ack_policy(var("RVERBS_ACK_POLICY").as_deref())?,
            write_pieces: write_pieces(var("RVERBS_WRITE_PIECES").as_deref())?,
            selective_repeat: selective_repeat(var("RVERBS_SELECTIVE_REPEAT").as_deref())?,
            same_host: None,
            udp_trains: None,
            loopback_ipv6_localhost: None,
        })
    }

    pub(crate) fn resolve(&self) -> Result<Resolved> {
        Ok(Resolved {
            faults: self.faults,
            pcap: self.pcap.clone(),
            raw_interface: self.raw_interface.clone(),
            ack_policy: self.ack_policy,
            write_pieces: self.write_pieces,
            selective_repeat: self.selective_repeat,
            same_host: match self.same_host {
                Some(on) => on,
                None => same_host(var("RVERBS_SAME_HOST").as_deref())?,
            },
            udp_trains: match self.udp_trains {
                Some(on) => on,
                None => !no_gso(var("RVERBS_NO_GSO").as_deref())?,
            },
            loopback_ipv6_localhost: match self.loopback_ipv6_localhost {
                Some(on) => on,
                None => loopback_ipv6(var("RVERBS_LOOPBACK_IPV6").as_deref())?,
            },
        })
    }
}

/// Environment variable `name`; unset, empty or not Unicode is `None` (a non-Unicode
/// value is refused by the parsers that see `Some`, so it is read lossily here).
/// `RVERBS_SYSTEM_DEVICES`: whether the system's devices are listed (default yes).
pub(crate) fn system_devices_enabled() -> Result<bool> {
    Ok(switch(
        "RVERBS_SYSTEM_DEVICES",
        var("RVERBS_SYSTEM_DEVICES").as_deref(),
    )?
    .unwrap_or(true))
}

/// `RVERBS_LIBIBVERBS`: the library loaded for system devices instead of the soname.
pub(crate) fn libibverbs_path() -> Option<String> {
    var("RVERBS_LIBIBVERBS")
}

/// `RVERBS_LIBRDMACM`: the library loaded for the RDMA CM of system devices instead of
/// `librdmacm.so.1`.
pub(crate) fn librdmacm_path() -> Option<String> {
    var("RVERBS_LIBRDMACM")
}

pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var_os(name)
        .map(|v| v.to_string_lossy().into_owned())
        .filter(|v| !v.is_empty())
}

/// A `0` / `1` switch of variable `name`: `None` when unset.
fn switch(name: &'static str, v: Option<&str>) -> Result<Option<bool>> {
    match v {
        None => Ok(None),
        Some("1") => Ok(Some(true)),
        Some("0") => Ok(Some(false)),
        Some(other) => Err(bad_env(name, other, "\"1\" or \"0\"")),
    }
}

/// `RVERBS_FAULTS`: a [`Faults`] spec; unset is none.
fn faults(v: Option<&str>) -> Result<Option<Faults>> {
    // The parser's error names the bad item, so only the variable is added.
    v.map(|spec| Faults::parse(spec).map_err(|why| Error::env("RVERBS_FAULTS", why)))
        .transpose()
}

/// `RVERBS_SAME_HOST`: `1` (or unset) or `0`.
fn same_host(v: Option<&str>) -> Result<bool> {
    Ok(switch("RVERBS_SAME_HOST", v)?.unwrap_or(true))
}

/// `RVERBS_NO_GSO`: set (to anything but `0`) turns UDP trains off. Any value is
/// accepted, as the variable's users expect of a `NO_*` flag.
fn no_gso(v: Option<&str>) -> Result<bool> {
    Ok(!matches!(v, None | Some("0")))
}

/// `RVERBS_LOOPBACK_IPV6`: `1` lets a loopback context bind `::1`; `0` (or unset) not.
fn loopback_ipv6(v: Option<&str>) -> Result<bool> {
    Ok(switch("RVERBS_LOOPBACK_IPV6", v)?.unwrap_or(false))
}

/// `RVERBS_ACK_POLICY`: `coalesce` (or unset) or `every-message`.
fn ack_policy(v: Option<&str>) -> Result<AckPolicy> {
    match v {
        None | Some("coalesce") => Ok(AckPolicy::Coalesce),
        Some("every-message") => Ok(AckPolicy::EveryMessage),
        Some(other) => Err(bad_env(
            "RVERBS_ACK_POLICY",
            other,
            "\"coalesce\" or \"every-message\"",
        )),
    }
}

/// `RVERBS_RAW_RX`: `ring` (or unset) or `plain`, the raw device's receive mode.
pub(crate) fn raw_rx(v: Option<&str>) -> Result<rverbs_raw::RxMode> {
    match v {
        None | Some("ring") => Ok(rverbs_raw::RxMode::Ring),
        Some("plain") => Ok(rverbs_raw::RxMode::Plain),
        Some(other) => Err(bad_env("RVERBS_RAW_RX", other, "\"ring\" or \"plain\"")),
    }
}

/// The error of environment variable `var` set to `value`, which is not one of
/// `expected`.
fn bad_env(var: &'static str, value: &str, expected: &str) -> Error {
    Error::env(var, format!("{value:?}: expected {expected}"))
}

/// `RVERBS_WRITE_PIECES`: `1` or `0` forces WRITE pieces on or off; unset leaves the
/// device's default (`None`).
fn write_pieces(v: Option<&str>) -> Result<Option<bool>> {
    switch("RVERBS_WRITE_PIECES", v)
}

/// `RVERBS_SELECTIVE_REPEAT`: `1` offers selective repeat; `0` or unset, not.
fn selective_repeat(v: Option<&str>) -> Result<bool> {
    Ok(switch("RVERBS_SELECTIVE_REPEAT", v)?.unwrap_or(false))
}

/// `RVERBS_PCAP` for the n-th context a process opens: the path itself for the first,
/// then `name.2.pcap`, `name.3.pcap`, ... so contexts never share a file.
fn pcap_path(v: Option<String>) -> Option<std::path::PathBuf> {
    static OPENED: AtomicUsize = AtomicUsize::new(0);
    let base = std::path::PathBuf::from(v?);
    let n = OPENED.fetch_add(1, Ordering::SeqCst) + 1;
    if n == 1 {
        return Some(base);
    }
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = base
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pcap".into());
    Some(base.with_file_name(format!("{stem}.{n}.{ext}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of `r`'s error, which must be `Error::Config` for `var` and name
    /// the variable once.
    fn config_err<T: std::fmt::Debug>(r: Result<T>, var: &str) -> String {
        let e = r.expect_err("the value must be refused");
        assert!(
            matches!(&e, Error::Config { var: v, .. } if *v == var),
            "{e:?}"
        );
        assert_eq!(e.errno(), libc::EINVAL);
        let msg = e.to_string();
        assert_eq!(msg.matches(var).count(), 1, "{msg}");
        assert!(msg.starts_with(&format!("{var}: ")), "{msg}");
        msg
    }

    #[test]
    fn rverbs_faults() {
        assert_eq!(faults(None).unwrap(), None);
        assert_eq!(faults(Some("loss=0.5")).unwrap().unwrap().loss, 0.5);
        let msg = config_err(faults(Some("loss=abc")), "RVERBS_FAULTS");
        assert_eq!(msg, "RVERBS_FAULTS: loss=abc: not a number");
        config_err(faults(Some("typo=1")), "RVERBS_FAULTS");
    }

    #[test]
    fn rverbs_same_host() {
        assert!(same_host(None).unwrap());
        assert!(!same_host(Some("0")).unwrap());
        let msg = config_err(same_host(Some("yes")), "RVERBS_SAME_HOST");
        assert!(msg.contains("\"yes\""), "{msg}");
    }

    #[test]
    fn rverbs_ack_policy() {
        assert_eq!(ack_policy(None).unwrap(), AckPolicy::Coalesce);
        assert_eq!(
            ack_policy(Some("every-message")).unwrap(),
            AckPolicy::EveryMessage
        );
        config_err(ack_policy(Some("always")), "RVERBS_ACK_POLICY");
    }

    #[test]
    fn rverbs_selective_repeat() {
        assert!(!selective_repeat(None).unwrap());
        assert!(selective_repeat(Some("1")).unwrap());
        assert!(!selective_repeat(Some("0")).unwrap());
        config_err(selective_repeat(Some("on")), "RVERBS_SELECTIVE_REPEAT");
    }

    #[test]
    fn rverbs_write_pieces() {
        assert_eq!(write_pieces(None).unwrap(), None);
        assert_eq!(write_pieces(Some("1")).unwrap(), Some(true));
        config_err(write_pieces(Some("on")), "RVERBS_WRITE_PIECES");
    }

    #[test]
    fn rverbs_loopback_ipv6() {
        assert!(!loopback_ipv6(None).unwrap());
        assert!(loopback_ipv6(Some("1")).unwrap());
        assert!(!loopback_ipv6(Some("0")).unwrap());
        config_err(loopback_ipv6(Some("true")), "RVERBS_LOOPBACK_IPV6");
    }

    #[test]
    fn rverbs_raw_rx() {
        assert!(matches!(raw_rx(None), Ok(rverbs_raw::RxMode::Ring)));
        assert!(matches!(
            raw_rx(Some("plain")),
            Ok(rverbs_raw::RxMode::Plain)
        ));
        config_err(raw_rx(Some("fast")), "RVERBS_RAW_RX");
    }

    #[test]
    fn rverbs_no_gso_and_empty_values() {
        assert!(!no_gso(None).unwrap() && !no_gso(Some("0")).unwrap());
        assert!(no_gso(Some("1")).unwrap() && no_gso(Some("yes")).unwrap());
        // An empty variable is unset (`var` filters it before the parsers). The name
        // is this test's own.
        std::env::set_var("RVERBS_OPTIONS_TEST_EMPTY", "");
        assert_eq!(var("RVERBS_OPTIONS_TEST_EMPTY"), None);
        std::env::set_var("RVERBS_OPTIONS_TEST_EMPTY", "x");
        assert_eq!(var("RVERBS_OPTIONS_TEST_EMPTY").as_deref(), Some("x"));
        std::env::remove_var("RVERBS_OPTIONS_TEST_EMPTY");
    }
}
