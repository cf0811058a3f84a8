//! Queue pairs ([`Qp`]): creation attributes, connection, state changes, posting.

use super::*;
use crate::error::Error;
use crate::error::Result;
use crate::soft::Shared;
use rverbs_engine::modify::{AhAttr, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::{AddressVector, Mtu, QpState, QpType, RecvWr, SendFlags, Wc, WrOpcode};
use rverbs_wire::grh::Gid;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::soft::guard::check_not_in_with;

/// What a new QP is made of (`struct ibv_qp_init_attr`): start from [`QpInitAttr::new`]
/// and change what differs, with the builder methods or the fields.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{QpCap, QpInitAttr, QpType};
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let (scq, rcq) = (ctx.create_cq(256)?, ctx.create_cq(256)?);
/// let srq = pd.create_srq(&rverbs::SrqInitAttr::new(512))?;
/// let qp = pd.create_qp(
///     &QpInitAttr::new(QpType::Rc, &scq)
///         .recv_cq(&rcq)
///         .srq(&srq)
///         .cap(QpCap { max_send_wr: 128, max_send_sge: 2, max_inline_data: 64, ..QpCap::default() })
///         .sq_sig_all(true),
/// )?;
/// # let _ = qp; Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct QpInitAttr<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue: receives come from it, and [`Qp::post_recv`] is refused.
    pub srq: Option<&'a Srq>,
    /// Queue sizes (the receive sizes are ignored with an SRQ).
    pub cap: QpCap,
    /// Every send completes signaled, whatever [`SendRequest::signaled`] says.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// An RC/UC/UD QP with both queues on `cq`, no SRQ, 1024-deep queues of 4 SGEs,
    /// 256 bytes of inline data ([`QpCap::default`]) and selective signaling.
    pub fn new(qp_type: QpType, cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }

    /// Send completions go to `cq`.
    pub fn send_cq(mut self, cq: &'a Cq) -> Self {
        self.send_cq = cq;
        self
    }

    /// Receive completions go to `cq`.
    pub fn recv_cq(mut self, cq: &'a Cq) -> Self {
        self.recv_cq = cq;
        self
    }

    /// Receives come from `srq`.
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }

    /// Queue sizes.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Whether every send completes signaled.
    pub fn sq_sig_all(mut self, yes: bool) -> Self {
        self.sq_sig_all = yes;
        self
    }
}

/// A queue pair (`struct ibv_qp`): created in RESET by [`Pd::create_qp`], brought up
/// with [`Qp::connect`] (or step by step with [`Qp::modify`]), then used with
/// [`Qp::post_send`] and [`Qp::post_recv`].
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{AccessFlags, ConnectOpts, PeerInfo, QpInitAttr, QpType, SendRequest};
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64)?;
/// let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
/// let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
/// qp.init(&ConnectOpts::default())?;
/// qp.post_recv(1, &[mr.slice(0..2048)])?; // before the peer can send
/// // ... exchange qp.qp_num() and ctx.gid(1) with the peer, then:
/// # let peer = PeerInfo { qpn: 0x11, psn: 0, gid: ctx.gid(1).unwrap() };
/// qp.connect(&peer, &ConnectOpts::default())?;
/// qp.post_send(&SendRequest::send(2, &[mr.slice(2048..4096)]).imm(7))?;
/// # Ok(()) }
/// ```
pub struct Qp {
    pub(crate) pd: Arc<PdInner>,
    pub(crate) _cqs: [Arc<CqInner>; 2],
    pub(crate) _srq: Option<Arc<SrqInner>>,
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) raw: Option<Arc<crate::raw::RawQpInner>>,
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // Dropping the device queue removes its flows; it takes the steering
            // table's write lock, never the engine's, so it runs here even inside
            // `Mr::with` (the receive thread never waits for a region while holding
            // that lock: it copies frames into the queue's own buffers).
            raw.raw.set_notify(None);
            drop(raw);
            let qpn = self.qpn;
            self.pd.ctx.shared().destroy(move |_, e| e.release_qpn(qpn));
            return;
        }
        let qpn = self.qpn;
        let ud = self.qp_type == QpType::Ud;
        self.pd.ctx.shared().destroy(move |s, e| {
            if ud {
                // Destroying a QP destroys its flows.
                s.ud_steering.remove_qp(qpn);
                s.udp.recv_meta_user(false);
            }
            // ACKs this QP still owes its peer (deferred, `progress.rs`) leave first:
            // a program that exits right after its last completion must not leave the
            // peer retrying.
            s.flush_deferred(e);
            let dgid = e.qp_dgid(qpn);
            let _ = e.destroy_qp(qpn);
            // Out of the sharing of its loopback peer's buffer: the QPs still
            // connected there get wider windows, and what the narrower ones held
            // back goes at once.
            if dgid.is_some_and(|g| s.reshare_peer(e, g)) {
                s.flush(e, s.now());
            }
        });
    }
}

