//! The Rust layouts of `rverbs_ibverbs::types` and the values of `consts`, proved
//! against the installed `<infiniband/verbs.h>` (libibverbs-dev), not against
//! themselves: the test writes a C program that prints `sizeof`, `_Alignof`, and the
//! `offsetof` and `sizeof` of every field listed here, plus every constant of
//! `consts::ALL`, compiles it with gcc, runs it, and compares each line with
//! `size_of` / `align_of` / `offset_of!` of the Rust side.
//!
//! Without gcc or the header it says SKIPPED, and fails when `RVERBS_NO_SKIP` is set.

mod common;

use common::{check_consts, check_rows, field_size, gcc_and_header, work_dir, Header, Row};
use rverbs_ibverbs::consts;
use rverbs_ibverbs::types::*;
use std::mem::{align_of, offset_of, size_of};

const VERBS_H: Header = Header {
    include: "<infiniband/verbs.h>",
    package: "libibverbs-dev",
};

/// The size of a field: through structs by raw borrow; a union member, whose place
/// Rust lets safe code name only as the target of a write (before 1.92), by its type
/// written after `:`, which a never-called assignment proves is the field's type.
macro_rules! field_size {
    ($t:ty, $($f:ident).+ : $fty:ty) => {{
        let _proof = |s: &mut $t, v: $fty| s.$($f).+ = v;
        size_of::<$fty>()
    }};
    ($t:ty, $($f:ident).+) => {
        field_size(|s: &$t| &raw const s.$($f).+)
    };
}

/// Rows for one type: `layout!(struct ibv_wc { wr_id, imm.imm_data as "imm_data" })`
/// checks `struct ibv_wc` (Rust `ibv_wc`) and each field path, Rust path first and the
/// C path after `as` where the two differ (anonymous unions, `type`, `priv`). A union
/// member carries its type: `imm.imm_data: __be32 as "imm_data"` (see `field_size!`).
///
/// A Rust type that C leaves unnamed (the member structs of an anonymous or inner union)
/// is named in C with gcc's `__typeof__`: `layout!(r, ibv_send_wr_rdma = "struct
/// ibv_send_wr", wr.rdma { remote_addr, rkey })`. Paths that go on through a union member
/// are checked that way.
macro_rules! layout {
    ($rows:ident, $t:ident = $outer:literal, $($p:ident).+ { $($fields:tt)* }) => {{
        let ty = format!(
            "__typeof__((({} *)0)->{})",
            $outer,
            stringify!($($p).+).replace(' ', "")
        );
        layout!(@rows $rows, ty, $t { $($fields)* });
    }};
    ($rows:ident, $kw:ident $t:ident { $($fields:tt)* }) => {{
        let ty = concat!(stringify!($kw), " ", stringify!($t)).to_string();
        layout!(@rows $rows, ty, $t { $($fields)* });
    }};
    (@rows $rows:ident, $ty:ident, $t:ident {
        $($($f:ident).+ $(: $fty:ty)? $(as $cf:literal)?),* $(,)?
    }) => {{
        let ty = $ty;
        $rows.push(Row {
            key: ty.to_string(),
            c: format!("sizeof({ty}), _Alignof({ty})"),
            a: size_of::<$t>(),
            b: align_of::<$t>(),
        });
        $({
            #[allow(unused_mut, unused_assignments)]
            let mut c_path = stringify!($($f).+).replace(' ', "");
            $(c_path = $cf.to_string();)?
            $rows.push(Row {
                key: format!("{ty}|{c_path}"),
                c: format!("offsetof({ty}, {c_path}), sizeof((({ty} *)0)->{c_path})"),
                a: offset_of!($t, $($f).+),
                b: field_size!($t, $($f).+ $(: $fty)?),
            });
        })*
    }};
}

