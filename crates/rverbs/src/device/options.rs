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
/// | `same_host` | `RVERBS_SAME_HOST` (`1` / `0`; read even by `open_with` while `None`) |
/// | `udp_trains` | `RVERBS_NO_GSO` (set: off; read even by `open_with` while `None`) |
/// | `loopback_ipv6_localhost` | `RVERBS_LOOPBACK_IPV6` (`1`: bind `::1`; read even by `open_with` while `None`) |
///
/// (`RVERBS_DEVICES`, the device list, is read by [`crate::devices`].)
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
    pub(crate) same_host: bool,
    pub(crate) udp_trains: bool,
    pub(crate) loopback_ipv6_localhost: bool,
}

impl OpenOptions {
    /// The options the environment sets (the table above); an error names the
    /// variable and what it accepts.
    pub fn from_env() -> Result<OpenOptions> {
        Ok(OpenOptions {
            faults: Faults::from_env().map_err(|e| Error::env("RVERBS_FAULTS", e))?,
            pcap: pcap_path_from_env(),
            raw_interface: std::env::var("RVERBS_RAW_IF")
                .ok()
                .filter(|s| !s.is_empty()),
            ack_policy: ack_policy_from_env()?,
            write_pieces: write_pieces_from_env()?,
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
            same_host: match self.same_host {
                Some(on) => on,
                None => same_host_from_env()?,
            },
            udp_trains: self
                .udp_trains
                .unwrap_or_else(|| std::env::var_os("RVERBS_NO_GSO").is_none()),
            loopback_ipv6_localhost: self
                .loopback_ipv6_localhost
                .unwrap_or_else(|| std::env::var("RVERBS_LOOPBACK_IPV6").is_ok_and(|v| v == "1")),
        })
    }
}

/// `RVERBS_SAME_HOST`: `1` (or unset/empty) or `0`.
fn same_host_from_env() -> Result<bool> {
    match std::env::var("RVERBS_SAME_HOST").as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(other) => Err(bad_env("RVERBS_SAME_HOST", other, "\"1\" or \"0\"")),
    }
}

/// `RVERBS_ACK_POLICY`: `coalesce` (or unset/empty) or `every-message`.
fn ack_policy_from_env() -> Result<AckPolicy> {
    match std::env::var("RVERBS_ACK_POLICY").as_deref() {
        Err(_) | Ok("") | Ok("coalesce") => Ok(AckPolicy::Coalesce),
        Ok("every-message") => Ok(AckPolicy::EveryMessage),
        Ok(other) => Err(bad_env(
            "RVERBS_ACK_POLICY",
            other,
            "\"coalesce\" or \"every-message\"",
        )),
    }
}

/// The error of environment variable `var` set to `value`, which is not one of
/// `expected`.
fn bad_env(var: &'static str, value: &str, expected: &str) -> Error {
    Error::env(var, format!("{value:?}: expected {expected}"))
}

/// `RVERBS_WRITE_PIECES`: `1` or `0` forces WRITE pieces on or off; unset or empty
/// leaves the device's default (`None`).
fn write_pieces_from_env() -> Result<Option<bool>> {
    match std::env::var("RVERBS_WRITE_PIECES").as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("1") => Ok(Some(true)),
        Ok("0") => Ok(Some(false)),
        Ok(other) => Err(bad_env("RVERBS_WRITE_PIECES", other, "\"1\" or \"0\"")),
    }
}

/// `RVERBS_PCAP` for the n-th context a process opens: the path itself for the first,
/// then `name.2.pcap`, `name.3.pcap`, ... so contexts never share a file.
fn pcap_path_from_env() -> Option<std::path::PathBuf> {
    static OPENED: AtomicUsize = AtomicUsize::new(0);
    let base = std::path::PathBuf::from(std::env::var_os("RVERBS_PCAP")?);
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
