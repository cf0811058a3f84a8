//! The library as a C program sees it: functions bound by name and symbol version, the
//! ops of `ibv_context` / `ibv_qp_ex` / `ibv_cq_ex` called as verbs.h's inlines call
//! them. Failure paths return libibverbs' errors (EINVAL / EBUSY, errno set where the
//! verb returns NULL or -1), data moves between two QPs of one process, and random
//! requests and attributes from a C caller never panic across the boundary (a panic
//! would come back as EIO).

mod common;

use rverbs_ibverbs::types::*;
use std::ffi::{c_int, c_uint, c_void};
use std::ptr::null_mut;

type Ctx = *mut ibv_context;

struct V {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const i8,
    open_device: unsafe extern "C" fn(*mut ibv_device) -> Ctx,
    close_device: unsafe extern "C" fn(Ctx) -> c_int,
    query_device: unsafe extern "C" fn(Ctx, *mut ibv_device_attr) -> c_int,
    query_gid: unsafe extern "C" fn(Ctx, u8, c_int, *mut ibv_gid) -> c_int,
    alloc_pd: unsafe extern "C" fn(Ctx) -> *mut ibv_pd,
    dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    create_comp_channel: unsafe extern "C" fn(Ctx) -> *mut ibv_comp_channel,
    destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    create_cq:
        unsafe extern "C" fn(Ctx, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, c_uint),
    create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    query_qp:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    qp_to_qp_ex: unsafe extern "C" fn(*mut ibv_qp) -> *mut ibv_qp_ex,
}

fn v() -> V {
    V {
        get_device_list: f!(
            ibv_get_device_list,
            "IBVERBS_1.1",
            fn(*mut c_int) -> *mut *mut ibv_device
        ),
        free_device_list: f!(
            ibv_free_device_list,
            "IBVERBS_1.1",
            fn(*mut *mut ibv_device)
        ),
        get_device_name: f!(
            ibv_get_device_name,
            "IBVERBS_1.1",
            fn(*mut ibv_device) -> *const i8
        ),
        open_device: f!(ibv_open_device, "IBVERBS_1.1", fn(*mut ibv_device) -> Ctx),
        close_device: f!(ibv_close_device, "IBVERBS_1.1", fn(Ctx) -> c_int),
        query_device: f!(
            ibv_query_device,
            "IBVERBS_1.1",
            fn(Ctx, *mut ibv_device_attr) -> c_int
        ),
        query_gid: f!(
            ibv_query_gid,
            "IBVERBS_1.1",
            fn(Ctx, u8, c_int, *mut ibv_gid) -> c_int
        ),
        alloc_pd: f!(ibv_alloc_pd, "IBVERBS_1.1", fn(Ctx) -> *mut ibv_pd),
        dealloc_pd: f!(ibv_dealloc_pd, "IBVERBS_1.1", fn(*mut ibv_pd) -> c_int),
        reg_mr: f!(
            ibv_reg_mr,
            "IBVERBS_1.1",
            fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr
        ),
        dereg_mr: f!(ibv_dereg_mr, "IBVERBS_1.1", fn(*mut ibv_mr) -> c_int),
        create_comp_channel: f!(
            ibv_create_comp_channel,
            "IBVERBS_1.0",
            fn(Ctx) -> *mut ibv_comp_channel
        ),
        destroy_comp_channel: f!(
            ibv_destroy_comp_channel,
            "IBVERBS_1.0",
            fn(*mut ibv_comp_channel) -> c_int
        ),
        create_cq: f!(
            ibv_create_cq,
            "IBVERBS_1.1",
            fn(Ctx, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq
        ),
        destroy_cq: f!(ibv_destroy_cq, "IBVERBS_1.1", fn(*mut ibv_cq) -> c_int),
        get_cq_event: f!(
            ibv_get_cq_event,
            "IBVERBS_1.1",
            fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int
        ),
        ack_cq_events: f!(ibv_ack_cq_events, "IBVERBS_1.1", fn(*mut ibv_cq, c_uint)),
        create_qp: f!(
            ibv_create_qp,
            "IBVERBS_1.1",
            fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp
        ),
        modify_qp: f!(
            ibv_modify_qp,
            "IBVERBS_1.1",
            fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int
        ),
        query_qp: f!(
            ibv_query_qp,
            "IBVERBS_1.1",
            fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int
        ),
        destroy_qp: f!(ibv_destroy_qp, "IBVERBS_1.1", fn(*mut ibv_qp) -> c_int),
        qp_to_qp_ex: f!(
            ibv_qp_to_qp_ex,
            "IBVERBS_1.6",
            fn(*mut ibv_qp) -> *mut ibv_qp_ex
        ),
    }
}

/// Opens the loopback soft device.
fn open(v: &V) -> Ctx {
    // SAFETY: the C API used as a C program uses it.
    unsafe {
        let mut n = 0;
        let list = (v.get_device_list)(&mut n);
        assert!(!list.is_null() && n > 0, "no device");
        let mut ctx = null_mut();
        for i in 0..n as usize {
            let d = *list.add(i);
            let name = std::ffi::CStr::from_ptr((v.get_device_name)(d));
            if name.to_str() == Ok("rv_lo") {
                ctx = (v.open_device)(d);
            }
        }
        (v.free_device_list)(list);
        assert!(!ctx.is_null(), "rv_lo did not open");
        ctx
    }
}

fn zeroed<T>() -> T {
    // SAFETY: only used for the C structs of verbs.h, all plain data.
    unsafe { std::mem::zeroed() }
}

/// `ibv_create_qp_ex` (an inline of verbs.h: `verbs_context.create_qp_ex`) with every
/// send op the builders take: a QP with an `ibv_qp_ex`, which `ibv_qp_to_qp_ex` gives
/// (it is NULL for a QP `ibv_create_qp` made, as in libibverbs).
unsafe fn create_qp_ex(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    init: &ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: `ctx` is an open context of the library, inside its verbs_context.
    let vctx = unsafe {
        &*(ctx as *mut u8)
            .sub(std::mem::offset_of!(verbs_context, context))
            .cast::<verbs_context>()
    };
    let mut a: ibv_qp_init_attr_ex = zeroed();
    a.qp_context = init.qp_context;
    a.send_cq = init.send_cq;
    a.recv_cq = init.recv_cq;
    a.srq = init.srq;
    a.cap = init.cap;
    a.qp_type = init.qp_type;
    a.sq_sig_all = init.sq_sig_all;
    // IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; the ten IBV_QP_EX_WITH_*.
    a.comp_mask = 1 | (1 << 6);
    a.pd = pd;
    a.send_ops_flags = 0x3ff;
    // SAFETY: the library's op, with a valid attribute.
    unsafe { (vctx.create_qp_ex.expect("verbs_context.create_qp_ex"))(ctx, &mut a) }
}

fn qp_init(cq: *mut ibv_cq, qp_type: u32) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: null_mut(),
        cap: ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        },
        qp_type,
        sq_sig_all: 0,
    }
}

