//! Numbers of the CM protocol: reject reasons, SIDR statuses, private-data limits and
//! the kernel's timer arithmetic.

/// Virtual time in nanoseconds (the same unit as `rverbs_engine::Nanos`).
pub type Nanos = u64;

/// Nanoseconds per millisecond.
pub const MS: Nanos = 1_000_000;

/// REJ reasons (IBTA 12.6.7 Table 109; kernel `enum ib_cm_rej_reason`).
pub mod rej {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout: sent when an active side gives up (ARI = its CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Nobody listens on the REQ's service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Transport type not supported.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// The REQ's QPN (or REP's) belongs to a connection that is still alive.
    pub const STALE_CONN: u16 = 10;
    /// The REQ names a GID this port does not have (ARI = the port's GID).
    pub const INVALID_GID: u16 = 12;
    /// The consumer rejected (rdma_reject; also sent when a pending request is destroyed).
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// SIDR_REP status (IBTA 12.11.2 Table 121; kernel `enum ib_cm_sidr_status`).
pub mod sidr_status {
    /// The service ID was resolved.
    pub const SUCCESS: u8 = 0;
    /// Nobody listens on the service ID.
    pub const UNSUPPORTED: u8 = 1;
    /// The consumer rejected the request (or was destroyed before answering).
    pub const REJECT: u8 = 2;
    /// No QP available.
    pub const NO_QP: u8 = 3;
    /// Redirect (the additional information holds a ClassPortInfo).
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// Private-data sizes of each message (kernel `include/rdma/ib_cm.h`
/// `IB_CM_*_PRIVATE_DATA_SIZE`); longer private data is `EINVAL`.
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP (224 in the kernel and in IBTA Table 113).
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
    /// REJ additional reject information (`IB_CM_REJ_ARI_LENGTH`).
    pub const REJ_ARI: usize = 72;
    /// SIDR_REP additional information (`IB_CM_SIDR_REP_INFO_LENGTH`).
    pub const SIDR_REP_INFO: usize = 72;
}

/// rdma_cm's CM response timeout exponent (kernel cma.c `CMA_CM_RESPONSE_TIMEOUT`).
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// rdma_cm's CM retries (kernel cma.c `CMA_MAX_CM_RETRIES`).
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// rdma_cm's packet life time on RoCE (kernel cma.c `CMA_IBOE_PACKET_LIFETIME`: 16 since
/// Linux 5.13, 18 before).
pub const CMA_IBOE_PACKET_LIFETIME: u8 = 16;
/// The service timeout of rdma_cm's delayed MRA (kernel cma.c `CMA_CM_MRA_SETTING`
/// without its delay flag; removed from recent kernels).
pub const CMA_MRA_SERVICE_TIMEOUT: u8 = 24;
/// rxe's `local_ca_ack_delay` (kernel `RXE_LOCAL_CA_ACK_DELAY`).
pub const RXE_ACK_DELAY: u8 = 15;
/// Default most connect requests a listener holds undelivered (kernel ucma.c
/// `max_backlog`, the `net.rdma_ucm.max_backlog` sysctl).
pub const MAX_BACKLOG: u32 = 1024;
/// The MRA service-timeout flag that records an MRA without sending it until a
/// duplicate arrives (kernel `IB_CM_MRA_FLAG_DELAY`).
pub const MRA_FLAG_DELAY: u8 = 0x80;

/// 4.096 us x 2^`iba_time` in milliseconds, the kernel's approximation
/// (cm.c `cm_convert_to_ms`: `1 << max(iba_time - 8, 0)`).
pub const fn convert_to_ms(iba_time: u8) -> u64 {
    let t = iba_time & 0x1f;
    1u64 << t.saturating_sub(8)
}

/// [`convert_to_ms`] in nanoseconds.
pub const fn convert_to_ns(iba_time: u8) -> Nanos {
    convert_to_ms(iba_time) * MS
}

/// The QP local ACK timeout for a path: 4.096 us x 2^t >= ack delay + 2 x packet life
/// time, rounded as the kernel does (cm.c `cm_ack_timeout`).
pub const fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let d = ca_ack_delay as i32;
    let mut t = packet_life_time as i32 + 1;
    if t >= d {
        if d >= t - 1 {
            t += 1;
        }
    } else {
        t = d + if t >= d - 1 { 1 } else { 0 };
    }
    if t > 31 {
        31
    } else {
        t as u8
    }
}

/// The active side's REQ (and DREQ) timeout in milliseconds: 2 x packet life time +
/// the remote CM response time (cm.c `ib_send_cm_req`).
pub const fn req_timeout_ms(packet_life_time: u8, remote_cm_response_timeout: u8) -> u64 {
    convert_to_ms(packet_life_time) * 2 + convert_to_ms(remote_cm_response_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_timer_arithmetic() {
        assert_eq!(convert_to_ms(0), 1);
        assert_eq!(convert_to_ms(8), 1);
        assert_eq!(convert_to_ms(20), 4096);
        assert_eq!(convert_to_ms(24), 65536);
        // rdma_cm over RoCE: 2 x 256 ms + 4096 ms per REQ try.
        assert_eq!(req_timeout_ms(16, 20), 4608);
        // The golden rxe REQ: ack delay 15, packet life time 18 -> local ACK timeout 19.
        assert_eq!(ack_timeout(15, 18), 19);
        assert_eq!(ack_timeout(15, 14), 16);
        assert_eq!(ack_timeout(15, 16), 17);
        assert_eq!(ack_timeout(20, 10), 20);
        assert_eq!(ack_timeout(0, 31), 31);
    }
}
