//! Flow attributes (`struct ibv_flow_attr` and its `ibv_flow_spec_*` list) as Rust values,
//! and the checks `ibv_create_flow` makes on them.
//!
//! Numbering and meaning follow rdma-core `libibverbs/verbs.h` and
//! `libibverbs/man/ibv_create_flow.3`; the checks follow the kernel
//! (`drivers/infiniband/core/uverbs_cmd.c`, `ib_uverbs_ex_create_flow` and
//! `kern_spec_to_ib_spec*`), rdma-core's user-to-kernel conversion
//! (`libibverbs/cmd.c`, `ib_spec_to_kern_spec`) and what a real NIC accepts
//! (`drivers/infiniband/hw/mlx5/fs.c`, `parse_flow_attr`, `is_valid_ethertype`,
//! `mlx5_ib_create_flow`). Each check below names its source.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{errno, FlowError};

/// `IBV_FLOW_SPEC_*` type codes (rdma-core `verbs.h`, `enum ibv_flow_spec_type`).
pub mod spec_type {
    /// L2 header.
    pub const ETH: u32 = 0x20;
    /// IPv4 source/destination only.
    pub const IPV4: u32 = 0x30;
    /// IPv6 header.
    pub const IPV6: u32 = 0x31;
    /// IPv4 with protocol, TOS, TTL and flags.
    pub const IPV4_EXT: u32 = 0x32;
    /// IPsec ESP header.
    pub const ESP: u32 = 0x34;
    /// TCP ports.
    pub const TCP: u32 = 0x40;
    /// UDP ports.
    pub const UDP: u32 = 0x41;
    /// VXLAN network identifier.
    pub const VXLAN_TUNNEL: u32 = 0x50;
    /// GRE header.
    pub const GRE: u32 = 0x51;
    /// MPLS label stack entry.
    pub const MPLS: u32 = 0x60;
    /// Flag: the spec applies to the inner (tunnelled) headers.
    pub const INNER: u32 = 0x100;
    /// Action: report a flow tag in the completion.
    pub const ACTION_TAG: u32 = 0x1000;
    /// Action: drop the packet.
    pub const ACTION_DROP: u32 = 0x1001;
    /// Action: an `ibv_flow_action` handle (not supported by this device).
    pub const ACTION_HANDLE: u32 = 0x1002;
    /// Action: count into an `ibv_counters`.
    pub const ACTION_COUNT: u32 = 0x1003;
}

/// Most specs one flow may carry: the kernel's `IB_FLOW_SPEC_SUPPORT_LAYERS`
/// (`include/rdma/ib_verbs.h`), checked in `ib_uverbs_ex_create_flow`.
pub const MAX_SPECS: usize = 10;

/// Highest priority number mlx5 accepts for a NORMAL rule (`MLX5_IB_FLOW_LAST_PRIO` =
/// `MLX5_BY_PASS_NUM_REGULAR_PRIOS - 1`); above it `mlx5_ib_create_flow` fails with ENOMEM.
pub const MAX_PRIORITY: u16 = 15;

/// `enum ibv_flow_attr_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FlowAttrType {
    /// Steer by the rule's specs.
    Normal = 0,
    /// Every Ethernet frame no other rule steered (unicast and multicast).
    AllDefault = 1,
    /// Every multicast frame no other rule steered.
    McDefault = 2,
    /// A copy of all port traffic, received and sent.
    Sniffer = 3,
}

impl FlowAttrType {
    /// The type for a raw `ibv_flow_attr.type`, if it names one.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Normal,
            1 => Self::AllDefault,
            2 => Self::McDefault,
            3 => Self::Sniffer,
            _ => return None,
        })
    }
}

/// `enum ibv_flow_flags`. Bit 0 (`ALLOW_LOOP_BACK`) is deprecated and rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowFlags(u32);

impl FlowFlags {
    /// No flags.
    pub const NONE: Self = Self(0);
    /// `IBV_FLOW_ATTR_FLAGS_DONT_TRAP`: the rule does not consume the packet; lower-priority
    /// rules see it too (NORMAL rules only).
    pub const DONT_TRAP: Self = Self(1 << 1);
    /// `IBV_FLOW_ATTR_FLAGS_EGRESS`: match sent packets instead of received ones.
    pub const EGRESS: Self = Self(1 << 2);