/// The other end of an RC/UC connection, as exchanged out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's QP number.
    pub qpn: u32,
    /// The peer's first send PSN (our receive PSN).
    pub psn: u32,
    /// The peer's GID.
    pub gid: Gid,
}

/// Connection settings for [`Qp::connect`].
///
/// The defaults take rdma-core's `ibv_rc_pingpong` timers and retries — `timeout` 14
/// (4.096 µs · 2^14 ≈ 67 ms), `retry_cnt` 7, `rnr_retry` 7 (infinite), `min_rnr_timer`
/// 12 (0.64 ms) — and its default path MTU of 1024, which every RoCE netdev of 1500
/// bytes carries; on a device with a larger active MTU (4096 on `rv_lo`) set `mtu` to
/// `ctx.query_port(1)?.active_mtu` for fewer packets. Where `ibv_rc_pingpong` only
/// SENDs, these defaults let the peer do everything the verbs offer, as the crate's
/// examples need: `access` [`AccessFlags::ALL`] (remote READ, WRITE and atomics on
/// this QP; each region's own access flags still apply; `ibv_rc_pingpong` grants
/// none) and `rd_atomic` 16 READs/atomics in flight each way (it uses 1; rxe allows
/// 128). The rest: `psn` 0 (`ibv_rc_pingpong` draws a random one), `sgid_index` 1 (a
/// soft device's first address GID; `ibv_rc_pingpong` has no default, `-g`),
/// `hop_limit` 64 (Linux's default TTL; it uses 1), `traffic_class` 0 and `qkey`
/// 0x11111111 (`ibv_ud_pingpong`'s).
#[derive(Debug, Clone, Copy)]
pub struct ConnectOpts {
    /// Our source GID index.
    pub sgid_index: u8,
    /// Path MTU.
    pub mtu: Mtu,
    /// Our first send PSN.
    pub psn: u32,
    /// Remote access rights we grant the peer on this QP.
    pub access: AccessFlags,
    /// Local ACK timeout exponent (4.096 µs · 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code we ask the peer to wait.
    pub min_rnr_timer: u8,
    /// READ/atomic depth in each direction.
    pub rd_atomic: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Q_Key (UD).
    pub qkey: u32,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            sgid_index: 1,
            mtu: Mtu::M1024,
            psn: 0,
            access: AccessFlags::ALL,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            rd_atomic: 16,
            hop_limit: 64,
            traffic_class: 0,
            qkey: 0x1111_1111,
        }
    }
}

impl Qp {
    /// The QP's transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.pd.ctx.shared()
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The context the QP belongs to.
    pub fn context(&self) -> &Context {
        &self.pd.ctx
    }

    /// The QP's state.
    pub fn state(&self) -> QpState {
        if let Some(r) = &self.raw {
            return r.state();
        }
        self.shared()
            .lock()
            .qp_state(self.qpn)
            .unwrap_or(QpState::Err)
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        if let Some(r) = &self.raw {
            crate::verbs::check_not_in_with("query_qp")?;
            return Ok(QpAttr {
                qp_state: r.state(),
                port_num: 1,
                ..Default::default()
            });
        }
        Ok(self.shared().lock_verb("query_qp")?.query_qp(self.qpn)?)
    }

    /// `ibv_modify_qp` with typed attributes: the mask is the set of attributes
    /// [`QpModify`] was given (checked exactly as Linux checks it: a missing required
    /// or a forbidden attribute is EINVAL).
    pub fn modify(&self, m: &QpModify) -> Result<()> {
        self.modify_raw(&m.attr, m.mask)
    }

