//! librdmacm's functions as a C program binds them (by name and `RDMACM_1.x` version
//! from the built library): bad arguments get librdmacm's answer, -1 with `errno`
//! (EINVAL, EPROTONOSUPPORT, EADDRNOTAVAIL, EADDRINUSE, EAGAIN, ENOSYS, EOPNOTSUPP), never a
//! panic across the boundary (which would come back as EIO); and two IDs of one
//! process connect through the C calls, the connect request naming the listener, its
//! user context, and the new ID's context and addresses.

mod common;

use rverbs_ibverbs::types::*;
use std::ffi::{c_int, c_void, CStr};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

type Chan = *mut rdma_event_channel;
type Id = *mut rdma_cm_id;

struct Cm {
    create_event_channel: unsafe extern "C" fn() -> Chan,
    destroy_event_channel: unsafe extern "C" fn(Chan),
    create_id: unsafe extern "C" fn(Chan, *mut Id, *mut c_void, u32) -> c_int,
    destroy_id: unsafe extern "C" fn(Id) -> c_int,
    bind_addr: unsafe extern "C" fn(Id, *mut libc::sockaddr) -> c_int,
    resolve_addr:
        unsafe extern "C" fn(Id, *mut libc::sockaddr, *mut libc::sockaddr, c_int) -> c_int,
    resolve_route: unsafe extern "C" fn(Id, c_int) -> c_int,
    listen: unsafe extern "C" fn(Id, c_int) -> c_int,
    connect: unsafe extern "C" fn(Id, *mut rdma_conn_param) -> c_int,
    accept: unsafe extern "C" fn(Id, *mut rdma_conn_param) -> c_int,
    reject: unsafe extern "C" fn(Id, *const c_void, u8) -> c_int,
    create_qp: unsafe extern "C" fn(Id, *mut ibv_pd, *mut ibv_qp_init_attr) -> c_int,
    get_cm_event: unsafe extern "C" fn(Chan, *mut *mut rdma_cm_event) -> c_int,
    ack_cm_event: unsafe extern "C" fn(*mut rdma_cm_event) -> c_int,
    event_str: unsafe extern "C" fn(u32) -> *const i8,
    set_option: unsafe extern "C" fn(Id, c_int, c_int, *mut c_void, usize) -> c_int,
    getaddrinfo: unsafe extern "C" fn(
        *const i8,
        *const i8,
        *const rdma_addrinfo,
        *mut *mut rdma_addrinfo,
    ) -> c_int,
    freeaddrinfo: unsafe extern "C" fn(*mut rdma_addrinfo),
    get_src_port: unsafe extern "C" fn(Id) -> u16,
    alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
}