    /// Flags from raw bits, unknown bits kept (validation rejects them).
    pub const fn from_bits_retain(bits: u32) -> Self {
        Self(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for FlowFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// `struct ibv_flow_eth_filter` (values in host order; the wire order is applied when
/// serialising and matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthFilter {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// EtherType after the last VLAN tag (`ibv_create_flow(3)` note 3).
    pub ether_type: u16,
    /// 802.1Q TCI of the first VLAN tag: priority 3 bits, CFI/DEI 1, VLAN id 12.
    pub vlan_tag: u16,
}

/// `struct ibv_flow_ipv4_filter` (IBV_FLOW_SPEC_IPV4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Filter {
    /// Source address.
    pub src_ip: Ipv4Addr,
    /// Destination address.
    pub dst_ip: Ipv4Addr,
}

impl Default for Ipv4Filter {
    fn default() -> Self {
        Self {
            src_ip: Ipv4Addr::UNSPECIFIED,
            dst_ip: Ipv4Addr::UNSPECIFIED,
        }
    }
}

/// `struct ibv_flow_ipv4_ext_filter` (IBV_FLOW_SPEC_IPV4_EXT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4ExtFilter {
    /// Source address.
    pub src_ip: Ipv4Addr,
    /// Destination address.
    pub dst_ip: Ipv4Addr,
    /// IP protocol.
    pub proto: u8,
    /// Type of service byte (DSCP and ECN).
    pub tos: u8,
    /// Time to live (no NIC matches it: a set mask is EOPNOTSUPP).
    pub ttl: u8,
    /// IP flags (no NIC matches them: a set mask is EOPNOTSUPP).
    pub flags: u8,
}

impl Default for Ipv4ExtFilter {
    fn default() -> Self {
        Self {
            src_ip: Ipv4Addr::UNSPECIFIED,
            dst_ip: Ipv4Addr::UNSPECIFIED,
            proto: 0,
            tos: 0,
            ttl: 0,
            flags: 0,
        }
    }
}

/// `struct ibv_flow_ipv6_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Filter {
    /// Source address.
    pub src_ip: Ipv6Addr,
    /// Destination address.
    pub dst_ip: Ipv6Addr,
    /// Flow label (20 bits; larger values are EINVAL).
    pub flow_label: u32,
    /// Next header (the upper-layer protocol).
    pub next_hdr: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit (no NIC matches it: a set mask is EOPNOTSUPP).
    pub hop_limit: u8,
}

impl Default for Ipv6Filter {
    fn default() -> Self {
        Self {
            src_ip: Ipv6Addr::UNSPECIFIED,
            dst_ip: Ipv6Addr::UNSPECIFIED,
            flow_label: 0,
            next_hdr: 0,
            traffic_class: 0,
            hop_limit: 0,
        }
    }
}

/// `struct ibv_flow_tcp_udp_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpUdpFilter {
    /// Destination port.
    pub dst_port: u16,
    /// Source port.
    pub src_port: u16,
}

/// `struct ibv_flow_tunnel_filter` (VXLAN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TunnelFilter {
    /// VXLAN network identifier (24 bits; larger values are EINVAL).
    pub tunnel_id: u32,
}

/// `struct ibv_flow_gre_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GreFilter {
    /// First 16 bits of the GRE header: C, K, S bits and version (no NIC matches them: a
    /// set mask is EOPNOTSUPP).
    pub c_ks_res0_ver: u16,
    /// Protocol type of the encapsulated payload.
    pub protocol: u16,
    /// Key (present when the K bit is set).
    pub key: u32,
}

/// `struct ibv_flow_mpls_filter`: a whole label stack entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MplsFilter {
    /// Label 20 bits, traffic class 3, bottom of stack 1, TTL 8 (wire order, top bits first).
    pub label: u32,
}