fn rows() -> Vec<Row> {
    let mut r = Vec::new();
    layout!(r, union ibv_gid { raw: [u8; 16], global: ibv_gid_global });
    layout!(
        r,
        ibv_gid_global = "union ibv_gid",
        global {
            subnet_prefix,
            interface_id
        }
    );
    layout!(r, struct ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex });
    layout!(r, struct ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class });
    layout!(r, struct ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid });
    layout!(r, struct ibv_ah_attr {
        grh, grh.dgid, grh.flow_label, grh.sgid_index, grh.hop_limit, grh.traffic_class,
        dlid, sl, src_path_bits, static_rate, is_global, port_num,
    });
    layout!(r, struct ibv_device_attr {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
    });
    layout!(r, struct ibv_query_device_ex_input { comp_mask });
    layout!(r, struct ibv_odp_caps {
        general_caps, per_transport_caps, per_transport_caps.rc_odp_caps,
        per_transport_caps.uc_odp_caps, per_transport_caps.ud_odp_caps,
    });
    layout!(r, struct ibv_tso_caps { max_tso, supported_qpts });
    layout!(r, struct ibv_rss_caps {
        supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
        rx_hash_fields_mask, rx_hash_function,
    });
    layout!(r, struct ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts });
    layout!(r, struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge });
    layout!(r, struct ibv_cq_moderation_caps { max_cq_count, max_cq_period });
    layout!(r, struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap });
    layout!(r, struct ibv_device_attr_ex {
        orig_attr, orig_attr.phys_port_cnt, comp_mask, odp_caps, completion_timestamp_mask,
        hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq,
        packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size,
        pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex,
    });
    layout!(r, struct ibv_port_attr {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2,
    });
    layout!(r, struct ibv_async_event {
        element, element.cq: *mut ibv_cq, element.qp: *mut ibv_qp, element.srq: *mut ibv_srq,
        element.wq: *mut ibv_wq, element.port_num: core::ffi::c_int, event_type,
    });
    layout!(r, struct ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len, imm.imm_data: __be32 as "imm_data",
        imm.invalidated_rkey: u32 as "invalidated_rkey", qp_num, src_qp, wc_flags, pkey_index,
        slid, sl, dlid_path_bits,
    });
    layout!(r, struct ibv_poll_cq_attr { comp_mask });
    layout!(r, struct ibv_wc_tm_info { tag, priv_ as "priv" });
    layout!(r, struct ibv_pd { context, handle });
    layout!(r, struct ibv_td_init_attr { comp_mask });
    layout!(r, struct ibv_td { context });
    layout!(r, struct ibv_xrcd_init_attr { comp_mask, fd, oflags });
    layout!(r, struct ibv_xrcd { context });
    layout!(r, struct ibv_mr { context, pd, addr, length, handle, lkey, rkey });
    layout!(r, struct ibv_mw { context, pd, rkey, handle, type_ as "type" });
    layout!(r, struct ibv_mw_bind_info { mr, addr, length, mw_access_flags });
    layout!(r, struct ibv_mw_bind { wr_id, send_flags, bind_info, bind_info.mw_access_flags });
    layout!(r, struct ibv_alloc_dm_attr { length, log_align_req, comp_mask });
    layout!(r, struct ibv_dm { context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle });
    layout!(r, struct ibv_srq_attr { max_wr, max_sge, srq_limit });
    layout!(r, struct ibv_srq_init_attr { srq_context, attr, attr.srq_limit });
    layout!(r, struct ibv_tm_cap { max_num_tags, max_ops });
    layout!(r, struct ibv_srq_init_attr_ex {
        srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap, tm_cap.max_ops,
    });
    layout!(r, struct ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed });
    layout!(r, struct ibv_wq_init_attr {
        wq_context, wq_type, max_wr, max_sge, pd, cq, comp_mask, create_flags,
    });
    layout!(r, struct ibv_wq_attr { attr_mask, wq_state, curr_wq_state, flags, flags_mask });
    layout!(r, struct ibv_wq {
        context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond,
        events_completed, comp_mask,
    });
    layout!(r, struct ibv_rwq_ind_table { context, ind_tbl_handle, ind_tbl_num, comp_mask });
    layout!(r, struct ibv_rwq_ind_table_init_attr { log_ind_tbl_size, ind_tbl, comp_mask });
    layout!(r, struct ibv_qp_cap {
        max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
    });
    layout!(r, struct ibv_qp_init_attr {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
    });
    layout!(r, struct ibv_rx_hash_conf {
        rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask,
    });
    layout!(r, struct ibv_qp_init_attr_ex {
        qp_context, send_cq, recv_cq, srq, cap, cap.max_inline_data, qp_type, sq_sig_all,
        comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf,
        rx_hash_conf.rx_hash_fields_mask, source_qpn, send_ops_flags,
    });
    layout!(r, struct ibv_qp_open_attr { comp_mask, qp_num, xrcd, qp_context, qp_type });
    layout!(r, struct ibv_qp_attr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, ah_attr.grh.sgid_index, ah_attr.port_num,
        alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining,
        max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
        rnr_retry, alt_port_num, alt_timeout, rate_limit,
    });
    layout!(r, struct ibv_qp_rate_limit_attr { rate_limit, max_burst_sz, typical_pkt_sz, comp_mask });
    layout!(r, struct ibv_qp {
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
        mutex, cond, events_completed,
    });
    layout!(r, struct ibv_qp_ex {
        qp_base, qp_base.events_completed, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp,
        wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write,
        wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr,
        wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge,
        wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write,
    });
    layout!(r, struct ibv_data_buf { addr, length });
    layout!(r, struct ibv_sge { addr, length, lkey });
    layout!(r, struct ibv_send_wr {
        wr_id, next, sg_list, num_sge, opcode, send_flags, imm.imm_data: __be32 as "imm_data",
        imm.invalidate_rkey: u32 as "invalidate_rkey", wr, wr.rdma: ibv_send_wr_rdma,
        wr.atomic: ibv_send_wr_atomic, wr.ud: ibv_send_wr_ud, qp_type,
        qp_type.xrc: ibv_send_wr_xrc, ext.bind_mw: ibv_send_wr_bind_mw as "bind_mw",
        ext.tso: ibv_send_wr_tso as "tso",
    });
    layout!(r, ibv_send_wr_rdma = "struct ibv_send_wr", wr.rdma { remote_addr, rkey });
    layout!(r, ibv_send_wr_atomic = "struct ibv_send_wr", wr.atomic {
        remote_addr, compare_add, swap, rkey,
    });
    layout!(r, ibv_send_wr_ud = "struct ibv_send_wr", wr.ud { ah, remote_qpn, remote_qkey });
    layout!(r, ibv_send_wr_xrc = "struct ibv_send_wr", qp_type.xrc { remote_srqn });
    layout!(r, ibv_send_wr_bind_mw = "struct ibv_send_wr", bind_mw {
        mw, rkey, bind_info, bind_info.mr, bind_info.addr, bind_info.length,
        bind_info.mw_access_flags,
    });
    layout!(
        r,
        ibv_send_wr_tso = "struct ibv_send_wr",
        tso { hdr, hdr_sz, mss }
    );
    layout!(r, struct ibv_recv_wr { wr_id, next, sg_list, num_sge });
    layout!(r, struct ibv_ops_wr {
        wr_id, next, opcode, flags, tm, tm.unexpected_cnt, tm.handle, tm.add,
        tm.add.recv_wr_id, tm.add.sg_list, tm.add.num_sge, tm.add.tag, tm.add.mask,
    });
    layout!(r, struct ibv_comp_channel { context, fd, refcnt });
    layout!(r, struct ibv_cq {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed,
    });
    layout!(r, struct ibv_cq_ex {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
        read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num,
        read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits,
        read_completion_ts, read_cvlan, read_flow_tag, read_tm_info,
        read_completion_wallclock_ns,
    });
    layout!(r, struct ibv_cq_init_attr_ex {
        cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
    });
    layout!(r, struct ibv_moderate_cq { cq_count, cq_period });
    layout!(r, struct ibv_modify_cq_attr { attr_mask, moderate, moderate.cq_period });
    layout!(r, struct ibv_ah { context, pd, handle });
    layout!(r, struct ibv_flow_eth_filter { dst_mac, src_mac, ether_type, vlan_tag });
    layout!(r, struct ibv_flow_spec_eth { type_ as "type", size, val, mask, mask.vlan_tag });
    layout!(r, struct ibv_flow_ipv4_filter { src_ip, dst_ip });
    layout!(r, struct ibv_flow_spec_ipv4 { type_ as "type", size, val, mask, mask.dst_ip });
    layout!(r, struct ibv_flow_ipv4_ext_filter { src_ip, dst_ip, proto, tos, ttl, flags });
    layout!(r, struct ibv_flow_spec_ipv4_ext { type_ as "type", size, val, mask, mask.flags });
    layout!(r, struct ibv_flow_ipv6_filter {
        src_ip, dst_ip, flow_label, next_hdr, traffic_class, hop_limit,
    });
    layout!(r, struct ibv_flow_spec_ipv6 { type_ as "type", size, val, mask, mask.hop_limit });
    layout!(r, struct ibv_flow_tcp_udp_filter { dst_port, src_port });
    layout!(r, struct ibv_flow_spec_tcp_udp { type_ as "type", size, val, mask, mask.src_port });
    layout!(r, struct ibv_flow_spec_action_tag { type_ as "type", size, tag_id });
    layout!(r, struct ibv_flow_spec_action_drop { type_ as "type", size });
    layout!(r, struct ibv_flow_spec {
        spec.hdr: ibv_flow_spec_hdr as "hdr", spec.eth: ibv_flow_spec_eth as "eth",
        spec.ipv4: ibv_flow_spec_ipv4 as "ipv4", spec.tcp_udp: ibv_flow_spec_tcp_udp as "tcp_udp",
        spec.ipv4_ext: ibv_flow_spec_ipv4_ext as "ipv4_ext",
        spec.ipv6: ibv_flow_spec_ipv6 as "ipv6",
        spec.flow_tag: ibv_flow_spec_action_tag as "flow_tag",
        spec.drop: ibv_flow_spec_action_drop as "drop",
        spec.handle: ibv_flow_spec_action_handle as "handle",
        spec.flow_count: ibv_flow_spec_counter_action as "flow_count",
    });
    layout!(r, struct ibv_flow_spec_action_handle { type_ as "type", size, action });
    layout!(r, struct ibv_flow_spec_counter_action { type_ as "type", size, counters });
    layout!(r, ibv_flow_spec_hdr = "struct ibv_flow_spec", hdr { type_ as "type", size });
    layout!(r, struct ibv_flow_attr {
        comp_mask, type_ as "type", size, priority, num_of_specs, port, flags,
    });
    layout!(r, struct ibv_flow { comp_mask, context, handle });
    layout!(r, struct ibv_flow_action { context });
    layout!(r, struct ibv_counters_init_attr { comp_mask });
    layout!(r, struct ibv_counters { context });
    layout!(r, struct ibv_counter_attach_attr { counter_desc, index, comp_mask });
    layout!(r, struct ibv_values_ex { comp_mask, raw_clock });
    layout!(r, struct ibv_parent_domain_init_attr { pd, td, comp_mask, alloc, free, pd_context });
    layout!(r, struct _ibv_device_ops { _dummy1, _dummy2 });
    layout!(r, struct ibv_device {
        _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
    });
    layout!(r, struct ibv_context_ops {
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
        _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
        _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
    });
    layout!(r, struct ibv_context {
        device, ops, ops.poll_cq, ops.post_send, ops.post_recv, cmd_fd, async_fd,
        num_comp_vectors, mutex, abi_compat,
    });
    layout!(r, struct verbs_context {
        query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
        create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
        modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
        modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
        post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
        create_wq, query_rt_values, create_cq_ex, priv_ as "priv", query_device_ex,
        ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp,
        create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3,
        sz, context, context.abi_compat,
    });
    r
}

