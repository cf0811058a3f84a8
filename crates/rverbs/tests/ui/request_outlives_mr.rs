// A work request borrows the regions it names until it is posted.
use rverbs::{AccessFlags, QpInitAttr, QpType, SendRequest};

fn main() -> rverbs::Result<()> {
    let ctx = rverbs::device(None)?.open()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4)?;
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let wr = SendRequest::send(1, &[mr.all()]);
    drop(mr);
    qp.post_send(&wr)?;
    Ok(())
}
