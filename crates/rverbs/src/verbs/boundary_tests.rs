//! The verbs over a device that is not the soft one: a recording device behind the
//! device interface shows that every verb reaches the device through it (with the
//! device's own handles), that the soft-only accessors answer nothing on another
//! device, and that handles are destroyed on the device in the order verbs need.

use super::*;
use crate::device::attrs::{DeviceAttr, PortAttr};
use crate::device::ops::Registered;
use crate::device::ops::{
    CqOwner, Device, DeviceChannel, DeviceCq, DeviceFlow, DeviceMad, DeviceQp, QpCreate,
};
use crate::device::wr::{LocalBuf, SendRequest};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::gid::GidTable;
use rverbs_engine::mad::gsi::{AgentId, GsiDest, GsiRecv, Registration};
use rverbs_engine::mad::{GrhArea, Mad, MadResult, MadStats, Trap};
use rverbs_engine::modify::{AhAttr, QpAttr, QpAttrMask};
use rverbs_engine::{
    Access, AhId, AsyncEvent, Counters, CqId, Errno, MrKeys, PdId, QpState, QpType, SrqId,
    VecMemory, VerbError, Wc, WcOpcode, WcStatus,
};
use rverbs_wire::grh::Gid;
use std::any::Any;
use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// The public CQ handles bound to the context's channel.
type Owners = Arc<Mutex<Vec<Weak<dyn Any + Send + Sync>>>>;

/// What the device was asked, in order.
#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Log {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn unsupported(verb: &'static str) -> Error {
    VerbError::new(verb, Errno::NotSupported, "the recording device has none").into()
}

struct FakeDevice {
    info: DeviceInfo,
    log: Arc<Log>,
    gids: Mutex<GidTable>,
    /// A readable-never descriptor for the async and channel fds.
    fd: File,
    /// The completion the next poll of any CQ returns.
    completions: Arc<Mutex<VecDeque<Wc>>>,
    /// The CQ owners bound to the context's own channel.
    owners: Owners,
}

impl FakeDevice {
    fn new(log: Arc<Log>) -> FakeDevice {
        let info = DeviceInfo {
            name: "fake0".into(),
            kind: crate::device::DeviceKind::Soft,
            ifname: "fake".into(),
            ifindex: 9,
            addrs: vec!["10.9.0.1".parse().unwrap()],
            netdev_mtu: 1500,
            mac: Some([2, 0, 0, 0, 0, 9]),
        };
        FakeDevice {
            gids: Mutex::new(info.gid_table()),
            info,
            log,
            fd: File::open("/dev/null").unwrap(),
            completions: Arc::default(),
            owners: Owners::default(),
        }
    }
}

