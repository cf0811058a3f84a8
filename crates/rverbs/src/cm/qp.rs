//! The ID's queue pair: made on it (`rdma_create_qp`), or the program's own attached
//! to it, and forgotten (`rdma_destroy_qp`).

use super::*;

impl CmId {
    /// `rdma_create_qp`: a QP of `pd` (which must be on the ID's context) for this
    /// ID, moved to INIT (RC: no remote access until the CM grants it; UD: rdma_cm's
    /// Q_Key, and on to RTS, as librdmacm's `ucma_init_ud_qp`). The connection moves
    /// it on.
    pub fn create_qp(&self, pd: &Pd, attr: &QpInitAttr<'_>) -> Result<Arc<Qp>> {
        const VERB: &str = "rdma_create_qp";
        let ctx = self.context().ok_or(errno(VERB, libc::EINVAL))?;
        if !Arc::ptr_eq(&pd.context().inner, &ctx.inner) {
            return Err(errno(VERB, libc::EINVAL));
        }
        if lock(&self.inner.st).qp.is_some() {
            return Err(errno(VERB, libc::EINVAL));
        }
        if attr.qp_type != self.qp_type() {
            return Err(errno(VERB, libc::EINVAL));
        }
        let qp = Arc::new(pd.create_qp(attr)?);
        self.attach_qp(qp.clone())?;
        Ok(qp)
    }

    /// The QP type of the port space (UD for UDP, RC otherwise).
    pub fn qp_type(&self) -> QpType {
        match self.inner.ps {
            PortSpace::Udp => QpType::Ud,
            _ => QpType::Rc,
        }
    }

    /// Makes a QP created elsewhere (by the C library's `rdma_create_qp`, on the ID's
    /// context) the ID's, moved as [`CmId::create_qp`] moves its own.
    pub fn attach_qp(&self, qp: Arc<Qp>) -> Result<()> {
        const VERB: &str = "rdma_create_qp";
        if let Some(s) = self.sys() {
            if lock(&self.inner.st).qp.is_some() || qp.qp_type != self.qp_type() {
                return Err(errno(VERB, libc::EINVAL));
            }
            system::init_qp(&s, &qp, self.qp_type() == QpType::Ud)?;
            lock(&self.inner.st).qp = Some(qp);
            return Ok(());
        }
        let port = lock(&self.inner.st)
            .port
            .clone()
            .ok_or(errno(VERB, libc::EINVAL))?;
        if !Arc::ptr_eq(&qp.pd.ctx.inner, &port.ctx.inner)
            || lock(&self.inner.st).qp.is_some()
            || qp.qp_type != self.qp_type()
        {
            return Err(errno(VERB, libc::EINVAL));
        }
        let want = self.qp_type();
        let init = QpModify::to(QpState::Init).port(1).pkey_index(0);
        if want == QpType::Ud {
            let psn = lock(&self.inner.st).psn;
            qp.modify(&init.qkey(port::RDMA_UDP_QKEY))?;
            qp.modify(&QpModify::to(QpState::Rtr))?;
            qp.modify(&QpModify::to(QpState::Rts).sq_psn(psn))?;
        } else {
            qp.modify(&init.access(crate::AccessFlags::NONE))?;
        }
        lock(&self.inner.st).qp = Some(qp);
        Ok(())
    }

    /// Forgets the ID's QP (`rdma_destroy_qp`), which is destroyed with its last handle.
    pub fn detach_qp(&self) -> Option<Arc<Qp>> {
        lock(&self.inner.st).qp.take()
    }
}