    /// `ibv_modify_qp` with an explicit attribute mask, as in C: only the fields of
    /// `attr` named by `mask` are read. Prefer [`Qp::modify`]; this is for attribute
    /// combinations [`QpModify`] has no setter for. (Checked like [`Qp::modify`]; a
    /// wrong mask is an error, never undefined behaviour.)
    pub fn modify_raw(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        if let Some(r) = &self.raw {
            return self.modify_raw_packet(r, attr, mask);
        }
        let s = self.shared();
        let av = attr.ah_attr.filter(|_| mask.contains(QpAttrMask::AV));
        // Over loopback an RC peer is a socket on this machine whose receive buffer
        // the kernel shows (asked before the engine lock is taken): the QPs connected
        // to a peer with less room than ours get windows its buffer takes together
        // (`peer_window`).
        let peer_rcvbuf = match av {
            // (With the same-host carrier the datagrams wait in its ring, no
            // larger than this, instead: `same_host.rs`.)
            Some(h) if self.qp_type == QpType::Rc && s.info.is_loopback() => {
                crate::soft::window::peer_rcvbuf(h.av.dgid).map(|b| match &s.rings {
                    Some(_) => b.min(crate::carrier::same_host::RING_ROOM),
                    None => b,
                })
            }
            _ => None,
        };
        let mut e = s.lock_verb("modify_qp")?;
        // Under the engine lock, as in `Pd::create_ah` (the re-scan may reuse a slot).
        if let Some(h) = &av {
            self.pd.ctx.check_sgid(h.av.sgid_index, "modify_qp")?;
        }
        let now = s.now();
        let old_dgid = e.qp_dgid(self.qpn);
        e.modify_qp(self.qpn, attr, mask, now)?;
        if let Some(h) = av.filter(|_| self.qp_type == QpType::Rc) {
            // The peer's window if it is tighter than the engine's (our buffer's),
            // with our READ pieces (the responses come to us); else the engine's. The
            // peer's buffer is shared by every QP connected to it, this one included:
            // their windows are set again for one more sharer (and again for one less
            // when a QP leaves: below, `Qp::drop`, `Shared::dispatch`).
            match peer_rcvbuf {
                Some(b) => {
                    s.peer_rcvbufs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(h.av.dgid, b);
                    crate::soft::window::share_peer_buffer(&mut e, h.av.dgid, b)?;
                }
                // Without the peer's buffer only this QP's window is known (the
                // engine's).
                None => e.set_qp_window(self.qpn, None)?,
            }
            // A QP moved to another peer (a new address vector) leaves its old one.
            if let Some(old) = old_dgid.filter(|&o| o != h.av.dgid) {
                s.reshare_peer(&mut e, old);
            }
        } else if mask.contains(QpAttrMask::STATE)
            && matches!(attr.qp_state, QpState::Reset | QpState::Err)
        {
            // Out of the sharing: the QPs left connected to its peer take its share
            // (and send what it lets go with the flush below).
            if let Some(old) = old_dgid {
                s.reshare_peer(&mut e, old);
            }
        }
        s.flush(&mut e, now);
        drop(e);
        s.wake();
        Ok(())
    }

    /// One step of the connection path with exactly the attributes Linux requires for
    /// it (`modify::required`), taken from `attr`.
    pub(crate) fn step(&self, attr: &QpAttr, from: QpState, to: QpState) -> Result<()> {
        let mask = rverbs_engine::modify::required(self.qp_type, from, to).ok_or(
            rverbs_engine::VerbError::new(
                "modify_qp",
                rverbs_engine::Errno::Inval,
                "illegal transition",
            ),
        )?;
        self.modify_raw(
            &QpAttr {
                qp_state: to,
                ..*attr
            },
            mask,
        )
    }

    /// The attributes of the whole connection path, from `o` and the peer.
    pub(crate) fn connect_attr(peer: &PeerInfo, o: &ConnectOpts) -> QpAttr {
        let av = AddressVector {
            dgid: peer.gid,
            sgid_index: o.sgid_index,
            hop_limit: o.hop_limit,
            traffic_class: o.traffic_class,
            flow_label: 0,
        };
        QpAttr {
            port_num: 1,
            qp_access_flags: o.access,
            qkey: o.qkey,
            path_mtu: o.mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: o.rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
            ah_attr: Some(AhAttr { av, port_num: 1 }),
            sq_psn: o.psn,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            max_rd_atomic: o.rd_atomic,
            ..Default::default()
        }
    }