/// `struct ibv_flow_esp_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EspFilter {
    /// Security parameters index.
    pub spi: u32,
    /// Sequence number (no NIC matches it: a set mask is EOPNOTSUPP).
    pub seq: u32,
}

/// One header spec: value and mask (a set mask bit means that bit of the value must
/// match), and whether it applies to the tunnelled (inner) headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layer<F> {
    /// `IBV_FLOW_SPEC_INNER`.
    pub inner: bool,
    /// Value.
    pub val: F,
    /// Mask.
    pub mask: F,
}

impl<F> Layer<F> {
    /// An outer-header spec.
    pub fn outer(val: F, mask: F) -> Self {
        Self {
            inner: false,
            val,
            mask,
        }
    }

    /// An inner-header spec (`IBV_FLOW_SPEC_INNER`).
    pub fn inner(val: F, mask: F) -> Self {
        Self {
            inner: true,
            val,
            mask,
        }
    }
}

/// Packet and byte counters a COUNT action adds to (`struct ibv_counters` with the
/// `IBV_COUNTER_PACKETS` and `IBV_COUNTER_BYTES` descriptions attached). Clones share the
/// counts.
#[derive(Debug, Clone)]
pub struct Counters(Arc<CountersInner>);

#[derive(Debug)]
struct CountersInner {
    handle: u32,
    packets: AtomicU64,
    bytes: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterValues {
    /// Packets counted.
    pub packets: u64,
    /// Bytes counted (whole frames).
    pub bytes: u64,
}

static NEXT_COUNTERS_HANDLE: AtomicU32 = AtomicU32::new(1);

impl Counters {
    /// New zeroed counters with a process-unique handle.
    pub fn new() -> Self {
        let handle = NEXT_COUNTERS_HANDLE.fetch_add(1, Ordering::Relaxed);
        Self(Arc::new(CountersInner {
            handle,
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }))
    }

    /// The handle a kernel command would carry (`ib_uverbs_flow_spec_action_count.handle`).
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// Reads the counts (`ibv_read_counters`).
    pub fn read(&self) -> CounterValues {
        CounterValues {
            packets: self.0.packets.load(Ordering::Relaxed),
            bytes: self.0.bytes.load(Ordering::Relaxed),
        }
    }

    /// Counts one packet of `len` bytes.
    pub fn add(&self, len: usize) {
        self.0.packets.fetch_add(1, Ordering::Relaxed);
        self.0.bytes.fetch_add(len as u64, Ordering::Relaxed);
    }
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for Counters {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Counters {}

/// One `ibv_flow_spec_*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowSpec {
    /// IBV_FLOW_SPEC_ETH.
    Eth(Layer<EthFilter>),
    /// IBV_FLOW_SPEC_IPV4.
    Ipv4(Layer<Ipv4Filter>),
    /// IBV_FLOW_SPEC_IPV4_EXT.
    Ipv4Ext(Layer<Ipv4ExtFilter>),
    /// IBV_FLOW_SPEC_IPV6.
    Ipv6(Layer<Ipv6Filter>),
    /// IBV_FLOW_SPEC_TCP.
    Tcp(Layer<TcpUdpFilter>),
    /// IBV_FLOW_SPEC_UDP.
    Udp(Layer<TcpUdpFilter>),
    /// IBV_FLOW_SPEC_VXLAN_TUNNEL (never inner).
    VxlanTunnel(Layer<TunnelFilter>),
    /// IBV_FLOW_SPEC_GRE (never inner).
    Gre(Layer<GreFilter>),
    /// IBV_FLOW_SPEC_MPLS; where it matches depends on the spec before it (see
    /// the `classify` module).
    Mpls(Layer<MplsFilter>),
    /// IBV_FLOW_SPEC_ESP.
    Esp(Layer<EspFilter>),
    /// IBV_FLOW_SPEC_ACTION_TAG: completions of matching packets carry this tag (24 bits).
    Tag(u32),
    /// IBV_FLOW_SPEC_ACTION_DROP.
    Drop,
    /// IBV_FLOW_SPEC_ACTION_COUNT.
    Count(Counters),
    /// IBV_FLOW_SPEC_ACTION_HANDLE with the handle of an `ibv_flow_action`; this device
    /// has no flow actions, so creating a flow with one fails (EOPNOTSUPP).
    ActionHandle(u32),
}

impl FlowSpec {
    /// The `ibv_flow_spec_type` value, INNER bit included.
    pub fn type_code(&self) -> u32 {
        let (base, inner) = match self {
            Self::Eth(l) => (spec_type::ETH, l.inner),
            Self::Ipv4(l) => (spec_type::IPV4, l.inner),
            Self::Ipv4Ext(l) => (spec_type::IPV4_EXT, l.inner),
            Self::Ipv6(l) => (spec_type::IPV6, l.inner),
            Self::Tcp(l) => (spec_type::TCP, l.inner),
            Self::Udp(l) => (spec_type::UDP, l.inner),
            Self::VxlanTunnel(l) => (spec_type::VXLAN_TUNNEL, l.inner),
            Self::Gre(l) => (spec_type::GRE, l.inner),
            Self::Mpls(l) => (spec_type::MPLS, l.inner),
            Self::Esp(l) => (spec_type::ESP, l.inner),
            Self::Tag(_) => (spec_type::ACTION_TAG, false),
            Self::Drop => (spec_type::ACTION_DROP, false),
            Self::Count(_) => (spec_type::ACTION_COUNT, false),
            Self::ActionHandle(_) => (spec_type::ACTION_HANDLE, false),
        };
        if inner {
            base | spec_type::INNER
        } else {
            base
        }
    }

