//! The Rust layouts of librdmacm's structs (`types::rdmacm`) and its constants, proved
//! against the installed `<rdma/rdma_cma.h>` (librdmacm-dev) as `layout.rs` proves the
//! verbs: a C program prints each `sizeof` / `_Alignof` and each field's `offsetof` /
//! `sizeof`, and every line must equal the Rust side's.
//!
//! Without gcc or the header it says SKIPPED, and fails when `RVERBS_NO_SKIP` is set.

mod common;

use common::{check_consts, check_rows, field_size, gcc_and_header, work_dir, Header, Row};
use rverbs_ibverbs::types::*;
use std::mem::{align_of, offset_of, size_of};

const RDMA_CMA_H: Header = Header {
    include: "<rdma/rdma_cma.h>",
    package: "librdmacm-dev",
};

/// `rows!(r, rdma_cm_id { verbs, route.addr.ibaddr as "route.addr.addr.ibaddr" })`:
/// the struct's size and alignment, and each field's offset and size (the C path after
/// `as` where C names it through an anonymous or named union).
macro_rules! rows {
    ($r:ident, $kw:literal $t:ident { $($($f:ident).+ $(as $cf:literal)?),* $(,)? }) => {{
        let ty = format!("{} {}", $kw, stringify!($t));
        $r.push(Row {
            key: ty.clone(),
            c: format!("sizeof({ty}), _Alignof({ty})"),
            a: size_of::<$t>(),
            b: align_of::<$t>(),
        });
        $({
            #[allow(unused_mut, unused_assignments)]
            let mut c_path = stringify!($($f).+).replace(' ', "");
            $(c_path = $cf.to_string();)?
            $r.push(Row {
                key: format!("{ty}|{c_path}"),
                c: format!("offsetof({ty}, {c_path}), sizeof((({ty} *)0)->{c_path})"),
                a: offset_of!($t, $($f).+),
                b: field_size(|s: &$t| &raw const s.$($f).+),
            });
        })*
    }};
}

fn rows() -> Vec<Row> {
    let mut r = Vec::new();
    rows!(r, "struct" rdma_event_channel { fd });
    rows!(r, "struct" rdma_ib_addr { sgid, dgid, pkey });
    rows!(r, "struct" rdma_addr {
        src_storage, dst_storage, ibaddr as "addr.ibaddr", ibaddr.pkey as "addr.ibaddr.pkey",
    });
    rows!(r, "struct" rdma_route { addr, path_rec, num_paths });
    rows!(r, "struct" rdma_cm_id {
        verbs, channel, context, qp, route, route.addr.src_storage,
        route.addr.dst_storage, route.addr.ibaddr as "route.addr.addr.ibaddr",
        route.path_rec, route.num_paths, ps, port_num, event, send_cq_channel, send_cq,
        recv_cq_channel, recv_cq, srq, pd, qp_type,
    });
    rows!(r, "struct" rdma_conn_param {
        private_data, private_data_len, responder_resources, initiator_depth, flow_control,
        retry_count, rnr_retry_count, srq, qp_num,
    });
    rows!(r, "struct" rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey });
    rows!(r, "struct" rdma_cm_event { id, listen_id, event, status, param });
    rows!(r, "struct" rdma_addrinfo {
        ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len,
        ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len,
        ai_route, ai_connect_len, ai_connect, ai_next,
    });
    rows!(r, "struct" ibv_ece { vendor_id, options, comp_mask });
    rows!(r, "struct" rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr });
    // The union of an event's parameters, member by member.
    let ev = "struct rdma_cm_event";
    for (path, rust_size) in [
        ("param.conn", size_of::<rdma_conn_param>()),
        ("param.ud", size_of::<rdma_ud_param>()),
    ] {
        r.push(Row {
            key: format!("{ev}|{path}"),
            c: format!("offsetof({ev}, {path}), sizeof((({ev} *)0)->{path})"),
            a: offset_of!(rdma_cm_event, param),
            b: rust_size,
        });
    }
    r
}

const CONSTS: &[(&str, i128)] = &[
    ("RDMA_PS_IPOIB", RDMA_PS_IPOIB as i128),
    ("RDMA_PS_TCP", RDMA_PS_TCP as i128),
    ("RDMA_PS_UDP", RDMA_PS_UDP as i128),
    ("RDMA_PS_IB", RDMA_PS_IB as i128),
    ("RDMA_UDP_QKEY", RDMA_UDP_QKEY as i128),
    ("RAI_PASSIVE", RAI_PASSIVE as i128),
    ("RAI_NUMERICHOST", RAI_NUMERICHOST as i128),
    ("RAI_NOROUTE", RAI_NOROUTE as i128),
    ("RAI_FAMILY", RAI_FAMILY as i128),
    ("RDMA_OPTION_ID", RDMA_OPTION_ID as i128),
    ("RDMA_OPTION_IB", RDMA_OPTION_IB as i128),
    ("RDMA_OPTION_ID_TOS", RDMA_OPTION_ID_TOS as i128),
    ("RDMA_OPTION_ID_REUSEADDR", RDMA_OPTION_ID_REUSEADDR as i128),
    ("RDMA_OPTION_ID_AFONLY", RDMA_OPTION_ID_AFONLY as i128),
    (
        "RDMA_OPTION_ID_ACK_TIMEOUT",
        RDMA_OPTION_ID_ACK_TIMEOUT as i128,
    ),
    ("RDMA_OPTION_IB_PATH", RDMA_OPTION_IB_PATH as i128),
    (
        "RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_RESOLVED as i128,
    ),
    ("RDMA_CM_EVENT_ADDR_ERROR", RDMA_CM_EVENT_ADDR_ERROR as i128),
    (
        "RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_RESOLVED as i128,
    ),
    (
        "RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_ROUTE_ERROR as i128,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_REQUEST as i128,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_RESPONSE as i128,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_CONNECT_ERROR as i128,
    ),
    (
        "RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_UNREACHABLE as i128,
    ),
    ("RDMA_CM_EVENT_REJECTED", RDMA_CM_EVENT_REJECTED as i128),
    (
        "RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_ESTABLISHED as i128,
    ),
    (
        "RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DISCONNECTED as i128,
    ),
    (
        "RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_DEVICE_REMOVAL as i128,
    ),
    (
        "RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_JOIN as i128,
    ),
    (
        "RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_MULTICAST_ERROR as i128,
    ),
    (
        "RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_ADDR_CHANGE as i128,
    ),
    (
        "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        RDMA_CM_EVENT_TIMEWAIT_EXIT as i128,
    ),
];

#[test]
fn every_rdmacm_struct_and_field_matches_the_installed_header() {
    let dir = work_dir("rdmacm");
    if !gcc_and_header(&dir, &RDMA_CMA_H) {
        return;
    }
    let rows = rows();
    check_rows(&dir, &RDMA_CMA_H, &rows);
    assert!(rows.len() >= 70, "{} rows", rows.len());
}

#[test]
fn every_rdmacm_constant_matches_the_installed_header() {
    let dir = work_dir("rdmacm-consts");
    if !gcc_and_header(&dir, &RDMA_CMA_H) {
        return;
    }
    check_consts(&dir, &RDMA_CMA_H, CONSTS, "");
}