const RC: u32 = 2;

/// Moves `qp` RESET → INIT → RTR → RTS towards `dest` over the GID at index 1.
unsafe fn connect(v: &V, ctx: Ctx, qp: *mut ibv_qp, dest: u32) {
    let mut gid: ibv_gid = zeroed();
    // SAFETY: as a C program.
    unsafe {
        assert_eq!((v.query_gid)(ctx, 1, 1, &mut gid), 0);
        let mut a: ibv_qp_attr = zeroed();
        a.qp_state = 1;
        a.port_num = 1;
        a.qp_access_flags = 0xf;
        assert_eq!(
            (v.modify_qp)(qp, &mut a, 1 | (1 << 4) | (1 << 5) | (1 << 3)),
            0
        );
        let mut a: ibv_qp_attr = zeroed();
        a.qp_state = 2;
        a.path_mtu = 3;
        a.dest_qp_num = dest;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = gid;
        a.ah_attr.grh.sgid_index = 1;
        a.ah_attr.grh.hop_limit = 1;
        a.ah_attr.port_num = 1;
        let m = 1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15);
        assert_eq!((v.modify_qp)(qp, &mut a, m), 0);
        let mut a: ibv_qp_attr = zeroed();
        a.qp_state = 3;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        let m = 1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 16) | (1 << 13);
        assert_eq!((v.modify_qp)(qp, &mut a, m), 0);
        assert_eq!((*qp).state, 3, "ibv_qp.state follows modify_qp");
    }
}

/// Polls through `ctx->ops.poll_cq` (the `ibv_poll_cq` inline) until `n` arrive.
unsafe fn poll(cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
    let mut out = Vec::new();
    let start = std::time::Instant::now();
    // SAFETY: the CQ's context is live.
    let poll = unsafe { (*(*cq).context).ops.poll_cq.unwrap() };
    while out.len() < n {
        let mut wc: [ibv_wc; 4] = zeroed();
        // SAFETY: room for 4.
        let k = unsafe { poll(cq, 4, wc.as_mut_ptr()) };
        assert!(k >= 0, "poll_cq failed");
        out.extend_from_slice(&wc[..k as usize]);
        assert!(start.elapsed().as_secs() < 20, "no completion");
    }
    out
}