    /// RESET → INIT with the access rights (RC/UC) or Q_Key (UD) of `o`; receives may be
    /// posted from then on.
    pub fn init(&self, o: &ConnectOpts) -> Result<()> {
        let nobody = PeerInfo {
            qpn: 0,
            psn: 0,
            gid: Gid::ZERO,
        };
        self.step(
            &Self::connect_attr(&nobody, o),
            QpState::Reset,
            QpState::Init,
        )
    }

    /// (RESET →) INIT → RTR → RTS towards `peer` (RC/UC), or → RTS (UD). A QP already
    /// in INIT (see [`Qp::init`]) keeps its INIT attributes.
    pub fn connect(&self, peer: &PeerInfo, o: &ConnectOpts) -> Result<()> {
        if self.state() == QpState::Reset {
            self.init(o)?;
        }
        let attr = Self::connect_attr(peer, o);
        self.step(&attr, QpState::Init, QpState::Rtr)?;
        self.step(&attr, QpState::Rtr, QpState::Rts)
    }

    /// A RAW_PACKET QP's modify, checked as `ib_modify_qp_is_ok()` does with the
    /// kernel's IB_QPT_RAW_PACKET column ([`rverbs_engine::modify::transition`]):
    /// mask bits rdma-core does not define are EOPNOTSUPP (as mlx5 answers); an
    /// illegal pair, a required attribute missing or any other attribute given
    /// (`CUR_STATE` included: no RAW_PACKET transition lists it) is EINVAL; a port other
    /// than 1 is EINVAL; a `rate_limit` other than 0 (unlimited) is EINVAL, because
    /// this device has no packet pacing (mlx5 answers EINVAL to a rate outside its
    /// range). Entering RTR hands the receives posted so far to the device; entering
    /// ERR flushes them (WR_FLUSH_ERR). RTS→SQD→RTS is allowed with no attribute;
    /// sends are refused outside RTS.
    pub(crate) fn modify_raw_packet(
        &self,
        r: &crate::raw::RawQpInner,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<()> {
        check_not_in_with("modify_qp")?;
        let inval = |why| -> Error {
            rverbs_engine::VerbError::new("modify_qp", rverbs_engine::Errno::Inval, why).into()
        };
        if !QpAttrMask::ALL.contains(mask) {
            return Err(rverbs_engine::VerbError::new(
                "modify_qp",
                rverbs_engine::Errno::NotSupported,
                "unknown attribute mask bits",
            )
            .into());
        }
        // The engine first, then the QP's state: the driver thread's order (it drains
        // raw completions under the engine lock), and flushing needs both.
        let s = self.shared();
        let mut e = s.lock_verb("modify_qp")?;
        let mut st = r.lock();
        let from = st.state;
        let to = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state
        } else {
            st.state
        };
        let (req, opt) = rverbs_engine::modify::transition(QpType::RawPacket, from, to)
            .ok_or_else(|| inval("illegal transition for a RAW_PACKET QP"))?;
        let given = QpAttrMask(mask.0 & !QpAttrMask::STATE.0);
        if !given.contains(req) || given.0 & !(req.0 | opt.0) != 0 {
            return Err(inval("attribute mask does not fit the transition"));
        }
        if given.contains(QpAttrMask::PORT) && attr.port_num != 1 {
            return Err(inval("invalid port number"));
        }
        if given.contains(QpAttrMask::RATE_LIMIT) && attr.rate_limit != 0 {
            return Err(inval(
                "this device has no packet pacing (rate_limit must be 0)",
            ));
        }
        match to {
            QpState::Err => r.flush(&mut e, &mut st),
            QpState::Reset => r.reset(&mut e, &mut st),
            QpState::Rtr | QpState::Rts => {
                while let Some((wr_id, t)) = st.held.pop_front() {
                    if let Err(e) = r.post_to_device(&mut st, wr_id, t) {
                        return Err(Error::io("handing receives to the raw device", e));
                    }
                }
            }
            _ => {}
        }
        r.set_state(&mut st, to);
        drop(st);
        // Completions moved or made here become visible to pollers.
        let now = s.now();
        s.flush(&mut e, now);
        drop(e);
        s.wake();
        Ok(())
    }

