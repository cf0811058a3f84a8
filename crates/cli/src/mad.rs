//! The MAD tools: `perfquery`, `smpquery`, `mad listen-traps`, `mad serve` and the
//! BM key/trap-destination setters, plus the one-line MAD summary `pcap decode`
//! prints for QP1 packets.

use rverbs::mad::{self, attr, class, flags, method, Mad, MadDest, Registration};
use rverbs::{Context, Gid};
use rverbs_wire::mad::bm::{BKeyInfo, BKeyInfoRepr};
use rverbs_wire::mad::notice::{
    trap, GsNotice, GsNoticeRepr, Notice, NoticeRepr, Trap256Details, Trap256DetailsRepr,
    Trap259BKeyDetails, Trap259BKeyDetailsRepr,
};
use rverbs_wire::mad::pma::{
    capability, ClassPortInfo, ClassPortInfoRepr, PortCounters, PortCountersExtended,
    PortCountersExtendedRepr, PortCountersRepr,
};
use rverbs_wire::mad::sma::{sm_attr, NodeInfo, NodeInfoRepr, PortInfo, PortInfoRepr};
use rverbs_wire::mad::MadHeader;
use std::io::Write;
use std::time::Duration;

/// How long a remote query waits for each try, and how many tries it makes.
pub const TIMEOUT: Duration = Duration::from_millis(500);
/// Resends after a timeout.
pub const RETRIES: u32 = 3;

type Res<T> = Result<T, String>;

fn w(r: std::io::Result<()>) -> Res<()> {
    r.map_err(|e| format!("writing output: {e}"))
}

/// Opens the device `dev` (default: the loopback soft device).
pub fn open(dev: Option<&str>) -> Res<Context> {
    let d = rverbs::device(dev).map_err(|e| e.to_string())?;
    d.open().map_err(|e| e.to_string())
}

/// Parses a number given in decimal or 0x-hex.
pub fn parse_num(s: &str) -> Res<u64> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("bad number {s:?}"))
}

/// Sends `req` locally through `process_mad` or over GSI to `gid`, returning the
/// response MAD.
fn query(ctx: &Context, gid: Option<Gid>, req: &Mad) -> Res<Mad> {
    match gid {
        None => {
            let (r, out) =
                ctx.process_mad(flags::IGNORE_MKEY | flags::IGNORE_BKEY, 1, None, None, req);
            if r.contains(mad::MadResult::SUCCESS | mad::MadResult::REPLY) {
                Ok(out)
            } else {
                Err("the local port did not answer".into())
            }
        }
        Some(g) => {
            let agent = ctx.register_mad_agent(None).map_err(|e| e.to_string())?;
            let r = agent
                .request(MadDest::gsi(g), req, TIMEOUT, RETRIES)
                .map_err(|e| format!("no answer from {}: {e}", g))?;
            Ok(r.mad)
        }
    }
}

fn status(m: &Mad) -> u16 {
    u16::from_be_bytes([m[4], m[5]]) & 0x7fff
}

fn check_status(m: &Mad, what: &str) -> Res<()> {
    match status(m) {
        0 => Ok(()),
        s => Err(format!("{what}: MAD status 0x{s:04x} ({})", status_text(s))),
    }
}

/// The meaning of a MAD status (IBTA 13.4.7).
pub fn status_text(s: u16) -> &'static str {
    match s & 0x1f {
        0 => "ok",
        0x01 => "busy",
        0x02 => "redirect",
        0x04 => "bad version",
        0x08 => "method not supported",
        0x0c => "method/attribute not supported",
        0x1c => "invalid field",
        _ => "class specific",
    }
}

fn field(out: &mut dyn Write, name: &str, v: impl std::fmt::Display) -> Res<()> {
    w(writeln!(out, "{:.<33}{v}", format!("{name}:")))
}