    /// Whether this spec is an action rather than a header match.
    pub fn is_action(&self) -> bool {
        self.type_code() >= spec_type::ACTION_TAG
    }

    /// Whether the INNER flag is set.
    pub fn is_inner(&self) -> bool {
        self.type_code() & spec_type::INNER != 0
    }

    /// Short name for listings.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Eth(_) => "eth",
            Self::Ipv4(_) => "ipv4",
            Self::Ipv4Ext(_) => "ipv4_ext",
            Self::Ipv6(_) => "ipv6",
            Self::Tcp(_) => "tcp",
            Self::Udp(_) => "udp",
            Self::VxlanTunnel(_) => "vxlan",
            Self::Gre(_) => "gre",
            Self::Mpls(_) => "mpls",
            Self::Esp(_) => "esp",
            Self::Tag(_) => "tag",
            Self::Drop => "drop",
            Self::Count(_) => "count",
            Self::ActionHandle(_) => "action_handle",
        }
    }

    // ---- builders for the common single-field matches ----

    /// Destination MAC equal to `mac`.
    pub fn eth_dst(mac: [u8; 6]) -> Self {
        Self::Eth(Layer::outer(
            EthFilter {
                dst_mac: mac,
                ..Default::default()
            },
            EthFilter {
                dst_mac: [0xff; 6],
                ..Default::default()
            },
        ))
    }

    /// VLAN id (12 bits of the first tag's TCI) equal to `vid`.
    pub fn vlan_id(vid: u16) -> Self {
        Self::Eth(Layer::outer(
            EthFilter {
                vlan_tag: vid & 0x0fff,
                ..Default::default()
            },
            EthFilter {
                vlan_tag: 0x0fff,
                ..Default::default()
            },
        ))
    }

    /// IPv4 destination equal to `addr`.
    pub fn ipv4_dst(addr: Ipv4Addr) -> Self {
        Self::Ipv4(Layer::outer(
            Ipv4Filter {
                dst_ip: addr,
                ..Default::default()
            },
            Ipv4Filter {
                dst_ip: Ipv4Addr::BROADCAST,
                ..Default::default()
            },
        ))
    }

    /// IPv6 destination equal to `addr`.
    pub fn ipv6_dst(addr: Ipv6Addr) -> Self {
        Self::Ipv6(Layer::outer(
            Ipv6Filter {
                dst_ip: addr,
                ..Default::default()
            },
            Ipv6Filter {
                dst_ip: Ipv6Addr::from([0xff; 16]),
                ..Default::default()
            },
        ))
    }