    /// `ibv_post_send` of one request.
    ///
    /// Beyond `ibv_post_send`'s checks, a READ or WRITE whose [`RemoteBuf`] length is
    /// not its local buffers' total is EINVAL, with both lengths in the message (see
    /// [`SendRequest`]).
    ///
    /// On a RAW_PACKET QP (in RTS, else EINVAL) the request is a SEND whose gathered
    /// buffers (or inline data: both are copies here) are one whole Ethernet frame,
    /// destination MAC first, no FCS; it goes out on the context's raw interface after
    /// the EGRESS flow rules (an EGRESS DROP rule stops it and the request still
    /// completes successfully, as on a NIC). Other opcodes are EINVAL; a frame over
    /// [`rverbs_raw::MAX_FRAME`] bytes completes with LOC_LEN_ERR.
    pub fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        if let Some(r) = &self.raw {
            return self.post_send_raw(r, wr);
        }
        sge_lens_fit("post_send", wr.bufs.as_slice().iter().map(|b| b.len))?;
        wr.check_remote_len()?;
        let s = self.shared();
        let mut e = s.lock_verb("post_send")?;
        let now = s.now();
        e.post_send(self.qpn, wr.to_engine(), now)?;
        s.flush(&mut e, now);
        s.wake_if_needed(&e);
        Ok(())
    }

    /// `ibv_post_send` of a chain of requests: the device is entered once and the
    /// packets of the whole chain leave together, which is what makes small messages
    /// cheap (perftest's post-list `-l`).
    ///
    /// # Errors
    /// Like `ibv_post_send`'s `bad_wr`: on a refused request, the index of that request
    /// and the error; the requests before it were posted, those from it on were not.
    pub fn post_send_list(
        &self,
        wrs: &[SendRequest<'_>],
    ) -> std::result::Result<(), (usize, Error)> {
        if let Some(r) = &self.raw {
            for (i, wr) in wrs.iter().enumerate() {
                self.post_send_raw(r, wr).map_err(|e| (i, e))?;
            }
            return Ok(());
        }
        let s = self.shared();
        let mut e = s.lock_verb("post_send").map_err(|e| (0, e))?;
        let now = s.now();
        let mut failed = None;
        for (i, wr) in wrs.iter().enumerate() {
            let fits = sge_lens_fit("post_send", wr.bufs.as_slice().iter().map(|b| b.len))
                .and_then(|()| wr.check_remote_len());
            if let Err(err) = fits.and_then(|()| Ok(e.post_send(self.qpn, wr.to_engine(), now)?)) {
                failed = Some((i, err));
                break;
            }
        }
        s.flush(&mut e, now);
        s.wake_if_needed(&e);
        failed.map_or(Ok(()), Err)
    }

    pub(crate) fn post_send_raw(
        &self,
        r: &crate::raw::RawQpInner,
        wr: &SendRequest<'_>,
    ) -> Result<()> {
        check_not_in_with("post_send")?;
        let inval = |why| -> Error {
            rverbs_engine::VerbError::new("post_send", rverbs_engine::Errno::Inval, why).into()
        };
        if r.lock().state != QpState::Rts {
            return Err(inval("the QP is not in RTS"));
        }
        if wr.opcode != WrOpcode::Send || wr.remote.is_some() || wr.ud.is_some() {
            return Err(inval("a RAW_PACKET QP sends frames with SEND only"));
        }
        let over = |why, asked: usize, max: u32, unit| -> Error {
            rverbs_engine::VerbError::new("post_send", rverbs_engine::Errno::Inval, why)
                .with_limit(asked as u64, max.into(), unit, "the QP takes at most")
                .into()
        };
        if wr.bufs.as_slice().len() > r.cap.max_send_sge as usize {
            return Err(over(
                "more SGEs than cap.max_send_sge",
                wr.bufs.as_slice().len(),
                r.cap.max_send_sge,
                "SGEs",
            ));
        }
        let frame: Vec<u8> = wr
            .bufs
            .as_slice()
            .iter()
            .flat_map(LocalBuf::bytes)
            .collect();
        if wr.flags.contains(SendFlags::INLINE) && frame.len() > r.cap.max_inline_data as usize {
            return Err(over(
                "inline data beyond cap.max_inline_data",
                frame.len(),
                r.cap.max_inline_data,
                "bytes",
            ));
        }
        let signaled = r.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let s = self.shared();
        // Buffers of another PD (IBTA 10.6.3.1; rxe's `copy_data` looks the key up in
        // the QP's PD): the request completes with a local protection error and
        // nothing is sent (an error completes whether signaled or not).
        if wr.bufs.as_slice().iter().any(|b| b.mr.pd.id != self.pd.id) {
            let wc = Wc {
                wr_id: wr.wr_id,
                status: rverbs_engine::WcStatus::LocProtErr,
                opcode: rverbs_engine::WcOpcode::Send,
                qp_num: self.qpn,
                ..Wc::default()
            };
            r.lock().local.push_back((r.send_cq, wc));
            let mut e = s.lock_verb("post_send")?;
            s.drain_raw_qps(&mut e);
            let now = s.now();
            s.flush(&mut e, now);
            return Ok(());
        }
        r.raw
            .post_send_wr(wr.wr_id, &[&frame], signaled)
            .map_err(|e| Error::io("sending a raw frame", e))?;
        let mut e = s.lock_verb("post_send")?;
        if s.drain_raw_qps(&mut e) {
            let now = s.now();
            s.flush(&mut e, now);
        }
        Ok(())
    }

    /// `ibv_post_recv` of one request.
    ///
    /// On a RAW_PACKET QP the buffers receive one whole frame (as received: destination
    /// MAC first, a VLAN tag the driver stripped put back, no FCS); the completion on
    /// the receive CQ gives `byte_len`, [`rverbs_engine::WcFlags::IP_CSUM_OK`] and, when a
    /// TAG rule steered it, [`rverbs_engine::WcFlags::WITH_FLOW_TAG`] with
    /// [`Wc::flow_tag`]. A frame longer than the buffers completes with LOC_LEN_ERR; a
    /// frame steered to the QP while no receive is posted is dropped (no RNR on raw
    /// QPs); a receive whose region was dropped before its frame came completes with
    /// LOC_PROT_ERR and writes nothing. Receives posted before RTR wait for it. EINVAL in RESET, ENOMEM beyond
    /// `cap.max_recv_wr` outstanding; in ERR the receive completes at once with
    /// WR_FLUSH_ERR.
    pub fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        if let Some(r) = &self.raw {
            return self.post_recv_raw(r, wr_id, bufs);
        }
        sge_lens_fit("post_recv", bufs.iter().map(|b| b.len))?;
        let s = self.shared();
        let wr = RecvWr {
            wr_id,
            sg_list: bufs.iter().map(LocalBuf::sge).collect(),
        };
        let mut e = s.lock_verb("post_recv")?;
        // Posting a receive starts no timer and sends nothing (the engine only
        // queues it, or completes it at once on a QP in error), so the clock is read
        // only when `settle` flushes; while answers are deferred (flush_pending,
        // written under the engine lock held here) the time they were deferred at
        // stands for it. (A ping-pong reposts a receive between taking the request
        // and answering it: one clock read less on its critical path.)
        let now = match s.flush_pending.load(std::sync::atomic::Ordering::Relaxed) {
            0 => s.now(),
            at => at,
        };
        e.post_recv(self.qpn, wr, now)?;
        // A receive posted to a QP in error completes at once: let pollers see it.
        // Deferred acknowledgements stay deferred: a receive is usually reposted
        // just before the reply that will carry them.
        s.settle(&mut e, now);
        Ok(())
    }
}