impl Device for FakeDevice {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        self.log.push("query_device".into());
        let (mut d, _, _) = self.info.attributes();
        d.max_qp = 7;
        Ok(d)
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.log.push(format!("query_port {port}"));
        Ok(self.info.attributes().1)
    }
    fn gid_table(&self) -> MutexGuard<'_, GidTable> {
        self.gids.lock().unwrap()
    }
    fn counters(&self) -> Counters {
        Counters {
            tx_packets: 42,
            ..Counters::default()
        }
    }
    fn alloc_pd(&self) -> Result<PdId> {
        self.log.push("alloc_pd".into());
        Ok(PdId::from_raw(5))
    }
    fn dealloc_pd(&self, pd: PdId) {
        self.log.push(format!("dealloc_pd {}", pd.raw()));
    }
    fn reg_mr(&self, pd: PdId, buf: Vec<u8>, access: Access) -> Result<Registered> {
        let addr = buf.as_ptr() as u64;
        self.log.push(format!(
            "reg_mr pd {} len {} addr_ok {} access {:#x}",
            pd.raw(),
            buf.len(),
            addr != 0,
            access.0
        ));
        Ok(Registered {
            region: crate::device::wr::Region::Soft(Arc::new(VecMemory::from_vec(buf))),
            addr,
            keys: MrKeys {
                lkey: 0x77,
                rkey: 0x88,
            },
        })
    }
    fn dereg_mr(&self, lkey: u32) {
        self.log.push(format!("dereg_mr {lkey:#x}"));
    }
    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId> {
        self.log.push(format!(
            "create_ah pd {} sgid {}",
            pd.raw(),
            attr.av.sgid_index
        ));
        Ok(AhId::from_raw(3))
    }
    fn destroy_ah(&self, ah: AhId) {
        self.log.push(format!("destroy_ah {}", ah.raw()));
    }
    fn alloc_mw(
        &self,
        pd: PdId,
        kind: rverbs_engine::MwType,
    ) -> Result<(rverbs_engine::MwId, u32)> {
        self.log.push(format!("alloc_mw pd {} {kind:?}", pd.raw()));
        Ok((rverbs_engine::MwId(3), 0x0300))
    }
    fn dealloc_mw(&self, mw: rverbs_engine::MwId) {
        self.log.push(format!("dealloc_mw {}", mw.0));
    }
    fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId> {
        self.log
            .push(format!("create_srq pd {} {max_wr} {max_sge}", pd.raw()));
        Ok(SrqId::from_raw(4))
    }
    fn destroy_srq(&self, srq: SrqId) {
        self.log.push(format!("destroy_srq {}", srq.raw()));
    }
    fn post_srq_recv(&self, srq: SrqId, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        self.log.push(format!(
            "post_srq_recv {} wr {wr_id} bufs {}",
            srq.raw(),
            bufs.len()
        ));
        Ok(())
    }
    fn modify_srq(&self, srq: SrqId, limit: u32) -> Result<()> {
        self.log.push(format!("modify_srq {} {limit}", srq.raw()));
        Ok(())
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn DeviceChannel>> {
        self.log.push("create_comp_channel".into());
        Err(unsupported("create_comp_channel"))
    }
    fn create_cq(
        &self,
        cqe: u32,
        _channel: Option<&dyn DeviceChannel>,
    ) -> Result<Box<dyn DeviceCq>> {
        self.log.push(format!("create_cq {cqe}"));
        Ok(Box::new(FakeCq {
            log: self.log.clone(),
            completions: self.completions.clone(),
            owners: self.owners.clone(),
        }))
    }
    fn create_qp(&self, pd: PdId, init: &QpCreate<'_>) -> Result<Box<dyn DeviceQp>> {
        self.log.push(format!(
            "create_qp pd {} {:?} cqs {} {} srq {:?}",
            pd.raw(),
            init.qp_type,
            init.send_cq.handle().raw(),
            init.recv_cq.handle().raw(),
            init.srq.map(SrqId::raw)
        ));
        Ok(Box::new(FakeQp {
            log: self.log.clone(),
        }))
    }
    fn get_cq_event(&self, _timeout: Duration) -> Option<CqOwner> {
        self.owners.lock().unwrap().first()?.upgrade()
    }
    fn get_async_event(&self, _timeout: Option<Duration>) -> Option<AsyncEvent> {
        Some(AsyncEvent::CommEst(0x99))
    }
    fn try_get_async_event(&self) -> Option<AsyncEvent> {
        None
    }
    fn async_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    fn mad(&self) -> &dyn DeviceMad {
        self
    }
}

struct FakeCq {
    log: Arc<Log>,
    completions: Arc<Mutex<VecDeque<Wc>>>,
    owners: Owners,
}

impl Drop for FakeCq {
    fn drop(&mut self) {
        self.log.push("destroy_cq".into());
    }
}

impl DeviceCq for FakeCq {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn handle(&self) -> CqId {
        CqId::from_raw(6)
    }
    fn bind(&self, owner: Weak<dyn Any + Send + Sync>, channel: Option<&dyn DeviceChannel>) {
        self.log
            .push(format!("bind_cq own_channel {}", channel.is_some()));
        self.owners.lock().unwrap().push(owner);
    }
    fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let mut q = self.completions.lock().unwrap();
        let mut n = 0;
        while n < out.len() {
            let Some(wc) = q.pop_front() else { break };
            out[n] = wc;
            n += 1;
        }
        Ok(n)
    }
    fn wait(&self, out: &mut [Wc], spin: Duration, _timeout: Duration) -> Result<usize> {
        self.log.push(format!("wait_cq spin {}", spin.as_micros()));
        self.poll(out)
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.log.push(format!("req_notify {solicited_only}"));
        Ok(())
    }
}

struct FakeQp {
    log: Arc<Log>,
}

impl Drop for FakeQp {
    fn drop(&mut self) {
        self.log.push("destroy_qp".into());
    }
}

