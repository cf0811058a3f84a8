//! Address handles ([`Ah`]; their attributes are [`crate::AhAttr`], as a QP's path).

use super::*;
use rverbs_engine::AhId;
use std::sync::Arc;

/// An address handle (`struct ibv_ah`).
pub struct Ah {
    pub(crate) pd: Arc<PdInner>,
    pub(crate) id: AhId,
}

impl Drop for Ah {
    fn drop(&mut self) {
        self.pd.ctx.dev().destroy_ah(self.id);
    }
}