    /// UDP destination port equal to `port` (`None` = any UDP).
    pub fn udp_dst(port: Option<u16>) -> Self {
        Self::Udp(Layer::outer(
            TcpUdpFilter {
                dst_port: port.unwrap_or(0),
                src_port: 0,
            },
            TcpUdpFilter {
                dst_port: if port.is_some() { 0xffff } else { 0 },
                src_port: 0,
            },
        ))
    }

    /// TCP destination port equal to `port` (`None` = any TCP).
    pub fn tcp_dst(port: Option<u16>) -> Self {
        Self::Tcp(Layer::outer(
            TcpUdpFilter {
                dst_port: port.unwrap_or(0),
                src_port: 0,
            },
            TcpUdpFilter {
                dst_port: if port.is_some() { 0xffff } else { 0 },
                src_port: 0,
            },
        ))
    }

    /// VXLAN VNI equal to `vni`.
    pub fn vxlan_vni(vni: u32) -> Self {
        Self::VxlanTunnel(Layer::outer(
            TunnelFilter { tunnel_id: vni },
            TunnelFilter {
                tunnel_id: 0x00ff_ffff,
            },
        ))
    }

    /// Turns a header spec into its INNER variant (actions are returned unchanged).
    pub fn into_inner(mut self) -> Self {
        match &mut self {
            Self::Eth(l) => l.inner = true,
            Self::Ipv4(l) => l.inner = true,
            Self::Ipv4Ext(l) => l.inner = true,
            Self::Ipv6(l) => l.inner = true,
            Self::Tcp(l) => l.inner = true,
            Self::Udp(l) => l.inner = true,
            Self::VxlanTunnel(l) => l.inner = true,
            Self::Gre(l) => l.inner = true,
            Self::Mpls(l) => l.inner = true,
            Self::Esp(l) => l.inner = true,
            Self::Tag(_) | Self::Drop | Self::Count(_) | Self::ActionHandle(_) => {}
        }
        self
    }
}

/// `struct ibv_flow_attr` with its specs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowAttr {
    /// Rule type.
    pub attr_type: FlowAttrType,
    /// Priority: lower numbers are tried first and win.
    pub priority: u16,
    /// Port number (1-based).
    pub port: u8,
    /// DONT_TRAP / EGRESS.
    pub flags: FlowFlags,
    /// Header specs and actions, in order.
    pub specs: Vec<FlowSpec>,
}

impl FlowAttr {
    /// A NORMAL rule on port 1 at `priority` with `specs`.
    pub fn normal(priority: u16, specs: Vec<FlowSpec>) -> Self {
        Self {
            attr_type: FlowAttrType::Normal,
            priority,
            port: 1,
            flags: FlowFlags::NONE,
            specs,
        }
    }

    /// A rule of `attr_type` on port 1 with no specs (ALL_DEFAULT, MC_DEFAULT, SNIFFER).
    pub fn of_type(attr_type: FlowAttrType) -> Self {
        Self {
            attr_type,
            priority: 0,
            port: 1,
            flags: FlowFlags::NONE,
            specs: Vec::new(),
        }
    }

    /// The tag of a TAG action, if any.
    pub fn tag(&self) -> Option<u32> {
        self.specs.iter().find_map(|s| match s {
            FlowSpec::Tag(t) => Some(*t),
            _ => None,
        })
    }

    /// Whether a DROP action is present.
    pub fn drops(&self) -> bool {
        self.specs.iter().any(|s| matches!(s, FlowSpec::Drop))
    }

    /// The counters of a COUNT action, if any.
    pub fn counters(&self) -> Option<&Counters> {
        self.specs.iter().find_map(|s| match s {
            FlowSpec::Count(c) => Some(c),
            _ => None,
        })
    }
}

/// The QP a flow is attached to, as far as the checks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowQpType {
    /// IBV_QPT_UD.
    Ud,
    /// IBV_QPT_RAW_PACKET.
    RawPacket,
    /// Any other QP type (RC, UC, XRC, ...): flows are EINVAL.
    Other,
}