impl Qp {
    pub(crate) fn post_recv_raw(
        &self,
        r: &crate::raw::RawQpInner,
        wr_id: u64,
        bufs: &[LocalBuf<'_>],
    ) -> Result<()> {
        check_not_in_with("post_recv")?;
        let err =
            |errno, why| -> Error { rverbs_engine::VerbError::new("post_recv", errno, why).into() };
        if bufs.len() > r.cap.max_recv_sge as usize {
            return Err(err(
                rverbs_engine::Errno::Inval,
                "more SGEs than cap.max_recv_sge",
            ));
        }
        let targets: Vec<crate::raw::Target> = bufs
            .iter()
            .map(|b| crate::raw::Target {
                lkey: b.mr.lkey,
                region: b.mr.region.clone(),
                offset: b.offset,
                len: b.len,
            })
            .collect();
        let mut st = r.lock();
        match st.state {
            QpState::Reset => {
                return Err(err(rverbs_engine::Errno::Inval, "the QP is in RESET"));
            }
            QpState::Err => {
                st.local.push_back((
                    r.recv_cq,
                    Wc {
                        wr_id,
                        status: rverbs_engine::WcStatus::WrFlushErr,
                        opcode: rverbs_engine::WcOpcode::Recv,
                        qp_num: self.qpn,
                        ..Wc::default()
                    },
                ));
                drop(st);
                let s = self.shared();
                s.activity.fetch_add(1, Ordering::Release);
                s.wake();
                return Ok(());
            }
            _ => {}
        }
        if st.held.len() + st.posted.len() >= r.max_recv_wr {
            return Err(err(
                rverbs_engine::Errno::NoMem,
                "the receive queue is full",
            ));
        }
        if targets.iter().map(|t| t.len).sum::<usize>() == 0 {
            return Err(err(rverbs_engine::Errno::Inval, "no receive buffer"));
        }
        if st.state == QpState::Init {
            st.held.push_back((wr_id, targets));
            return Ok(());
        }
        r.post_to_device(&mut st, wr_id, targets)
            .map_err(|e| Error::io("posting a raw receive", e))
    }

    /// `ibv_create_flow`: steers the frames `attr` selects to this QP until the returned
    /// [`Flow`] is dropped (`ibv_destroy_flow`; no frame is steered by it once the drop
    /// returns). Errors as the kernel's `ib_uverbs_ex_create_flow` and mlx5 give them:
    /// EPERM without CAP_NET_RAW, EINVAL for a QP that is neither RAW_PACKET nor UD and
    /// for every malformed attribute, EOPNOTSUPP for unsupported attributes or mask
    /// bits (the whole list: [`rverbs_flow::attr::validate`]).
    ///
    /// On a RAW_PACKET QP the rule is installed in the raw device's classifier: NORMAL
    /// rules by priority (lower wins), ALL_DEFAULT / MC_DEFAULT for frames no rule took,
    /// SNIFFER for copies of everything, DONT_TRAP, EGRESS, TAG, DROP and COUNT, as
    /// described in the `rverbs-raw` crate.
    ///
    /// On a UD QP (any context) the rule steers received RoCE v2 UD datagrams by their
    /// outer headers: a datagram a NORMAL rule takes goes to this QP instead of the QP
    /// its BTH names; SNIFFER rules get a copy of every datagram; DROP drops; a
    /// datagram no rule takes goes to its BTH QP as usual. A UDP socket shows no
    /// Ethernet header, so an ETH spec sees MAC addresses `00:00:00:00:00:00`, the
    /// EtherType of the IP version and no VLAN tag: EtherType matches work, a rule on a
    /// non-zero MAC or a VLAN never matches. IPV4 / IPV6 / UDP specs see the addresses,
    /// TTL / hop limit, TOS / traffic class and flow label as received, UDP source port
    /// and destination port 4791. ALL_DEFAULT / MC_DEFAULT, EGRESS and TAG are
    /// EOPNOTSUPP on UD QPs. Datagrams to QP1 (the GSI) are never steered.
    pub fn create_flow(&self, attr: &rverbs_flow::attr::FlowAttr) -> Result<Flow> {
        use rverbs_flow::attr::{FlowContext, FlowQpType};
        check_not_in_with("create_flow")?;
        let qp_type = match self.qp_type {
            QpType::RawPacket => FlowQpType::RawPacket,
            QpType::Ud => FlowQpType::Ud,
            _ => FlowQpType::Other,
        };
        rverbs_flow::attr::validate(
            attr,
            &FlowContext {
                qp_type,
                cap_net_raw: rverbs_raw::has_cap_net_raw(),
                num_ports: 1,
            },
        )?;
        let Some(r) = &self.raw else {
            let id = self.shared().ud_steering.insert(self.qpn, attr)?;
            return Ok(Flow {
                id,
                inner: Some(FlowInner::Ud {
                    id,
                    shared: Arc::downgrade(self.shared()),
                }),
            });
        };
        let f = r.raw.create_flow(attr)?;
        Ok(Flow {
            id: f.id(),
            inner: Some(FlowInner::Raw(f)),
        })
    }
}
