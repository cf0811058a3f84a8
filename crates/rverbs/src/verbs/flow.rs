//! Flows ([`Flow`]): steering rules on raw-packet and UD QPs.

use crate::device::ops::DeviceFlow;
use crate::error::Result;

/// A flow rule made by [`Qp::create_flow`](crate::Qp::create_flow) (`struct ibv_flow`); dropping it is
/// `ibv_destroy_flow`. A flow outlives nothing: destroying its QP removes it (then
/// [`Flow::destroy`] is EINVAL).
pub struct Flow {
    pub(crate) id: rverbs_flow::classify::FlowId,
    /// The device's rule; `None` once destroyed.
    pub(crate) inner: Option<Box<dyn DeviceFlow>>,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Flow({:#x})", self.id().raw())
    }
}

impl Flow {
    /// The flow's handle.
    pub fn id(&self) -> rverbs_flow::classify::FlowId {
        self.id
    }

    /// `ibv_destroy_flow` with its result: EINVAL if the flow is already gone (its QP
    /// was destroyed). Inside [`Mr::with`](crate::Mr::with) this is EDEADLK (dropping the flow there
    /// works: the driver thread removes it).
    pub fn destroy(mut self) -> Result<()> {
        match self.inner.take() {
            None => Ok(()),
            Some(f) => f.destroy(),
        }
    }
}