/// What `ibv_create_flow` checks besides the attribute itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowContext {
    /// Type of the QP the flow is created on.
    pub qp_type: FlowQpType,
    /// Whether the caller holds CAP_NET_RAW (the kernel demands it for every flow).
    pub cap_net_raw: bool,
    /// Number of ports of the device (ports are 1..=num_ports).
    pub num_ports: u8,
}

impl FlowContext {
    /// A RAW_PACKET QP on a one-port device, caller privileged.
    pub fn raw_packet() -> Self {
        Self {
            qp_type: FlowQpType::RawPacket,
            cap_net_raw: true,
            num_ports: 1,
        }
    }
}

/// Checks `attr` as `ibv_create_flow` on a NIC would, in the kernel's order, and returns
/// the first failure. On success the attribute can be installed in a
/// `Classifier` (the `classify` module, which builds on this one).
pub fn validate(attr: &FlowAttr, ctx: &FlowContext) -> Result<(), FlowError> {
    // uverbs_cmd.c ib_uverbs_ex_create_flow: capability first.
    if !ctx.cap_net_raw {
        return Err(FlowError::new(
            errno::EPERM,
            "creating a flow needs CAP_NET_RAW",
        ));
    }
    // flags >= IB_FLOW_ATTR_FLAGS_RESERVED (1 << 3) is EINVAL in uverbs_cmd.c; mlx5 rejects
    // every bit but DONT_TRAP and EGRESS (so deprecated bit 0 too).
    let known = FlowFlags::DONT_TRAP.bits() | FlowFlags::EGRESS.bits();
    if attr.flags.bits() & !known != 0 {
        return Err(FlowError::inval(format!(
            "unknown or deprecated flow flags {:#x}",
            attr.flags.bits() & !known
        )));
    }
    let defaults = matches!(
        attr.attr_type,
        FlowAttrType::AllDefault | FlowAttrType::McDefault
    );
    if attr.flags.contains(FlowFlags::DONT_TRAP) && defaults {
        return Err(FlowError::inval(
            "DONT_TRAP is only valid on NORMAL (and SNIFFER) rules, not ALL_DEFAULT/MC_DEFAULT",
        ));
    }
    if attr.specs.len() > MAX_SPECS {
        return Err(FlowError::inval(format!(
            "{} specs, at most {MAX_SPECS} (IB_FLOW_SPEC_SUPPORT_LAYERS)",
            attr.specs.len()
        )));
    }
    // rdma_is_port_valid: 1..=num_ports.
    if attr.port == 0 || attr.port > ctx.num_ports {
        return Err(FlowError::inval(format!(
            "port {} is not a port of this device (1..={})",
            attr.port, ctx.num_ports
        )));
    }
    if ctx.qp_type == FlowQpType::Other {
        return Err(FlowError::inval(
            "flows attach only to UD and RAW_PACKET QPs",
        ));
    }
    // Per spec: rdma-core's conversion (ib_spec_to_kern_spec) and the kernel's
    // (kern_spec_to_ib_spec_filter) checks, then mlx5's parse_flow_attr.
    let mut counts = 0;
    let mut seen: Vec<u32> = Vec::new();
    let mut prev_type = 0u32;
    for spec in &attr.specs {
        check_spec(spec)?;
        if let FlowSpec::Count(_) = spec {
            // mlx5: "for now support only one counters spec per flow".
            counts += 1;
            if counts > 1 {
                return Err(FlowError::inval("more than one COUNT action in a flow"));
            }
        }
        // A header appears once per layer; MPLS may repeat at different positions
        // (its position is the spec before it).
        let key = match spec {
            // Where an MPLS spec matches (see `classify::compile`): after UDP, after
            // GRE, after the inner or after the outer Ethernet header.
            FlowSpec::Mpls(l) => {
                let slot = match prev_type & !spec_type::INNER {
                    spec_type::UDP => 1,
                    spec_type::GRE => 2,
                    _ if l.inner => 3,
                    _ => 4,
                };
                spec_type::MPLS | (slot << 16)
            }
            FlowSpec::Ipv4Ext(l) => spec_type::IPV4 | (u32::from(l.inner) << 8),
            FlowSpec::Udp(l) | FlowSpec::Tcp(l) => 0x4f | (u32::from(l.inner) << 8),
            // One SPI per packet (mlx5 has a single `outer_esp_spi` field whatever the
            // INNER flag): an outer and an inner ESP spec are duplicates.
            FlowSpec::Esp(_) => spec_type::ESP,
            _ => spec.type_code(),
        };
        if seen.contains(&key) {
            return Err(FlowError::inval(format!(
                "duplicated {} spec (one per header layer)",
                spec.name()
            )));
        }
        seen.push(key);
        prev_type = spec.type_code();
    }
    check_ethertype(attr, false)?;
    check_ethertype(attr, true)?;
    check_l3_l4_consistent(attr)?;
    if attr.flags.contains(FlowFlags::EGRESS) && defaults {
        return Err(FlowError::inval(
            "EGRESS rules cannot be ALL_DEFAULT/MC_DEFAULT (mlx5_ib_create_flow)",
        ));
    }
    if defaults && attr.tag().is_some() {
        return Err(FlowError::inval(
            "a flow tag is not allowed on ALL_DEFAULT/MC_DEFAULT rules (mlx5 leftovers)",
        ));
    }
    if attr.attr_type == FlowAttrType::Normal && attr.priority > MAX_PRIORITY {
        return Err(FlowError::new(
            errno::ENOMEM,
            format!(
                "priority {} beyond the last flow table ({MAX_PRIORITY})",
                attr.priority
            ),
        ));
    }
    Ok(())
}