/// `perfquery` options.
#[derive(Debug, Clone, Default)]
pub struct PerfOpts {
    /// Device.
    pub dev: Option<String>,
    /// Port (PortSelect).
    pub port: u8,
    /// PortCountersExtended instead of PortCounters.
    pub extended: bool,
    /// Reset the counters instead of reading them (perfquery `-R`).
    pub reset_only: bool,
    /// Read, then reset (perfquery `-r`).
    pub reset_after: bool,
    /// Query this remote port over GSI instead of the local one.
    pub gid: Option<Gid>,
}

/// A PMA Get, or the Set that resets every counter the way perfquery `-R` does
/// (`infiniband-diags/perfquery.c` `do_reset`, libibmad `performance_reset_via`):
/// CounterSelect 0xffff; CounterSelect2 bit 0 (PortXmitWait) and bit 1 (QP1Dropped)
/// of PortCounters only when ClassPortInfo advertises them; for PortCountersExtended
/// the 32-bit CounterSelect2 (bytes 4-7) with the 12 error counters, plus bit 12
/// (PortXmitWait) and bit 13 (QP1Dropped) when advertised.
fn pma_request(attr_id: u16, port: u8, set: bool, cap_mask: u16) -> Mad {
    let mut m = mad::request(class::PERF_MGMT, attr_id, 0);
    if set {
        m[3] = method::SET;
        let mut mask: u32 = 0xffff;
        let (wait, qp1) = (
            cap_mask & capability::PM_PC_XMIT_WAIT_SUP != 0,
            cap_mask & capability::PM_IS_QP1_DROP_SUP != 0,
        );
        if attr_id == attr::PMA_PORT_COUNTERS_EXT {
            mask |= 0xfff_0000 | u32::from(wait) << 28 | u32::from(qp1) << 29;
            m[68..72].copy_from_slice(&(mask >> 16).to_be_bytes());
        } else {
            mask |= u32::from(wait) << 16 | u32::from(qp1) << 17;
            m[64 + 18] = (mask >> 16) as u8;
        }
        m[66..68].copy_from_slice(&(mask as u16).to_be_bytes());
    }
    m[65] = port;
    m
}

/// `rverbs perfquery`: like infiniband-diags' perfquery, locally or over GSI.
pub fn perfquery(o: &PerfOpts, out: &mut dyn Write) -> Res<()> {
    let ctx = open(o.dev.as_deref())?;
    let cpi = query(
        &ctx,
        o.gid,
        &mad::request(class::PERF_MGMT, attr::CLASS_PORT_INFO, 0),
    )?;
    check_status(&cpi, "ClassPortInfo")?;
    let c = ClassPortInfoRepr::parse(&ClassPortInfo::new_unchecked(&cpi[64..136]))
        .map_err(|e| e.to_string())?;
    let attr_id = if o.extended {
        if c.capability_mask & 0x0600 == 0 {
            return Err(format!(
                "PerfMgt ClassPortInfo CapMask 0x{:04x}; No extended counter support indicated",
                c.capability_mask
            ));
        }
        attr::PMA_PORT_COUNTERS_EXT
    } else {
        attr::PMA_PORT_COUNTERS
    };
    let who = match o.gid {
        Some(g) => format!("GID {}", g),
        None => "Lid 0".into(),
    };
    if !o.reset_only {
        let r = query(
            &ctx,
            o.gid,
            &pma_request(attr_id, o.port, false, c.capability_mask),
        )?;
        check_status(&r, "PortCounters")?;
        if o.extended {
            w(writeln!(
                out,
                "# Port extended counters: {who} port {} (CapMask: 0x{:04X})",
                o.port, c.capability_mask
            ))?;
            print_ext(out, &r)?;
        } else {
            w(writeln!(
                out,
                "# Port counters: {who} port {} (CapMask: 0x{:04X})",
                o.port, c.capability_mask
            ))?;
            print_basic(out, &r)?;
        }
    }
    if o.reset_only || o.reset_after {
        let r = query(
            &ctx,
            o.gid,
            &pma_request(attr_id, o.port, true, c.capability_mask),
        )?;
        check_status(&r, "reset")?;
        if o.reset_only {
            w(writeln!(
                out,
                "# Port counters reset: {who} port {}",
                o.port
            ))?;
        }
    }
    Ok(())
}