#[test]
fn null_and_bad_arguments_get_libibverbs_errors() {
    let v = v();
    // SAFETY: the C API, given bad input on purpose.
    unsafe {
        assert!((v.open_device)(null_mut()).is_null());
        assert_eq!(common::errno(), libc::EINVAL);
        assert!((v.alloc_pd)(null_mut()).is_null());
        assert_eq!(common::errno(), libc::EINVAL);
        let ctx = open(&v);
        assert_eq!((v.query_device)(ctx, null_mut()), libc::EINVAL);
        let mut gid: ibv_gid = zeroed();
        assert_eq!((v.query_gid)(ctx, 2, 0, &mut gid), -1, "no port 2");
        assert_eq!((v.query_gid)(ctx, 1, -1, &mut gid), -1);
        let query_port = (*(ctx as *mut u8)
            .sub(std::mem::offset_of!(verbs_context, context))
            .cast::<verbs_context>())
        .query_port
        .expect("verbs_context.query_port");
        let mut pa: ibv_port_attr = zeroed();
        assert_eq!(
            query_port(ctx, 2, &mut pa, std::mem::size_of::<ibv_port_attr>()),
            libc::EINVAL
        );
        assert_eq!(
            query_port(ctx, 1, &mut pa, std::mem::size_of::<ibv_port_attr>()),
            0
        );
        assert_eq!(pa.state, 4, "PORT_ACTIVE");
        assert_eq!(pa.link_layer, 2, "Ethernet");

        let pd = (v.alloc_pd)(ctx);
        assert!(!pd.is_null());
        assert!((v.reg_mr)(pd, null_mut(), 64, 0).is_null());
        assert_eq!(common::errno(), libc::EINVAL);
        assert!((v.reg_mr)(null_mut(), null_mut(), 0, 0).is_null());
        assert_eq!(common::errno(), libc::EINVAL);
        let mut buf = vec![0u8; 64];
        assert!(
            (v.reg_mr)(pd, buf.as_mut_ptr().cast(), 64, 1 << 9).is_null(),
            "unknown access bit"
        );
        assert_eq!(common::errno(), libc::EINVAL);
        assert!((v.create_cq)(ctx, 0, null_mut(), null_mut(), 0).is_null());
        assert_eq!(common::errno(), libc::EINVAL);
        assert!((v.create_cq)(ctx, -5, null_mut(), null_mut(), 0).is_null());
        assert_eq!(common::errno(), libc::EINVAL);
        let cq = (v.create_cq)(ctx, 16, null_mut(), null_mut(), 0);
        assert!(!cq.is_null());
        let mut init = qp_init(cq, 77);
        assert!((v.create_qp)(pd, &mut init).is_null(), "unknown QP type");
        assert_eq!(common::errno(), libc::EINVAL);
        let mut init = qp_init(null_mut(), RC);
        assert!((v.create_qp)(pd, &mut init).is_null(), "no CQ");
        assert_eq!(common::errno(), libc::EINVAL);
        let mut init = qp_init(cq, RC);
        init.cap.max_send_wr = u32::MAX;
        assert!(
            (v.create_qp)(pd, &mut init).is_null(),
            "over the device's max_qp_wr"
        );
        assert_eq!(common::errno(), libc::EINVAL);

        // Bad modify: an unknown state value, a skipped state, a missing attribute.
        let mut init = qp_init(cq, RC);
        let qp = (v.create_qp)(pd, &mut init);
        assert!(!qp.is_null());
        let mut a: ibv_qp_attr = zeroed();
        a.qp_state = 99;
        assert_eq!((v.modify_qp)(qp, &mut a, 1), libc::EINVAL);
        a.qp_state = 2;
        assert_eq!((v.modify_qp)(qp, &mut a, 1), libc::EINVAL, "RESET -> RTR");
        a.qp_state = 1;
        assert_eq!(
            (v.modify_qp)(qp, &mut a, 1),
            libc::EINVAL,
            "INIT without PORT etc."
        );
        assert_eq!((*qp).state, 0, "a refused modify leaves the state");
        assert_eq!((v.modify_qp)(null_mut(), &mut a, 1), libc::EINVAL);

        // Posting in RESET: EINVAL and bad_wr names the request.
        let post_send = (*ctx).ops.post_send.unwrap();
        let mut sge = ibv_sge {
            addr: buf.as_mut_ptr() as u64,
            length: 8,
            lkey: 0,
        };
        let mut wr: ibv_send_wr = zeroed();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = 2;
        let mut bad: *mut ibv_send_wr = null_mut();
        assert_eq!(post_send(qp, &mut wr, &mut bad), libc::EINVAL);
        assert_eq!(bad, &mut wr as *mut _);
        wr.num_sge = -1;
        assert_eq!(post_send(qp, &mut wr, &mut bad), libc::EINVAL);
        let post_recv = (*ctx).ops.post_recv.unwrap();
        let mut rwr: ibv_recv_wr = zeroed();
        rwr.num_sge = 1;
        rwr.sg_list = null_mut();
        let mut rbad: *mut ibv_recv_wr = null_mut();
        assert_eq!(post_recv(qp, &mut rwr, &mut rbad), libc::EINVAL);
        assert_eq!(rbad, &mut rwr as *mut _);

        assert_eq!((v.destroy_qp)(qp), 0);
        assert_eq!((v.destroy_cq)(cq), 0);
        assert_eq!((v.dealloc_pd)(pd), 0);
        assert_eq!((v.close_device)(ctx), 0);
    }
}

#[test]
fn objects_in_use_are_ebusy_and_free_in_order() {
    let v = v();
    // SAFETY: the C API as a C program uses it.
    unsafe {
        let ctx = open(&v);
        let pd = (v.alloc_pd)(ctx);
        let ch = (v.create_comp_channel)(ctx);
        assert!(!ch.is_null() && (*ch).fd >= 0);
        let cq = (v.create_cq)(ctx, 8, null_mut(), ch, 0);
        let mut buf = vec![0u8; 256];
        let mr = (v.reg_mr)(pd, buf.as_mut_ptr().cast(), 256, 1);
        let mut init = qp_init(cq, RC);
        let qp = (v.create_qp)(pd, &mut init);
        assert!(!pd.is_null() && !cq.is_null() && !mr.is_null() && !qp.is_null());
        assert_eq!((v.dealloc_pd)(pd), libc::EBUSY, "PD with an MR and a QP");
        assert_eq!((v.destroy_cq)(cq), libc::EBUSY, "CQ with a QP");
        assert_eq!((v.destroy_comp_channel)(ch), -1, "channel with a CQ");
        assert_eq!(common::errno(), libc::EBUSY);
        assert_eq!((v.destroy_qp)(qp), 0);
        assert_eq!((v.destroy_cq)(cq), 0);
        assert_eq!((v.destroy_comp_channel)(ch), 0);
        assert_eq!((v.dealloc_pd)(pd), libc::EBUSY, "PD with an MR");
        assert_eq!((v.dereg_mr)(mr), 0);
        assert_eq!((v.dealloc_pd)(pd), 0);
        assert_eq!((v.close_device)(ctx), 0);
    }
}