fn check_spec(spec: &FlowSpec) -> Result<(), FlowError> {
    match spec {
        FlowSpec::Eth(_) | FlowSpec::Ipv4(_) | FlowSpec::Tcp(_) | FlowSpec::Udp(_) => Ok(()),
        FlowSpec::Ipv4Ext(l) => {
            // mlx5 LAST_IPV4_FIELD is tos: ttl and flags cannot be matched.
            if l.mask.ttl != 0 || l.mask.flags != 0 {
                return Err(FlowError::notsupp(
                    "IPv4 ttl/flags cannot be matched (mask must be 0)",
                ));
            }
            Ok(())
        }
        FlowSpec::Ipv6(l) => {
            // uverbs_cmd.c: flow_label of value or mask >= BIT(20) is EINVAL.
            if l.val.flow_label >= 1 << 20 || l.mask.flow_label >= 1 << 20 {
                return Err(FlowError::inval("IPv6 flow label wider than 20 bits"));
            }
            // mlx5 LAST_IPV6_FIELD is traffic_class: hop_limit cannot be matched.
            if l.mask.hop_limit != 0 {
                return Err(FlowError::notsupp(
                    "IPv6 hop limit cannot be matched (mask must be 0)",
                ));
            }
            Ok(())
        }
        FlowSpec::VxlanTunnel(l) => {
            // uverbs_cmd.c: INNER | VXLAN_TUNNEL is EINVAL; tunnel_id >= BIT(24) is EINVAL.
            if l.inner {
                return Err(FlowError::inval("VXLAN_TUNNEL cannot be INNER"));
            }
            if l.val.tunnel_id >= 1 << 24 || l.mask.tunnel_id >= 1 << 24 {
                return Err(FlowError::inval("VXLAN tunnel id wider than 24 bits"));
            }
            Ok(())
        }
        FlowSpec::Gre(l) => {
            // rdma-core ib_spec_to_kern_spec has no GRE | INNER case: EINVAL.
            if l.inner {
                return Err(FlowError::inval("GRE cannot be INNER"));
            }
            // mlx5: c_ks_res0_ver mask is EOPNOTSUPP.
            if l.mask.c_ks_res0_ver != 0 {
                return Err(FlowError::notsupp(
                    "GRE C/K/S/version bits cannot be matched (mask must be 0)",
                ));
            }
            Ok(())
        }
        FlowSpec::Mpls(_) => Ok(()),
        FlowSpec::Esp(l) => {
            // mlx5: an ESP sequence-number mask is EOPNOTSUPP.
            if l.mask.seq != 0 {
                return Err(FlowError::notsupp(
                    "ESP sequence number cannot be matched (mask must be 0)",
                ));
            }
            Ok(())
        }
        FlowSpec::Tag(t) => {
            // mlx5: tag_id >= BIT(24) is EINVAL.
            if *t >= 1 << 24 {
                return Err(FlowError::inval("flow tag wider than 24 bits"));
            }
            Ok(())
        }
        FlowSpec::Drop | FlowSpec::Count(_) => Ok(()),
        FlowSpec::ActionHandle(_) => Err(FlowError::notsupp(
            "this device has no ibv_flow_action objects (ACTION_HANDLE)",
        )),
    }
}