fn print_basic(out: &mut dyn Write, r: &Mad) -> Res<()> {
    let p = PortCountersRepr::parse(&PortCounters::new_unchecked(&r[64..108]))
        .map_err(|e| e.to_string())?;
    field(out, "PortSelect", p.port_select)?;
    field(out, "CounterSelect", format!("0x{:04x}", p.counter_select))?;
    field(out, "SymbolErrorCounter", p.symbol_error_counter)?;
    field(
        out,
        "LinkErrorRecoveryCounter",
        p.link_error_recovery_counter,
    )?;
    field(out, "LinkDownedCounter", p.link_downed_counter)?;
    field(out, "PortRcvErrors", p.port_rcv_errors)?;
    field(
        out,
        "PortRcvRemotePhysicalErrors",
        p.port_rcv_remote_physical_errors,
    )?;
    field(
        out,
        "PortRcvSwitchRelayErrors",
        p.port_rcv_switch_relay_errors,
    )?;
    field(out, "PortXmitDiscards", p.port_xmit_discards)?;
    field(
        out,
        "PortXmitConstraintErrors",
        p.port_xmit_constraint_errors,
    )?;
    field(out, "PortRcvConstraintErrors", p.port_rcv_constraint_errors)?;
    field(
        out,
        "CounterSelect2",
        format!("0x{:02x}", p.counter_select2),
    )?;
    field(out, "LinkIntegrityErrors", p.local_link_integrity_errors)?;
    field(
        out,
        "ExcBufOverrunErrors",
        p.excessive_buffer_overrun_errors,
    )?;
    field(out, "QP1Dropped", p.qp1_dropped)?;
    field(out, "VL15Dropped", p.vl15_dropped)?;
    field(out, "PortXmitData", p.port_xmit_data)?;
    field(out, "PortRcvData", p.port_rcv_data)?;
    field(out, "PortXmitPkts", p.port_xmit_pkts)?;
    field(out, "PortRcvPkts", p.port_rcv_pkts)?;
    field(out, "PortXmitWait", p.port_xmit_wait)
}

fn print_ext(out: &mut dyn Write, r: &Mad) -> Res<()> {
    let p = PortCountersExtendedRepr::parse(&PortCountersExtended::new_unchecked(&r[64..]))
        .map_err(|e| e.to_string())?;
    field(out, "PortSelect", p.port_select)?;
    field(out, "CounterSelect", format!("0x{:04x}", p.counter_select))?;
    field(out, "PortXmitData", p.port_xmit_data)?;
    field(out, "PortRcvData", p.port_rcv_data)?;
    field(out, "PortXmitPkts", p.port_xmit_pkts)?;
    field(out, "PortRcvPkts", p.port_rcv_pkts)?;
    field(out, "PortUnicastXmitPkts", p.port_unicast_xmit_pkts)?;
    field(out, "PortUnicastRcvPkts", p.port_unicast_rcv_pkts)?;
    field(out, "PortMulticastXmitPkts", p.port_multicast_xmit_pkts)?;
    field(out, "PortMulticastRcvPkts", p.port_multicast_rcv_pkts)?;
    field(out, "SymbolErrorCounter", p.symbol_error_counter)?;
    field(
        out,
        "LinkErrorRecoveryCounter",
        p.link_error_recovery_counter,
    )?;
    field(out, "LinkDownedCounter", p.link_downed_counter)?;
    field(out, "PortRcvErrors", p.port_rcv_errors)?;
    field(
        out,
        "PortRcvRemotePhysicalErrors",
        p.port_rcv_remote_physical_errors,
    )?;
    field(
        out,
        "PortRcvSwitchRelayErrors",
        p.port_rcv_switch_relay_errors,
    )?;
    field(out, "PortXmitDiscards", p.port_xmit_discards)?;
    field(
        out,
        "PortXmitConstraintErrors",
        p.port_xmit_constraint_errors,
    )?;
    field(out, "PortRcvConstraintErrors", p.port_rcv_constraint_errors)?;
    field(
        out,
        "LocalLinkIntegrityErrors",
        p.local_link_integrity_errors,
    )?;
    field(
        out,
        "ExcessiveBufferOverrunErrors",
        p.excessive_buffer_overrun_errors,
    )?;
    field(out, "VL15Dropped", p.vl15_dropped)?;
    field(out, "PortXmitWait", p.port_xmit_wait)?;
    field(out, "QP1Dropped", p.qp1_dropped)
}

