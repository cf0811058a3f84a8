//! An open device ([`Context`]): the handle the verbs hang off, over a device
//! (`crate::device::ops::Device`; today the soft device, `crate::soft`).

use crate::device::attrs::{DeviceAttr, PortAttr};
use crate::device::ops::Device;
use crate::device::{DeviceInfo, OpenOptions};
use crate::error::Result;
use crate::soft::SoftDevice;
use crate::tap::faults::FaultStats;
use rverbs_engine::{Errno, VerbError};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Counts of a raw-mode context's RoCE v1 path ([`Context::roce_v1_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoceV1Stats {
    /// EtherType 0x8915 frames received.
    pub rx_frames: u64,
    /// Of those, dropped as malformed (GRH, BTH or lengths).
    pub rx_malformed: u64,
    /// Of those, dropped for a wrong ICRC.
    pub rx_icrc_errors: u64,
    /// RoCE v1 frames sent.
    pub tx_frames: u64,
    /// Frames not sent because the destination GID's neighbour was not found: ARP /
    /// Neighbor Discovery went unanswered (or the frame could not be built, or its
    /// neighbour's queue overflowed); the transport's retransmission retries them.
    pub tx_no_neighbour: u64,
}

/// The device behind a context; dropping it (with the last handle) closes the device.
pub(crate) struct ContextInner {
    pub(crate) dev: Box<dyn Device>,
}

/// An open device (`struct ibv_context`): a soft RoCE v2 device, or one of the
/// system's libibverbs. Cheap to clone; the device
/// closes when the context and every object made from it are dropped.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// for dev in rverbs::devices()? {
///     println!("{} on {}", dev.name, dev.ifname);
/// }
/// let ctx = rverbs::device(Some("rv_lo"))?.open()?;
/// let attr = ctx.query_device()?;
/// let port = ctx.query_port(1)?;
/// println!("max_qp {} active_mtu {:?} gids {:?}", attr.max_qp, port.active_mtu, ctx.gids());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// Opens a device with the options the environment sets ([`OpenOptions::from_env`]):
    /// binds its UDP port 4791 and starts the driver thread.
    ///
    /// The loopback device binds a free `127.0.0.x` per context (any number of
    /// processes may open it); other devices bind each of their addresses, so only one
    /// process at a time can open them (port 4791 can be bound once per address).
    pub fn open(info: DeviceInfo) -> Result<Context> {
        if info.kind == crate::DeviceKind::System {
            return Context::open_with(info, &OpenOptions::default());
        }
        Context::open_with(info, &OpenOptions::from_env()?)
    }

    /// Opens a device with explicit options (see [`OpenOptions`]); [`Context::open`]
    /// takes them from the environment.
    ///
    /// A device of the system's libibverbs ([`crate::DeviceKind::System`]) takes none of
    /// the options (they configure the soft device): it is opened with
    /// `ibv_open_device`.
    pub fn open_with(info: DeviceInfo, opts: &OpenOptions) -> Result<Context> {
        if info.kind == crate::DeviceKind::System {
            return Ok(Context::with_device(Box::new(crate::hw::HwDevice::open(
                info,
            )?)));
        }
        let dev = SoftDevice::open(info, &opts.resolve()?)?;
        Ok(Context::with_device(Box::new(dev)))
    }

    /// A context over an opened device (the soft device, or another implementation of
    /// the device interface).
    pub(crate) fn with_device(dev: Box<dyn Device>) -> Context {
        Context {
            inner: Arc::new(ContextInner { dev }),
        }
    }

    /// The device interface.
    pub(crate) fn dev(&self) -> &dyn Device {
        &*self.inner.dev
    }

    /// The soft device's own state (its carriers, faults, raw mode), for the accessors
    /// of soft-only features: `None` on another device.
    pub(crate) fn soft(&self) -> Option<&Arc<crate::soft::Shared>> {
        self.inner
            .dev
            .as_any()
            .downcast_ref::<SoftDevice>()
            .map(SoftDevice::shared)
    }

    /// The device this context opened.
    pub fn device(&self) -> &DeviceInfo {
        self.dev().info()
    }

    /// The interface the context is bound to in raw mode
    /// ([`OpenOptions::raw_interface`]), if any.
    pub fn raw_interface(&self) -> Option<&str> {
        self.soft()?.raw.as_ref().map(|r| r.ifname.as_str())
    }

    /// Counts of the RoCE v1 path of a raw-mode context (`None` without raw mode or
    /// without CAP_NET_RAW, when the device has no RoCE v1 GID entries).
    pub fn roce_v1_stats(&self) -> Option<RoceV1Stats> {
        let v1 = self.soft()?.net.as_ref()?.v1()?;
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        Some(RoceV1Stats {
            rx_frames: l(&v1.stats.rx_frames),
            rx_malformed: l(&v1.stats.rx_malformed),
            rx_icrc_errors: l(&v1.stats.rx_icrc_errors),
            tx_frames: l(&v1.stats.tx_frames),
            tx_no_neighbour: l(&v1.stats.tx_no_neighbour),
        })
    }

    /// Counts of the raw-mode RoCE v2 path and of neighbour resolution (`None` without
    /// raw mode on the device's own interface, or without CAP_NET_RAW).
    pub fn raw_net_stats(&self) -> Option<crate::carrier::raw::RawNetStats> {
        self.soft()?.net.as_ref().map(|n| n.stats())
    }

    /// The raw device's counts (frames received, delivered, dropped by a rule, not
    /// steered, lost for want of a posted receive, ...), in raw mode with CAP_NET_RAW.
    pub fn raw_stats(&self) -> Option<rverbs_raw::RawStats> {
        self.soft()?.raw.as_ref()?.dev.as_ref().map(|d| d.stats())
    }

    /// Counts of the same-host carrier (`None` when it is off: `RVERBS_SAME_HOST=0`,
    /// [`OpenOptions::same_host`], raw mode).
    pub fn same_host_stats(&self) -> Option<crate::SameHostStats> {
        self.soft()?.rings.as_ref().map(|r| r.same_host().stats())
    }

    /// What the fault injector did so far (all zero without `RVERBS_FAULTS`).
    pub fn fault_stats(&self) -> FaultStats {
        self.soft()
            .and_then(|s| s.faults.as_ref())
            .map_or_else(FaultStats::default, |f| {
                f.lock().unwrap_or_else(|e| e.into_inner()).stats
            })
    }

    /// Port counters (traffic, and a counter per drop reason).
    /// Deferred acknowledgements (`progress.rs`) are sent first, so the counters say
    /// what a device that answers at once would have sent.
    pub fn counters(&self) -> rverbs_engine::Counters {
        self.dev().counters()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.dev().query_device()
    }

    /// `ibv_query_port` of port `port` (this device has port 1 only; others are EINVAL).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(VerbError::new("query_port", Errno::Inval, "no such port").into());
        }
        self.dev().query_port(port)
    }
}

impl DeviceInfo {
    /// Opens the device.
    pub fn open(&self) -> Result<Context> {
        Context::open(self.clone())
    }
}
