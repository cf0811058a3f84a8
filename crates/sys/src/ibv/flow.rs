//! Flow steering on a system device: `ibv_create_flow` / `ibv_destroy_flow`, which
//! verbs.h defines `static inline` over `verbs_context.ibv_create_flow` /
//! `ibv_destroy_flow` (no op: EOPNOTSUPP, as the header answers). The rule is passed in
//! libibverbs' own layout (`struct ibv_flow_attr` followed by its specs); the provider
//! decides (mlx5 installs it, rxe has no flow steering and answers EOPNOTSUPP).

use super::{check, einval, Qp};
use rverbs_ibverbs::types as t;
use std::ffi::c_int;
use std::io;
use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::Arc;

/// The head of a rule (`struct ibv_flow_attr` but its size and spec count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowHead {
    /// `IBV_FLOW_ATTR_*`.
    pub attr_type: u32,
    /// Priority.
    pub priority: u16,
    /// Port number.
    pub port: u8,
    /// `IBV_FLOW_ATTR_FLAGS_*`.
    pub flags: u32,
}

/// The size of libibverbs' struct for a spec type (without the INNER bit), `None` for
/// a type a provider would not know how to read. verbs.h: the filters of tunnel
/// (`tunnel_id`), GRE (`c_ks_res0_ver`, `protocol`, `key`), MPLS (`label`) and ESP
/// (`spi`, `seq`) follow the 8-byte header as value and mask.
fn spec_size(ty: u32) -> Option<usize> {
    Some(match ty & !0x100 {
        0x20 => size_of::<t::ibv_flow_spec_eth>(),
        0x30 => size_of::<t::ibv_flow_spec_ipv4>(),
        0x32 => size_of::<t::ibv_flow_spec_ipv4_ext>(),
        0x31 => size_of::<t::ibv_flow_spec_ipv6>(),
        0x40 | 0x41 => size_of::<t::ibv_flow_spec_tcp_udp>(),
        0x50 | 0x60 => 16,
        0x51 | 0x52 => 24,
        _ if ty == 0x1000 => size_of::<t::ibv_flow_spec_action_tag>(),
        _ if ty == 0x1001 => size_of::<t::ibv_flow_spec_action_drop>(),
        _ => return None,
    })
}

/// The number of specs in `specs` when each is a known type of exactly its struct's
/// size and together they fill it; EINVAL otherwise (so the provider, which walks the
/// specs by their `size`, reads only these bytes).
fn count_specs(specs: &[u8]) -> io::Result<u8> {
    let mut at = 0;
    let mut n = 0u8;
    while at < specs.len() {
        let hdr = specs.get(at..at + 8).ok_or_else(einval)?;
        let ty = u32::from_ne_bytes(hdr[0..4].try_into().expect("4 bytes"));
        let size = usize::from(u16::from_ne_bytes(hdr[4..6].try_into().expect("2 bytes")));
        if spec_size(ty) != Some(size) || at + size > specs.len() {
            return Err(einval());
        }
        n = n.checked_add(1).ok_or_else(einval)?;
        at += size;
    }
    Ok(n)
}

/// An installed rule (`struct ibv_flow`), destroyed in Drop. It keeps its QP: the
/// kernel refuses to destroy a QP that still has rules.
pub struct FlowRule {
    qp: Arc<Qp>,
    ptr: NonNull<t::ibv_flow>,
    /// Not yet destroyed.
    live: bool,
}

// SAFETY: owned (destroyed once); flow verbs are thread-safe in libibverbs.
unsafe impl Send for FlowRule {}
// SAFETY: as above.
unsafe impl Sync for FlowRule {}

type DestroyFlow = unsafe extern "C" fn(*mut t::ibv_flow) -> c_int;
type CreateFlow = unsafe extern "C" fn(*mut t::ibv_qp, *mut t::ibv_flow_attr) -> *mut t::ibv_flow;