#[test]
fn send_write_atomic_and_the_wr_builders_move_data_between_two_qps() {
    let v = v();
    // SAFETY: the C API as a C program uses it; buffers outlive their regions.
    unsafe {
        let ctx = open(&v);
        let pd = (v.alloc_pd)(ctx);
        let ch = (v.create_comp_channel)(ctx);
        let cq = (v.create_cq)(ctx, 64, 0x77 as *mut c_void, ch, 0);
        let mut a_buf = vec![0u8; 4096];
        let mut b_buf = vec![0u8; 4096];
        let a_mr = (v.reg_mr)(pd, a_buf.as_mut_ptr().cast(), 4096, 0xf);
        let b_mr = (v.reg_mr)(pd, b_buf.as_mut_ptr().cast(), 4096, 0xf);
        let (ia, mut ib) = (qp_init(cq, RC), qp_init(cq, RC));
        let (qa, qb) = (create_qp_ex(ctx, pd, &ia), (v.create_qp)(pd, &mut ib));
        assert!(
            (v.qp_to_qp_ex)(qb).is_null(),
            "ibv_create_qp's QP has no ibv_qp_ex"
        );
        connect(&v, ctx, qa, (*qb).qp_num);
        connect(&v, ctx, qb, (*qa).qp_num);
        let mut qattr: ibv_qp_attr = zeroed();
        let mut qinit: ibv_qp_init_attr = zeroed();
        assert_eq!((v.query_qp)(qa, &mut qattr, 0, &mut qinit), 0);
        assert_eq!((qattr.qp_state, qattr.dest_qp_num), (3, (*qb).qp_num));
        assert_eq!(qinit.cap.max_inline_data, 64);

        // SEND with immediate, armed for an event on the channel.
        let ops = &(*ctx).ops;
        assert_eq!((ops.req_notify_cq.unwrap())(cq, 0), 0);
        let mut rsge = ibv_sge {
            addr: b_buf.as_mut_ptr() as u64,
            length: 64,
            lkey: (*b_mr).lkey,
        };
        let mut rwr: ibv_recv_wr = zeroed();
        rwr.wr_id = 7;
        rwr.sg_list = &mut rsge;
        rwr.num_sge = 1;
        let mut rbad = null_mut();
        assert_eq!((ops.post_recv.unwrap())(qb, &mut rwr, &mut rbad), 0);
        a_buf[..5].copy_from_slice(b"hello");
        let mut sge = ibv_sge {
            addr: a_buf.as_ptr() as u64,
            length: 5,
            lkey: (*a_mr).lkey,
        };
        let mut wr: ibv_send_wr = zeroed();
        wr.wr_id = 1;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = 3; // SEND_WITH_IMM
        wr.send_flags = 2;
        wr.imm.imm_data = 0x1234_5678u32.to_be();
        let mut bad = null_mut();
        assert_eq!((ops.post_send.unwrap())(qa, &mut wr, &mut bad), 0);
        let (mut ecq, mut ectx) = (null_mut(), null_mut());
        let r = (v.get_cq_event)(ch, &mut ecq, &mut ectx);
        assert_eq!(r, 0, "errno {}", common::errno());
        assert_eq!((ecq, ectx), (cq, 0x77 as *mut c_void));
        (v.ack_cq_events)(cq, 1);
        assert_eq!((*cq).comp_events_completed, 1);
        let wcs = poll(cq, 2);
        let recv = wcs.iter().find(|w| w.opcode == 128).expect("a receive");
        assert_eq!((recv.status, recv.wr_id, recv.byte_len), (0, 7, 5));
        assert_eq!(
            u32::from_be(recv.imm.imm_data),
            0x1234_5678,
            "imm_data is __be32"
        );
        assert_eq!(recv.wc_flags & 2, 2, "WITH_IMM");
        assert_eq!(&b_buf[..5], b"hello");

        // INLINE from memory no region covers, then RDMA WRITE and FETCH_ADD.
        let loose = *b"inline!";
        let mut sge = ibv_sge {
            addr: loose.as_ptr() as u64,
            length: 7,
            lkey: 0,
        };
        let mut wr: ibv_send_wr = zeroed();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = 0; // RDMA_WRITE
        wr.send_flags = 2 | 8;
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: b_buf.as_ptr() as u64 + 100,
            rkey: (*b_mr).rkey,
        };
        assert_eq!((ops.post_send.unwrap())(qa, &mut wr, &mut bad), 0);
        b_buf[200..208].copy_from_slice(&40u64.to_ne_bytes());
        let mut sge = ibv_sge {
            addr: a_buf.as_mut_ptr() as u64 + 8,
            length: 8,
            lkey: (*a_mr).lkey,
        };
        let mut wr: ibv_send_wr = zeroed();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = 6; // FETCH_AND_ADD
        wr.send_flags = 2;
        wr.wr.atomic = ibv_send_wr_atomic {
            remote_addr: b_buf.as_ptr() as u64 + 200,
            compare_add: 2,
            swap: 0,
            rkey: (*b_mr).rkey,
        };
        assert_eq!((ops.post_send.unwrap())(qa, &mut wr, &mut bad), 0);
        let wcs = poll(cq, 2);
        assert!(
            wcs.iter().all(|w| w.status == 0),
            "{:?}",
            wcs.iter().map(|w| w.status).collect::<Vec<_>>()
        );
        assert_eq!(&b_buf[100..107], b"inline!");
        assert_eq!(u64::from_ne_bytes(b_buf[200..208].try_into().unwrap()), 42);
        assert_eq!(u64::from_ne_bytes(a_buf[8..16].try_into().unwrap()), 40);

        // The ibv_qp_ex builders (ibv_wr_start / ibv_wr_rdma_write / ibv_wr_set_sge /
        // ibv_wr_complete inlines call these pointers).
        let qx = (v.qp_to_qp_ex)(qa);
        a_buf[300..303].copy_from_slice(b"abc");
        ((*qx).wr_start.unwrap())(qx);
        (*qx).wr_id = 9;
        (*qx).wr_flags = 2;
        ((*qx).wr_rdma_write.unwrap())(qx, (*b_mr).rkey, b_buf.as_ptr() as u64 + 300);
        ((*qx).wr_set_sge.unwrap())(qx, (*a_mr).lkey, a_buf.as_ptr() as u64 + 300, 3);
        assert_eq!(((*qx).wr_complete.unwrap())(qx), 0);
        let wcs = poll(cq, 1);
        assert_eq!((wcs[0].status, wcs[0].wr_id, wcs[0].opcode), (0, 9, 1));
        assert_eq!(&b_buf[300..303], b"abc");
        // A setter before any opcode: the batch fails at complete.
        ((*qx).wr_start.unwrap())(qx);
        ((*qx).wr_set_sge.unwrap())(qx, 0, 0, 0);
        assert_eq!(((*qx).wr_complete.unwrap())(qx), libc::EINVAL);

        for q in [qa, qb] {
            assert_eq!((v.destroy_qp)(q), 0);
        }
        assert_eq!((v.destroy_cq)(cq), 0);
        assert_eq!((v.destroy_comp_channel)(ch), 0);
        assert_eq!((v.dereg_mr)(a_mr), 0);
        assert_eq!((v.dereg_mr)(b_mr), 0);
        assert_eq!((v.dealloc_pd)(pd), 0);
        assert_eq!((v.close_device)(ctx), 0);
    }
}