/// What `smpquery` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmpQuery {
    /// NodeInfo.
    NodeInfo,
    /// NodeDescription.
    NodeDesc,
    /// PortInfo.
    PortInfo,
    /// GUIDInfo.
    Guids,
    /// P_KeyTable.
    Pkeys,
}

/// `rverbs smpquery`: a directed-route SMP (0 hops, permissive DrSLID/DrDLID) to the
/// local SMA, with the given M_Key.
pub fn smpquery(
    dev: Option<&str>,
    port: u8,
    what: SmpQuery,
    m_key: u64,
    out: &mut dyn Write,
) -> Res<()> {
    let ctx = open(dev)?;
    let attr_id = match what {
        SmpQuery::NodeInfo => sm_attr::NODE_INFO,
        SmpQuery::NodeDesc => sm_attr::NODE_DESC,
        SmpQuery::PortInfo => sm_attr::PORT_INFO,
        SmpQuery::Guids => sm_attr::GUID_INFO,
        SmpQuery::Pkeys => sm_attr::PKEY_TABLE,
    };
    let mut smp = mad::request(class::SUBN_DIRECTED_ROUTE, attr_id, 1);
    smp[24..32].copy_from_slice(&m_key.to_be_bytes());
    smp[32..36].copy_from_slice(&[0xff; 4]);
    if what == SmpQuery::PortInfo {
        smp[20..24].copy_from_slice(&u32::from(port).to_be_bytes());
    }
    let r = ctx.local_smp(&smp).map_err(|e| e.to_string())?;
    check_status(&r, "SMP")?;
    let data = &r[64..128];
    match what {
        SmpQuery::NodeInfo => {
            let n =
                NodeInfoRepr::parse(&NodeInfo::new_unchecked(data)).map_err(|e| e.to_string())?;
            w(writeln!(
                out,
                "# Node info: DR path slid 65535; dlid 65535; 0"
            ))?;
            field(out, "BaseVers", n.base_version)?;
            field(out, "ClassVers", n.class_version)?;
            field(
                out,
                "NodeType",
                if n.node_type == 1 {
                    "Channel Adapter"
                } else {
                    "?"
                },
            )?;
            field(out, "NumPorts", n.num_ports)?;
            field(out, "SystemGuid", format!("0x{:016x}", n.system_image_guid))?;
            field(out, "Guid", format!("0x{:016x}", n.node_guid))?;
            field(out, "PortGuid", format!("0x{:016x}", n.port_guid))?;
            field(out, "PartCap", n.partition_cap)?;
            field(out, "DevId", format!("0x{:04x}", n.device_id))?;
            field(out, "Revision", format!("0x{:08x}", n.revision))?;
            field(out, "LocalPort", n.local_port_num)?;
            field(out, "VendorId", format!("0x{:06x}", n.vendor_id))
        }
        SmpQuery::NodeDesc => {
            let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            w(writeln!(
                out,
                "Node Description:.{}",
                String::from_utf8_lossy(&data[..end])
            ))
        }
        SmpQuery::PortInfo => {
            let p =
                PortInfoRepr::parse(&PortInfo::new_unchecked(data)).map_err(|e| e.to_string())?;
            w(writeln!(
                out,
                "# Port info: DR path slid 65535; dlid 65535; 0 port {port}"
            ))?;
            field(out, "Mkey", format!("0x{:016x}", p.m_key))?;
            field(out, "GidPrefix", format!("0x{:016x}", p.gid_prefix))?;
            field(out, "Lid", p.lid)?;
            field(out, "SMLid", p.master_sm_lid)?;
            field(out, "CapMask", format!("0x{:x}", p.capability_mask))?;
            field(out, "MkeyLeasePeriod", p.m_key_lease_period)?;
            field(out, "LocalPort", p.local_port_num)?;
            field(
                out,
                "LinkState",
                match p.port_state {
                    4 => "Active",
                    1 => "Down",
                    2 => "Initialize",
                    3 => "Armed",
                    _ => "?",
                },
            )?;
            field(
                out,
                "PhysLinkState",
                if p.port_phys_state == 5 {
                    "LinkUp"
                } else {
                    "?"
                },
            )?;
            field(out, "ProtectBits", p.m_key_protect_bits)?;
            field(out, "LMC", p.lmc)?;
            field(out, "NeighborMTU", 128usize << p.neighbor_mtu)?;
            field(out, "MtuCap", 128usize << p.mtu_cap)?;
            field(out, "MkeyViolations", p.m_key_violations)?;
            field(out, "PkeyViolations", p.p_key_violations)?;
            field(out, "QkeyViolations", p.q_key_violations)?;
            field(out, "GuidCap", p.guid_cap)?;
            field(out, "SubnetTimeout", p.subnet_timeout)?;
            field(out, "RespTimeVal", p.resp_time_value)
        }
        SmpQuery::Guids => {
            for (i, g) in data.chunks(8).enumerate() {
                let v = u64::from_be_bytes(g.try_into().unwrap_or([0; 8]));
                w(writeln!(out, "{i:>4}  0x{v:016x}"))?;
            }
            Ok(())
        }
        SmpQuery::Pkeys => {
            let keys: Vec<String> = data
                .chunks(2)
                .map(|k| format!("0x{:04x}", u16::from_be_bytes([k[0], k[1]])))
                .collect();
            for (i, row) in keys.chunks(8).enumerate() {
                w(writeln!(out, "{:>4}: {}", i * 8, row.join(" ")))?;
            }
            let valid = data.chunks(2).filter(|k| k != &[0, 0]).count();
            w(writeln!(out, "{valid} pkeys capacity for this port"))
        }
    }
}

