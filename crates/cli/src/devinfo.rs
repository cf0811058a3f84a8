//! `rverbs devinfo`: the soft devices in `ibv_devinfo`'s layout and field names
//! (rdma-core `libibverbs/examples/devinfo.c`; compare
//! `rxe-peer/reference/ibv_devinfo-v.txt`), or as JSON.

use crate::json::Json;
use rverbs::{Context, DeviceAttr, DeviceInfo, PortAttr, PortState, DEVICE_CAP_NAMES};
use std::fmt::Write;

/// A GUID as `ibv_devinfo` prints it: four groups of four hex digits.
pub fn guid_str(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

fn mtu_str(m: rverbs::Mtu) -> String {
    format!("{} ({})", m.bytes(), m as u8)
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1X",
        2 => "4X",
        4 => "8X",
        8 => "12X",
        16 => "2X",
        _ => "invalid width",
    }
}

fn speed_str(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn state_str(s: PortState) -> &'static str {
    match s {
        PortState::Active => "PORT_ACTIVE",
        PortState::Down => "PORT_DOWN",
    }
}

/// `enum ibv_port_state`'s value, which ibv_devinfo prints beside the name
/// (`IBV_PORT_DOWN` 1, `IBV_PORT_INIT` 2, `IBV_PORT_ARMED` 3, `IBV_PORT_ACTIVE` 4,
/// `IBV_PORT_ACTIVE_DEFER` 5); not the Rust enum's own discriminant.
fn state_num(s: PortState) -> u8 {
    match s {
        PortState::Down => 1,
        PortState::Active => 4,
    }
}

fn phys_state_str(p: u8) -> &'static str {
    match p {
        5 => "LINK_UP",
        3 => "DISABLED",
        _ => "invalid physical state",
    }
}

/// A flag list as devinfo prints it: one name a line, then the unknown bits.
fn flags(o: &mut String, v: u64, names: &[(u64, &str)]) {
    let mut known = 0;
    for (bit, name) in names {
        known |= bit;
        if v & bit != 0 {
            let _ = writeln!(o, "\t\t\t\t\t{name}");
        }
    }
    if v & !known != 0 {
        let _ = writeln!(o, "\t\t\t\t\tUnknown flags: 0x{:X}", v & !known);
    }
}

/// QP types a TSO / RSS / pacing capability lists (bit n: `IBV_QPT_*` n).
const QPTS: [(u64, &str); 2] = [(1 << 8, "SUPPORT_RAW_PACKET"), (1 << 4, "SUPPORT_UD")];

