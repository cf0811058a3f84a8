//! The kernel structures `src/kern.rs` mirrors (`<rdma/ib_user_verbs.h>`,
//! `<rdma/ib_user_sa.h>`) and `ibv_sa_path_rec` (`<infiniband/sa.h>`), compared with
//! what gcc makes of the installed headers: size and every field's offset. Without gcc
//! or the headers it says SKIPPED, and fails when `RVERBS_NO_SKIP` is set (as the ABI
//! layout test of rverbs-ibverbs).

use ibverbs::kern::*;
use std::mem::{offset_of, size_of};
use std::process::Command;

macro_rules! layout {
    ($c:literal, $t:ty, [$($f:ident),*]) => {
        (
            $c,
            size_of::<$t>(),
            vec![$((stringify!($f), offset_of!($t, $f))),*],
        )
    };
}

#[test]
fn mirrored_kernel_structures_match_the_headers() {
    let ours = [
        layout!(
            "struct ib_uverbs_global_route",
            ib_uverbs_global_route,
            [
                dgid,
                flow_label,
                sgid_index,
                hop_limit,
                traffic_class,
                reserved
            ]
        ),
        layout!(
            "struct ib_uverbs_ah_attr",
            ib_uverbs_ah_attr,
            [
                grh,
                dlid,
                sl,
                src_path_bits,
                static_rate,
                is_global,
                port_num,
                reserved
            ]
        ),
        layout!(
            "struct ib_uverbs_qp_attr",
            ib_uverbs_qp_attr,
            [
                qp_attr_mask,
                qp_state,
                cur_qp_state,
                path_mtu,
                path_mig_state,
                qkey,
                rq_psn,
                sq_psn,
                dest_qp_num,
                qp_access_flags,
                ah_attr,
                alt_ah_attr,
                max_send_wr,
                max_recv_wr,
                max_send_sge,
                max_recv_sge,
                max_inline_data,
                pkey_index,
                alt_pkey_index,
                en_sqd_async_notify,
                sq_draining,
                max_rd_atomic,
                max_dest_rd_atomic,
                min_rnr_timer,
                port_num,
                timeout,
                retry_cnt,
                rnr_retry,
                alt_port_num,
                alt_timeout,
                reserved
            ]
        ),
        layout!(
            "struct ib_user_path_rec",
            ib_user_path_rec,
            [
                dgid,
                sgid,
                dlid,
                slid,
                raw_traffic,
                flow_label,
                reversible,
                mtu,
                pkey,
                hop_limit,
                traffic_class,
                numb_path,
                sl,
                mtu_selector,
                rate_selector,
                rate,
                packet_life_time_selector,
                packet_life_time,
                preference
            ]
        ),
        layout!(
            "struct ibv_sa_path_rec",
            ibv_sa_path_rec,
            [
                dgid,
                sgid,
                dlid,
                slid,
                raw_traffic,
                flow_label,
                hop_limit,
                traffic_class,
                reversible,
                numb_path,
                pkey,
                sl,
                mtu_selector,
                mtu,
                rate_selector,
                rate,
                packet_life_time_selector,
                packet_life_time,
                preference
            ]
        ),
    ];
    let dir = std::env::temp_dir().join(format!("rverbs-kern-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/ib_user_verbs.h>\n\
         #include <rdma/ib_user_sa.h>\n#include <infiniband/sa.h>\nint main(void) {\n",
    );
    for (name, _, fields) in &ours {
        c += &format!("printf(\"{name} %zu\\n\", sizeof({name}));\n");
        for (f, _) in fields {
            c += &format!("printf(\"{name}.{f} %zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    c += "return 0;\n}\n";
    let (src, exe) = (dir.join("k.c"), dir.join("k"));
    std::fs::write(&src, c).unwrap();
    let built = Command::new("gcc").arg("-o").arg(&exe).arg(&src).output();
    let Some(built) = built.ok().filter(|o| o.status.success()) else {
        assert!(
            std::env::var_os("RVERBS_NO_SKIP").is_none(),
            "gcc or the uapi / libibverbs-dev headers are missing and RVERBS_NO_SKIP is set"
        );
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("SKIPPED: needs gcc, linux-libc-dev and libibverbs-dev");
        return;
    };
    let _ = built;
    let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
    let gcc: std::collections::HashMap<&str, usize> = out
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    for (name, size, fields) in &ours {
        assert_eq!(gcc[name], *size, "sizeof({name})");
        for (f, off) in fields {
            assert_eq!(
                gcc[format!("{name}.{f}").as_str()],
                *off,
                "offsetof({name}, {f})"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
