//! The Rust layouts of librdmacm's structs (`types::rdmacm`) and its constants, proved
//! against the installed `<rdma/rdma_cma.h>` (librdmacm-dev) as `layout.rs` proves the
//! verbs: a C program prints each `sizeof` / `_Alignof` and each field's `offsetof` /
//! `sizeof`, and every line must equal the Rust side's.
//!
//! Without gcc or the header it says SKIPPED, and fails when `RVERBS_NO_SKIP` is set.

use rverbs_ibverbs::types::*;
use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

struct Row {
    key: String,
    c: String,
    rust: (usize, usize),
}

fn size_of_field<T, F>(_: fn(&T) -> *const F) -> usize {
    size_of::<F>()
}

/// `rows!(r, rdma_cm_id { verbs, route.addr.ibaddr as "route.addr.addr.ibaddr" })`:
/// the struct's size and alignment, and each field's offset and size (the C path after
/// `as` where C names it through an anonymous or named union).
macro_rules! rows {
    ($r:ident, $kw:literal $t:ident { $($($f:ident).+ $(as $cf:literal)?),* $(,)? }) => {{
        let ty = format!("{} {}", $kw, stringify!($t));
        $r.push(Row {
            key: ty.clone(),
            c: format!("sizeof({ty}), _Alignof({ty})"),
            rust: (size_of::<$t>(), align_of::<$t>()),
        });
        $({
            #[allow(unused_mut, unused_assignments)]
            let mut c_path = stringify!($($f).+).replace(' ', "");
            $(c_path = $cf.to_string();)?
            $r.push(Row {
                key: format!("{ty}|{c_path}"),
                c: format!("offsetof({ty}, {c_path}), sizeof((({ty} *)0)->{c_path})"),
                rust: (
                    offset_of!($t, $($f).+),
                    size_of_field(|s: &$t| &raw const s.$($f).+),
                ),
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
            rust: (offset_of!(rdma_cm_event, param), rust_size),
        });
    }
    r
}

const CONSTS: &[(&str, i64)] = &[
    ("RDMA_PS_IPOIB", RDMA_PS_IPOIB as i64),
    ("RDMA_PS_TCP", RDMA_PS_TCP as i64),
    ("RDMA_PS_UDP", RDMA_PS_UDP as i64),
    ("RDMA_PS_IB", RDMA_PS_IB as i64),
    ("RDMA_UDP_QKEY", RDMA_UDP_QKEY as i64),
    ("RAI_PASSIVE", RAI_PASSIVE as i64),
    ("RAI_NUMERICHOST", RAI_NUMERICHOST as i64),
    ("RAI_NOROUTE", RAI_NOROUTE as i64),
    ("RAI_FAMILY", RAI_FAMILY as i64),
    ("RDMA_OPTION_ID", RDMA_OPTION_ID as i64),
    ("RDMA_OPTION_IB", RDMA_OPTION_IB as i64),
    ("RDMA_OPTION_ID_TOS", RDMA_OPTION_ID_TOS as i64),
    ("RDMA_OPTION_ID_REUSEADDR", RDMA_OPTION_ID_REUSEADDR as i64),
    ("RDMA_OPTION_ID_AFONLY", RDMA_OPTION_ID_AFONLY as i64),
    (
        "RDMA_OPTION_ID_ACK_TIMEOUT",
        RDMA_OPTION_ID_ACK_TIMEOUT as i64,
    ),
    ("RDMA_OPTION_IB_PATH", RDMA_OPTION_IB_PATH as i64),
    (
        "RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_RESOLVED as i64,
    ),
    ("RDMA_CM_EVENT_ADDR_ERROR", RDMA_CM_EVENT_ADDR_ERROR as i64),
    (
        "RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_RESOLVED as i64,
    ),
    (
        "RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_ROUTE_ERROR as i64,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_REQUEST as i64,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_RESPONSE as i64,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_CONNECT_ERROR as i64,
    ),
    (
        "RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_UNREACHABLE as i64,
    ),
    ("RDMA_CM_EVENT_REJECTED", RDMA_CM_EVENT_REJECTED as i64),
    (
        "RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_ESTABLISHED as i64,
    ),
    (
        "RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DISCONNECTED as i64,
    ),
    (
        "RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_DEVICE_REMOVAL as i64,
    ),
    (
        "RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_JOIN as i64,
    ),
    (
        "RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_MULTICAST_ERROR as i64,
    ),
    (
        "RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_ADDR_CHANGE as i64,
    ),
    (
        "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        RDMA_CM_EVENT_TIMEWAIT_EXIT as i64,
    ),
];

/// gcc and the header, if they are there; without them the test says so, and fails
/// under `RVERBS_NO_SKIP`.
fn gcc_and_header(dir: &std::path::Path) -> bool {
    let probe = dir.join("probe.c");
    std::fs::write(
        &probe,
        "#include <rdma/rdma_cma.h>\nint main(void) { return 0; }\n",
    )
    .unwrap();
    let ok = Command::new("gcc")
        .arg("-fsyntax-only")
        .arg(&probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("RVERBS_NO_SKIP").is_none(),
            "gcc or <rdma/rdma_cma.h> (librdmacm-dev) is missing and RVERBS_NO_SKIP is set"
        );
        eprintln!("SKIPPED: needs gcc and librdmacm-dev; the layouts were not checked");
    }
    ok
}

fn work_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rdmacm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles and runs `body` (printf lines) against the header: `key -> (a, b)`.
fn run_c(dir: &std::path::Path, body: &str) -> BTreeMap<String, (i64, i64)> {
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    let prog = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_cma.h>\n\
         int main(void)\n{{\n{body}\treturn 0;\n}}\n"
    );
    std::fs::write(&src, prog).unwrap();
    let o = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = Command::new(&exe).output().unwrap();
    assert!(o.status.success());
    let mut out = BTreeMap::new();
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let mut w = line.rsplitn(3, ' ');
        let (b, a, key) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
        out.insert(key.to_string(), (a.parse().unwrap(), b.parse().unwrap()));
    }
    out
}

#[test]
fn every_rdmacm_struct_and_field_matches_the_installed_header() {
    let dir = work_dir("layout");
    if !gcc_and_header(&dir) {
        return;
    }
    let rows = rows();
    let mut body = String::new();
    for r in &rows {
        body += &format!("\tprintf(\"%s %zu %zu\\n\", \"{}\", {});\n", r.key, r.c);
    }
    let c = run_c(&dir, &body);
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| c.get(&r.key) != Some(&(r.rust.0 as i64, r.rust.1 as i64)))
        .map(|r| format!("{}: C {:?}, Rust {:?}", r.key, c.get(&r.key), r.rust))
        .collect();
    assert!(
        bad.is_empty(),
        "layouts differ from <rdma/rdma_cma.h>:\n{}",
        bad.join("\n")
    );
    assert_eq!(c.len(), rows.len(), "a row printed twice");
    assert!(rows.len() >= 70, "{} rows", rows.len());
}

#[test]
fn every_rdmacm_constant_matches_the_installed_header() {
    let dir = work_dir("consts");
    if !gcc_and_header(&dir) {
        return;
    }
    let mut body = String::new();
    for (name, _) in CONSTS {
        body += &format!("\tprintf(\"%s %lld 0\\n\", \"{name}\", (long long){name});\n");
    }
    let c = run_c(&dir, &body);
    for (name, v) in CONSTS {
        assert_eq!(c.get(*name).map(|x| x.0), Some(*v), "{name}");
    }
}