/// The extended block of `ibv_devinfo -v` (`ibv_query_device_ex`: on-demand paging,
/// timestamps, raw packet caps, the capability bits above 31, TSO, RSS, receive WQs,
/// packet pacing, tag matching, CQ moderation, device memory), in devinfo.c's order
/// and layout (rdma-core 44's, the rxe guest's).
fn extended(o: &mut String, x: &rverbs::DeviceAttrEx) {
    let _ = writeln!(o, "\tgeneral_odp_caps:");
    flags(
        o,
        x.odp_general_caps,
        &[(1, "ODP_SUPPORT"), (2, "ODP_SUPPORT_IMPLICIT")],
    );
    for (t, caps) in ["rc", "uc", "ud", "xrc"].iter().zip(x.odp_caps) {
        let _ = writeln!(o, "\t{t}_odp_caps:");
        if caps == 0 {
            let _ = writeln!(o, "\t\t\t\t\tNO SUPPORT");
        } else {
            let names = [
                (1, "SUPPORT_SEND"),
                (2, "SUPPORT_RECV"),
                (4, "SUPPORT_WRITE"),
                (8, "SUPPORT_READ"),
                (16, "SUPPORT_ATOMIC"),
                (32, "SUPPORT_SRQ"),
            ];
            flags(o, caps.into(), &names);
        }
    }
    if x.completion_timestamp_mask != 0 {
        let m = x.completion_timestamp_mask;
        let _ = writeln!(o, "\tcompletion timestamp_mask:\t\t\t0x{m:016x}");
    } else {
        let _ = writeln!(o, "\tcompletion_timestamp_mask not supported");
    }
    if x.hca_core_clock != 0 {
        let _ = writeln!(o, "\thca_core_clock:\t\t\t{}kHZ", x.hca_core_clock);
    } else {
        let _ = writeln!(o, "\tcore clock not supported");
    }
    if x.raw_packet_caps != 0 {
        let _ = writeln!(o, "\traw packet caps:");
        for (bit, name) in [
            (1, "C-VLAN stripping offload"),
            (2, "Scatter FCS offload"),
            (4, "IP csum offload"),
            (8, "Delay drop"),
        ] {
            if x.raw_packet_caps & bit != 0 {
                let _ = writeln!(o, "\t\t\t\t\t{name}");
            }
        }
    }
    let _ = writeln!(o, "\tdevice_cap_flags_ex:\t\t0x{:X}", x.device_cap_flags_ex);
    // Only the bits above 31 are listed here (the others were, under device_cap_flags).
    flags(
        o,
        x.device_cap_flags_ex & !0xffff_ffff,
        &[
            (1 << 34, "RAW_SCATTER_FCS"),
            (1 << 36, "PCI_WRITE_END_PADDING"),
        ],
    );
    let _ = writeln!(o, "\ttso_caps:\n\t\tmax_tso:\t\t\t{}", x.max_tso);
    if x.max_tso != 0 {
        let _ = writeln!(o, "\t\tsupported_qp:");
        flags(o, x.tso_qpts.into(), &QPTS);
    }
    let _ = writeln!(o, "\trss_caps:");
    let _ = writeln!(
        o,
        "\t\tmax_rwq_indirection_tables:\t\t\t{}",
        x.max_rwq_indirection_tables
    );
    let _ = writeln!(
        o,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}",
        x.max_rwq_indirection_table_size
    );
    let _ = writeln!(o, "\t\trx_hash_function:\t\t\t\t0x{:x}", x.rx_hash_function);
    let _ = writeln!(
        o,
        "\t\trx_hash_fields_mask:\t\t\t\t0x{:X}",
        x.rx_hash_fields_mask
    );
    if x.rss_qpts != 0 {
        let _ = writeln!(o, "\t\tsupported_qp:");
        flags(o, x.rss_qpts.into(), &QPTS);
    }
    let _ = writeln!(o, "\tmax_wq_type_rq:\t\t\t{}", x.max_wq_type_rq);
    let _ = writeln!(o, "\tpacket_pacing_caps:");
    let _ = writeln!(o, "\t\tqp_rate_limit_min:\t{}kbps", x.qp_rate_limit_min);
    let _ = writeln!(o, "\t\tqp_rate_limit_max:\t{}kbps", x.qp_rate_limit_max);
    if x.qp_rate_limit_max != 0 {
        let _ = writeln!(o, "\t\tsupported_qp:");
        flags(o, x.pacing_qpts.into(), &QPTS);
    }
    if x.tm_max_num_tags != 0 {
        let _ = writeln!(o, "\tmax_rndv_hdr_size:\t\t{}", x.tm_max_rndv_hdr_size);
        let _ = writeln!(o, "\tmax_num_tags:\t\t\t{}", x.tm_max_num_tags);
        let _ = writeln!(o, "\tmax_ops:\t\t\t{}", x.tm_max_ops);
        let _ = writeln!(o, "\tmax_sge:\t\t\t{}", x.tm_max_sge);
        let _ = writeln!(o, "\tflags:");
        if x.tm_flags & 1 != 0 {
            let _ = writeln!(o, "\t\t\t\t\tIBV_TM_CAP_RC");
        }
    } else {
        let _ = writeln!(o, "\ttag matching not supported");
    }
    if x.max_cq_count != 0 && x.max_cq_period != 0 {
        let _ = writeln!(o, "\n\tcq moderation caps:");
        let _ = writeln!(o, "\t\tmax_cq_count:\t{}", x.max_cq_count);
        let _ = writeln!(o, "\t\tmax_cq_period:\t{} us\n", x.max_cq_period);
    }
    if x.max_dm_size != 0 {
        let m = x.max_dm_size;
        let _ = writeln!(o, "\tmaximum available device memory:\t{m}Bytes\n");
    }
}

/// Everything `devinfo` shows about one open device.
pub struct Snapshot {
    /// The device.
    pub info: DeviceInfo,
    /// `ibv_query_device`.
    pub dev: DeviceAttr,
    /// `ibv_query_port(1)`.
    pub port: PortAttr,
    /// The GID table (every entry is RoCE v2).
    pub gids: Vec<rverbs::Gid>,
}

