//! Flows ([`Flow`]): steering rules on raw-packet and UD QPs.

use crate::error::Result;
use crate::soft::Shared;

use crate::soft::guard::check_not_in_with;

/// A flow rule made by [`Qp::create_flow`](crate::Qp::create_flow) (`struct ibv_flow`); dropping it is
/// `ibv_destroy_flow`. A flow outlives nothing: destroying its QP removes it (then
/// [`Flow::destroy`] is EINVAL).
pub struct Flow {
    pub(crate) id: rverbs_flow::classify::FlowId,
    /// `None` once destroyed.
    pub(crate) inner: Option<FlowInner>,
}

pub(crate) enum FlowInner {
    /// A rule of the raw device (RAW_PACKET QP).
    Raw(rverbs_raw::Flow),
    /// A rule of the context's UD steering table; emptied once destroyed.
    Ud {
        id: rverbs_flow::classify::FlowId,
        shared: std::sync::Weak<Shared>,
    },
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
            Some(FlowInner::Raw(f)) => Ok(f.destroy()?),
            Some(FlowInner::Ud { id, shared }) => {
                check_not_in_with("destroy_flow")?;
                let gone = shared.upgrade().is_some_and(|s| s.ud_steering.remove(id));
                if gone {
                    Ok(())
                } else {
                    Err(rverbs_flow::error::FlowError::inval("flow already destroyed").into())
                }
            }
        }
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if let Some(FlowInner::Ud { id, shared }) = &self.inner {
            let Some(s) = shared.upgrade() else { return };
            let id = *id;
            if check_not_in_with("destroy_flow").is_ok() {
                s.ud_steering.remove(id);
            } else {
                // The driver may hold the table while it waits for the region this
                // thread holds: remove the flow from the driver thread instead.
                s.destroy(move |s, _| {
                    s.ud_steering.remove(id);
                });
            }
        }
    }
}