fn ops(qp: &Qp) -> (Option<CreateFlow>, Option<DestroyFlow>) {
    let Some(v) = qp.pd.ctx.vctx() else {
        return (None, None);
    };
    let end = size_of::<t::verbs_context>();
    // verbs.h's verbs_get_ctx_op: an op exists only if `sz` covers it.
    let has = |off: usize| v.sz >= end - off;
    (
        v.ibv_create_flow
            .filter(|_| has(offset_of!(t::verbs_context, ibv_create_flow))),
        v.ibv_destroy_flow
            .filter(|_| has(offset_of!(t::verbs_context, ibv_destroy_flow))),
    )
}

impl FlowRule {
    /// `ibv_create_flow` on `qp` of the rule `head` with `specs` (libibverbs' spec
    /// structs, back to back). The provider's errno on refusal.
    pub fn create(qp: &Arc<Qp>, head: &FlowHead, specs: &[u8]) -> io::Result<FlowRule> {
        let num = count_specs(specs)?;
        let (Some(create), Some(_)) = ops(qp) else {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        };
        let head_len = size_of::<t::ibv_flow_attr>();
        let total = head_len + specs.len();
        let size = u16::try_from(total).map_err(|_| einval())?;
        let attr = t::ibv_flow_attr {
            comp_mask: 0,
            type_: head.attr_type,
            size,
            priority: head.priority,
            num_of_specs: num,
            port: head.port,
            flags: head.flags,
        };
        // An 8-byte aligned buffer: the head, then the specs (4-byte aligned after it,
        // as a C program lays them out).
        let mut buf = vec![0u64; total.div_ceil(8)];
        let base = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: `buf` holds `total` bytes, 8-byte aligned; the head goes at its start
        // and the specs right after it, inside it.
        unsafe {
            std::ptr::write(base.cast::<t::ibv_flow_attr>(), attr);
            std::ptr::copy_nonoverlapping(specs.as_ptr(), base.add(head_len), specs.len());
        }
        // SAFETY: the provider's op on a live QP; the attribute is followed by `num`
        // specs of known types, each exactly its struct's size (count_specs), inside
        // the buffer, which outlives the call.
        let p = unsafe { create(qp.ptr.as_ptr(), base.cast()) };
        let ptr = NonNull::new(p).ok_or_else(io::Error::last_os_error)?;
        Ok(FlowRule {
            qp: qp.clone(),
            ptr,
            live: true,
        })
    }

    /// The kernel's handle of the rule.
    pub fn handle(&self) -> u32 {
        // SAFETY: the rule is live until Drop; `handle` is a plain integer.
        unsafe { (*self.ptr.as_ptr()).handle }
    }

    /// `ibv_destroy_flow` with its result.
    pub fn destroy(mut self) -> io::Result<()> {
        self.destroy_once()
    }

    fn destroy_once(&mut self) -> io::Result<()> {
        if !std::mem::replace(&mut self.live, false) {
            return Ok(());
        }
        let (_, Some(destroy)) = ops(&self.qp) else {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        };
        // SAFETY: the rule made in `create`, destroyed once (`live` says it was not).
        check(unsafe { destroy(self.ptr.as_ptr()) })
    }
}

impl Drop for FlowRule {
    fn drop(&mut self) {
        let _ = self.destroy_once();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ty: u32, size: usize) -> Vec<u8> {
        let mut v = vec![0u8; size];
        v[0..4].copy_from_slice(&ty.to_ne_bytes());
        v[4..6].copy_from_slice(&(size as u16).to_ne_bytes());
        v
    }

    #[test]
    fn specs_are_counted_only_when_each_has_its_structs_size() {
        let mut s = spec(0x20, 40);
        s.extend(spec(0x41, 16));
        s.extend(spec(0x1001, 8));
        assert_eq!(count_specs(&s).unwrap(), 3);
        assert_eq!(count_specs(&[]).unwrap(), 0);
        // Wrong size for its type, unknown type, cut short, a zero size.
        for bad in [
            spec(0x20, 32),
            spec(0x77, 16),
            spec(0x20, 40)[..30].to_vec(),
            {
                let mut z = vec![0u8; 8];
                z[0] = 0x20;
                z
            },
        ] {
            assert_eq!(
                count_specs(&bad).unwrap_err().raw_os_error(),
                Some(libc::EINVAL)
            );
        }
    }
}