#[test]
fn cq_ex_polls_through_its_pointers() {
    let v = v();
    // SAFETY: the C API as a C program uses it.
    unsafe {
        let ctx = open(&v);
        let vctx = &*(ctx as *mut u8)
            .sub(std::mem::offset_of!(verbs_context, context))
            .cast::<verbs_context>();
        assert_eq!((*ctx).abi_compat as usize, usize::MAX);
        assert!(
            vctx.sz
                >= std::mem::size_of::<verbs_context>()
                    - std::mem::offset_of!(verbs_context, create_cq_ex)
        );
        let mut attr: ibv_cq_init_attr_ex = zeroed();
        attr.cqe = 8;
        attr.wc_flags = 1 << 7; // COMPLETION_TIMESTAMP: not supported
        assert!((vctx.create_cq_ex.unwrap())(ctx, &mut attr).is_null());
        assert_eq!(common::errno(), libc::EOPNOTSUPP);
        attr.wc_flags = 0x7;
        let cqx = (vctx.create_cq_ex.unwrap())(ctx, &mut attr);
        assert!(!cqx.is_null());
        let mut pa: ibv_poll_cq_attr = zeroed();
        assert_eq!(
            ((*cqx).start_poll.unwrap())(cqx, &mut pa),
            libc::ENOENT,
            "empty"
        );
        pa.comp_mask = 1;
        assert_eq!(((*cqx).start_poll.unwrap())(cqx, &mut pa), libc::EINVAL);
        // A receive posted to a QP in ERR completes at once, flushed.
        let pd = (v.alloc_pd)(ctx);
        let mut init = qp_init(cqx as *mut ibv_cq, RC);
        let qp = (v.create_qp)(pd, &mut init);
        let mut a: ibv_qp_attr = zeroed();
        a.qp_state = 1;
        a.port_num = 1;
        assert_eq!(
            (v.modify_qp)(qp, &mut a, 1 | (1 << 3) | (1 << 4) | (1 << 5)),
            0
        );
        let mut a: ibv_qp_attr = zeroed();
        a.qp_state = 6;
        assert_eq!((v.modify_qp)(qp, &mut a, 1), 0);
        let mut rwr: ibv_recv_wr = zeroed();
        rwr.wr_id = 5;
        let mut rbad = null_mut();
        assert_eq!(((*ctx).ops.post_recv.unwrap())(qp, &mut rwr, &mut rbad), 0);
        let mut got = libc::ENOENT;
        for _ in 0..1000 {
            pa.comp_mask = 0;
            got = ((*cqx).start_poll.unwrap())(cqx, &mut pa);
            if got == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(got, 0);
        assert_eq!(((*cqx).wr_id, (*cqx).status), (5, 5), "WR_FLUSH_ERR");
        assert_eq!(((*cqx).read_qp_num.unwrap())(cqx), (*qp).qp_num);
        assert_eq!(((*cqx).next_poll.unwrap())(cqx), libc::ENOENT);
        ((*cqx).end_poll.unwrap())(cqx);
        assert_eq!((v.destroy_qp)(qp), 0);
        assert_eq!((v.destroy_cq)(cqx as *mut ibv_cq), 0);
        assert_eq!((v.dealloc_pd)(pd), 0);
        assert_eq!((v.close_device)(ctx), 0);
    }
}

/// xorshift64*: a seeded stream for the fuzz test (the seed is printed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

#[test]
fn random_attributes_and_requests_from_c_never_panic() {
    let v = v();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("fuzz seed {seed:#x}");
    let mut r = Rng(seed);
    // SAFETY: random values in valid memory: every pointer the library reads points to
    // a live buffer or is NULL.
    unsafe {
        let ctx = open(&v);
        let pd = (v.alloc_pd)(ctx);
        let cq = (v.create_cq)(ctx, 64, null_mut(), null_mut(), 0);
        let mut buf = vec![0u8; 1 << 16];
        let mr = (v.reg_mr)(pd, buf.as_mut_ptr().cast(), buf.len(), 0xf);
        let mut sges: Vec<ibv_sge> = vec![zeroed(); 8];
        for round in 0..300 {
            let ty = r.pick(&[2u32, 3, 4]);
            let mut init = qp_init(cq, ty);
            init.cap.max_send_wr = r.pick(&[1, 4, 64, 0, 1 << 30]) as u32;
            init.cap.max_inline_data = r.pick(&[0, 16, 256, 4096]) as u32;
            let qp = (v.create_qp)(pd, &mut init);
            if qp.is_null() {
                assert_ne!(
                    common::errno(),
                    libc::EIO,
                    "round {round}: create_qp panicked"
                );
                continue;
            }
            for _ in 0..20 {
                let mut a: ibv_qp_attr = zeroed();
                let bytes = std::slice::from_raw_parts_mut(
                    (&mut a as *mut ibv_qp_attr).cast::<u8>(),
                    std::mem::size_of::<ibv_qp_attr>(),
                );
                for b in bytes.iter_mut() {
                    *b = r.next() as u8;
                }
                a.qp_state = r.pick(&[0, 1, 2, 3, 4, 5, 6, 7, 1000]);
                let mask = (r.next() as u32) & r.pick(&[0x1ff_ffff, 0x3f, 0x1, 0xffff_ffff]);
                let ret = (v.modify_qp)(qp, &mut a, mask as c_int);
                assert_ne!(
                    ret,
                    libc::EIO,
                    "round {round}: modify_qp panicked (mask {mask:#x})"
                );
                for s in sges.iter_mut() {
                    let junk = r.next() as u32;
                    *s = ibv_sge {
                        addr: r.pick(&[
                            buf.as_ptr() as u64,
                            buf.as_ptr() as u64 + 100,
                            0,
                            u64::MAX - 3,
                        ]),
                        length: r.pick(&[0, 1, 64, 1 << 16, u32::MAX]),
                        lkey: r.pick(&[(*mr).lkey, 0, junk]),
                    };
                }
                let mut wr: ibv_send_wr = zeroed();
                wr.wr_id = r.next();
                wr.sg_list = sges.as_mut_ptr();
                // (1 << 20 is over the library's SGE limit: refused before the list is read.)
                wr.num_sge = r.pick(&[0, 1, 2, 8, -1, 1 << 20]);
                wr.opcode = r.pick(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 200]);
                // INLINE reads the SGEs' bytes: only in-buffer ranges with it.
                wr.send_flags = (r.next() as u32) & 0x37;
                if wr.send_flags & 8 != 0 {
                    for s in sges.iter_mut() {
                        *s = ibv_sge {
                            addr: buf.as_ptr() as u64,
                            length: 16,
                            lkey: 0,
                        };
                    }
                }
                wr.wr.rdma = ibv_send_wr_rdma {
                    remote_addr: r.next(),
                    rkey: r.next() as u32,
                };
                if ty == 4 {
                    // A UD request's `ah` is dereferenced: NULL (EINVAL) rather than junk.
                    wr.wr.ud.ah = null_mut();
                }
                let mut bad = null_mut();
                let ret = ((*ctx).ops.post_send.unwrap())(qp, &mut wr, &mut bad);
                assert_ne!(ret, libc::EIO, "round {round}: post_send panicked");
                let mut rwr: ibv_recv_wr = zeroed();
                rwr.sg_list = sges.as_mut_ptr();
                rwr.num_sge = r.pick(&[0, 1, 8, -3]);
                let mut rbad = null_mut();
                let ret = ((*ctx).ops.post_recv.unwrap())(qp, &mut rwr, &mut rbad);
                assert_ne!(ret, libc::EIO, "round {round}: post_recv panicked");
                let mut wc: [ibv_wc; 8] = zeroed();
                assert!(((*ctx).ops.poll_cq.unwrap())(cq, 8, wc.as_mut_ptr()) >= 0);
            }
            assert_eq!((v.destroy_qp)(qp), 0);
        }
        let mut wc: [ibv_wc; 64] = zeroed();
        while ((*ctx).ops.poll_cq.unwrap())(cq, 64, wc.as_mut_ptr()) > 0 {}
        assert_eq!((v.destroy_cq)(cq), 0);
        assert_eq!((v.dereg_mr)(mr), 0);
        assert_eq!((v.dealloc_pd)(pd), 0);
        assert_eq!((v.close_device)(ctx), 0);
    }
}