/// A trap MAD as one line (SM Trap 256, BM Trap 259, or the generic notice fields).
pub fn decode_trap(m: &Mad) -> String {
    let cls = m[1];
    let (notice, issuer) = if cls == class::SUBN_LID_ROUTED || cls == class::SUBN_DIRECTED_ROUTE {
        match NoticeRepr::parse(&Notice::new_unchecked(&m[64..128])) {
            Ok(n) => (n, None),
            Err(e) => return format!("undecodable trap: {e}"),
        }
    } else {
        match GsNoticeRepr::parse(&GsNotice::new_unchecked(&m[64..144])) {
            Ok(n) => (n.notice, Some(Gid(n.issuer_gid))),
            Err(e) => return format!("undecodable trap: {e}"),
        }
    };
    let num = notice.trap_number_or_device_id;
    let mut s = format!(
        "trap {num} class 0x{cls:02x} type {} issuer lid {}",
        notice.notice_type, notice.issuer_lid
    );
    if let Some(g) = issuer {
        s += &format!(" issuer gid {}", g);
    }
    let d = &notice.data_details[..];
    match (cls, num) {
        (class::BM, trap::BM_BAD_B_KEY) => {
            if let Ok(t) = Trap259BKeyDetailsRepr::parse(&Trap259BKeyDetails::new_unchecked(d)) {
                s += &format!(
                    ": bad B_Key 0x{:016x} from lid {} gid {} qp 0x{:06x} attempted method 0x{:02x} attr 0x{:04x} mod 0x{:08x}",
                    t.b_key,
                    t.lidaddr,
                    Gid(t.gidaddr),
                    t.qp,
                    t.method,
                    t.attribute_id,
                    t.attribute_modifier
                );
            }
        }
        (class::SUBN_LID_ROUTED, trap::SM_BAD_M_KEY) => {
            if let Ok(t) = Trap256DetailsRepr::parse(&Trap256Details::new_unchecked(d)) {
                s += &format!(
                    ": bad M_Key 0x{:016x} from lid {} attempted method 0x{:02x} attr 0x{:04x} mod 0x{:08x}",
                    t.m_key, t.lidaddr, t.method, t.attribute_id, t.attribute_modifier
                );
                if t.dr_notice {
                    s += &format!(" dr_slid {} hops {}", t.dr_slid, t.dr_hop_count);
                }
            }
        }
        _ => {}
    }
    s
}