impl Snapshot {
    /// Opens `info` and queries it.
    pub fn take(info: &DeviceInfo) -> rverbs::Result<Snapshot> {
        let ctx = Context::open(info.clone())?;
        Ok(Snapshot {
            info: info.clone(),
            dev: ctx.query_device()?,
            port: ctx.query_port(1)?,
            gids: ctx.gids(),
        })
    }

    /// The same without opening the device (`DeviceInfo::attributes`): what devinfo
    /// shows when the device cannot be opened (another process holds it, or the
    /// kernel's rxe holds port 4791).
    pub fn unopened(info: &DeviceInfo) -> Snapshot {
        let (dev, port, gids) = info.attributes();
        Snapshot {
            info: info.clone(),
            dev,
            port,
            gids,
        }
    }
}

/// The `ibv_devinfo [-v]` text of one device.
pub fn text(s: &Snapshot, verbose: bool) -> String {
    text_port(s, verbose, None)
}

/// [`text`] limited to `port` (`ibv_devinfo -i PORT`): as devinfo.c's port loop, a
/// port the device does not have prints no port section (and no error).
pub fn text_port(s: &Snapshot, verbose: bool, port: Option<u8>) -> String {
    let d = &s.dev;
    let p = &s.port;
    let mut o = String::new();
    let _ = writeln!(o, "hca_id:\t{}", s.info.name);
    // rdma-core prints the node type's transport: InfiniBand (0) for RoCE devices.
    let _ = writeln!(o, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(o, "\tfw_ver:\t\t\t\t{}", d.fw_ver);
    let _ = writeln!(o, "\tnode_guid:\t\t\t{}", guid_str(d.node_guid));
    let _ = writeln!(o, "\tsys_image_guid:\t\t\t{}", guid_str(d.sys_image_guid));
    let _ = writeln!(o, "\tvendor_id:\t\t\t{:#x}", d.vendor_id);
    let _ = writeln!(o, "\tvendor_part_id:\t\t\t{}", d.vendor_part_id);
    let _ = writeln!(o, "\thw_ver:\t\t\t\t{:#x}", d.hw_ver);
    let _ = writeln!(o, "\tphys_port_cnt:\t\t\t{}", d.phys_port_cnt);
    if verbose {
        let _ = writeln!(o, "\tmax_mr_size:\t\t\t{:#x}", d.max_mr_size);
        let _ = writeln!(o, "\tpage_size_cap:\t\t\t{:#x}", d.page_size_cap);
        let _ = writeln!(o, "\tmax_qp:\t\t\t\t{}", d.max_qp);
        let _ = writeln!(o, "\tmax_qp_wr:\t\t\t{}", d.max_qp_wr);
        let _ = writeln!(o, "\tdevice_cap_flags:\t\t0x{:08x}", d.device_cap_flags);
        for (bit, name) in DEVICE_CAP_NAMES {
            if d.device_cap_flags & u64::from(*bit) != 0 {
                let _ = writeln!(o, "\t\t\t\t\t{name}");
            }
        }
        let n = |o: &mut String, k: &str, tabs: usize, v: u64| {
            let _ = writeln!(o, "\t{k}:{}{v}", "\t".repeat(tabs));
        };
        n(
            &mut o,
            "max_sge",
            3,
            d.max_send_sge.min(d.max_recv_sge).into(),
        );
        n(&mut o, "max_sge_rd", 3, d.max_send_sge.into());
        n(&mut o, "max_cq", 4, d.max_cq.into());
        n(&mut o, "max_cqe", 3, d.max_cqe.into());
        n(&mut o, "max_mr", 4, d.max_mr.into());
        n(&mut o, "max_pd", 4, d.max_pd.into());
        n(&mut o, "max_qp_rd_atom", 3, d.max_qp_rd_atom.into());
        n(&mut o, "max_ee_rd_atom", 3, 0);
        n(&mut o, "max_res_rd_atom", 2, d.max_res_rd_atom.into());
        n(
            &mut o,
            "max_qp_init_rd_atom",
            2,
            d.max_qp_init_rd_atom.into(),
        );
        n(&mut o, "max_ee_init_rd_atom", 2, 0);
        let atomic = if d.atomic_hca {
            "ATOMIC_HCA (1)"
        } else {
            "ATOMIC_NONE (0)"
        };
        let _ = writeln!(o, "\tatomic_cap:\t\t\t{atomic}");
        n(&mut o, "max_ee", 4, 0);
        n(&mut o, "max_rdd", 3, 0);
        n(&mut o, "max_mw", 4, d.max_mw.into());
        n(&mut o, "max_raw_ipv6_qp", 2, 0);
        n(&mut o, "max_raw_ethy_qp", 2, 0);
        n(&mut o, "max_mcast_grp", 3, d.max_mcast_grp.into());
        n(
            &mut o,
            "max_mcast_qp_attach",
            2,
            d.max_mcast_qp_attach.into(),
        );
        n(
            &mut o,
            "max_total_mcast_qp_attach",
            1,
            d.max_total_mcast_qp_attach.into(),
        );
        n(&mut o, "max_ah", 4, d.max_ah.into());
        n(&mut o, "max_fmr", 3, 0);
        n(&mut o, "max_srq", 3, d.max_srq.into());
        n(&mut o, "max_srq_wr", 3, d.max_srq_wr.into());
        n(&mut o, "max_srq_sge", 3, d.max_srq_sge.into());
        n(&mut o, "max_pkeys", 3, d.max_pkeys.into());
        n(&mut o, "local_ca_ack_delay", 2, d.local_ca_ack_delay.into());
        extended(&mut o, &d.ex);
        let _ = writeln!(o, "\tnum_comp_vectors:\t\t1");
    }
    if port.is_some_and(|p| p != 1) {
        return o;
    }
    let _ = writeln!(o, "\t\tport:\t1");
    let _ = writeln!(
        o,
        "\t\t\tstate:\t\t\t{} ({})",
        state_str(p.state),
        state_num(p.state)
    );
    let _ = writeln!(o, "\t\t\tmax_mtu:\t\t{}", mtu_str(p.max_mtu));
    let _ = writeln!(o, "\t\t\tactive_mtu:\t\t{}", mtu_str(p.active_mtu));
    let _ = writeln!(o, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
    let _ = writeln!(o, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(o, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
    let _ = writeln!(o, "\t\t\tlink_layer:\t\tEthernet");
    if verbose {
        let _ = writeln!(o, "\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
        let _ = writeln!(o, "\t\t\tport_cap_flags:\t\t0x{:08x}", p.port_cap_flags);
        let _ = writeln!(o, "\t\t\tport_cap_flags2:\t0x0000");
        let _ = writeln!(o, "\t\t\tmax_vl_num:\t\t1 ({})", p.max_vl_num);
        let _ = writeln!(o, "\t\t\tbad_pkey_cntr:\t\t{:#x}", p.bad_pkey_cntr);
        let _ = writeln!(o, "\t\t\tqkey_viol_cntr:\t\t{:#x}", p.qkey_viol_cntr);
        let _ = writeln!(o, "\t\t\tsm_sl:\t\t\t0");
        let _ = writeln!(o, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
        let _ = writeln!(o, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
        let _ = writeln!(o, "\t\t\tsubnet_timeout:\t\t0");
        let _ = writeln!(o, "\t\t\tinit_type_reply:\t0");
        let _ = writeln!(
            o,
            "\t\t\tactive_width:\t\t{} ({})",
            width_str(p.active_width),
            p.active_width
        );
        let _ = writeln!(
            o,
            "\t\t\tactive_speed:\t\t{} ({})",
            speed_str(p.active_speed),
            p.active_speed
        );
        let _ = writeln!(
            o,
            "\t\t\tphys_state:\t\t{} ({})",
            phys_state_str(p.phys_state),
            p.phys_state
        );
        for (i, g) in s.gids.iter().enumerate() {
            let _ = writeln!(o, "\t\t\tGID[{i:>3}]:\t\t{g}, RoCE v2");
        }
    }
    o.push('\n');
    o
}

/// The JSON object of one device (every field of both structures, and the GIDs).
pub fn json(s: &Snapshot) -> Json {
    let d = &s.dev;
    let p = &s.port;
    let caps: Vec<&str> = DEVICE_CAP_NAMES
        .iter()
        .filter(|(b, _)| d.device_cap_flags & u64::from(*b) != 0)
        .map(|(_, n)| *n)
        .collect();
    let dev = Json::obj()
        .with("hca_id", s.info.name.as_str())
        .with("netdev", s.info.ifname.as_str())
        .with("transport", "InfiniBand")
        .with("fw_ver", d.fw_ver.as_str())
        .with("node_guid", guid_str(d.node_guid))
        .with("sys_image_guid", guid_str(d.sys_image_guid))
        .with("vendor_id", d.vendor_id)
        .with("vendor_part_id", d.vendor_part_id)
        .with("hw_ver", d.hw_ver)
        .with("phys_port_cnt", d.phys_port_cnt)
        .with("max_mr_size", d.max_mr_size)
        .with("page_size_cap", d.page_size_cap)
        .with("max_qp", d.max_qp)
        .with("max_qp_wr", d.max_qp_wr)
        .with("device_cap_flags", d.device_cap_flags)
        .with("device_caps", caps)
        .with("max_send_sge", d.max_send_sge)
        .with("max_recv_sge", d.max_recv_sge)
        .with("max_cq", d.max_cq)
        .with("max_cqe", d.max_cqe)
        .with("max_mr", d.max_mr)
        .with("max_pd", d.max_pd)
        .with("max_qp_rd_atom", d.max_qp_rd_atom)
        .with("max_res_rd_atom", d.max_res_rd_atom)
        .with("max_qp_init_rd_atom", d.max_qp_init_rd_atom)
        .with("atomic_cap", u8::from(d.atomic_hca))
        .with("max_mcast_grp", d.max_mcast_grp)
        .with("max_mcast_qp_attach", d.max_mcast_qp_attach)
        .with("max_total_mcast_qp_attach", d.max_total_mcast_qp_attach)
        .with("max_ah", d.max_ah)
        .with("max_srq", d.max_srq)
        .with("max_srq_wr", d.max_srq_wr)
        .with("max_srq_sge", d.max_srq_sge)
        .with("max_pkeys", d.max_pkeys)
        .with("local_ca_ack_delay", d.local_ca_ack_delay);
    let port = Json::obj()
        .with("port", 1u8)
        .with("state", state_str(p.state))
        .with("max_mtu", p.max_mtu.bytes())
        .with("active_mtu", p.active_mtu.bytes())
        .with("sm_lid", p.sm_lid)
        .with("port_lid", p.lid)
        .with("port_lmc", p.lmc)
        .with("link_layer", "Ethernet")
        .with("max_msg_sz", p.max_msg_sz)
        .with("port_cap_flags", p.port_cap_flags)
        .with("max_vl_num", p.max_vl_num)
        .with("bad_pkey_cntr", p.bad_pkey_cntr)
        .with("qkey_viol_cntr", p.qkey_viol_cntr)
        .with("pkey_tbl_len", p.pkey_tbl_len)
        .with("gid_tbl_len", p.gid_tbl_len)
        .with("active_width", width_str(p.active_width))
        .with("active_speed", speed_str(p.active_speed))
        .with("phys_state", phys_state_str(p.phys_state))
        .with(
            "gids",
            Json::Arr(
                s.gids
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        Json::obj()
                            .with("index", i)
                            .with("gid", g.to_string())
                            .with("type", "RoCE v2")
                    })
                    .collect(),
            ),
        );
    dev.with("ports", Json::Arr(vec![port]))
}

/// `ibv_devinfo -l`: the number of devices, then their names, a tab before each.
pub fn list() -> Result<String, String> {
    let all = rverbs::devices().map_err(|e| e.to_string())?;
    Ok(list_text(all.iter().map(|d| d.name.as_str())))
}

fn list_text<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let n = names.len();
    let mut o = format!("{n} HCA{} found:\n", if n == 1 { "" } else { "s" });
    for name in names {
        let _ = writeln!(o, "\t{name}");
    }
    o.push('\n');
    o
}

/// Runs `rverbs devinfo`: every device (or `dev` only), text or JSON.
pub fn run(dev: Option<&str>, verbose: bool, as_json: bool) -> Result<String, String> {
    run_port(dev, None, verbose, as_json)
}

/// [`run`] limited to one port (`-i`); the JSON then lists that port only.
pub fn run_port(
    dev: Option<&str>,
    port: Option<u8>,
    verbose: bool,
    as_json: bool,
) -> Result<String, String> {
    let all = rverbs::devices().map_err(|e| e.to_string())?;
    let chosen: Vec<&DeviceInfo> = match dev {
        Some(n) => {
            let d =
                all.iter()
                    .find(|d| d.name == n)
                    .ok_or_else(|| match rverbs::device(Some(n)) {
                        // Why (e.g. the system's libibverbs.so.1 is missing).
                        Err(e) => format!("IB device '{n}' wasn't found: {e}"),
                        Ok(_) => format!("IB device '{n}' wasn't found"),
                    })?;
            vec![d]
        }
        None => all.iter().collect(),
    };
    if chosen.is_empty() {
        return Err("No IB devices found".into());
    }
    let mut out = String::new();
    let mut objs = Vec::new();
    for d in chosen {
        // A device another process holds is shown unopened; a bad environment variable
        // is the user's to fix, so it is reported, not hidden behind that fallback.
        let s = match Snapshot::take(d) {
            Ok(s) => s,
            Err(e @ rverbs::Error::Config { .. }) => return Err(e.to_string()),
            Err(_) => Snapshot::unopened(d),
        };
        if as_json {
            let mut j = json(&s);
            if port.is_some_and(|p| p != 1) {
                j = j.with("ports", Json::Arr(Vec::new()));
            }
            objs.push(j);
        } else {
            out.push_str(&text_port(&s, verbose, port));
        }
    }
    if as_json {
        out = Json::Arr(objs).render();
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_state_numbers_are_ibv_port_states() {
        assert_eq!(state_num(PortState::Down), 1);
        assert_eq!(state_num(PortState::Active), 4);
        let s = Snapshot::take(&rverbs::device(None).unwrap()).unwrap();
        let t = text(&s, false);
        let line = t.lines().find(|l| l.contains("state:")).unwrap();
        let want = match s.port.state {
            PortState::Active => "PORT_ACTIVE (4)",
            PortState::Down => "PORT_DOWN (1)",
        };
        assert!(line.ends_with(want), "{line}");
    }

    /// The extended block: rxe's zeros give rxe's lines; set fields give devinfo's
    /// lists (names, then the unknown bits).
    #[test]
    fn extended_block_like_ibv_devinfo() {
        let reference = include_str!("../../../testdata/rxe/ibv_devinfo-v.txt");
        let mut o = String::new();
        extended(
            &mut o,
            &rverbs::DeviceAttrEx {
                device_cap_flags_ex: 0x1223c76,
                ..Default::default()
            },
        );
        let start = reference.find("\tgeneral_odp_caps:").unwrap();
        let end = reference.find("\tnum_comp_vectors:").unwrap();
        assert_eq!(o, reference[start..end]);
        let mut o = String::new();
        extended(
            &mut o,
            &rverbs::DeviceAttrEx {
                device_cap_flags_ex: 0x1c0_0122_3c76 | 1 << 34,
                odp_caps: [1 | 8, 0, 0, 0x40],
                max_tso: 262_144,
                tso_qpts: 1 << 8,
                hca_core_clock: 156_250,
                tm_max_num_tags: 64,
                tm_flags: 1,
                ..Default::default()
            },
        );
        for line in [
            "\trc_odp_caps:\n\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_READ\n\tuc_odp_caps:\n",
            "\txrc_odp_caps:\n\t\t\t\t\tUnknown flags: 0x40\n",
            "\thca_core_clock:\t\t\t156250kHZ\n",
            "\tdevice_cap_flags_ex:\t\t0x1C401223C76\n\t\t\t\t\tRAW_SCATTER_FCS\n\t\t\t\t\tUnknown flags: 0x1C000000000\n",
            "\t\tmax_tso:\t\t\t262144\n\t\tsupported_qp:\n\t\t\t\t\tSUPPORT_RAW_PACKET\n\trss_caps:",
            "\tmax_num_tags:\t\t\t64\n",
            "\t\t\t\t\tIBV_TM_CAP_RC\n",
        ] {
            assert!(o.contains(line), "{line:?} not in:\n{o}");
        }
    }

    #[test]
    fn guid_like_ibv_devinfo() {
        assert_eq!(guid_str(0x5054_00ff_fe77_0002), "5054:00ff:fe77:0002");
    }

    /// Every line label of rxe's `ibv_devinfo -v` that rverbs has a value for appears
    /// with the same indentation and tab layout.
    #[test]
    fn layout_matches_rxe_reference() {
        let s = Snapshot::take(&rverbs::device(None).unwrap()).unwrap();
        let t = text(&s, true);
        let reference = include_str!("../../../testdata/rxe/ibv_devinfo-v.txt");
        let labels = |txt: &str| -> Vec<String> {
            txt.lines()
                .filter(|l| l.starts_with('\t') && l.contains(':'))
                .map(|l| {
                    let (k, _) = l.split_once(':').unwrap();
                    // label plus the tabs after the colon
                    let rest = &l[k.len() + 1..];
                    let tabs = rest.chars().take_while(|&c| c == '\t').count();
                    format!("{k}:{tabs}")
                })
                .filter(|k| !k.contains("GID["))
                .collect()
        };
        let ours = labels(&t);
        let theirs = labels(reference);
        for l in &ours {
            assert!(theirs.contains(l), "{l:?} not in rxe's layout");
        }
        for must in ["\tmax_qp_wr:3", "\t\t\tactive_mtu:2", "\t\t\tgid_tbl_len:2"] {
            assert!(ours.iter().any(|l| l == must), "{must}");
        }
        assert!(t.starts_with("hca_id:\trv_lo\n"));
        assert!(t.contains("\t\t\tGID[  1]:\t\t::ffff:127.0.0."));
        let short = text(&s, false);
        assert!(!short.contains("max_qp_wr") && short.contains("link_layer:\t\tEthernet"));
    }

    #[test]
    fn unopened_matches_opened_but_for_the_loopback_address() {
        let info = rverbs::device(None).unwrap();
        let (opened, unopened) = (Snapshot::take(&info).unwrap(), Snapshot::unopened(&info));
        assert_eq!(opened.dev, unopened.dev);
        // The GID list (and so its length) differs for loopback by design.
        assert_eq!(
            rverbs::PortAttr {
                gid_tbl_len: 0,
                ..opened.port.clone()
            },
            rverbs::PortAttr {
                gid_tbl_len: 0,
                ..unopened.port.clone()
            }
        );
        assert_eq!(opened.gids[0], unopened.gids[0]);
        assert!(unopened.gids[1..]
            .iter()
            .any(|g| g.to_string() == "::ffff:127.0.0.1"));
        assert_eq!(
            text(&opened, false).lines().count(),
            text(&unopened, false).lines().count()
        );
    }

    #[test]
    fn json_has_ports_and_gids() {
        let s = Snapshot::take(&rverbs::device(None).unwrap()).unwrap();
        let j = json(&s).render();
        assert!(j.starts_with("{\"hca_id\":\"rv_lo\""), "{j}");
        assert!(j.contains("\"gids\":[{\"index\":0,"), "{j}");
        assert!(j.contains("\"active_mtu\":"), "{j}");
    }

    #[test]
    fn list_like_ibv_devinfo_l() {
        assert_eq!(
            list_text(["rv_lo"].into_iter()),
            "1 HCA found:\n\trv_lo\n\n"
        );
        assert_eq!(
            list_text(["rv_lo", "rv_eth0"].into_iter()),
            "2 HCAs found:\n\trv_lo\n\trv_eth0\n\n"
        );
        assert_eq!(list_text([].into_iter()), "0 HCAs found:\n\n");
    }

    #[test]
    fn values_match_rxe_where_rverbs_has_them() {
        let s = Snapshot::take(&rverbs::device(None).unwrap()).unwrap();
        let t = text(&s, true);
        for line in [
            "\t\t\tgid_tbl_len:\t\t1024\n",
            "\tmax_mcast_grp:\t\t\t8192\n",
            "\tmax_mcast_qp_attach:\t\t56\n",
            "\tmax_total_mcast_qp_attach:\t458752\n",
        ] {
            assert!(
                include_str!("../../../testdata/rxe/ibv_devinfo-v.txt").contains(line),
                "{line:?} not in rxe's output"
            );
            assert!(t.contains(line), "{line:?} not in ours:\n{t}");
        }
    }

    #[test]
    fn one_port_only() {
        let s = Snapshot::take(&rverbs::device(None).unwrap()).unwrap();
        assert_eq!(text_port(&s, true, Some(1)), text(&s, true));
        let none = text_port(&s, true, Some(2));
        assert!(
            none.contains("max_qp_wr") && !none.contains("\t\tport:\t"),
            "{none}"
        );
        let j = run_port(Some("rv_lo"), Some(2), false, true).unwrap();
        assert!(j.contains("\"ports\":[]"), "{j}");
    }

    #[test]
    fn unknown_device_is_an_error() {
        let e = run(Some("rv_nonexistent"), false, false).unwrap_err();
        assert!(e.contains("wasn't found"), "{e}");
    }
}