#[test]
fn objects_destroyed_after_the_close_still_find_their_context() {
    let v = v();
    // SAFETY: the C API as a C program (a sloppy one) uses it.
    unsafe {
        let ctx = open(&v);
        let pd = (v.alloc_pd)(ctx);
        let ch = (v.create_comp_channel)(ctx);
        let cq = (v.create_cq)(ctx, 8, null_mut(), ch, 0);
        let mut init = qp_init(cq, RC);
        let qp = (v.create_qp)(pd, &mut init);
        assert!(!qp.is_null());
        assert_eq!((v.close_device)(ctx), 0);
        assert_eq!((v.destroy_qp)(qp), 0);
        assert_eq!((v.destroy_cq)(cq), 0);
        assert_eq!((v.destroy_comp_channel)(ch), 0);
        assert_eq!((v.dealloc_pd)(pd), 0);
    }
}

#[test]
fn rereg_mr_keeps_the_keys() {
    let v = v();
    let rereg = f!(
        ibv_rereg_mr,
        "IBVERBS_1.1",
        fn(*mut ibv_mr, c_int, *mut ibv_pd, *mut c_void, usize, c_int) -> c_int
    );
    // SAFETY: the C API as a C program uses it; the buffers outlive the region.
    unsafe {
        let ctx = open(&v);
        let (pd, pd2) = ((v.alloc_pd)(ctx), (v.alloc_pd)(ctx));
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 128];
        let mr = (v.reg_mr)(pd, a.as_mut_ptr().cast(), 64, 1);
        let (lkey, rkey) = ((*mr).lkey, (*mr).rkey);
        assert_eq!(
            rereg(mr, 0, null_mut(), null_mut(), 0, 0),
            libc::EINVAL,
            "no flag"
        );
        assert_eq!(
            rereg(mr, 1 | 2 | 4, pd2, b.as_mut_ptr().cast(), 128, 0xf),
            0
        );
        assert_eq!(((*mr).lkey, (*mr).rkey), (lkey, rkey));
        assert_eq!(
            ((*mr).addr, (*mr).length, (*mr).pd),
            (b.as_mut_ptr().cast(), 128, pd2)
        );
        assert_eq!((v.dealloc_pd)(pd), 0, "the old PD is free");
        assert_eq!((v.dealloc_pd)(pd2), libc::EBUSY, "the new one holds the MR");
        assert_eq!((v.dereg_mr)(mr), 0);
        assert_eq!((v.dealloc_pd)(pd2), 0);
        assert_eq!((v.close_device)(ctx), 0);
    }
}