fn cm() -> Cm {
    Cm {
        create_event_channel: f!(rdma_create_event_channel, "RDMACM_1.0", fn() -> Chan),
        destroy_event_channel: f!(rdma_destroy_event_channel, "RDMACM_1.0", fn(Chan)),
        create_id: f!(
            rdma_create_id,
            "RDMACM_1.0",
            fn(Chan, *mut Id, *mut c_void, u32) -> c_int
        ),
        destroy_id: f!(rdma_destroy_id, "RDMACM_1.0", fn(Id) -> c_int),
        bind_addr: f!(
            rdma_bind_addr,
            "RDMACM_1.0",
            fn(Id, *mut libc::sockaddr) -> c_int
        ),
        resolve_addr: f!(
            rdma_resolve_addr,
            "RDMACM_1.0",
            fn(Id, *mut libc::sockaddr, *mut libc::sockaddr, c_int) -> c_int
        ),
        resolve_route: f!(rdma_resolve_route, "RDMACM_1.0", fn(Id, c_int) -> c_int),
        listen: f!(rdma_listen, "RDMACM_1.0", fn(Id, c_int) -> c_int),
        connect: f!(
            rdma_connect,
            "RDMACM_1.0",
            fn(Id, *mut rdma_conn_param) -> c_int
        ),
        accept: f!(
            rdma_accept,
            "RDMACM_1.0",
            fn(Id, *mut rdma_conn_param) -> c_int
        ),
        reject: f!(
            rdma_reject,
            "RDMACM_1.0",
            fn(Id, *const c_void, u8) -> c_int
        ),
        create_qp: f!(
            rdma_create_qp,
            "RDMACM_1.0",
            fn(Id, *mut ibv_pd, *mut ibv_qp_init_attr) -> c_int
        ),
        get_cm_event: f!(
            rdma_get_cm_event,
            "RDMACM_1.0",
            fn(Chan, *mut *mut rdma_cm_event) -> c_int
        ),
        ack_cm_event: f!(
            rdma_ack_cm_event,
            "RDMACM_1.0",
            fn(*mut rdma_cm_event) -> c_int
        ),
        event_str: f!(rdma_event_str, "RDMACM_1.0", fn(u32) -> *const i8),
        set_option: f!(
            rdma_set_option,
            "RDMACM_1.0",
            fn(Id, c_int, c_int, *mut c_void, usize) -> c_int
        ),
        getaddrinfo: f!(
            rdma_getaddrinfo,
            "RDMACM_1.0",
            fn(*const i8, *const i8, *const rdma_addrinfo, *mut *mut rdma_addrinfo) -> c_int
        ),
        freeaddrinfo: f!(rdma_freeaddrinfo, "RDMACM_1.0", fn(*mut rdma_addrinfo)),
        get_src_port: f!(rdma_get_src_port, "RDMACM_1.0", fn(Id) -> u16),
        alloc_pd: f!(
            ibv_alloc_pd,
            "IBVERBS_1.1",
            fn(*mut ibv_context) -> *mut ibv_pd
        ),
        create_cq: f!(
            ibv_create_cq,
            "IBVERBS_1.1",
            fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq
        ),
    }
}

fn sin(ip: [u8; 4], port: u16) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain data.
    let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = port.to_be();
    s.sin_addr.s_addr = u32::from_be_bytes(ip).to_be();
    s
}

fn sa(s: &mut libc::sockaddr_in) -> *mut libc::sockaddr {
    s as *mut libc::sockaddr_in as *mut libc::sockaddr
}

/// -1 and `errno` == `want`.
fn fails(r: c_int, want: c_int, what: &str) {
    let e = common::errno();
    assert_eq!((r, e), (-1, want), "{what}: errno {e}");
}

/// A CM port of this run.
fn port() -> u16 {
    common::free_port()
}