/// mlx5 `is_valid_ethertype`: if a layer's ETH spec masks the EtherType, the mask must be
/// all ones and agree with that layer's IP spec (0x0800 for IPv4, 0x86dd for IPv6; MPLS
/// EtherTypes are allowed with an IP spec).
fn check_ethertype(attr: &FlowAttr, inner: bool) -> Result<(), FlowError> {
    let mut eth = None;
    let mut ip = None;
    for spec in &attr.specs {
        match spec {
            FlowSpec::Eth(l) if l.inner == inner && l.mask.ether_type != 0 => eth = Some(l),
            FlowSpec::Ipv4(l) if l.inner == inner => ip = Some(0x0800),
            FlowSpec::Ipv4Ext(l) if l.inner == inner => ip = Some(0x0800),
            FlowSpec::Ipv6(l) if l.inner == inner => ip = Some(0x86dd),
            _ => {}
        }
    }
    let (Some(eth), Some(ip)) = (eth, ip) else {
        return Ok(());
    };
    if eth.mask.ether_type != 0xffff {
        return Err(FlowError::inval(
            "a partial EtherType mask together with an IP spec",
        ));
    }
    let et = eth.val.ether_type;
    if et == ip || et == 0x8847 || et == 0x8848 {
        Ok(())
    } else {
        Err(FlowError::inval(format!(
            "EtherType {et:#06x} contradicts the IP spec ({ip:#06x})"
        )))
    }
}

/// mlx5 `set_proto`: the IP protocol implied by a TCP/UDP/GRE/ESP spec and one masked in
/// an IPv4_EXT/IPv6 spec of the same layer must agree; so must IPv4 vs IPv6 specs.
fn check_l3_l4_consistent(attr: &FlowAttr) -> Result<(), FlowError> {
    for inner in [false, true] {
        let mut proto: Option<(u8, u8)> = None; // (val, mask)
        let mut v4 = false;
        let mut v6 = false;
        for spec in &attr.specs {
            if spec.is_action() || spec.is_inner() != inner {
                continue;
            }
            let want = match spec {
                FlowSpec::Ipv4(_) => {
                    v4 = true;
                    None
                }
                FlowSpec::Ipv4Ext(l) => {
                    v4 = true;
                    Some((l.val.proto, l.mask.proto))
                }
                FlowSpec::Ipv6(l) => {
                    v6 = true;
                    Some((l.val.next_hdr, l.mask.next_hdr))
                }
                FlowSpec::Tcp(_) => Some((6, 0xff)),
                FlowSpec::Udp(_) => Some((17, 0xff)),
                FlowSpec::Gre(_) => Some((47, 0xff)),
                FlowSpec::Esp(_) => Some((50, 0xff)),
                _ => None,
            };
            if let Some((val, mask)) = want {
                if mask == 0 {
                    continue;
                }
                if let Some((pv, pm)) = proto {
                    let common = pm & mask;
                    if pv & common != val & common {
                        return Err(FlowError::inval(format!(
                            "{} spec contradicts the IP protocol of another spec",
                            spec.name()
                        )));
                    }
                    proto = Some((pv | (val & mask), pm | mask));
                } else {
                    proto = Some((val & mask, mask));
                }
            }
        }
        if v4 && v6 {
            return Err(FlowError::inval("IPv4 and IPv6 specs on the same layer"));
        }
    }
    Ok(())
}
