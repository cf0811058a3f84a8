//! The CM state machine of IBTA Vol. 1 ch. 12 (Figure 126 ff.) as Linux
//! `drivers/infiniband/core/cm.c` implements it, as data: every legal
//! (state, input) -> state step is one row of [`TRANSITIONS`]; anything else is an
//! error. The engine moves a communication ID only through [`step`].

use core::fmt;

/// A communication ID's state (kernel `enum ib_cm_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    /// No connection.
    Idle,
    /// Listening on a service ID.
    Listen,
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Passive: REQ received, the consumer decides.
    ReqRcvd,
    /// Passive: MRA sent (or recorded) for the REQ.
    MraReqSent,
    /// Active: the peer MRAed the REQ.
    MraReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, the consumer must RTU.
    RepRcvd,
    /// Active: MRA sent for the REP.
    MraRepSent,
    /// Passive: the peer MRAed the REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, the consumer must DREP.
    DreqRcvd,
    /// Disconnected; stray packets of the old connection drain.
    Timewait,
    /// SIDR_REQ sent.
    SidrReqSent,
    /// SIDR_REQ received, the consumer decides.
    SidrReqRcvd,
}

impl State {
    /// Every state, in declaration order.
    pub const ALL: [State; 16] = [
        State::Idle,
        State::Listen,
        State::ReqSent,
        State::ReqRcvd,
        State::MraReqSent,
        State::MraReqRcvd,
        State::RepSent,
        State::RepRcvd,
        State::MraRepSent,
        State::MraRepRcvd,
        State::Established,
        State::DreqSent,
        State::DreqRcvd,
        State::Timewait,
        State::SidrReqSent,
        State::SidrReqRcvd,
    ];

    /// The kernel's name for it.
    pub const fn name(self) -> &'static str {
        match self {
            State::Idle => "IDLE",
            State::Listen => "LISTEN",
            State::ReqSent => "REQ_SENT",
            State::ReqRcvd => "REQ_RCVD",
            State::MraReqSent => "MRA_REQ_SENT",
            State::MraReqRcvd => "MRA_REQ_RCVD",
            State::RepSent => "REP_SENT",
            State::RepRcvd => "REP_RCVD",
            State::MraRepSent => "MRA_REP_SENT",
            State::MraRepRcvd => "MRA_REP_RCVD",
            State::Established => "ESTABLISHED",
            State::DreqSent => "DREQ_SENT",
            State::DreqRcvd => "DREQ_RCVD",
            State::Timewait => "TIMEWAIT",
            State::SidrReqSent => "SIDR_REQ_SENT",
            State::SidrReqRcvd => "SIDR_REQ_RCVD",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What moves a communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Input {
    /// The consumer listens (`ib_cm_listen`).
    Listen,
    /// The listener is destroyed.
    Unlisten,
    /// The consumer connects (`ib_send_cm_req`).
    SendReq,
    /// A REQ reached a listener: a new ID is born in REQ_RCVD.
    RecvReq,
    /// The consumer accepts (`ib_send_cm_rep`).
    SendRep,
    /// A REP for our REQ.
    RecvRep,
    /// The consumer completes the handshake (`ib_send_cm_rtu`).
    SendRtu,
    /// An RTU for our REP.
    RecvRtu,
    /// The consumer asks for more time (`ib_send_cm_mra`).
    SendMra,
    /// The peer asks for more time.
    RecvMra,
    /// The consumer rejects (`ib_send_cm_rej`).
    SendRej,
    /// A REJ for us, any reason but stale connection.
    RecvRej,
    /// A REJ with reason stale connection.
    RecvRejStale,
    /// The first packet arrived on the QP before the RTU (`IB_EVENT_COMM_EST`).
    CommEst,
    /// The consumer disconnects (`ib_send_cm_dreq`).
    SendDreq,
    /// The peer disconnects.
    RecvDreq,
    /// The consumer answers a DREQ (`ib_send_cm_drep`).
    SendDrep,
    /// A DREP.
    RecvDrep,
    /// The outstanding MAD ran out of retries (`cm_process_send_error`).
    Timeout,
    /// The time-wait period ended.
    TimewaitExpired,
    /// The consumer resolves a service ID over UD (`ib_send_cm_sidr_req`).
    SendSidrReq,
    /// A SIDR_REQ reached a listener.
    RecvSidrReq,
    /// The consumer answers a SIDR_REQ.
    SendSidrRep,
    /// A SIDR_REP for our SIDR_REQ.
    RecvSidrRep,
}

use Input as I;
use State as S;

/// Every legal step (kernel cm.c: the state checks of each `ib_send_cm_*` and
/// `cm_*_handler`, `cm_send_rej_locked`, `cm_process_send_error`, `cm_establish`).
pub const TRANSITIONS: &[(State, Input, State)] = &[
    (S::Idle, I::Listen, S::Listen),
    (S::Idle, I::SendReq, S::ReqSent),
    (S::Idle, I::RecvReq, S::ReqRcvd),
    (S::Idle, I::SendSidrReq, S::SidrReqSent),
    (S::Idle, I::RecvSidrReq, S::SidrReqRcvd),
    (S::Listen, I::Unlisten, S::Idle),
    (S::ReqSent, I::RecvRep, S::RepRcvd),
    (S::ReqSent, I::RecvMra, S::MraReqRcvd),
    (S::ReqSent, I::RecvRej, S::Idle),
    (S::ReqSent, I::RecvRejStale, S::Timewait),
    (S::ReqSent, I::SendRej, S::Idle),
    (S::ReqSent, I::Timeout, S::Idle),
    (S::MraReqRcvd, I::RecvRep, S::RepRcvd),
    (S::MraReqRcvd, I::RecvRej, S::Idle),
    (S::MraReqRcvd, I::RecvRejStale, S::Timewait),
    (S::MraReqRcvd, I::SendRej, S::Idle),
    (S::MraReqRcvd, I::Timeout, S::Idle),
    (S::ReqRcvd, I::SendRep, S::RepSent),
    (S::ReqRcvd, I::SendMra, S::MraReqSent),
    (S::ReqRcvd, I::SendRej, S::Idle),
    (S::ReqRcvd, I::RecvRej, S::Idle),
    (S::ReqRcvd, I::RecvRejStale, S::Timewait),
    (S::MraReqSent, I::SendRep, S::RepSent),
    (S::MraReqSent, I::SendRej, S::Idle),
    (S::MraReqSent, I::RecvRej, S::Idle),
    (S::MraReqSent, I::RecvRejStale, S::Timewait),
    (S::RepSent, I::RecvRtu, S::Established),
    (S::RepSent, I::CommEst, S::Established),
    (S::RepSent, I::RecvMra, S::MraRepRcvd),
    (S::RepSent, I::RecvRej, S::Idle),
    (S::RepSent, I::RecvRejStale, S::Timewait),
    (S::RepSent, I::SendRej, S::Timewait),
    (S::RepSent, I::RecvDreq, S::DreqRcvd),
    (S::RepSent, I::Timeout, S::Idle),
    (S::MraRepRcvd, I::RecvRtu, S::Established),
    (S::MraRepRcvd, I::CommEst, S::Established),
    (S::MraRepRcvd, I::RecvRej, S::Idle),
    (S::MraRepRcvd, I::RecvRejStale, S::Timewait),
    (S::MraRepRcvd, I::SendRej, S::Timewait),
    (S::MraRepRcvd, I::RecvDreq, S::DreqRcvd),
    (S::MraRepRcvd, I::Timeout, S::Idle),
    (S::RepRcvd, I::SendRtu, S::Established),
    (S::RepRcvd, I::SendMra, S::MraRepSent),
    (S::RepRcvd, I::SendRej, S::Idle),
    (S::RepRcvd, I::RecvRej, S::Timewait),
    (S::RepRcvd, I::RecvRejStale, S::Timewait),
    (S::MraRepSent, I::SendRtu, S::Established),
    (S::MraRepSent, I::SendRej, S::Idle),
    (S::MraRepSent, I::RecvRej, S::Timewait),
    (S::MraRepSent, I::RecvRejStale, S::Timewait),
    (S::Established, I::SendDreq, S::DreqSent),
    (S::Established, I::RecvDreq, S::DreqRcvd),
    (S::Established, I::RecvRej, S::Timewait),
    (S::Established, I::RecvRejStale, S::Timewait),
    (S::DreqSent, I::RecvDrep, S::Timewait),
    (S::DreqSent, I::RecvDreq, S::DreqRcvd),
    (S::DreqSent, I::RecvRej, S::Timewait),
    (S::DreqSent, I::RecvRejStale, S::Timewait),
    (S::DreqSent, I::Timeout, S::Timewait),
    (S::DreqRcvd, I::SendDrep, S::Timewait),
    (S::DreqRcvd, I::RecvDrep, S::Timewait),
    (S::Timewait, I::TimewaitExpired, S::Idle),
    (S::SidrReqSent, I::RecvSidrRep, S::Idle),
    (S::SidrReqSent, I::Timeout, S::Idle),
    (S::SidrReqRcvd, I::SendSidrRep, S::Idle),
];

/// An input the current state does not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidTransition {
    /// The state.
    pub state: State,
    /// The input it refused.
    pub input: Input,
}

impl fmt::Display for InvalidTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not valid in {}", self.input, self.state)
    }
}