#[test]
fn a_move_to_reset_removes_the_qps_unpolled_completions() {
    let v = v();
    // SAFETY: the C API as a C program uses it.
    unsafe {
        let ctx = open(&v);
        let pd = (v.alloc_pd)(ctx);
        let cq = (v.create_cq)(ctx, 16, null_mut(), null_mut(), 0);
        let mut init = qp_init(cq, RC);
        let (qp, other) = ((v.create_qp)(pd, &mut init), (v.create_qp)(pd, &mut init));
        let mut flushed = 0;
        for q in [qp, other] {
            let mut a: ibv_qp_attr = zeroed();
            a.qp_state = 1;
            a.port_num = 1;
            assert_eq!(
                (v.modify_qp)(q, &mut a, 1 | (1 << 3) | (1 << 4) | (1 << 5)),
                0
            );
            let mut a: ibv_qp_attr = zeroed();
            a.qp_state = 6;
            assert_eq!((v.modify_qp)(q, &mut a, 1), 0);
            let mut rwr: ibv_recv_wr = zeroed();
            let mut bad = null_mut();
            assert_eq!(((*ctx).ops.post_recv.unwrap())(q, &mut rwr, &mut bad), 0);
            flushed += 1;
        }
        // Both flushed receives are in the CQ; RESET of one QP takes its own away.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut a: ibv_qp_attr = zeroed();
        a.qp_state = 0;
        assert_eq!((v.modify_qp)(qp, &mut a, 1), 0);
        let wcs = poll(cq, flushed - 1);
        assert_eq!(wcs.len(), 1);
        assert_eq!((wcs[0].qp_num, wcs[0].status), ((*other).qp_num, 5));
        let mut wc: [ibv_wc; 4] = zeroed();
        assert_eq!(((*ctx).ops.poll_cq.unwrap())(cq, 4, wc.as_mut_ptr()), 0);
        for q in [qp, other] {
            assert_eq!((v.destroy_qp)(q), 0);
        }
        assert_eq!((v.destroy_cq)(cq), 0);
        assert_eq!((v.dealloc_pd)(pd), 0);
        assert_eq!((v.close_device)(ctx), 0);
    }
}

/// Posts `wr` on `qp` through `ctx->ops.post_send` (the `ibv_post_send` inline).
unsafe fn post(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> c_int {
    let mut bad = null_mut();
    // SAFETY: the QP's context is live; `wr` is a complete request.
    unsafe { ((*(*qp).context).ops.post_send.unwrap())(qp, wr, &mut bad) }
}

/// An RDMA WRITE or READ (`opcode`) of `len` bytes from `local` to `remote` / `rkey`.
unsafe fn rdma(qp: *mut ibv_qp, opcode: u32, local: &mut ibv_sge, remote: u64, rkey: u32) -> c_int {
    let mut wr: ibv_send_wr = zeroed();
    wr.wr_id = 50 + u64::from(opcode);
    wr.sg_list = local;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = 2;
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: remote,
        rkey,
    };
    // SAFETY: as a C program.
    unsafe { post(qp, &mut wr) }
}

