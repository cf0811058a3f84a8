//! What an engine and its QPs are made with: the engine's settings, the ACK policy of
//! its RC requesters, and the attributes of a new QP (`struct ibv_qp_init_attr`).

use crate::modify::{ModifyLimits, QpCap};
use crate::types::*;
use rverbs_wire::grh::Gid;

/// The first QP number the engine hands out (0 and 1 are the special QPs).
pub(crate) const FIRST_QPN: u32 = 0x11;

/// Engine settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The port's GID table (index = sgid_index). Usually built from the interface's
    /// addresses by the device layer.
    pub gids: Vec<Gid>,
    /// Which entries of `gids` are RoCE v1 (by index; a missing entry is RoCE v2). A
    /// QP or AH whose `sgid_index` names a v1 entry sends [`crate::Transmit`]s marked
    /// `roce_v1`, and a connected QP accepts only packets received the same way
    /// (kernel `ib_init_ah_attr_from_wc`/mlx5: the GID type fixes the wire format).
    pub gid_roce_v1: Vec<bool>,
    /// Limits checked by `create_qp` / `modify_qp`, including the port's active MTU.
    pub limits: ModifyLimits,
    /// Most completions a CQ may hold.
    pub max_cqe: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Seed of the key generator (keys are unpredictable to peers only if this is).
    pub seed: u64,
    /// The first QP number to hand out (wrapping at 2^24, skipping 0 and 1). A device
    /// that restarts should pick it at random, so stale packets of an old connection
    /// are unlikely to reach a new QP with the same number.
    pub first_qpn: u32,
    /// Send every packet from this UDP source port instead of rxe's per-QP
    /// `0xC000 | hash` ports: a driver on a plain UDP socket bound to 4791 can only send
    /// from that port, and the ICRC covers it. Receivers accept any source port.
    pub src_port: Option<u16>,
    /// When RC requesters set AckReq ([`AckPolicy`]; default [`AckPolicy::Coalesce`]).
    pub ack_policy: AckPolicy,
    /// Leave the ICRC of RoCE v2 packets zero in [`Transmit::payload`](crate::Transmit::payload): the driver
    /// computes it when it sends, because only then does it know the UDP source port
    /// and IPv4 Identification the packet leaves with (a connected socket's; see the
    /// `rverbs` device). RoCE v1 packets always get theirs. Default: false (the engine
    /// fills every ICRC for `src_port` and ID 0).
    pub sender_fills_icrc: bool,
    /// With [`Config::sender_fills_icrc`]: leave the payload of a RoCE v2 request or
    /// READ response of at least [`LEND_MIN`] bytes that lies in one memory region in
    /// that region ([`Transmit::body`](crate::Transmit::body)) instead of copying it into the datagram; the
    /// driver sends it from there (`sendmmsg` gathers it) and hashes it into the ICRC.
    /// Default: false (every [`Transmit::payload`](crate::Transmit::payload) is the whole packet).
    pub lend_payloads: bool,
    /// How many PSNs an RC requester may have outstanding (sent, not acknowledged):
    /// rxe's 128 ([`crate::MAX_UNACKED_PSNS`]) by default. A driver whose peers take
    /// longer bursts may allow more: a bulk stream then runs further ahead of its ACKs
    /// instead of stalling whenever one is late (it asks for them as often as with
    /// 128). A driver whose peer's receive buffer holds less than 128 packets should
    /// allow fewer, or every burst overflows it and goes back N: the requester then
    /// asks for ACKs in proportion (every half window within a long message instead of
    /// every 64 packets, [`crate::MAX_PKT_PER_ACK`]; a quarter and an eighth of the
    /// window at message ends), so the window never fills before an answer is on its
    /// way. Kept within [`crate::MIN_UNACKED_PSNS`] (16) ..= 2^23 ([`Engine::config`](crate::Engine::config)
    /// shows the value kept): past 2^23 (half the 24-bit PSN space) a responder could
    /// not tell a new PSN from a duplicate.
    pub max_unacked_psns: u32,
    /// Response packets one RDMA READ request asks for at most: a longer READ is
    /// asked for in pieces, each sent once its responses fit in the window
    /// ([`Config::max_unacked_psns`]; a piece is at most the window). 0 (the
    /// default, as rxe and adapters do): one request per READ, whose responses come
    /// as one burst. For a driver whose peer's receive buffer holds about a window:
    /// each piece waits a round trip for the one before, which costs bandwidth when
    /// the buffer is no limit.
    pub read_piece_psns: u32,
    /// Send each packet of a multi-packet RC RDMA WRITE (without immediate) as a WRITE
    /// ONLY of its own, its RETH naming its part of the range, instead of FIRST,
    /// MIDDLE.. LAST: for a driver that sends runs of equal-sized datagrams as one
    /// `UDP_SEGMENT` train, where the 16 bytes of a FIRST's RETH would make every
    /// message start a train of its own. Any responder takes a run of ONLY messages
    /// (IBTA 9.7.5.1.2); RC's PSN order places them in order, so a peer watching the
    /// last byte sees it last, as with one message. Differences a peer can see: its
    /// MSN counts the pieces, and an R_Key range that ends inside the WRITE is found at
    /// the first piece outside it, after the pieces before it were written (the WRITE
    /// still completes with a remote access error; IBTA leaves the target of a failed
    /// WRITE undefined). Left alone: UC (a lost piece would leave a hole in a WRITE
    /// that completes), WRITE with immediate (the responder reports the RETH length
    /// as the completion's `byte_len`, rxe `rxe_resp.c` `do_complete`), and
    /// single-packet WRITEs. Default: false.
    pub write_pieces: bool,
    /// RC requesters recover from loss before the local ACK timeout with tail-loss
    /// probes (RFC 8985 TLP, `Counters::tail_loss_probes`: after about two round trips
    /// without progress a SEND/WRITE packet goes again with AckReq, which any
    /// responder answers as a duplicate or executes; probes are not retries, so the
    /// timeout keeps its IBTA meaning). Default: true; off leaves recovery to NAKs,
    /// implied NAKs and the timeout, as rxe's requester does.
    pub loss_recovery: bool,
    /// After a loss, RC requesters send within a loss window of half what was
    /// outstanding that grows back (RFC 5681 AIMD in packets, once per round trip of
    /// data, RFC 6582), so go-back-N resends fewer packets per loss on a path whose
    /// bandwidth, not the window, bounds the rate. Default: false (the window is
    /// the configured one throughout, as rxe's): on a path with no bandwidth limit
    /// (the simulator's links) the smaller window only slows, and reordering, which a
    /// go-back-N responder answers with NAKs, shrinks it as a loss would. The soft
    /// device turns it on.
    pub loss_window: bool,
    /// RC QPs offer selective repeat ([`crate::selective`]): requests carry a marker
    /// in a reserved BTH bit; a responder that has it on and sees the marker holds
    /// requests that arrive past a gap and reports each to the requester, which
    /// resends only what is missing. A peer without it (kernel rxe, a NIC, an rverbs
    /// engine with it off) never sends a report, so both sides stay go-back-N.
    /// Default: false (an opt-in both sides must make; the module says why).
    pub selective_repeat: bool,
}