impl DeviceQp for FakeQp {
    fn qp_num(&self) -> u32 {
        0x1234
    }
    fn state(&self) -> QpState {
        QpState::Rts
    }
    fn query(&self) -> Result<QpAttr> {
        Ok(QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        })
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.log
            .push(format!("modify_qp {:?} mask {:#x}", attr.qp_state, mask.0));
        Ok(())
    }
    fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        let w = wr.to_engine();
        let s = &w.sg_list[..];
        self.log.push(format!(
            "post_send wr {} {:?} lkey {:#x} len {} rkey {:#x}",
            w.wr_id, w.opcode, s[0].lkey, s[0].length, w.rkey
        ));
        Ok(())
    }
    fn post_send_list(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.log.push(format!("post_send_list {}", wrs.len()));
        Err((1, unsupported("post_send")))
    }
    fn bind_mw(&self, wr: &SendRequest<'_>) -> Result<u32> {
        let k = wr.bind.map_or(0, |(_, k)| k);
        self.log
            .push(format!("bind_mw wr {} rkey {k:#x}", wr.wr_id));
        Ok(k)
    }
    fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        self.log
            .push(format!("post_recv wr {wr_id} len {}", bufs[0].byte_len()));
        Ok(())
    }
    fn attach_mcast(&self, gid: &Gid) -> Result<()> {
        self.log.push(format!("attach_mcast {gid}"));
        Ok(())
    }
    fn detach_mcast(&self, gid: &Gid) -> Result<()> {
        self.log.push(format!("detach_mcast {gid}"));
        Ok(())
    }
    fn create_flow(&self, _attr: &rverbs_flow::attr::FlowAttr) -> Result<Box<dyn DeviceFlow>> {
        Err(unsupported("create_flow"))
    }
}

impl DeviceMad for FakeDevice {
    fn register_agent(&self, _reg: Option<Registration>) -> Result<AgentId> {
        Err(unsupported("register_mad_agent"))
    }
    fn unregister_agent(&self, _id: AgentId) {}
    fn send(&self, _id: AgentId, _dest: GsiDest, _mad: &Mad) -> Result<()> {
        Err(unsupported("mad_send"))
    }
    fn send_as_is(&self, _id: AgentId, _dest: GsiDest, _mad: &Mad) -> Result<()> {
        Err(unsupported("mad_send"))
    }
    fn try_recv(&self, _id: AgentId) -> Option<GsiRecv> {
        None
    }
    fn requeue(&self, _id: AgentId, _mads: Vec<GsiRecv>) {}
    fn process_mad(
        &self,
        _flags: u32,
        port: u8,
        _wc: Option<&Wc>,
        _grh: Option<&GrhArea>,
        _mad: &Mad,
    ) -> (MadResult, Mad) {
        self.log.push(format!("process_mad port {port}"));
        (MadResult(0), [0; rverbs_wire::mad::MAD_LEN])
    }
    fn local_smp(&self, _smp: &Mad) -> Result<Mad> {
        Err(unsupported("local_smp"))
    }
    fn poll_trap(&self) -> Option<Trap> {
        None
    }
    fn stats(&self) -> MadStats {
        MadStats::default()
    }
    fn pma_counters(&self) -> rverbs_engine::mad::pma::PortTotals {
        Default::default()
    }
    fn set_b_key(&self, _key: u64, _protect: bool) {}
    fn set_m_key(&self, _key: u64, _protect_bits: u8) {}
}

fn fake() -> (Context, Arc<Log>, Arc<Mutex<VecDeque<Wc>>>) {
    let log = Arc::new(Log::default());
    let dev = FakeDevice::new(log.clone());
    let completions = dev.completions.clone();
    (Context::with_device(Box::new(dev)), log, completions)
}