#[test]
fn every_struct_and_field_matches_the_installed_header() {
    let dir = work_dir("verbs");
    if !gcc_and_header(&dir, &VERBS_H) {
        return;
    }
    let rows = rows();
    check_rows(&dir, &VERBS_H, &rows);
    // The structs the brief names are all here, each with its fields.
    let types = rows.iter().filter(|r| !r.key.contains('|')).count();
    assert!(
        types >= 80 && rows.len() >= 700,
        "{types} types, {} rows",
        rows.len()
    );
}

#[test]
fn every_constant_matches_the_installed_header() {
    let dir = work_dir("verbs-consts");
    if !gcc_and_header(&dir, &VERBS_H) {
        return;
    }
    let extra = "\tprintf(\"VERBS_ABI_IS_EXTENDED %llu 0\\n\", \
                 (unsigned long long)(uintptr_t)__VERBS_ABI_IS_EXTENDED);\n";
    let c = check_consts(&dir, &VERBS_H, consts::ALL, extra);
    assert_eq!(
        c["VERBS_ABI_IS_EXTENDED"].0,
        consts::VERBS_ABI_IS_EXTENDED as i128
    );
    assert!(consts::ALL.len() > 300, "{}", consts::ALL.len());
}

/// The one rule the inline verbs rely on that offsets alone do not show: `context` is
/// the last member, so `verbs_get_ctx` finds the extension at a fixed distance before it.
#[test]
fn verbs_context_ends_with_the_context() {
    assert_eq!(
        offset_of!(verbs_context, context) + size_of::<ibv_context>(),
        size_of::<verbs_context>()
    );
    assert_eq!(
        offset_of!(verbs_context, sz) + size_of::<usize>(),
        offset_of!(verbs_context, context)
    );
}