/// `rverbs mad listen-traps`: prints traps as they arrive over GSI (BM and PMA Trap
/// MADs sent to this port) and traps this port raises itself. Stops after `count`
/// traps or `timeout`.
pub fn listen_traps(
    dev: Option<&str>,
    count: Option<usize>,
    timeout: Option<Duration>,
    out: &mut dyn Write,
) -> Res<()> {
    let ctx = open(dev)?;
    let mut agents = Vec::new();
    for c in [class::BM, class::PERF_MGMT] {
        agents.push(
            ctx.register_mad_agent(Some(Registration {
                mgmt_class: c,
                class_version: 1,
                methods: 1 << method::TRAP,
            }))
            .map_err(|e| e.to_string())?,
        );
    }
    let gid = ctx.gid(1).ok_or("the device has no address GID")?;
    w(writeln!(out, "listening on gid {} qp 1", gid))?;
    w(out.flush())?;
    let start = std::time::Instant::now();
    let mut n = 0;
    while count.is_none_or(|c| n < c) && timeout.is_none_or(|t| start.elapsed() < t) {
        let mut got = false;
        for a in &agents {
            if let Some(r) = a.recv(Duration::from_millis(20)) {
                w(writeln!(
                    out,
                    "from gid {} qp 0x{:x}: {}",
                    r.src_gid(),
                    r.wc.src_qp,
                    decode_trap(&r.mad)
                ))?;
                n += 1;
                got = true;
            }
        }
        while let Some(t) = ctx.poll_trap() {
            w(writeln!(out, "local: {}", decode_trap(&t.mad)))?;
            n += 1;
            got = true;
        }
        if got {
            w(out.flush())?;
        }
    }
    match count {
        Some(c) if n < c => Err(format!("{n} of {c} traps before the timeout")),
        _ => Ok(()),
    }
}

/// `rverbs mad serve`: keeps a port up (its GSI answers PMA and BM queries) with the
/// given keys, printing its GID, until stdin closes.
pub fn serve(dev: Option<&str>, b_key: u64, m_key: u64, out: &mut dyn Write) -> Res<()> {
    let ctx = open(dev)?;
    ctx.set_b_key(b_key, false);
    ctx.set_m_key(m_key, if m_key != 0 { 2 } else { 0 });
    let gid = ctx.gid(1).ok_or("the device has no address GID")?;
    w(writeln!(out, "serving gid {} qp 1", gid))?;
    w(out.flush())?;
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    let s = ctx.mad_stats();
    w(writeln!(
        out,
        "gsi received={} sent={} dropped={} bkey_drops={} traps={}",
        s.gsi_received, s.gsi_sent, s.gsi_dropped, s.bkey_drops, s.traps_raised
    ))
}

/// What `rverbs mad bm-set` writes on a remote BMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmSet {
    /// BKeyInfo: a new B_Key (protect bit clear, no lease).
    BKey(u64),
    /// ClassPortInfo: the trap destination (GID, GSI QP 1, GSI Q_Key).
    TrapDest(Gid),
}

