//! The helpers of libibverbs that need no device: names of enum values, rate
//! conversions and fork support.

use std::ffi::{c_char, c_int, c_void, CStr};

fn s(c: &'static CStr) -> *const c_char {
    c.as_ptr()
}

unsafe extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    s(match t {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        5 => c"usNIC",
        6 => c"usNIC UDP",
        7 => c"unspecified",
        _ => c"unknown",
    })
}
export!(ibv_node_type_str, "IBVERBS_1.1");

unsafe extern "C" fn ibv_port_state_str(st: u32) -> *const c_char {
    s(match st {
        0 => c"PORT_NOP",
        1 => c"PORT_DOWN",
        2 => c"PORT_INIT",
        3 => c"PORT_ARMED",
        4 => c"PORT_ACTIVE",
        5 => c"PORT_ACTIVE_DEFER",
        _ => c"unknown",
    })
}
export!(ibv_port_state_str, "IBVERBS_1.1");

unsafe extern "C" fn ibv_event_type_str(e: u32) -> *const c_char {
    const N: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    s(N.get(e as usize).copied().unwrap_or(c"unknown"))
}
export!(ibv_event_type_str, "IBVERBS_1.1");

unsafe extern "C" fn ibv_wc_status_str(st: u32) -> *const c_char {
    const N: [&CStr; 23] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
    ];
    s(N.get(st as usize).copied().unwrap_or(c"unknown"))
}
export!(ibv_wc_status_str, "IBVERBS_1.1");

/// (`enum ibv_rate`, multiple of 2.5 Gb/s, Mb/s), as verbs.h numbers the rates.
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25000),
    (16, 40, 100000),
    (17, 80, 200000),
    (18, 120, 300000),
    (19, 11, 28125),
    (20, 20, 50000),
    (21, 160, 400000),
    (22, 240, 600000),
    (23, 320, 800000),
    (24, 480, 1200000),
];

unsafe extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}
export!(ibv_rate_to_mult, "IBVERBS_1.0");

unsafe extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}
export!(mult_to_ibv_rate, "IBVERBS_1.0");

unsafe extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}
export!(ibv_rate_to_mbps, "IBVERBS_1.1");

unsafe extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}
export!(mbps_to_ibv_rate, "IBVERBS_1.1");

// ---- fork support ------------------------------------------------------------------
// The soft device reads and writes registered memory with the CPU in this process, so a
// fork cannot take pages away from it: fork is always safe (IBV_FORK_UNNEEDED).

unsafe extern "C" fn ibv_fork_init() -> c_int {
    0
}
export!(ibv_fork_init, "IBVERBS_1.1");

/// `IBV_FORK_UNNEEDED` of `enum ibv_fork_status`.
unsafe extern "C" fn ibv_is_fork_initialized() -> u32 {
    2
}
export!(ibv_is_fork_initialized, "IBVERBS_1.13");

unsafe extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
export!(ibv_dontfork_range, "IBVERBS_1.1");

unsafe extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
export!(ibv_dofork_range, "IBVERBS_1.1");