#[test]
fn every_verb_goes_through_the_device_interface() {
    let (ctx, log, completions) = fake();
    assert_eq!(ctx.device().name, "fake0");
    assert_eq!(ctx.query_device().unwrap().max_qp, 7);
    assert!(ctx.query_port(2).is_err(), "the port check is the verbs'");
    ctx.query_port(1).unwrap();
    assert_eq!(ctx.counters().tx_packets, 42);
    assert_eq!(
        ctx.gid(1),
        Some(Gid::from(std::net::Ipv4Addr::new(10, 9, 0, 1)))
    );
    // The soft device's own counts: nothing on another device.
    assert!(ctx.same_host_stats().is_none() && ctx.raw_stats().is_none());
    assert!(ctx.raw_interface().is_none() && ctx.roce_v1_stats().is_none());
    assert_eq!(ctx.fault_stats(), crate::FaultStats::default());
    assert_eq!(
        ctx.create_comp_channel().unwrap_err().errno(),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        ctx.get_async_event(None),
        Some(crate::AsyncEvent::CommEst { qpn: 0x99 })
    );

    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!((mr.lkey(), mr.rkey()), (0x77, 0x88));
    let cq = ctx.create_cq(16).unwrap();
    assert_eq!(cq.handle(), 6);
    let srq = pd.create_srq(&SrqInitAttr::new(8)).unwrap();
    srq.post_recv(3, &[mr.slice(0..8)]).unwrap();
    srq.arm_limit(2).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).srq(&srq))
        .unwrap();
    assert_eq!((qp.qp_num(), qp.state()), (0x1234, QpState::Rts));
    qp.modify(
        &QpModify::to(QpState::Init)
            .port(1)
            .pkey_index(0)
            .access(AccessFlags::ALL),
    )
    .unwrap();
    qp.post_recv(1, &[mr.slice(0..32)]).unwrap();
    let peer = mr.remote(32..40);
    qp.post_send(&SendRequest::write(2, &[mr.slice(0..8)], peer))
        .unwrap();
    let two = [
        SendRequest::send(4, &[mr.slice(0..8)]),
        SendRequest::send(5, &[mr.slice(8..16)]),
    ];
    assert_eq!(qp.post_send_list(&two).unwrap_err().0, 1);
    let group = Gid::from(std::net::Ipv4Addr::new(239, 1, 1, 1));
    qp.attach_mcast(&group, 0).unwrap();
    qp.detach_mcast(&group, 0).unwrap();
    let ah = pd
        .create_ah(&AhAttr {
            av: rverbs_engine::AddressVector {
                dgid: group,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            port_num: 1,
        })
        .unwrap();

    completions.lock().unwrap().push_back(Wc {
        wr_id: 2,
        status: WcStatus::Success,
        opcode: WcOpcode::RdmaWrite,
        ..Wc::default()
    });
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 2);
    assert_eq!(
        cq.wait(&mut wc, Duration::from_micros(5), Duration::ZERO)
            .unwrap(),
        0
    );
    cq.req_notify(true).unwrap();
    // The context's channel hands back the verbs' own CQ handle.
    let got = ctx.get_cq_event(Duration::ZERO).expect("the bound CQ");
    assert_eq!(got, cq.handle());
    assert_eq!(ctx.process_mad(0, 1, None, None, &[0; 256]).0, MadResult(0));

    let mut expect = vec![
        "query_device".to_string(),
        "query_port 1".into(),
        "create_comp_channel".into(),
        "alloc_pd".into(),
        "reg_mr pd 5 len 64 addr_ok true access 0x1".into(),
        "create_cq 16".into(),
        "bind_cq own_channel false".into(),
        "create_srq pd 5 8 4".into(),
        "post_srq_recv 4 wr 3 bufs 1".into(),
        "modify_srq 4 2".into(),
        "create_qp pd 5 Rc cqs 6 6 srq Some(4)".into(),
        format!("modify_qp Init mask {:#x}", {
            let m = QpModify::to(QpState::Init)
                .port(1)
                .pkey_index(0)
                .access(AccessFlags::ALL);
            m.mask.0
        }),
        "post_recv wr 1 len 32".into(),
        format!("post_send wr 2 RdmaWrite lkey 0x77 len 8 rkey {:#x}", 0x88),
        "post_send_list 2".into(),
        format!("attach_mcast {group}"),
        format!("detach_mcast {group}"),
        "create_ah pd 5 sgid 1".into(),
        "wait_cq spin 5".into(),
        "req_notify true".into(),
        "process_mad port 1".into(),
    ];
    assert_eq!(log.take(), expect);

    // Dropped in any order, objects leave the device after what uses them: the QP
    // before its CQ and SRQ, everything before the PD.
    drop(pd);
    drop(cq);
    drop(srq);
    drop(mr);
    drop(ah);
    drop(qp);
    expect = vec![
        "dereg_mr 0x77".into(),
        "destroy_ah 3".into(),
        "destroy_qp".into(),
        "destroy_cq".into(),
        "destroy_srq 4".into(),
        "dealloc_pd 5".into(),
    ];
    assert_eq!(log.take(), expect);
}