/// `rverbs mad bm-set`: a BM Set carrying `b_key` to the port at `gid`. Prints the
/// result; a MAD dropped for a wrong B_Key gets no answer (an error after the
/// retries).
pub fn bm_set(
    dev: Option<&str>,
    gid: Gid,
    b_key: u64,
    what: BmSet,
    out: &mut dyn Write,
) -> Res<()> {
    let ctx = open(dev)?;
    let me = ctx.gid(1).ok_or("the device has no address GID")?;
    w(writeln!(out, "local gid {} qp 1", me))?;
    let mut m = match what {
        BmSet::BKey(k) => {
            let mut m = mad::request(class::BM, attr::BM_BKEY_INFO, 0);
            BKeyInfoRepr {
                b_key: k,
                b_key_protect_bit: false,
                b_key_lease_period: 0,
                b_key_violations: 0,
            }
            .emit(&mut BKeyInfo::new_unchecked(&mut m[64..78]));
            m
        }
        BmSet::TrapDest(t) => {
            let mut m = mad::request(class::BM, attr::CLASS_PORT_INFO, 0);
            let mut cpi = ClassPortInfoRepr::parse(&ClassPortInfo::new_unchecked(&[0u8; 72][..]))
                .map_err(|e| e.to_string())?;
            cpi.trap_gid = t.0;
            cpi.trap_qp = mad::GSI_QPN;
            cpi.trap_q_key = mad::GSI_QKEY;
            cpi.trap_p_key = 0xffff;
            cpi.emit(&mut ClassPortInfo::new_unchecked(&mut m[64..136]));
            m
        }
    };
    m[3] = method::SET;
    m[24..32].copy_from_slice(&b_key.to_be_bytes());
    let r = query(&ctx, Some(gid), &m)?;
    check_status(&r, "BM Set")?;
    w(writeln!(out, "BM Set accepted by {}", gid))
}

/// One-line summary of a MAD carried to or from QP1, for `pcap decode`.
pub fn summary(m: &[u8]) -> Option<String> {
    if m.len() != rverbs_wire::mad::MAD_LEN {
        return None;
    }
    let h = MadHeader::new_checked(m).ok()?;
    let cls = match h.mgmt_class() {
        class::SUBN_LID_ROUTED => "SubnMgt".to_string(),
        class::SUBN_DIRECTED_ROUTE => "SubnMgtDR".to_string(),
        class::SUBN_ADM => "SubnAdm".to_string(),
        class::PERF_MGMT => "PerfMgt".to_string(),
        class::BM => "BM".to_string(),
        class::CM => "CM".to_string(),
        c => format!("0x{c:02x}"),
    };
    let meth = match h.method() {
        method::GET => "Get".to_string(),
        method::SET => "Set".to_string(),
        method::SEND => "Send".to_string(),
        method::TRAP => "Trap".to_string(),
        method::REPORT => "Report".to_string(),
        method::TRAP_REPRESS => "TrapRepress".to_string(),
        method::GET_RESP => "GetResp".to_string(),
        method::REPORT_RESP => "ReportResp".to_string(),
        x => format!("0x{x:02x}"),
    };
    Some(format!(
        "mad {cls} {meth} attr=0x{:04x} mod=0x{:x} status=0x{:04x} tid=0x{:x}",
        h.attribute_id(),
        h.attribute_modifier(),
        h.status(),
        h.transaction_id()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_selects_what_perfquery_selects() {
        let caps = capability::PM_EXT_WIDTH_SUPPORTED | capability::PM_IS_QP1_DROP_SUP;
        // perfquery -R: mask 0xffff | 1 << 17 (QP1Dropped advertised, not XmitWait);
        // CounterSelect2 is PortCounters byte 18.
        let m = pma_request(attr::PMA_PORT_COUNTERS, 1, true, caps);
        assert_eq!((m[3], m[65]), (method::SET, 1));
        assert_eq!(&m[66..68], &[0xff, 0xff]);
        assert_eq!(m[64 + 18], 0x02);
        // perfquery -x -R: mask 0xffff | 0xfff0000 | 1 << 29, CounterSelect2 (32 bits)
        // at bytes 4-7 of the data area.
        let m = pma_request(attr::PMA_PORT_COUNTERS_EXT, 1, true, caps);
        assert_eq!(&m[66..68], &[0xff, 0xff]);
        assert_eq!(&m[68..72], &0x2fffu32.to_be_bytes());
        // Without the capability bits only the always-present selections are made.
        let m = pma_request(attr::PMA_PORT_COUNTERS, 1, true, 0);
        assert_eq!(m[64 + 18], 0);
        // A Get selects nothing.
        let m = pma_request(attr::PMA_PORT_COUNTERS_EXT, 1, false, caps);
        assert_eq!((m[3], &m[66..72]), (method::GET, &[0u8; 6][..]));
    }
}