/// The shortest payload a packet leaves in registered memory ([`Config::lend_payloads`]):
/// below it, a copy costs less than the region's lock and the extra iovecs.
pub const LEND_MIN: usize = 1024;

/// When an RC requester sets the BTH AckReq bit, asking the responder for an
/// acknowledgement (IBTA 9.7.5.1.1: ACKs are cumulative, so one ACK completes every
/// earlier request; a responder ACKs a SEND or WRITE only when asked, or for a
/// duplicate). Only RC requesters are affected; either policy interoperates with any
/// responder, kernel rxe's included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AckPolicy {
    /// AckReq on the last packet of every message and on every
    /// [`crate::MAX_PKT_PER_ACK`]-th packet, as kernel rxe's requester does
    /// (`rxe_req.c`): every message is acknowledged by its own ACK packet.
    EveryMessage,
    /// ACK coalescing: AckReq only where a completion or a decision waits for the ACK:
    /// the end of a signaled message (or any with `sq_sig_all`), a fenced message, READ
    /// and atomic requests, every [`crate::MAX_PKT_PER_ACK`]-th packet, the message that
    /// brings the unacknowledged messages sent since the last AckReq to half of
    /// `max_send_wr` (so a queue of unsignaled work never fills without an ACK on the
    /// way), a message end 16 packets after the last AckReq while a quarter of the
    /// [`crate::MAX_UNACKED_PSNS`]-PSN window is unacknowledged, whatever larger
    /// window [`Config::max_unacked_psns`] allows (so a bulk stream's window slides in
    /// steps; an eighth and a quarter of a smaller window),
    /// a retransmitted message end, a message end sent while the QP drains (SQD),
    /// and a message end after the oldest unacknowledged packet (or the last progress)
    /// has waited a quarter of the ACK timeout without an ACK requested. When the
    /// requester has nothing more to send and its last packet did not ask for an ACK,
    /// it resends that packet with AckReq after [`crate::ack_nudge_ns`] (an *ACK
    /// nudge*, counted in
    /// `Counters::ack_nudges`, not as a retry), so an unsignaled tail completes without
    /// waiting for the retransmit timer. The responder answers the nudge as any
    /// duplicate (C9-105; rxe `rxe_resp.c` `duplicate_request`).
    #[default]
    Coalesce,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            gids: Vec::new(),
            gid_roce_v1: Vec::new(),
            limits: ModifyLimits::default(),
            max_cqe: 1 << 20,
            max_qp: 1 << 17,
            seed: 0x5eed_1234_abcd_0001,
            first_qpn: FIRST_QPN,
            src_port: None,
            sender_fills_icrc: false,
            lend_payloads: false,
            max_unacked_psns: crate::MAX_UNACKED_PSNS,
            read_piece_psns: 0,
            write_pieces: false,
            loss_recovery: true,
            loss_window: false,
            selective_repeat: false,
            ack_policy: AckPolicy::default(),
        }
    }
}

/// What a new QP is made of (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInit {
    /// Protection domain.
    pub pd: PdId,
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Shared receive queue, if any.
    pub srq: Option<SrqId>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send WR completes signaled.
    pub sq_sig_all: bool,
}

/// Keys of a registered MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key (equal to the local key, as in rxe).
    pub rkey: u32,
}