#[test]
fn memory_windows_bind_grant_and_revoke_remote_access() {
    let v = v();
    // SAFETY: the C API as a C program uses it (the verbs.h inlines' ops); the buffers
    // outlive their regions.
    unsafe {
        let ctx = open(&v);
        let mut da: ibv_device_attr = zeroed();
        assert_eq!((v.query_device)(ctx, &mut da), 0);
        assert_ne!(da.device_cap_flags & (1 << 17), 0, "MEM_WINDOW");
        assert_ne!(da.device_cap_flags & (1 << 24), 0, "MEM_WINDOW_TYPE_2B");
        assert!(da.max_mw > 0);
        let ops = &(*ctx).ops;
        let (alloc_mw, dealloc_mw, bind_mw) = (
            ops.alloc_mw.unwrap(),
            ops.dealloc_mw.unwrap(),
            ops.bind_mw.unwrap(),
        );
        let pd = (v.alloc_pd)(ctx);
        assert!(alloc_mw(pd, 3).is_null(), "no type 3");
        assert_eq!(common::errno(), libc::EINVAL);
        assert!(alloc_mw(null_mut(), 1).is_null());
        let cq = (v.create_cq)(ctx, 64, null_mut(), null_mut(), 0);
        let mut a_buf = vec![0u8; 4096];
        let mut b_buf = vec![0u8; 4096];
        let a_mr = (v.reg_mr)(pd, a_buf.as_mut_ptr().cast(), 4096, 0x1);
        // LOCAL_WRITE | MW_BIND: no remote right of its own.
        let b_mr = (v.reg_mr)(pd, b_buf.as_mut_ptr().cast(), 4096, 0x11);
        assert!(!b_mr.is_null(), "errno {}", common::errno());
        let (mut ia, ib) = (qp_init(cq, RC), qp_init(cq, RC));
        let (qa, qb) = ((v.create_qp)(pd, &mut ia), create_qp_ex(ctx, pd, &ib));
        connect(&v, ctx, qa, (*qb).qp_num);
        connect(&v, ctx, qb, (*qa).qp_num);
        let b0 = b_buf.as_ptr() as u64;
        a_buf[..64].copy_from_slice(&[0xab; 64]);
        let mut sge = ibv_sge {
            addr: a_buf.as_ptr() as u64,
            length: 64,
            lkey: (*a_mr).lkey,
        };
        // The MR's own key grants no remote write.
        assert_eq!(rdma(qa, 0, &mut sge, b0, (*b_mr).rkey), 0);
        assert_eq!(poll(cq, 1)[0].status, 10, "REM_ACCESS_ERR");
        // Fresh QPs (the error moved both to ERR).
        let (qa, qb) = ((v.create_qp)(pd, &mut ia), create_qp_ex(ctx, pd, &ib));
        connect(&v, ctx, qa, (*qb).qp_num);
        connect(&v, ctx, qb, (*qa).qp_num);
        let _ = poll_all(cq);

        // Type 1 through ibv_bind_mw: the key's low byte moves on, the window's range
        // takes a WRITE.
        let mw1 = alloc_mw(pd, 1);
        assert!(!mw1.is_null());
        let old = (*mw1).rkey;
        let mut bind: ibv_mw_bind = zeroed();
        bind.wr_id = 0x51;
        bind.send_flags = 2;
        bind.bind_info = ibv_mw_bind_info {
            mr: b_mr,
            addr: b0,
            length: 64,
            mw_access_flags: 2, // REMOTE_WRITE
        };
        assert_eq!(bind_mw(qb, mw1, &mut bind), 0);
        let wc = poll(cq, 1)[0];
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (0x51, 0, 5),
            "IBV_WC_BIND_MW"
        );
        assert_eq!((*mw1).rkey, (old & !0xff) | (old.wrapping_add(1) & 0xff));
        assert_eq!(rdma(qa, 0, &mut sge, b0, (*mw1).rkey), 0);
        assert_eq!(poll(cq, 1)[0].status, 0);
        assert_eq!(&b_buf[..64], &[0xab; 64]);
        // The MR stays while a window is bound to it.
        assert_eq!((v.dereg_mr)(b_mr), libc::EBUSY);

        // Type 2 through IBV_WR_BIND_MW: READ and WRITE rights over 64 bytes at 64.
        let mw2 = alloc_mw(pd, 2);
        let key2 = ((*mw2).rkey & !0xff) | ((*mw2).rkey.wrapping_add(7) & 0xff);
        let mut wr: ibv_send_wr = zeroed();
        wr.wr_id = 0x52;
        wr.opcode = 8; // BIND_MW
        wr.send_flags = 2;
        wr.ext.bind_mw = ibv_send_wr_bind_mw {
            mw: mw2,
            rkey: key2,
            bind_info: ibv_mw_bind_info {
                mr: b_mr,
                addr: b0 + 64,
                length: 64,
                mw_access_flags: 2 | 4,
            },
        };
        assert_eq!(post(qb, &mut wr), 0);
        let wc = poll(cq, 1)[0];
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (0x52, 0, 5));
        b_buf[64..128].copy_from_slice(&[0x5c; 64]);
        let mut rsge = ibv_sge {
            addr: a_buf.as_ptr() as u64 + 1024,
            length: 64,
            lkey: (*a_mr).lkey,
        };
        assert_eq!(rdma(qa, 4, &mut rsge, b0 + 64, key2), 0);
        assert_eq!(poll(cq, 1)[0].status, 0, "READ through the window");
        assert_eq!(&a_buf[1024..1088], &[0x5c; 64]);

        // LOCAL_INV frees it; a rebind through the ibv_qp_ex builder gives it back.
        let mut wr: ibv_send_wr = zeroed();
        wr.wr_id = 0x53;
        wr.opcode = 7; // LOCAL_INV
        wr.send_flags = 2;
        wr.imm.invalidate_rkey = key2;
        assert_eq!(post(qb, &mut wr), 0);
        let wc = poll(cq, 1)[0];
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (0x53, 0, 6),
            "IBV_WC_LOCAL_INV"
        );
        let x = (v.qp_to_qp_ex)(qb);
        let key3 = (key2 & !0xff) | (key2.wrapping_add(1) & 0xff);
        ((*x).wr_start.unwrap())(x);
        (*x).wr_id = 0x54;
        (*x).wr_flags = 2;
        let info = ibv_mw_bind_info {
            mr: b_mr,
            addr: b0 + 64,
            length: 64,
            mw_access_flags: 2,
        };
        ((*x).wr_bind_mw.unwrap())(x, mw2, key3, &info);
        assert_eq!(((*x).wr_complete.unwrap())(x), 0);
        let wc = poll(cq, 1)[0];
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (0x54, 0, 5));
        assert_eq!(rdma(qa, 0, &mut sge, b0 + 64, key3), 0);
        assert_eq!(poll(cq, 1)[0].status, 0, "WRITE through the rebound window");
        assert_eq!(&b_buf[64..128], &[0xab; 64]);

        // Dealloc revokes the key: the WRITE is a remote access error.
        assert_eq!((v.dealloc_pd)(pd), libc::EBUSY);
        assert_eq!(dealloc_mw(mw2), 0);
        assert_eq!(rdma(qa, 0, &mut sge, b0 + 64, key3), 0);
        assert_eq!(poll(cq, 1)[0].status, 10, "REM_ACCESS_ERR");
        let _ = poll_all(cq);

        // A bad bind (a window outside the MR) completes with MW_BIND_ERR.
        let (qa, qb) = ((v.create_qp)(pd, &mut ia), create_qp_ex(ctx, pd, &ib));
        connect(&v, ctx, qa, (*qb).qp_num);
        connect(&v, ctx, qb, (*qa).qp_num);
        let mw3 = alloc_mw(pd, 2);
        let mut wr: ibv_send_wr = zeroed();
        wr.wr_id = 0x55;
        wr.opcode = 8;
        wr.send_flags = 2;
        wr.ext.bind_mw = ibv_send_wr_bind_mw {
            mw: mw3,
            rkey: (*mw3).rkey,
            bind_info: ibv_mw_bind_info {
                mr: b_mr,
                addr: b0 + 4090,
                length: 64,
                mw_access_flags: 2,
            },
        };
        assert_eq!(post(qb, &mut wr), 0);
        let wc = poll(cq, 1)[0];
        assert_eq!((wc.wr_id, wc.status), (0x55, 6), "IBV_WC_MW_BIND_ERR");
        // A request naming no window is refused at post time.
        wr.ext.bind_mw.mw = null_mut();
        let (qa2, qb2) = ((v.create_qp)(pd, &mut ia), create_qp_ex(ctx, pd, &ib));
        connect(&v, ctx, qa2, (*qb2).qp_num);
        assert_eq!(post(qa2, &mut wr), libc::EINVAL);
        let _ = (qa, qa2, qb2);

        assert_eq!(dealloc_mw(mw3), 0);
        assert_eq!(dealloc_mw(mw1), 0);
        assert_eq!((v.dereg_mr)(b_mr), 0, "free once no window is bound");
    }
}

/// Polls whatever is on `cq` now (flushed requests of QPs in ERR).
unsafe fn poll_all(cq: *mut ibv_cq) -> usize {
    // SAFETY: the CQ's context is live.
    let poll = unsafe { (*(*cq).context).ops.poll_cq.unwrap() };
    let mut n = 0;
    loop {
        let mut wc: [ibv_wc; 4] = zeroed();
        // SAFETY: room for 4.
        let k = unsafe { poll(cq, 4, wc.as_mut_ptr()) };
        if k <= 0 {
            return n;
        }
        n += k as usize;
    }
}