/// The state `input` leads to from `state`.
pub fn step(state: State, input: Input) -> Result<State, InvalidTransition> {
    TRANSITIONS
        .iter()
        .find(|(from, i, _)| *from == state && *i == input)
        .map(|&(_, _, to)| to)
        .ok_or(InvalidTransition { state, input })
}

/// Whether `state` takes `input`.
pub fn accepts(state: State, input: Input) -> bool {
    step(state, input).is_ok()
}

/// The graph as text, one `FROM --Input--> TO` line per row, grouped by state.
pub fn graph_text() -> String {
    let mut out = String::new();
    for s in State::ALL {
        for (from, i, to) in TRANSITIONS {
            if *from == s {
                out.push_str(&format!("{from} --{i:?}--> {to}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn table_is_a_function_and_every_state_is_reachable_and_leaves() {
        let mut seen = BTreeSet::new();
        for (from, i, _) in TRANSITIONS {
            assert!(seen.insert((*from, *i)), "{from} {i:?} twice");
        }
        let mut reach = BTreeSet::from([State::Idle]);
        loop {
            let before = reach.len();
            for (from, _, to) in TRANSITIONS {
                if reach.contains(from) {
                    reach.insert(*to);
                }
            }
            if reach.len() == before {
                break;
            }
        }
        assert_eq!(reach.len(), State::ALL.len());
        for s in State::ALL {
            assert!(
                s == State::Idle || TRANSITIONS.iter().any(|(f, _, _)| *f == s),
                "{s} is a dead end"
            );
        }
        assert!(step(State::Idle, Input::SendRep).is_err());
        assert!(step(State::Established, Input::SendRep).is_err());
        assert_eq!(step(State::ReqRcvd, Input::SendRep), Ok(State::RepSent));
    }

    /// The whole graph, as text: a change to the table shows here.
    #[test]
    fn graph_snapshot() {
        let expected = include_str!("state_graph.txt");
        assert_eq!(graph_text(), expected);
    }
}
