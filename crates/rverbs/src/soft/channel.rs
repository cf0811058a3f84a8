//! Completion channels of the soft device (`struct ibv_comp_channel`): a CQ's events
//! queue here; a waiter receives from the device's carriers itself while it waits.

use super::events::ChannelInner;
use super::Shared;
use crate::device::ops::{CqOwner, DeviceChannel};
use crate::error::Result;
use std::any::Any;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

/// A completion channel of the soft device: its event queue, and the device, whose
/// sockets a waiter receives from itself (`ChannelInner::next_receiving`).
pub(crate) struct SoftChannel {
    pub(crate) inner: Arc<ChannelInner>,
    shared: Arc<Shared>,
}

impl SoftChannel {
    pub(crate) fn new(shared: Arc<Shared>) -> Result<Self> {
        Ok(SoftChannel {
            inner: ChannelInner::new()?,
            shared,
        })
    }
}

impl DeviceChannel for SoftChannel {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn get_cq_event(&self, timeout: Option<Duration>) -> Option<CqOwner> {
        self.inner.next_receiving(&self.shared, timeout)
    }

    fn try_get_cq_event(&self) -> Option<CqOwner> {
        self.inner.try_next()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.inner.events.fd()
    }

    fn is_empty(&self) -> bool {
        self.inner.events.is_empty()
    }
}