#[test]
fn bad_arguments_get_librdmacms_errors() {
    let c = cm();
    let set_ece = f!(
        rdma_set_local_ece,
        "RDMACM_1.3",
        fn(Id, *mut ibv_ece) -> c_int
    );
    let get_ece = f!(
        rdma_get_remote_ece,
        "RDMACM_1.3",
        fn(Id, *mut ibv_ece) -> c_int
    );
    let join = f!(
        rdma_join_multicast,
        "RDMACM_1.0",
        fn(Id, *mut libc::sockaddr, *mut c_void) -> c_int
    );
    let leave = f!(
        rdma_leave_multicast,
        "RDMACM_1.0",
        fn(Id, *mut libc::sockaddr) -> c_int
    );
    // SAFETY: the library's functions, called as C calls them (pointers valid or NULL).
    unsafe {
        let ch = (c.create_event_channel)();
        assert!(!ch.is_null());
        let mut id: Id = null_mut();
        fails(
            (c.create_id)(ch, null_mut(), null_mut(), RDMA_PS_TCP),
            libc::EINVAL,
            "no out",
        );
        fails(
            (c.create_id)(ch, &mut id, null_mut(), 0x9999),
            libc::EPROTONOSUPPORT,
            "ps",
        );
        fails(
            (c.create_id)(ch, &mut id, null_mut(), RDMA_PS_IB),
            libc::EPROTONOSUPPORT,
            "IB",
        );
        assert_eq!((c.create_id)(ch, &mut id, null_mut(), RDMA_PS_TCP), 0);
        fails(
            (c.bind_addr)(null_mut(), null_mut()),
            libc::EINVAL,
            "NULL id",
        );
        fails((c.bind_addr)(id, null_mut()), libc::EINVAL, "NULL address");
        // SAFETY: sockaddr is plain data; AF_UNIX is no address of a device.
        let mut unix: libc::sockaddr = std::mem::zeroed();
        unix.sa_family = libc::AF_UNIX as libc::sa_family_t;
        fails((c.bind_addr)(id, &mut unix), libc::EINVAL, "AF_UNIX");
        // TEST-NET-1: no device has it.
        let mut far = sin([192, 0, 2, 1], 1);
        fails(
            (c.bind_addr)(id, sa(&mut far)),
            libc::EADDRNOTAVAIL,
            "foreign address",
        );
        fails(
            (c.resolve_route)(id, 100),
            libc::EINVAL,
            "route before address",
        );
        fails(
            (c.connect)(id, null_mut()),
            libc::EINVAL,
            "connect before resolving",
        );
        fails(
            (c.accept)(id, null_mut()),
            libc::EINVAL,
            "accept without a request",
        );
        fails(
            (c.reject)(id, null(), 0),
            libc::EINVAL,
            "reject without a request",
        );
        let mut any = sin([0, 0, 0, 0], 0);
        fails(
            (c.resolve_addr)(id, null_mut(), sa(&mut any), 100),
            libc::EINVAL,
            "to 0.0.0.0",
        );
        let mut tos: u8 = 0;
        let tp = &mut tos as *mut u8 as *mut c_void;
        fails(
            (c.set_option)(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, tp, 4),
            libc::EINVAL,
            "len",
        );
        assert_eq!(
            (c.set_option)(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, tp, 1),
            0
        );
        fails((c.set_option)(id, 7, 0, tp, 1), libc::ENOSYS, "level");

        // A second listener on a port: EADDRINUSE.
        let p = port();
        let mut lo = sin([0, 0, 0, 0], p);
        assert_eq!((c.bind_addr)(id, sa(&mut lo)), 0);
        fails((c.bind_addr)(id, sa(&mut lo)), libc::EINVAL, "bound twice");
        assert_eq!((c.listen)(id, 4), 0);
        assert_eq!(u16::from_be((c.get_src_port)(id)), p);
        let mut id2: Id = null_mut();
        assert_eq!((c.create_id)(ch, &mut id2, null_mut(), RDMA_PS_TCP), 0);
        assert_eq!((c.bind_addr)(id2, sa(&mut lo)), 0);
        fails((c.listen)(id2, 4), libc::EADDRINUSE, "second listener");

        // No event waits: a non-blocking channel says EAGAIN.
        let fd = (*ch).fd;
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert_eq!(
            fl & libc::O_NONBLOCK,
            0,
            "a channel blocks until told not to"
        );
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        let mut ev: *mut rdma_cm_event = null_mut();
        fails((c.get_cm_event)(ch, &mut ev), libc::EAGAIN, "no event");
        fails(
            (c.get_cm_event)(null_mut(), &mut ev),
            libc::EINVAL,
            "NULL channel",
        );
        fails((c.ack_cm_event)(null_mut()), libc::EINVAL, "NULL event");

        let name = |e| {
            CStr::from_ptr((c.event_str)(e))
                .to_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(name(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(name(200), "UNKNOWN EVENT");

        let mut res: *mut rdma_addrinfo = null_mut();
        fails(
            (c.getaddrinfo)(null(), null(), null(), &mut res),
            libc::EINVAL,
            "no name",
        );
        assert_eq!(
            (c.getaddrinfo)(c"127.0.0.1".as_ptr(), c"7471".as_ptr(), null(), &mut res),
            0
        );
        assert_eq!((*res).ai_family, libc::AF_INET);
        assert_eq!((*res).ai_port_space, RDMA_PS_TCP as c_int);
        assert_eq!((*res).ai_qp_type, 2);
        assert!((*res).ai_src_addr.is_null() && !(*res).ai_dst_addr.is_null());
        (c.freeaddrinfo)(res);

        // ECE: checked as librdmacm checks it; a peer without ECE reports none.
        let mut ece = ibv_ece {
            vendor_id: 0,
            options: 1,
            comp_mask: 0,
        };
        fails(set_ece(id2, &mut ece), libc::EINVAL, "ECE without a vendor");
        ece.vendor_id = 0x15b3;
        assert_eq!(set_ece(id2, &mut ece), 0);
        fails(set_ece(id2, null_mut()), libc::EINVAL, "NULL ECE");
        let mut remote = ibv_ece {
            vendor_id: 9,
            options: 9,
            comp_mask: 9,
        };
        assert_eq!(get_ece(id2, &mut remote), 0);
        assert_eq!(
            (remote.vendor_id, remote.options, remote.comp_mask),
            (0, 0, 0)
        );
        // Multicast is not in this CM: EOPNOTSUPP, and nothing to leave.
        let mut group = sin([239, 1, 2, 3], 0);
        fails(
            join(id2, sa(&mut group), null_mut()),
            libc::EOPNOTSUPP,
            "join",
        );
        fails(join(id2, null_mut(), null_mut()), libc::EINVAL, "join NULL");
        fails(leave(id2, sa(&mut group)), libc::EADDRNOTAVAIL, "leave");

        assert_eq!((c.destroy_id)(id2), 0);
        assert_eq!((c.destroy_id)(id), 0);
        fails((c.destroy_id)(null_mut()), libc::EINVAL, "NULL id");
        (c.destroy_event_channel)(ch);
    }
}

/// The next event of `ch` (blocking, bounded by the test's own clock).
///
/// # Safety
/// `ch` is a live channel of the library.
unsafe fn next(c: &Cm, ch: Chan) -> *mut rdma_cm_event {
    let start = Instant::now();
    loop {
        let mut ev: *mut rdma_cm_event = null_mut();
        // SAFETY: the caller's channel (non-blocking, set by the caller).
        if unsafe { (c.get_cm_event)(ch, &mut ev) } == 0 {
            return ev;
        }
        assert_eq!(common::errno(), libc::EAGAIN);
        assert!(start.elapsed() < Duration::from_secs(20), "no event");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn two_ids_connect_through_the_c_calls() {
    let c = cm();
    // SAFETY: the library's functions, called as C calls them.
    unsafe {
        let ch = (c.create_event_channel)();
        let fd = (*ch).fd;
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        );
        let mut server: Id = null_mut();
        let mut client: Id = null_mut();
        let tag = 0x5eed_usize as *mut c_void;
        assert_eq!((c.create_id)(ch, &mut server, tag, RDMA_PS_TCP), 0);
        assert_eq!((c.create_id)(ch, &mut client, null_mut(), RDMA_PS_TCP), 0);
        let p = port();
        let mut any = sin([0, 0, 0, 0], p);
        assert_eq!((c.bind_addr)(server, sa(&mut any)), 0);
        assert!(!(*server).verbs.is_null(), "bound: the device's context");
        assert_eq!((c.listen)(server, 1), 0);
        // Both IDs are in this process, so on one context: its own address reaches it.
        let mut to = sin([127, 0, 0, 1], p);
        assert_eq!((c.resolve_addr)(client, null_mut(), sa(&mut to), 2000), 0);
        let ev = next(&c, ch);
        assert_eq!(
            ((*ev).event, (*ev).id),
            (RDMA_CM_EVENT_ADDR_RESOLVED, client)
        );
        assert_eq!((c.ack_cm_event)(ev), 0);
        assert_eq!((*client).verbs, (*server).verbs, "one context per device");
        assert_eq!((c.resolve_route)(client, 2000), 0);
        let ev = next(&c, ch);
        assert_eq!((*ev).event, RDMA_CM_EVENT_ROUTE_RESOLVED);
        assert_eq!((c.ack_cm_event)(ev), 0);

        let verbs = (*client).verbs;
        let pd = (c.alloc_pd)(verbs);
        let cq = (c.create_cq)(verbs, 16, null_mut(), null_mut(), 0);
        assert!(!pd.is_null() && !cq.is_null());
        // SAFETY: ibv_qp_init_attr is plain data.
        let mut attr: ibv_qp_init_attr = std::mem::zeroed();
        attr.send_cq = cq;
        attr.recv_cq = cq;
        attr.cap.max_send_wr = 4;
        attr.cap.max_recv_wr = 4;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.qp_type = 4; // UD on a TCP ID
        fails(
            (c.create_qp)(client, pd, &mut attr),
            libc::EINVAL,
            "UD QP on an RC ID",
        );
        attr.qp_type = 2;
        assert_eq!((c.create_qp)(client, pd, &mut attr), 0);
        assert!(!(*client).qp.is_null());
        assert_eq!(((*client).pd, (*client).send_cq), (pd, cq));
        fails(
            (c.create_qp)(client, pd, &mut attr),
            libc::EINVAL,
            "a second QP",
        );

        let hello = *b"hello";
        // SAFETY: rdma_conn_param is plain data.
        let mut cp: rdma_conn_param = std::mem::zeroed();
        cp.private_data = hello.as_ptr() as *const c_void;
        cp.private_data_len = 5;
        cp.responder_resources = 1;
        cp.initiator_depth = 1;
        cp.retry_count = 7;
        cp.rnr_retry_count = 7;
        assert_eq!((c.connect)(client, &mut cp), 0);

        let ev = next(&c, ch);
        assert_eq!((*ev).event, RDMA_CM_EVENT_CONNECT_REQUEST);
        assert_eq!((*ev).listen_id, server);
        let child = (*ev).id;
        assert!(child != server && child != client);
        assert_eq!((*child).context, tag, "the listener's user context");
        assert_eq!((*child).verbs, verbs);
        assert_eq!((*child).channel, ch);
        let conn = (*ev).param.conn;
        assert!(conn.private_data_len >= 5);
        let got = std::slice::from_raw_parts(conn.private_data as *const u8, 5);
        assert_eq!(got, b"hello");
        assert_eq!((conn.responder_resources, conn.initiator_depth), (1, 1));
        assert_eq!((c.ack_cm_event)(ev), 0);

        // The request's ID gets its own QP (CQs made by the library: none given).
        // SAFETY: as above.
        let mut sattr: ibv_qp_init_attr = std::mem::zeroed();
        sattr.cap = attr.cap;
        sattr.qp_type = 2;
        assert_eq!((c.create_qp)(child, null_mut(), &mut sattr), 0);
        assert!(!(*child).send_cq.is_null() && !(*child).recv_cq_channel.is_null());
        assert!(!(*child).pd.is_null(), "the device's PD when none is given");
        assert_eq!((c.accept)(child, null_mut()), 0);

        let mut established = 0;
        while established < 2 {
            let ev = next(&c, ch);
            assert_eq!((*ev).event, RDMA_CM_EVENT_ESTABLISHED, "{}", (*ev).status);
            assert!((*ev).id == client || (*ev).id == child);
            established += 1;
            assert_eq!((c.ack_cm_event)(ev), 0);
        }
        assert_eq!((c.destroy_id)(child), 0);
        assert_eq!((c.destroy_id)(client), 0);
        assert_eq!((c.destroy_id)(server), 0);
        (c.destroy_event_channel)(ch);
    }
}

/// `rdma_destroy_id` of a listener frees its port before it returns, even while a
/// connect request for it waits unread on its channel: listening again on the port at
/// once succeeds, 200 times (a request waiting every 5th time, then rejected with
/// reason 28, never delivered).
#[test]
fn a_destroyed_listener_frees_its_port_at_once() {
    let c = cm();
    // SAFETY: the library's functions, called as C calls them.
    unsafe {
        let (sch, cch) = ((c.create_event_channel)(), (c.create_event_channel)());
        for ch in [sch, cch] {
            let fd = (*ch).fd;
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        let p = port();
        let listen_on = |id: &mut Id, round: usize| {
            assert_eq!((c.create_id)(sch, id, null_mut(), RDMA_PS_TCP), 0);
            let mut any = sin([0, 0, 0, 0], p);
            assert_eq!((c.bind_addr)(*id, sa(&mut any)), 0, "round {round}");
            let r = (c.listen)(*id, 8);
            assert_eq!(r, 0, "round {round}: errno {}", common::errno());
        };
        let mut server: Id = null_mut();
        listen_on(&mut server, 0);
        let (mut pd, mut cq): (*mut ibv_pd, *mut ibv_cq) = (null_mut(), null_mut());
        let mut clients = Vec::new();
        // The clients' next event of `kind`, counting the rejections met on the way.
        let rejected = std::cell::Cell::new(0);
        let client_event = |kind: u32| loop {
            let ev = next(&c, cch);
            let (e, st) = ((*ev).event, (*ev).status);
            assert_eq!((c.ack_cm_event)(ev), 0);
            if e == kind {
                return;
            }
            assert_eq!((e, st), (RDMA_CM_EVENT_REJECTED, 28));
            rejected.set(rejected.get() + 1);
        };
        for round in 0..200 {
            if round % 5 == 0 {
                let mut client: Id = null_mut();
                assert_eq!((c.create_id)(cch, &mut client, null_mut(), RDMA_PS_TCP), 0);
                let mut to = sin([127, 0, 0, 1], p);
                assert_eq!((c.resolve_addr)(client, null_mut(), sa(&mut to), 2000), 0);
                client_event(RDMA_CM_EVENT_ADDR_RESOLVED);
                assert_eq!((c.resolve_route)(client, 2000), 0);
                client_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
                if pd.is_null() {
                    pd = (c.alloc_pd)((*client).verbs);
                    cq = (c.create_cq)((*client).verbs, 256, null_mut(), null_mut(), 0);
                }
                // SAFETY: ibv_qp_init_attr is plain data.
                let mut attr: ibv_qp_init_attr = std::mem::zeroed();
                (attr.send_cq, attr.recv_cq, attr.qp_type) = (cq, cq, 2);
                attr.cap.max_send_wr = 1;
                attr.cap.max_recv_wr = 1;
                assert_eq!((c.create_qp)(client, pd, &mut attr), 0);
                // SAFETY: rdma_conn_param is plain data.
                let mut cp: rdma_conn_param = std::mem::zeroed();
                cp.retry_count = 7;
                assert_eq!((c.connect)(client, &mut cp), 0);
                // The request is queued on the listener's channel, unread.
                let mut pfd = libc::pollfd {
                    fd: (*sch).fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                assert_eq!(
                    libc::poll(&mut pfd, 1, 5000),
                    1,
                    "round {round}: no request"
                );
                clients.push(client);
            }
            assert_eq!((c.destroy_id)(server), 0);
            listen_on(&mut server, round);
        }
        // Every waiting request went with its listener: rejected, none delivered.
        while rejected.get() < clients.len() {
            client_event(RDMA_CM_EVENT_REJECTED);
            rejected.set(rejected.get() + 1);
        }
        let mut ev: *mut rdma_cm_event = null_mut();
        fails(
            (c.get_cm_event)(sch, &mut ev),
            libc::EAGAIN,
            "no request delivered",
        );
        for id in clients.into_iter().chain([server]) {
            assert_eq!((c.destroy_id)(id), 0);
        }
        (c.destroy_event_channel)(sch);
        (c.destroy_event_channel)(cch);
    }
}
