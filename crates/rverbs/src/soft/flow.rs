//! Flow rules of the soft device: the raw device's (RAW_PACKET QPs) and the UD
//! steering table's (`crate::ud_steer`).

use super::Shared;
use crate::device::guard::check_not_in_with;
use crate::device::ops::DeviceFlow;
use crate::error::Result;
use rverbs_flow::classify::FlowId;
use std::sync::Weak;

pub(crate) enum SoftFlow {
    /// A rule of the raw device (RAW_PACKET QP), its id; `None` once destroyed.
    Raw(Option<rverbs_raw::Flow>, FlowId),
    /// A rule of the context's UD steering table; `None` once destroyed.
    Ud {
        id: FlowId,
        shared: Option<Weak<Shared>>,
    },
}

impl DeviceFlow for SoftFlow {
    fn id(&self) -> FlowId {
        match self {
            SoftFlow::Raw(_, id) => *id,
            SoftFlow::Ud { id, .. } => *id,
        }
    }

    fn destroy(mut self: Box<Self>) -> Result<()> {
        match &mut *self {
            SoftFlow::Raw(f, _) => match f.take() {
                Some(f) => Ok(f.destroy()?),
                None => Ok(()),
            },
            SoftFlow::Ud { id, shared } => {
                check_not_in_with("destroy_flow")?;
                let gone = shared
                    .take()
                    .and_then(|s| s.upgrade())
                    .is_some_and(|s| s.ud_steering.remove(*id));
                if gone {
                    Ok(())
                } else {
                    Err(rverbs_flow::error::FlowError::inval("flow already destroyed").into())
                }
            }
        }
    }
}

impl Drop for SoftFlow {
    fn drop(&mut self) {
        if let SoftFlow::Ud { id, shared } = self {
            let Some(s) = shared.take().and_then(|s| s.upgrade()) else {
                return;
            };
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
