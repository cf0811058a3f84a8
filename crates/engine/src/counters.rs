//! Port counters: traffic, and one counter per reason a packet is dropped or a request
//! fails, so nothing is lost silently. The PMA (PortCounters) reads these later.

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Counters of one port.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Every counter with its name, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name),)*].into_iter()
            }
        }
    };
}

counters! {
    /// Packets sent.
    tx_packets,
    /// Bytes sent (the UDP payload: BTH through ICRC).
    tx_bytes,
    /// Packets received and accepted by the transport checks.
    rx_packets,
    /// Bytes received in accepted packets.
    rx_bytes,
    /// Dropped: ICRC mismatch.
    rx_icrc_errors,
    /// Dropped: the transport packet did not parse (truncated, bad opcode, bad pad...).
    rx_malformed,
    /// Dropped: no QP with the destination QPN.
    rx_unknown_qp,
    /// Dropped: the opcode does not belong to the QP's transport.
    rx_wrong_transport,
    /// Dropped: P_Key mismatch.
    rx_bad_pkey,
    /// Dropped: Q_Key mismatch (UD).
    rx_bad_qkey,
    /// Dropped: the QP is not in a state that receives (RESET, INIT, ERR...).
    rx_wrong_state,
    /// Dropped: the packet came from an address or QP other than the connected peer.
    rx_wrong_source,
    /// Duplicate requests seen by a responder (re-acknowledged or replayed).
    rx_duplicate_requests,
    /// Out-of-sequence requests seen by a responder.
    rx_out_of_sequence,
    /// Responses or ACKs that matched no outstanding request (stale, duplicate).
    rx_ghost_responses,
    /// UC/UD messages dropped (gap in a UC message, UD without a receive WQE, too long).
    rx_dropped_messages,
    /// NAK sequence errors sent.
    tx_nak_seq,
    /// RNR NAKs sent.
    tx_rnr_nak,
    /// NAKs for invalid request, remote access or remote operational errors sent.
    tx_nak_fatal,
    /// NAK sequence errors received.
    rx_nak_seq,
    /// RNR NAKs received.
    rx_rnr_nak,
    /// Retransmission timeouts (local ACK timeout, IBTA 9.7.6.1.3): recovery the
    /// timer had to start.
    retransmit_timeouts,
    /// Go-back-N resends started at once by a NAK sequence error (requester).
    nak_retries,
    /// Go-back-N resends started by a gap in READ responses (or an ACK past an
    /// unanswered READ/atomic) that outlived the reordering window (requester).
    reorder_retries,
    /// Tail-loss probes sent: a packet sent again with AckReq after about two round
    /// trips without progress (RFC 8985 TLP). Not retries, not in
    /// `retransmitted_packets`.
    tail_loss_probes,
    /// Go-back-N resends started by a probe's answer, which showed the packets sent
    /// before the probe lost (requester). Not retries.
    probe_retries,
    /// Packets retransmitted.
    retransmitted_packets,
    /// Completions lost because a CQ was full.
    cq_overflows,
    /// Repeated READ requests that moved the response stream still queued for that
    /// READ to the asked PSN instead of queueing another copy (responder).
    rx_read_replays_merged,
    /// READ response packets sent again, for a repeated READ request (responder):
    /// the responder's share of a READ's recovery, which `retransmitted_packets` (the
    /// requests sent again) does not count.
    tx_read_responses_resent,
    /// Gaps in READ responses (implied NAKs) the requester waited out for the
    /// reordering window before asking again.
    implied_nak_waits,
    /// READ responses placed although one before them was still missing.
    rx_read_out_of_order,
    /// RC request packets sent with AckReq set (requester).
    tx_ack_requests,
    /// ACK packets sent (responder; positive acknowledgements only, not NAKs, READ
    /// responses or ATOMIC ACKs).
    tx_acks,
    /// ACK nudges: the last packet of an unacknowledged tail resent with AckReq
    /// because nothing that would ask for an ACK followed it (`AckPolicy::Coalesce`).
    /// Not counted as retries or in `retransmitted_packets`.
    ack_nudges,
    /// Selective repeat ([`crate::selective`]), responder: requests held past a gap
    /// (each once), to be carried out when the gap fills.
    rx_selective_held,
    /// Selective repeat, responder: held requests carried out once the gap before
    /// them filled.
    rx_selective_placed,
    /// Selective repeat, responder: requests past a gap dropped because the QP's
    /// hold was full (sent again later).
    rx_selective_overflow,
    /// Selective repeat, responder: reports sent (one per request held or received
    /// again while held).
    tx_selective_reports,
    /// Selective repeat, requester: reports received.
    rx_selective_reports,
    /// Selective repeat, requester: packets resent because a report showed them
    /// missing (also in `retransmitted_packets`).
    selective_retransmits,
    /// Packets whose payload the driver was to send straight from registered memory
    /// (`Config::lend_payloads`, `Transmit::body`) instead of a copy in the datagram.
    tx_payloads_in_place,
    /// QP deadlines handled by [`crate::Engine::handle_timeout`].
    timer_fires,
    /// Nanoseconds from each of those deadlines to the call that handled it, summed:
    /// how late the driver ran the timers (a sleep past a deadline shows here).
    timer_late_ns,
    /// The recovery waits: nanoseconds from the requester's last progress (the ACK
    /// that last moved past something, or the send of the oldest unacknowledged
    /// packet) to each recovery event, summed per kind. Divided by the event's
    /// count, the stall a loss costs. For `nak_retries`.
    nak_retry_wait_ns,
    /// The recovery wait (see `nak_retry_wait_ns`) of `reorder_retries`.
    reorder_retry_wait_ns,
    /// The recovery wait of `tail_loss_probes`.
    probe_wait_ns,
    /// The recovery wait of `probe_retries`.
    probe_retry_wait_ns,
    /// The recovery wait of `retransmit_timeouts`.
    timeout_wait_ns,
    /// The recovery wait of `selective_retransmits`.
    selective_wait_ns,
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_listed() {
        let c = super::Counters {
            rx_icrc_errors: 3,
            ..Default::default()
        };
        assert!(c.iter().any(|(n, v)| n == "rx_icrc_errors" && v == 3));
        assert_eq!(c.iter().count(), 50);
    }
}
